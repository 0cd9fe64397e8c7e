"""`pipeframe dev`: a local copy of the project that follows the files.

Start: deploy into the `dev` environment, load the fixtures, serve the HTTP API. Then watch the folder
(watchdog): every save recompiles, prints the errors without exiting (the last good version keeps serving),
applies the plan and serves the new version. One warm Spark session for the whole run.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import click

from pipeframe.engine.warehouse import DeployedResource
from pipeframe.errors import PipeframeError
from pipeframe.project import Project

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from pipeframe.plan.diff import Plan
    from pipeframe.server import Service

# Files whose change means a new build; anything else (editor swap files, the warehouse) is ignored.
WATCHED_SUFFIXES = (".datasource", ".pipe", ".incl", ".yaml", ".yml", ".ndjson", ".csv", ".parquet")
DEBOUNCE_S = 0.05  # editors often write a file in several events; wait until they settle
TABLELESS_KINDS = ("endpoint", "copy", "pipe")  # resources whose change moves no data


@dataclass(frozen=True)
class Build:
    """What one rebuild did: `ok` False when the files had errors (nothing applied)."""

    ok: bool
    changes: int
    elapsed: float


class DevLoop:
    """The dev environment of one project folder, kept in step with the files."""

    def __init__(self, root: str | Path, env: str = "dev", echo: Callable[[str], None] = click.echo,
                 spark: SparkSession | None = None) -> None:
        self.root = Path(root).resolve()
        self.env = env
        self.echo = echo
        self.project = Project(self.root, env=env, spark=spark)
        self.spark = self.project.spark  # started once; every rebuild reuses it
        self.service: Service | None = None  # the HTTP server's state, once serving
        self._lock = threading.RLock()
        self.changed = threading.Event()
        self.idle = threading.Event()  # set while no build is running (the last save is fully deployed)
        self.idle.set()
        self._changed_files: set[str] = set()
        self._files_lock = threading.Lock()

    # ------------------------------------------------------------------------------- building
    def initial_build(self) -> Build:
        build = self.rebuild(set())
        if build.ok:
            for result in self.project.load_fixtures():
                if result.reasons != ("already loaded",):
                    self.echo(f"  fixtures: {result.datasource} +{result.accepted} row(s)"
                              + (f", {result.quarantined} quarantined" if result.quarantined else ""))
        return build

    def rebuild(self, changed: set[str]) -> Build:
        """Recompile; on errors print them and keep the current version; else deploy and swap it in."""
        start = time.perf_counter()
        try:
            project = Project(self.root, env=self.env, spark=self.spark)
            report = project.check()
            for diagnostic in report.diagnostics:
                self.echo(diagnostic.format())
            if not report.ok:
                self.echo(click.style(f"✗ {len(report.errors)} error(s); still serving the last good version",
                                      fg="red"))
                return Build(False, 0, time.perf_counter() - start)
            with self.service.lock if self.service else self._lock:
                self._serve_pipe_edits_first(project)
                result = project.deploy(allow_destructive=True)
                self._reload_fixtures(project, changed, result.plan)
                self.project = project
                if self.service is not None:
                    self.service.reload(project)
        except PipeframeError as err:
            for diagnostic in err.diagnostics:
                self.echo(diagnostic.format())
            if self.service is not None and self.service.project is not self.project:
                self.service.reload(self.project)  # undo an edit served ahead of a deploy that failed
            self.echo(click.style("✗ not applied; still serving the last good version", fg="red"))
            return Build(False, 0, time.perf_counter() - start)
        elapsed = time.perf_counter() - start
        self.echo(click.style(f"✓ {result.changes} change(s) applied in {elapsed:.2f} s", fg="green"))
        return Build(True, result.changes, elapsed)

    def _serve_pipe_edits_first(self, project: Project) -> None:
        """When a save changes only pipes that own no table (endpoints, copy pipes), serve the new version at
        once, from the planned state; the deploy that records it follows. Anything touching a table (a view's
        query, a schema) is served only after its deploy."""
        if self.service is None:
            return
        plan = project.plan(allow_destructive=True)
        if not plan.has_changes or any(c.kind not in TABLELESS_KINDS for c in plan.pending):
            return
        deployed = dict(self.service.current.endpoints.deployed)
        for change in plan.pending:
            if change.desired is None:
                deployed.pop(change.key, None)
            else:
                deployed[change.key] = DeployedResource(change.desired)
        self.service.reload(project, deployed)

    def _reload_fixtures(self, project: Project, changed: set[str], plan: Plan) -> None:
        """Fixtures for datasources the deploy created; a saved fixture file replaces its datasource's rows
        (its views are rebuilt)."""
        fixtures = self.root / "fixtures"
        names = {Path(f).name.split(".")[0] for f in changed if Path(f).parent == fixtures}
        if not names and not any(c.kind == "datasource" and c.action == "create" for c in plan.pending):
            return
        for result in project.load_fixtures(reload={n for n in names if n in project.compiled.datasources}):
            if result.reasons != ("already loaded",):
                self.echo(f"  fixtures: {result.datasource} = {result.accepted} row(s)")

    # ------------------------------------------------------------------------------- watching
    def _on_change(self, path: str) -> None:
        relative = Path(path)
        try:
            relative = relative.resolve().relative_to(self.root)
        except ValueError:
            return
        if relative.parts and (relative.parts[0].startswith(".") or relative.suffix not in WATCHED_SUFFIXES):
            return
        with self._files_lock:
            self._changed_files.add(str(self.root / relative))
        self.changed.set()

    def watch(self, stop: threading.Event) -> None:
        """Rebuild after each burst of saves until `stop` is set."""
        from watchdog.events import FileSystemEvent, FileSystemEventHandler
        from watchdog.observers import Observer

        loop = self

        class Handler(FileSystemEventHandler):
            def on_any_event(self, event: FileSystemEvent) -> None:
                if event.is_directory or event.event_type in ("opened", "closed_no_write"):
                    return
                loop._on_change(str(event.src_path))
                if getattr(event, "dest_path", ""):
                    loop._on_change(str(event.dest_path))

        observer = Observer()
        observer.schedule(Handler(), str(self.root), recursive=True)
        observer.start()
        try:
            while not stop.is_set():
                if not self.changed.wait(0.2):
                    continue
                self.idle.clear()
                time.sleep(DEBOUNCE_S)
                self.changed.clear()
                with self._files_lock:
                    changed, self._changed_files = self._changed_files, set()
                names = ", ".join(sorted(str(Path(f).relative_to(self.root)) for f in changed))
                self.echo(click.style(f"↻ {names}", fg="cyan"))
                try:
                    self.rebuild(changed)
                except Exception as exc:  # noqa: BLE001 — a bug must not end the session; it is reported
                    self.echo(f"PF999 internal error: {type(exc).__name__}: {exc}")
                finally:
                    if not self.changed.is_set():
                        self.idle.set()
        finally:
            observer.stop()
            observer.join(timeout=5)

    # ------------------------------------------------------------------------------- running
    def run(self, host: str, port: int, stop: threading.Event | None = None) -> int:
        """Build, serve and watch until `stop` is set (or Ctrl-C). Errors never end the loop: the last good
        version keeps serving and the next save is built again."""
        from pipeframe.copy import CopyScheduler
        from pipeframe.server import Service, start_server

        stop = stop or threading.Event()
        self.echo(f"pipeframe dev: {self.root} (environment `{self.env}`)")
        build = self.initial_build()
        if not build.ok:
            self.echo("Fix the errors above and save: the project is built again on every save.")
        self.service = Service(self.project, jobs=[CopyScheduler()])
        server = start_server(self.service, host, port)
        self.echo(click.style(f"serving http://{host}:{server.port}/v0/pipes — watching for changes "
                              "(Ctrl-C to stop)", bold=True))
        try:
            self.watch(stop)
        except KeyboardInterrupt:
            pass
        finally:
            server.stop()
        return 0
