"""The data commands of the `pipeframe` CLI: ingest (append, replace, truncate, delete) and materialized
views (refresh, populate, optimize, status, pause, resume, recover). Thin clients of `pipeframe.Project`."""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Self

import click

from pipeframe.cli import ENV_OPTION, PROJECT_OPTION, _console, _project, main, run

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
    line = f"{result.datasource}: {result.accepted} row(s) accepted (version {result.version})"
    if result.quarantined:
        click.echo(line + ", " + click.style(f"{result.quarantined} quarantined", fg="yellow", bold=True)
                   + f" → {result.datasource}_quarantine")
        for reason in result.reasons:
            click.echo(f"    e.g. {reason}")
    else:
        click.echo(line + ", 0 quarantined")
    return _print_refreshes(result.views)


def _print_refreshes(results) -> int:
    colors = {"applied": "green", "rebuilt": "green", "up to date": None, "paused": "yellow", "stale": "yellow",
              "error": "red"}
    for r in results:
        versions = f" (source version {r.from_version} → {r.to_version})" if r.outcome == "applied" \
            and r.from_version is not None else ""
        message = f": {r.message}" if r.message else ""
        click.echo(f"  {r.view}: " + click.style(r.outcome, fg=colors.get(r.outcome)) + versions + message)
    return 1 if any(r.failed for r in results) else 0


@main.command()
@click.argument("datasource", required=False)
@click.argument("file", required=False, type=click.Path(allow_dash=True))
@PROJECT_OPTION
@ENV_OPTION
@FORMAT_OPTION
@click.option("--fixtures", is_flag=True,
              help="Append every fixtures/<datasource>.<ext> file instead (each file's contents only once).")
def append(datasource: str | None, file: str | None, project_dir: str, env: str | None, fmt: str | None,
           fixtures: bool) -> None:
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
    """
    if fixtures:
        if datasource or file:
            raise click.UsageError("--fixtures takes no DATASOURCE or FILE.")
        run(lambda: _load_fixtures(_project(project_dir, env)))
        return
    if not datasource or not file:
        raise click.UsageError("Give a DATASOURCE and a FILE (or `-` for stdin), or --fixtures.")
    run(lambda: _ingest_command(lambda path: _project(project_dir, env).append(datasource, path, fmt), file, fmt))


def _load_fixtures(project) -> int:
    code = 0
    for result in project.load_fixtures():
        if result.version is None:
            click.echo(f"{result.datasource}: fixture already loaded, skipped")
            continue
        code = max(code, _print_ingest(result))
    return code


@main.command()
@click.argument("datasource")
@click.argument("file", type=click.Path(allow_dash=True))
@PROJECT_OPTION
@ENV_OPTION
@FORMAT_OPTION
@click.option("--where", default=None, help="Replace only the rows matching this SQL condition.")
def replace(datasource: str, file: str, project_dir: str, env: str | None, fmt: str | None,
            where: str | None) -> None:
    """Replace the rows of DATASOURCE (all, or those matching --where) with the rows of FILE.

    Every new row must match --where. Views over the datasource are rebuilt from the new contents.

    \b
    Example:
      pipeframe replace products fixtures/products.csv -p example_project
      pipeframe replace sales day.ndjson --where "to_date(ts) = '2024-05-14'"
    """
    run(lambda: _ingest_command(
        lambda path: _project(project_dir, env).replace(datasource, path, where, fmt), file, fmt))


def _confirm(question: str, yes: bool) -> bool:
    return yes or not sys.stdin.isatty() or click.confirm(question, default=False)


@main.command()
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
        if not _confirm(f"Delete every row of {datasource}?", yes):
            click.echo("Nothing deleted.")
            return 1
        deleted, views = _project(project_dir, env).truncate(datasource)
        click.echo(f"{datasource}: {deleted} row(s) deleted")
        return _print_refreshes(views)

    run(body)


@main.command()
@click.argument("datasource")
@click.option("--where", required=True, help="SQL condition selecting the rows to delete.")
@PROJECT_OPTION
@ENV_OPTION
@click.option("--yes", "-y", is_flag=True, help="Do not ask for confirmation on a terminal.")
def delete(datasource: str, where: str, project_dir: str, env: str | None, yes: bool) -> None:
    """Delete the rows of DATASOURCE matching --where; its views are rebuilt.

    \b
    Example:
      pipeframe delete sales --where "customer_id = 'c-0014'"
    """

    def body() -> int:
        if not _confirm(f"Delete the rows of {datasource} where {where}?", yes):
            click.echo("Nothing deleted.")
            return 1
        deleted, views = _project(project_dir, env).delete(datasource, where)
        click.echo(f"{datasource}: {deleted} row(s) deleted")
        return _print_refreshes(views)

    run(body)


@main.command()
@click.argument("view", required=False)
@PROJECT_OPTION
@ENV_OPTION
@click.option("--full", is_flag=True, help="Rebuild from the source instead of applying new commits.")
def refresh(view: str | None, project_dir: str, env: str | None, full: bool) -> None:
    """Apply the source commits that views have not processed yet (all views, or VIEW and its downstream).

    Picks up rows written to a source by other Spark jobs and repairs an ingest that was interrupted. A
    source whose rows were updated or deleted in place makes its views `stale`; --full rebuilds them (a new
    version beside the live one, swapped in when complete).

    \b
    Examples:
      pipeframe refresh -p example_project
      pipeframe refresh sales_by_hour --full
    """
    run(lambda: _print_refreshes(_project(project_dir, env).refresh(view, full)))


@main.command()
@click.argument("pipe")
@PROJECT_OPTION
@ENV_OPTION
@click.option("--truncate", is_flag=True, help="Rebuild the view from scratch (beside the live version).")
@click.option("--where", default=None, help="Only source rows matching this SQL condition.")
@click.option("--chunk-by", default=None, help="Process the source in chunks split on this column.")
@click.option("--chunk-rows", type=click.IntRange(min=1), default=1_000_000, show_default=True,
              help="About how many source rows per chunk (with --chunk-by).")
def populate(pipe: str, project_dir: str, env: str | None, truncate: bool, where: str | None, chunk_by: str | None,
             chunk_rows: int) -> None:
    """Backfill the materialized view of PIPE from its source, pinned to one source version.

    With --truncate the view is rebuilt beside the live one and swapped in; ingestion running meanwhile is
    applied afterwards, neither missed nor counted twice. Without it, the states of the source rows up to
    the view's watermark (and matching --where) are ADDED to the view: use it to fill a view deployed with
    `BACKFILL skip`. Chunks are committed one by one; an interrupted populate resumes where it stopped when
    run again.

    \b
    Examples:
      pipeframe populate sales_by_hour --truncate --chunk-by ts -p example_project
      pipeframe populate sales_by_hour --where "ts < '2024-05-01'"
    """

    def body() -> int:
        project = _project(project_dir, env)
        with _Progress() as progress:
            results = project.populate(pipe, truncate, where, chunk_by, chunk_rows, on_progress=progress.update)
        return _print_refreshes(results)

    run(body)


class _Progress:
    """A rich progress bar (rows, rate, ETA) on a terminal; one plain line per chunk elsewhere (CI logs)."""

    def __init__(self) -> None:
        self.tty = sys.stdout.isatty()
        self.bar = None
        self.task = None

    def __enter__(self) -> Self:
        if self.tty:
            from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn

            self.bar = Progress(TextColumn("{task.description}"), BarColumn(),
                                TextColumn("{task.completed:,.0f}/{task.total:,.0f} rows"),
                                TextColumn("{task.fields[rate]}"), TimeRemainingColumn(), console=_console())
            self.bar.start()
        return self

    def update(self, progress) -> None:
        rate = f"{progress.rate:,.0f} rows/s"
        if self.bar is not None:
            if self.task is None:
                self.task = self.bar.add_task(f"{progress.mode} {progress.view}", total=progress.total_rows,
                                              rate=rate)
            self.bar.update(self.task, completed=progress.processed_rows, rate=rate)
            return
        eta = f", ETA {progress.eta_seconds:.0f} s" if progress.eta_seconds is not None else ""
        click.echo(f"{progress.mode} {progress.view}: chunk {progress.done_chunks}/{progress.chunks}, "
                   f"{progress.processed_rows}/{progress.total_rows} rows ({progress.percent:.0f}%), "
                   f"{rate}{eta}")

    def __exit__(self, *exc: object) -> None:
        if self.bar is not None:
            self.bar.stop()


@main.command()
@click.argument("name", required=False)
@PROJECT_OPTION
@ENV_OPTION
def optimize(name: str | None, project_dir: str, env: str | None) -> None:
    """Compact view states to one row per key, delete rows past ENGINE_TTL, compact files and vacuum.

    Query results are the same before and after. Files no longer referenced are kept for
    `retention_hours` (pipeframe.yaml, default 168) before VACUUM removes them.

    \b
    Example:
      pipeframe optimize sales_by_hour -p example_project
    """

    def body() -> int:
        started = time.monotonic()
        done = _project(project_dir, env).optimize(name)
        click.echo(f"optimized {', '.join(done) or 'nothing'} in {time.monotonic() - started:.1f} s")
        return 0

    run(body)


@main.command()
@click.argument("view", required=False)
@PROJECT_OPTION
@ENV_OPTION
@click.option("--json", "as_json", is_flag=True, help="Print JSON (for tools and CI).")
def status(view: str | None, project_dir: str, env: str | None, as_json: bool) -> None:
    """Show each materialized view's status, size, lag behind its source and backfill progress.

    Statuses: active, backfilling, rebuilding, paused, stale (its source changed in place; refresh --full),
    error (see the reason; `pipeframe recover`).

    \b
    Example:
      pipeframe status sales_by_hour -p example_project
    """

    def body() -> int:
        statuses = _project(project_dir, env).status(view)
        if as_json:
            click.echo(json.dumps([s.to_json() for s in statuses], indent=2, default=str))
            return 0
        if not statuses:
            click.echo("No materialized views are deployed.")
            return 0
        _print_status(statuses)
        return 0

    run(body)


def _print_status(statuses) -> None:
    from rich.table import Table

    colors = {"active": "green", "paused": "yellow", "stale": "yellow", "error": "red"}
    table = Table("view", "status", "rows", "files", "size", "source (version)", "applied", "lag",
                  "last refresh (UTC)")
    for s in statuses:
        lag = "" if s.lag_versions is None else f"{s.lag_versions} v / {s.lag_seconds or 0:.0f} s"
        table.add_row(s.name, f"[{colors.get(s.status, 'cyan')}]{s.status}[/]", f"{s.rows:,}", str(s.files),
                      _size(s.bytes), f"{s.source} ({s.source_version})", str(s.applied_version), lag,
                      f"{s.last_refresh:%Y-%m-%d %H:%M:%S}" if s.last_refresh else "")
    console = _console()
    console.print(table)
    for s in statuses:
        if s.reason:
            console.print(f"{s.name}: [bold]{s.status}[/bold]: {s.reason}")
        if s.backfill:
            b = s.backfill
            state = "running" if b.running else f"interrupted (run `pipeframe populate {s.pipe}` to resume)"
            eta = f", ETA {b.eta_seconds:.0f} s" if b.eta_seconds is not None and b.running else ""
            console.print(f"{s.name}: {b.mode} {state}: {b.processed_rows:,}/{b.total_rows:,} rows "
                          f"({b.percent:.0f}%), chunk {b.done_chunks}/{b.chunks}, {b.rate:,.0f} rows/s{eta}, "
                          f"cursor {b.cursor or 'done'}")


def _size(n: int) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1024:
            return f"{n:.0f} {unit}"
        n /= 1024  # type: ignore[assignment]
    return f"{n:.1f} TB"


@main.command()
@click.argument("view")
@PROJECT_OPTION
@ENV_OPTION
@click.option("--permanent", is_flag=True, help="Stay paused across deploys that rebuild the view.")
def pause(view: str, project_dir: str, env: str | None, permanent: bool) -> None:
    """Stop applying new source rows to VIEW; it keeps its watermark and catches up on `resume`.

    \b
    Example:
      pipeframe pause sales_by_hour -p example_project
    """

    def body() -> int:
        _project(project_dir, env).pause(view, permanent)
        click.echo(f"{view}: paused" + (" (permanent)" if permanent else ""))
        return 0

    run(body)


@main.command()
@click.argument("view")
@PROJECT_OPTION
@ENV_OPTION
def resume(view: str, project_dir: str, env: str | None) -> None:
    """Resume a paused VIEW and apply every source commit it missed.

    \b
    Example:
      pipeframe resume sales_by_hour -p example_project
    """
    run(lambda: _print_refreshes(_project(project_dir, env).resume(view)))


@main.command()
@click.argument("view")
@PROJECT_OPTION
@ENV_OPTION
def recover(view: str, project_dir: str, env: str | None) -> None:
    """Bring a failed or stale VIEW back: retry its refresh, or rebuild it from its source.

    \b
    Example:
      pipeframe recover sales_by_hour -p example_project
    """
    run(lambda: _print_refreshes(_project(project_dir, env).recover(view)))


@main.group()
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
    from pipeframe.cli import parse_params
    from pipeframe.copy import run_copy

    def body() -> int:
        result = run_copy(_project(project_dir, env), pipe, parse_params(params), mode)
        click.echo(f"copy {result.pipe} → {result.target} ({result.mode}) in {result.elapsed:.1f} s")
        return _print_ingest(result.ingest)

    run(body)
