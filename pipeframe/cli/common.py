"""What every `pipeframe` command shares: the --project/--env options, opening the Project, running a command body
(PipeframeErrors print as diagnostics with their exit code, never as tracebacks) and the printing helpers."""

from __future__ import annotations

import logging
import os
import sys
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

import click

from pipeframe.errors import Diagnostic, PipeframeError

if TYPE_CHECKING:
    from rich.console import Console

    from pipeframe.project import Project

PROJECT_OPTION = click.option(
    "-p", "--project", "project_dir", default=".", envvar="PIPEFRAME_PROJECT", show_default=True,
    type=click.Path(file_okay=False), help="Project folder (or set PIPEFRAME_PROJECT).")

ENV_OPTION = click.option("--env", "env", default=None, envvar="PIPEFRAME_ENV",
                          help="Environment from pipeframe.yaml `environments:` (or PIPEFRAME_ENV).")


ENGINE_OPTION = click.option(
    "--engine", type=click.Choice(["auto", "duckdb", "spark"]), default="auto", show_default=True,
    help="What answers: DuckDB over the tables' snapshots (no JVM), with Spark for what it cannot answer as Spark "
         "would (auto); DuckDB alone; or Spark alone.")


def load_project(project_dir: str, env: str | None, cache: bool = True, engine: str = "auto") -> Project:
    """The Project of --project/--env (imported here: `pipeframe --help` need not load it)."""
    from pipeframe.project import Project

    return Project(project_dir, env=env, cache=cache, engine=engine)


def rich_console() -> Console:
    """A rich Console for tables and progress lines."""
    from rich.console import Console

    # Long lines stay whole in CI logs, and tables get room there instead of an 80-column squeeze.
    console = Console(highlight=False, soft_wrap=True)
    return console if console.is_terminal else Console(highlight=False, soft_wrap=True, width=160)


def print_diagnostic(d: Diagnostic) -> None:
    color = {"error": "red", "warning": "yellow"}.get(d.severity, "cyan")
    where = f"{d.location} " if d.location else ""
    click.echo(f"{where}{click.style(d.code, fg=color, bold=True)} {click.style(d.severity, fg=color)}: {d.message}",
               err=False)
    if d.hint:
        click.echo(f"    {click.style('fix:', fg='green')} {d.hint}")


def run(action: Callable[[], int | None], long_lived: bool = False) -> None:
    """Run a command body: PipeframeErrors print as diagnostics (exit 1), never as tracebacks. Output piped into
    a reader that stops early (`pipeframe check | head -1`) ends the command quietly, as Unix tools do.

    `long_lived` (`serve`, `dev`): once the command's own shutdown path has stopped its jobs, the process waits for
    its non-daemon threads (a checkpoint being written), flushes its output and ends without the interpreter's
    finalization. CPython (before 3.14) ends a daemon thread that wakes during finalization with pthread_exit; in
    the frames of a C++ library whose catch(...) swallows that unwind (pyarrow, DuckDB), the process then aborts
    (SIGABRT, "FATAL: exception not rethrown") after a clean stop. Seen on `dev` under load, Ctrl-C while idle."""
    try:
        code = _run(action)
        sys.stdout.flush()  # a closed pipe shows here, not at interpreter exit
    except BrokenPipeError:
        # The reader is gone: point stdout at devnull so Python's own flush at exit does not fail again.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        sys.exit(1)
    if long_lived and code == 0:  # it served and stopped cleanly (a refusal before serving exits as any command)
        for thread in threading.enumerate():
            if not thread.daemon and thread is not threading.current_thread():
                thread.join()
        logging.shutdown()
        sys.stderr.flush()
        os._exit(code)
    sys.exit(code)


def _run(action: Callable[[], int | None]) -> int:
    try:
        return action() or 0
    except PipeframeError as err:
        for d in err.diagnostics:
            print_diagnostic(d)
        return err.exit_code
    except KeyboardInterrupt:
        click.echo("interrupted", err=True)
        return 130
    except (click.exceptions.Exit, BrokenPipeError):
        raise
    except Exception as exc:
        if os.environ.get("PIPEFRAME_DEBUG"):
            raise
        click.echo(f"PF999 internal error: {type(exc).__name__}: {exc}", err=True)
        click.echo("    fix: this is a pipeframe bug; rerun with PIPEFRAME_DEBUG=1 and report the traceback.",
                   err=True)
        return 70


def parse_params(pairs: tuple[str, ...], option: str = "--param") -> dict[str, str]:
    """`--param k=v` options (or those of `option`) as a dict; a malformed one is a usage error naming it."""
    params = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or not name.strip():
            raise PipeframeError("PF805", f"`{option} {pair}` is not of the form name=value.",
                                 f"Write each parameter as {option} name=value, e.g. {option} limit=10.")
        params[name.strip()] = value
    return params


def print_refreshes(results) -> int:
    """One line per view refreshed after a write; 1 when a view failed."""
    colors = {"applied": "green", "rebuilt": "green", "up to date": None, "paused": "yellow", "stale": "yellow",
              "error": "red"}
    for r in results:
        versions = f" (source version {r.from_version} → {r.to_version})" if r.outcome == "applied" \
            and r.from_version is not None else ""
        if r.path not in (None, "append"):  # deletes or updates reached the view: say how
            versions += f" [{r.path}]"
        message = f": {r.message}" if r.message else ""
        click.echo(f"  {r.view}: " + click.style(r.outcome, fg=colors.get(r.outcome)) + versions + message)
    return 1 if any(r.failed for r in results) else 0
