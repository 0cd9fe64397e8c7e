"""`pipeframe sink run PIPE`: a sink pipe's rows exported now to its bucket (a thin client of
`pipeframe.connectors.sink.run_sink` over a `Project`)."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import click

from pipeframe.cli.common import ENV_OPTION, PROJECT_OPTION, load_project, parse_params, run
from pipeframe.errors import PipeframeError


@click.group()
def sink() -> None:
    """Sink pipes: export a pipe's rows to S3 or Kafka (TYPE sink, EXPORT_* settings).

    Scheduled sinks (EXPORT_SCHEDULE, a cron in UTC) run by themselves under `pipeframe serve`, `run` and
    `dev`; `sink run` runs one now.
    """


@sink.command("run")
@click.argument("pipe")
@click.option("--param", "params", multiple=True, metavar="NAME=VALUE", help="A template parameter (repeatable).")
@click.option("--run-time", "run_time", metavar="ISO_TIME",
              help="The run to write (default: now, to the second, UTC): the time in the files' names. Give a "
                   "failed run's time to write it again: the same files are replaced, none added.")
@click.option("--json", "as_json", is_flag=True, help="Print the files written as JSON.")
@PROJECT_OPTION
@ENV_OPTION
def sink_run(pipe: str, params: tuple[str, ...], run_time: str | None, as_json: bool, project_dir: str,
             env: str | None) -> None:
    """Run the sink pipe PIPE once and write its rows to its EXPORT_BUCKET_URI (or EXPORT_KAFKA_TOPIC).

    The files are CSV, NDJSON or Parquet (EXPORT_FORMAT), gzip-compressed with EXPORT_COMPRESSION gz, named by
    EXPORT_FILE_TEMPLATE and, with EXPORT_WRITE_STRATEGY new (the default), the run's time. A Kafka sink writes
    one JSON message a row in one transaction, and skips a run committed before.

    \b
    Examples:
      pipeframe sink run export_sales -p example_project
      pipeframe sink run export_sales --run-time 2024-06-01T01:00:00Z --json
    """
    from pipeframe.connectors.sink import run_sink

    def body() -> int:
        at = _run_time(run_time)
        project = load_project(project_dir, env)
        values = parse_params(params)
        project.require_pipe(pipe, "sink", values)  # name, kind and parameters before Spark starts
        result = run_sink(project, pipe, values, at)
        if as_json:
            click.echo(json.dumps(result.to_json(), indent=2))
            return 0
        for file in result.files:
            click.echo(f"  {file.uri}: {file.rows} row(s), {file.bytes} bytes")
        click.echo(f"sink {result.pipe}: {result}")
        return 0

    run(body)


def _run_time(text: str | None) -> datetime | None:
    if text is None:
        return None
    try:
        stamp = datetime.fromisoformat(text.strip())
    except ValueError:
        raise PipeframeError("PF119", f"--run-time `{text}` is not a time.",
                             "Write an ISO 8601 time, e.g. `2024-06-01T01:00:00Z` (UTC unless it says).") from None
    return stamp if stamp.tzinfo is not None else stamp.replace(tzinfo=UTC)


COMMANDS = [sink]
