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
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

from pipeframe.errors import PipeframeError
from pipeframe.plan.snapshot import DeployedResource, DeployedSnapshot
from pipeframe.project import Project

if TYPE_CHECKING:
    from pipeframe.engine.session import SparkSession
    from pipeframe.errors import Diagnostic
    from pipeframe.plan.diff import Plan
    from pipeframe.server import Service

# Files whose change means a new build; anything else (editor swap files, the warehouse) is ignored.
WATCHED_SUFFIXES = (".datasource", ".pipe", ".connection", ".incl", ".yaml", ".yml", ".ndjson", ".csv", ".parquet")
DEBOUNCE_S = 0.05  # editors often write a file in several events; wait until they settle
TABLELESS_KINDS = ("endpoint", "copy", "pipe")  # resources whose change moves no data


def plain(text: str, **_colours: object) -> str:
    """The default style: the text as it is (`fg=`, `bold=` are ignored)."""
    return text


@dataclass(frozen=True)
class Build:
    """What one rebuild did: `ok` False when the files had errors (nothing applied)."""

    ok: bool
    changes: int
    elapsed: float


@dataclass(frozen=True)
class LastCompile:
    """The last compile of the files and what it reported (`GET /v0/dev/diagnostics`, the console's dev panel)."""

    at: datetime
    diagnostics: tuple[Diagnostic, ...]

    def to_json(self) -> dict:
        errors = sum(d.is_error for d in self.diagnostics)
        return {"compiled_at": self.at.isoformat(timespec="seconds"), "ok": not errors, "errors": errors,
                "warnings": sum(d.severity == "warning" for d in self.diagnostics),
                "diagnostics": [d.to_json() for d in self.diagnostics]}


class DevLoop:
    """The dev environment of one project folder, kept in step with the files."""

    def __init__(self, root: str | Path, env: str = "dev", echo: Callable[[str], None] = print,
                 spark: SparkSession | None = None, style: Callable[..., str] = plain) -> None:
        self.root = Path(root).resolve()
        self.env = env
        self.echo = echo
        self.style = style  # colours on a terminal: the CLI passes click.style
        self.project = Project(self.root, env=env, spark=spark)
        self.spark = self.project.spark  # started once; every rebuild reuses it
        self.service: Service | None = None  # the HTTP server's state, once serving
        self._lock = threading.RLock()
        self.changed = threading.Event()
        self.idle = threading.Event()  # set while no build is running (the last save is fully deployed)
        self.idle.set()
        self._changed_files: set[str] = set()
        self._files_lock = threading.Lock()
        self._newest: Project | None = None  # the newest version that compiled (served, or about to be)
        # The newest compiled version waiting to be deployed, with the files changed since the last deploy: saves
        # made while a deploy runs are served at once when they can be, and deployed together after it.
        self._waiting: tuple[Project, set[str], float] | None = None
        self._waiting_lock = threading.Lock()
        self._deploy_due = threading.Event()
        self._deploying = False
        self.last_compile: LastCompile | None = None

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
        """Recompile; on errors print them and keep the current version; else serve what can be served at once,
        deploy, and serve the deployed version (all before returning)."""
        start = time.perf_counter()
        project = self._compile()
        if project is None:
            return Build(False, 0, time.perf_counter() - start)
        try:
            self._serve_pipe_edits_first(project)
        except PipeframeError as err:
            return self._not_applied(project, err, start)
        return self._deploy(project, changed, start)

    def _compile(self) -> Project | None:
        """The project as the files are now (one compile, sharing the warehouse snapshot), or None on errors."""
        try:
            project = self.project.reload()
            report = project.check()
        except PipeframeError as err:  # e.g. a broken pipeframe.yaml: the console shows it, the loop says it
            self.last_compile = LastCompile(datetime.now(UTC), tuple(err.diagnostics))
            raise
        self.last_compile = LastCompile(datetime.now(UTC), tuple(report.diagnostics))
        for diagnostic in report.diagnostics:
            self.echo(diagnostic.format())
        if report.ok:
            return project
        self.echo(self.style(f"✗ {len(report.errors)} error(s); still serving the last good version", fg="red"))
        return None

    def _deploy(self, project: Project, changed: set[str], start: float) -> Build:
        """Record `project` in the dev warehouse (the deploy and its bookkeeping), then serve it."""
        try:
            # Not under the service's lock: a save made meanwhile is served at once (`Service.reload` takes it).
            with self._lock:
                result = project.deploy(allow_destructive=True)
                self._reload_fixtures(project, changed, result.plan)
                self.project = project
                # Serve it unless a newer save is served already (ahead of its own deploy, which follows).
                if self.service is not None and (self._newest is project or self.service.project is not self._newest):
                    self.service.reload(project, project.snapshot)
        except PipeframeError as err:
            return self._not_applied(project, err, start)
        elapsed = time.perf_counter() - start
        self.echo(self.style(f"✓ {result.changes} change(s) applied in {elapsed:.2f} s", fg="green"))
        return Build(True, result.changes, elapsed)

    def _not_applied(self, project: Project, err: PipeframeError, start: float) -> Build:
        for diagnostic in err.diagnostics:
            self.echo(diagnostic.format())
        if self.service is not None and self.service.project is project:
            self.service.reload(self.project)  # undo an edit served ahead of a deploy that failed
        self.echo(self.style("✗ not applied; still serving the last good version", fg="red"))
        return Build(False, 0, time.perf_counter() - start)

    def _serve_pipe_edits_first(self, project: Project) -> None:
        """When a save changes only pipes that own no table (endpoints, copy pipes), serve the new version at
        once, from the planned state; the deploy that records it follows. Anything touching a table (a view's
        query, a schema) is served only after its deploy."""
        self._newest = project
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
        self.service.reload(project, DeployedSnapshot.of(deployed.values()))

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
        recorder = threading.Thread(target=self._record, args=(stop,), name="pipeframe-dev-deploy", daemon=True)
        recorder.start()
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
                self.echo(self.style(f"↻ {names}", fg="cyan"))
                try:
                    self._serve_then_queue(changed)
                except Exception as exc:  # noqa: BLE001 — a bug must not end the session; it is reported
                    self.echo(f"PF999 internal error: {type(exc).__name__}: {exc}")
                finally:
                    self._settle()
        finally:
            # Ctrl-C ends the loop above without `stop` set: set it, or the deploy thread never sees it (and the
            # join below waited its whole timeout, 60 s, before dev exited). A deploy under way finishes first.
            stop.set()
            observer.stop()
            observer.join(timeout=5)
            recorder.join(timeout=60)

    def _serve_then_queue(self, changed: set[str]) -> None:
        """One burst of saves: compile, serve at once what needs no deploy, and queue the deploy (coalesced with
        any other save waiting for it) so the next save never waits for this one's bookkeeping."""
        start = time.perf_counter()
        project = self._compile()
        if project is None:
            return
        try:
            self._serve_pipe_edits_first(project)
        except PipeframeError as err:
            self._not_applied(project, err, start)
            return
        with self._waiting_lock:
            earlier = self._waiting[1] if self._waiting else set()
            first = self._waiting[2] if self._waiting else start
            self._waiting = (project, earlier | changed, first)
            self._deploy_due.set()

    def _record(self, stop: threading.Event) -> None:
        """The deploy thread: deploys the newest waiting version, one at a time, until `stop`."""
        while not stop.is_set():
            if not self._deploy_due.wait(0.2):
                continue
            with self._waiting_lock:
                waiting, self._waiting = self._waiting, None
                self._deploy_due.clear()
                self._deploying = waiting is not None
            try:
                if waiting is not None:
                    self._deploy(*waiting)
            except Exception as exc:  # noqa: BLE001 — a bug must not end the session; it is reported
                self.echo(f"PF999 internal error: {type(exc).__name__}: {exc}")
            finally:
                with self._waiting_lock:
                    self._deploying = False
                self._settle()

    def _settle(self) -> None:
        """Mark the loop idle when no save is waiting to be compiled or deployed."""
        with self._waiting_lock:
            if not (self.changed.is_set() or self._waiting or self._deploying):
                self.idle.set()

    # ------------------------------------------------------------------------------- running
    def run(self, host: str, port: int, stop: threading.Event | None = None) -> int:
        """Build, serve and watch until `stop` is set (or Ctrl-C). Errors never end the loop: the last good
        version keeps serving and the next save is built again."""
        from pipeframe.connectors.sink import SinkScheduler
        from pipeframe.copy import CopyScheduler
        from pipeframe.server import Service, start_server
        from pipeframe.server.app import interrupted_cleanly, yield_to_commits

        stop = stop or threading.Event()
        self.echo(f"pipeframe dev: {self.root} (environment `{self.env}`)")
        build = self.initial_build()
        if not build.ok:
            self.echo("Fix the errors above and save: the project is built again on every save.")
        self.service = Service(self.project, jobs=[CopyScheduler(), SinkScheduler()],
                               last_compile=lambda: self.last_compile)
        server = start_server(self.service, host, port)
        yield_to_commits(self.service)
        self.echo(self.style(f"serving http://{host}:{server.port}/v0/pipes — watching for changes "
                              "(Ctrl-C to stop)", bold=True))
        self.echo(f"  console: http://{host}:{server.port}/ui")
        with interrupted_cleanly():
            try:
                self.watch(stop)
            except KeyboardInterrupt:
                pass
            finally:
                self.echo("stopping: finishing the requests and the refresh under way ...")
                server.stop()
                self.echo("stopped")
        return 0
