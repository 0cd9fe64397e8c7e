"""`pipeframe serve`: the HTTP API over the deployed project (a thin client of `pipeframe.server`)."""

from __future__ import annotations

import click

from pipeframe.cli.common import ENGINE_OPTION, ENV_OPTION, PROJECT_OPTION, load_project, run
from pipeframe.errors import PipeframeError

LOOPBACK = ("127.0.0.1", "localhost", "::1")


@click.command()
@click.option("--host", default="127.0.0.1", show_default=True,
              help="Interface to listen on (0.0.0.0 for every interface).")
@click.option("--port", default=7181, show_default=True, type=click.IntRange(0, 65535),
              help="Port to listen on (0 picks a free one).")
@PROJECT_OPTION
@ENV_OPTION
@ENGINE_OPTION
def serve(host: str, port: int, project_dir: str, env: str | None, engine: str) -> None:
    """Serve the deployed project over HTTP until Ctrl-C.

    Endpoints answer as in Tinybird (GET /v0/pipes/NAME.json|.csv|.ndjson?param=...), events land with
    POST /v0/events?name=DATASOURCE (NDJSON, like `pipeframe append`; group-committed, 202 once committed,
    ?wait=true for 200 once the views applied them), views are kept up to date in the background and managed
    under /v0/views, /docs shows the OpenAPI document, and /ui is a web console (graph, views, ingest, latency,
    quarantine, an endpoint playground). Tokens from pipeframe.yaml `tokens:` are enforced when there are any.
    Endpoints are answered by DuckDB over the tables' snapshots, by Spark where that cannot answer as Spark would
    (`statistics.engine` says which; `--engine spark` answers every one with Spark).
    The project must be deployed first (`pipeframe deploy`).

    \b
    Examples:
      pipeframe serve -p example_project
      curl 'http://127.0.0.1:7181/v0/pipes/top_products.json?limit=3'
      curl --data-binary @sales.ndjson 'http://127.0.0.1:7181/v0/events?name=sales'
    """

    def body() -> int:
        from pipeframe.server import RunningServer, serve_forever

        service = _service(project_dir, env, engine, "endpoints whose SQL changed answer 409")
        project = service.project

        def ready(running: RunningServer) -> None:
            names = service.current.endpoints.names
            click.secho(f"Serving {project.config.name} on {running.url} (Ctrl-C to stop)", fg="green", bold=True)
            for name in names[:5]:
                click.echo(f"  GET {running.url}/v0/pipes/{name}.json")
            if len(names) > 5:
                click.echo(f"  ... {len(names) - 5} more at {running.url}/v0/pipes")
            click.echo(f"  docs: {running.url}/docs")
            click.echo(f"  console: {running.url}/ui")
            _jobs(project)
            if service.tokens_enforced:
                click.echo(f"  tokens: enforced ({len(project.config.tokens)} static"
                           f"{', signed tokens with the signing key' if project.config.signing_key else ''})")
            elif host not in LOOPBACK:
                click.secho(f"  warning: no tokens configured and listening on {host}: every route is open to the "
                            "network (set `tokens:` in pipeframe.yaml).", fg="yellow")
            else:
                click.echo("  tokens: none configured, every route is open (local dev)")
            click.echo(f"  metrics: {running.url}/metrics")

        serve_forever(service, host, port, on_ready=ready)
        click.echo("stopped")
        return 0

    run(body, long_lived=True)


@click.command(name="run")
@PROJECT_OPTION
@ENV_OPTION
def run_worker(project_dir: str, env: str | None) -> None:
    """Keep the deployed project running without an HTTP server, until Ctrl-C.

    What `serve` does besides answering HTTP: views apply new source commits as they land, every Kafka datasource
    is consumed (exactly once; docs/connectors.md), COPY_SCHEDULE pipes run on their crons, and a deploy made
    elsewhere is followed. For a worker beside the servers, or the only process of a pipeline without endpoints.
    Ctrl-C (or SIGTERM) stops it cleanly: what was read lands first. The project must be deployed first.

    \b
    Example:
      pipeframe run -p example_project
    """

    def body() -> int:
        from pipeframe.server import run_forever

        service = _service(project_dir, env, "auto", "they are not run")
        project = service.project

        def ready() -> None:
            click.secho(f"Running {project.config.name}: {len(project.snapshot.views())} view(s) kept up to date "
                        "(Ctrl-C to stop)", fg="green", bold=True)
            _jobs(project)

        run_forever(service, on_ready=ready)
        click.echo("stopped")
        return 0

    run(body, long_lived=True)


def _service(project_dir: str, env: str | None, engine: str, undeployed: str):
    """The Service over the deployed project for `serve` and `run` (PF818 when nothing is deployed), with its
    scheduled copies; `undeployed`: what the warning about changes not deployed says happens to them."""
    from pipeframe.connectors.sink import SinkScheduler
    from pipeframe.copy import CopyScheduler
    from pipeframe.server import Service

    project = load_project(project_dir, env, engine=engine)
    project.require_valid()
    if project.deployed_version() < 0 or not project.snapshot:  # a local warehouse is looked at before Spark
        raise PipeframeError("PF818", f"Nothing is deployed in {project.config.warehouse_uri}.",
                             "Run `pipeframe deploy` first (and `pipeframe append --fixtures` for sample rows).")
    pending = project.plan().pending
    if pending:
        click.secho(f"warning: {len(pending)} change(s) in the files are not deployed; {undeployed} until "
                    "`pipeframe deploy`.", fg="yellow")
    return Service(project, jobs=[CopyScheduler(), SinkScheduler()])  # COPY_SCHEDULE, EXPORT_SCHEDULE crons


def _jobs(project) -> None:
    """What runs beside the views: scheduled copies and sinks, Kafka datasources, @auto S3 imports."""
    from pipeframe.connectors.kafka import kafka_datasources, topic_of
    from pipeframe.connectors.s3 import import_datasources
    from pipeframe.connectors.sink import schedules as sink_schedules
    from pipeframe.copy import schedules

    for pipe, cron in sorted(schedules(project).items()):
        click.echo(f"  copy {pipe}: scheduled `{cron}` (UTC)")
    for pipe, cron in sorted(sink_schedules(project).items()):
        click.echo(f"  sink {pipe}: exporting at `{cron}` (UTC)")
    resources, deployed = project.compiled.resources, project.snapshot
    for name, (datasource, _) in sorted(kafka_datasources(resources, deployed).items()):
        click.echo(f"  kafka {name}: consuming topic `{topic_of(datasource)}`")
    for name, (datasource, _) in sorted(import_datasources(resources, deployed, "@auto").items()):
        uri = next((s.value for s in datasource.connector if s.keyword == "IMPORT_BUCKET_URI"), "?")
        click.echo(f"  s3 {name}: importing new files of `{uri}`")


COMMANDS = [serve, run_worker]
