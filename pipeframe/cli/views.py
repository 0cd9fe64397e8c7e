"""The materialized-view commands of the `pipeframe` CLI: refresh, populate, optimize, status, pause, resume and
recover. Thin clients of `pipeframe.Project`."""

from __future__ import annotations

import json
import sys
import time
from typing import Self

import click

from pipeframe.cli.common import (
    ENGINE_OPTION,
    ENV_OPTION,
    PROJECT_OPTION,
    load_project,
    print_refreshes,
    rich_console,
    run,
)


@click.command()
@click.argument("view", required=False)
@PROJECT_OPTION
@ENV_OPTION
@click.option("--full", is_flag=True, help="Rebuild from the source instead of applying new commits.")
@click.option("--follow", is_flag=True,
              help="Keep running: apply new source commits as they come (every ingest.poll_ms) until Ctrl-C.")
def refresh(view: str | None, project_dir: str, env: str | None, full: bool, follow: bool) -> None:
    """Apply the source commits that views have not processed yet (all views, or VIEW and its downstream).

    Picks up rows written to a source by other Spark jobs and repairs an ingest that was interrupted. A
    source whose rows were updated or deleted in place makes its views `stale`; --full rebuilds them (a new
    version beside the live one, swapped in when complete).

    \b
    Examples:
      pipeframe refresh -p example_project
      pipeframe refresh sales_by_hour --full
      pipeframe refresh --follow -p example_project   # the continuous materializer, without the HTTP server
    """
    if follow:
        if view or full:
            raise click.UsageError("--follow keeps every view up to date: it takes no VIEW and no --full.")
        run(lambda: _follow(load_project(project_dir, env)))
        return
    run(lambda: print_refreshes(load_project(project_dir, env).refresh(view, full)))


def _follow(project) -> int:
    import signal
    import threading

    from pipeframe.sqltext import first_line

    project.require_valid()
    project.spark  # noqa: B018 — started first: pyspark installs its own SIGINT handler when it starts
    stop = threading.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):  # stop after the round under way, never inside a commit
        signal.signal(signum, lambda *_: stop.set())
    click.echo(f"Following {project.config.name}: views apply new source commits as they come (Ctrl-C to stop)")
    def failed(exc: Exception) -> None:
        click.secho(f"warning: a round failed ({first_line(exc)}); the next one tries again", fg="yellow", err=True)

    project.follow(stop, lambda results: print_refreshes([r for r in results if r.outcome != "up to date"]), failed)
    click.echo("stopped")
    return 0


@click.command()
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

    given = click.get_current_context().get_parameter_source("chunk_rows")
    if not chunk_by and given is not None and given.name != "DEFAULT":
        raise click.UsageError("--chunk-rows sizes the chunks of --chunk-by COL; give --chunk-by too.")

    def body() -> int:
        project = load_project(project_dir, env)
        with _Progress() as progress:
            results = project.populate(pipe, truncate, where, chunk_by, chunk_rows, on_progress=progress.update)
        return print_refreshes(results)

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
                                TextColumn("{task.fields[rate]}"), TimeRemainingColumn(), console=rich_console())
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


@click.command()
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
        done = load_project(project_dir, env).optimize(name)
        click.echo(f"optimized {', '.join(done) or 'nothing'} in {time.monotonic() - started:.1f} s")
        return 0

    run(body)


@click.command()
@click.argument("view", required=False)
@PROJECT_OPTION
@ENV_OPTION
@click.option("--json", "as_json", is_flag=True, help="Print JSON (for tools and CI).")
@ENGINE_OPTION
def status(view: str | None, project_dir: str, env: str | None, as_json: bool, engine: str) -> None:
    """Show each materialized view's status, size, lag behind its source and backfill progress, and how its
    landing datasource's newest group commits were made (typed without Spark, committed by pyarrow).

    Statuses: active, backfilling, rebuilding, paused, stale (its source changed in place; refresh --full),
    error (see the reason; `pipeframe recover`). Read from the tables' logs without starting Spark where they can
    say it (a local warehouse; object storage goes through Spark for the histories).

    \b
    Example:
      pipeframe status sales_by_hour -p example_project
    """

    def body() -> int:
        statuses = load_project(project_dir, env, engine=engine).status(view)
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
    table = Table("view", "status", "rows", "files", "size", "source (version)", "applied", "lag", "rows/s",
                  "last refresh (UTC)")
    for s in statuses:
        lag = "" if s.lag_versions is None else f"{s.lag_versions} v / {s.lag_ms or 0:,.0f} ms"
        table.add_row(s.name, f"[{colors.get(s.status, 'cyan')}]{s.status}[/]", f"{s.rows:,}", str(s.files),
                      _size(s.bytes), f"{s.source} ({s.source_version})", str(s.applied_version), lag,
                      f"{s.rows_per_second:,.0f}",
                      (f"{s.last_refresh:%Y-%m-%d %H:%M:%S}" if s.last_refresh else "")
                      + (f" [{s.last_path}]" if s.last_path not in (None, "append") else ""))
    console = rich_console()
    console.print(table)
    topics = {s.kafka["datasource"]: s.kafka for s in statuses if s.kafka}
    if topics:
        lags = Table("Kafka datasource", "topic", "partition", "in Delta", "broker", "lag")
        for name, t in topics.items():
            for partition, p in t["partitions"].items():
                lags.add_row(name, t["topic"], partition, _offset(p["committed"]), _offset(p["high"]), _offset(p["lag"]))
            if not t["partitions"]:
                lags.add_row(name, t["topic"], "", "", "", "")
        console.print(lags)
        for name, t in topics.items():
            if t["error"]:
                console.print(f"{name}: [bold]{t['error']}[/bold]")
    landing = {s.ingest["datasource"]: s.ingest for s in statuses if s.ingest and s.ingest["group_commits"]}
    if landing:
        paths = Table("landing datasource", "group commits", "typed without Spark", "committed by pyarrow")
        for name, i in landing.items():
            paths.add_row(name, f"{i['group_commits']:,} of its last {i['commits_read']:,} commits",
                          _share(i["typed_without_spark"], i["group_commits"]),
                          _share(i["committed_by_pyarrow"], i["group_commits"]))
        console.print(paths)
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


def _share(part: int, whole: int) -> str:
    return f"{part:,} ({100 * part / whole:.0f}%)"


def _offset(n: int | None) -> str:
    return "" if n is None else f"{n:,}"


def _size(n: int) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1024:
            return f"{n:.0f} {unit}"
        n /= 1024  # type: ignore[assignment]
    return f"{n:.1f} TB"


@click.command()
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
        load_project(project_dir, env).pause(view, permanent)
        click.echo(f"{view}: paused" + (" (permanent)" if permanent else ""))
        return 0

    run(body)


@click.command()
@click.argument("view")
@PROJECT_OPTION
@ENV_OPTION
def resume(view: str, project_dir: str, env: str | None) -> None:
    """Resume a paused VIEW and apply every source commit it missed.

    \b
    Example:
      pipeframe resume sales_by_hour -p example_project
    """
    run(lambda: print_refreshes(load_project(project_dir, env).resume(view)))


@click.command()
@click.argument("view")
@PROJECT_OPTION
@ENV_OPTION
def recover(view: str, project_dir: str, env: str | None) -> None:
    """Bring a failed or stale VIEW back: retry its refresh, or rebuild it from its source.

    \b
    Example:
      pipeframe recover sales_by_hour -p example_project
    """
    run(lambda: print_refreshes(load_project(project_dir, env).recover(view)))


COMMANDS = [refresh, populate, optimize, status, pause, resume, recover]
