"""The data commands of the `pipeframe` CLI: ingest (append, replace, truncate, delete) and copy pipes (`copy
run`). Thin clients of `pipeframe.Project`."""

from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path

import click

from pipeframe.cli.common import ENV_OPTION, PROJECT_OPTION, load_project, parse_params, print_refreshes, run

FORMAT_OPTION = click.option("--format", "fmt", type=click.Choice(["ndjson", "csv", "parquet"]), default=None,
                             help="Input format (default: from the file extension; ndjson for stdin).")


def _input_path(file: str, fmt: str | None, keep: list[Path]) -> str:
    """A path for FILE; `-` copies stdin to a temporary file first."""
    if file != "-":
        return file
    folder = Path(tempfile.mkdtemp(prefix="pipeframe-stdin-"))
    keep.append(folder)
    path = folder / f"stdin.{fmt or 'ndjson'}"
    with path.open("wb") as out:
        shutil.copyfileobj(sys.stdin.buffer, out)
    return str(path)


def _ingest_command(action, file: str, fmt: str | None) -> int:
    temporary: list[Path] = []
    try:
        result = action(_input_path(file, fmt, temporary))
    finally:
        for folder in temporary:
            shutil.rmtree(folder, ignore_errors=True)
    return _print_ingest(result)


def _print_ingest(result) -> int:
    if result.replayed:
        click.echo(f"{result.datasource}: already landed with this idempotency key at version {result.version} "
                   f"({result.accepted} row(s) accepted, {result.quarantined} quarantined); nothing written")
        return 0
    line = f"{result.datasource}: {result.accepted} row(s) accepted (version {result.version})"
    if result.quarantined:
        click.echo(line + ", " + click.style(f"{result.quarantined} quarantined", fg="yellow", bold=True)
                   + f" → {result.datasource}_quarantine")
        for reason in result.reasons:
            click.echo(f"    e.g. {reason}")
    else:
        click.echo(line + ", 0 quarantined")
    return print_refreshes(result.views)


@click.command()
@click.argument("datasource", required=False)
@click.argument("file", required=False, type=click.Path(allow_dash=True))
@PROJECT_OPTION
@ENV_OPTION
@FORMAT_OPTION
@click.option("--fixtures", is_flag=True,
              help="Append every fixtures/<datasource>.<ext> file instead (each file's contents only once).")
@click.option("--idempotency-key", "key", default=None, metavar="KEY",
              help="Land the rows once: run again with the same KEY (a retry) and nothing is written twice.")
@click.option("--no-views", "no_views", is_flag=True,
              help="Only commit the rows; a running `pipeframe serve` or `refresh --follow` (or the next "
                   "`refresh`) applies them to the views.")
def append(datasource: str | None, file: str | None, project_dir: str, env: str | None, fmt: str | None,
           fixtures: bool, key: str | None, no_views: bool) -> None:
    """Append the rows of FILE (NDJSON, CSV or Parquet; `-` reads stdin) to DATASOURCE.

    NDJSON fields are read through the columns' `json:` paths, CSV and Parquet columns by name. Rows that do
    not fit the schema go to `<datasource>_quarantine` with the raw row and the reason. The new rows then
    flow through every view that depends on the datasource, in graph order. Exit status 1 if a view failed
    (the rows stay landed; see `pipeframe status` and `pipeframe recover`).

    \b
    Examples:
      pipeframe append sales fixtures/sales.ndjson -p example_project
      cat events.csv | pipeframe append sales - --format csv
      pipeframe append --fixtures -p example_project
      pipeframe append sales batch-0042.ndjson --idempotency-key batch-0042
    """
    if fixtures:
        if datasource or file or key:
            raise click.UsageError("--fixtures takes no DATASOURCE, FILE or --idempotency-key.")
        run(lambda: _load_fixtures(load_project(project_dir, env)))
        return
    if not datasource or not file:
        raise click.UsageError("Give a DATASOURCE and a FILE (or `-` for stdin), or --fixtures.")
    run(lambda: _ingest_command(lambda path: load_project(project_dir, env).append(
        datasource, path, fmt, idempotency_key=key, views=not no_views), file, fmt))


def _load_fixtures(project) -> int:
    code = 0
    results = project.load_fixtures()
    if not results:
        click.echo("No fixture files: add fixtures/<datasource>.ndjson (or .csv, .parquet) for a landing datasource.")
    for result in results:
        if result.version is None:
            click.echo(f"{result.datasource}: fixture already loaded, skipped")
            continue
        code = max(code, _print_ingest(result))
    return code


@click.command()
@click.argument("datasource")
@click.argument("file", type=click.Path(allow_dash=True))
@PROJECT_OPTION
@ENV_OPTION
@FORMAT_OPTION
@click.option("--where", default=None, help="Replace only the rows matching this SQL condition.")
def replace(datasource: str, file: str, project_dir: str, env: str | None, fmt: str | None,
            where: str | None) -> None:
    """Replace the rows of DATASOURCE (all, or those matching --where) with the rows of FILE.

    Every new row must match --where. With --where, views over the datasource retract the replaced rows and add
    the new ones; replacing every row rebuilds them.

    \b
    Example:
      pipeframe replace products fixtures/products.csv -p example_project
      pipeframe replace sales day.ndjson --where "to_date(ts) = '2024-05-14'"
    """
    run(lambda: _ingest_command(
        lambda path: load_project(project_dir, env).replace(datasource, path, where, fmt), file, fmt))


def _confirm(question: str, yes: bool) -> bool:
    return yes or not sys.stdin.isatty() or click.confirm(question, default=False)


@click.command()
@click.argument("datasource")
@PROJECT_OPTION
@ENV_OPTION
@click.option("--yes", "-y", is_flag=True, help="Do not ask for confirmation on a terminal.")
def truncate(datasource: str, project_dir: str, env: str | None, yes: bool) -> None:
    """Delete every row of DATASOURCE; its views are rebuilt (empty).

    \b
    Example:
      pipeframe truncate page_views --yes
    """

    def body() -> int:
        project = load_project(project_dir, env)
        project._known_landing(datasource)  # before asking, and before Spark starts
        if not _confirm(f"Delete every row of {datasource}?", yes):
            click.echo("Nothing deleted.")
            return 1
        deleted, views = project.truncate(datasource)
        click.echo(f"{datasource}: {deleted} row(s) deleted")
        return print_refreshes(views)

    run(body)


@click.command()
@click.argument("datasource")
@click.option("--where", required=True, help="SQL condition selecting the rows to delete.")
@PROJECT_OPTION
@ENV_OPTION
@click.option("--yes", "-y", is_flag=True, help="Do not ask for confirmation on a terminal.")
def delete(datasource: str, where: str, project_dir: str, env: str | None, yes: bool) -> None:
    """Delete the rows of DATASOURCE matching --where; its views retract them (each view's groups forget them).

    \b
    Example:
      pipeframe delete sales --where "customer_id = 'c-0014'"
    """

    def body() -> int:
        project = load_project(project_dir, env)
        project._known_landing(datasource)  # before asking, and before Spark starts
        if not _confirm(f"Delete the rows of {datasource} where {where}?", yes):
            click.echo("Nothing deleted.")
            return 1
        deleted, views = project.delete(datasource, where)
        click.echo(f"{datasource}: {deleted} row(s) deleted")
        return print_refreshes(views)

    run(body)


@click.group()
def copy() -> None:
    """Copy pipes: run a pipe's snapshot query into its TARGET_DATASOURCE.

    Scheduled copy pipes (COPY_SCHEDULE, a cron in UTC) run by themselves under `pipeframe serve` and
    `pipeframe dev`; `copy run` runs one now.
    """


@copy.command("run")
@click.argument("pipe")
@click.option("--param", "params", multiple=True, metavar="NAME=VALUE", help="A template parameter (repeatable).")
@click.option("--mode", type=click.Choice(["append", "replace"]), default=None,
              help="Override the pipe's COPY_MODE (default: the pipe's, else append).")
@PROJECT_OPTION
@ENV_OPTION
def copy_run(pipe: str, params: tuple[str, ...], mode: str | None, project_dir: str, env: str | None) -> None:
    """Run the copy pipe PIPE once and write its rows into its target datasource.

    Rows go through the same path as `pipeframe append` (or `replace` with --mode replace): rows that do not
    fit the target's schema are quarantined and the target's own views follow.

    \b
    Example:
      pipeframe copy run daily_snapshot -p example_project
    """
    from pipeframe.copy import run_copy

    def body() -> int:
        project = load_project(project_dir, env)
        values = parse_params(params)
        project.require_pipe(pipe, "copy", values)  # name, kind and parameters before Spark starts
        result = run_copy(project, pipe, values, mode)
        click.echo(f"copy {result.pipe} → {result.target} ({result.mode}) in {result.elapsed:.1f} s")
        return _print_ingest(result.ingest)

    run(body)


COMMANDS = [append, replace, truncate, delete, copy]
