"""Copy pipes: a snapshot query written into its TARGET_DATASOURCE, on demand or on its COPY_SCHEDULE.

A copy goes through the same ingest path as `pipeframe append` (append) or `pipeframe replace` (replace): rows
that do not fit the target's schema are quarantined, and the target's own materialized views follow.
`CopyScheduler` runs the cron schedules (UTC) inside `pipeframe serve` and `pipeframe dev`.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from pipeframe.errors import PipeframeError

if TYPE_CHECKING:
    from pipeframe.engine.ingest import IngestResult
    from pipeframe.project import Project
    from pipeframe.server import Service

log = logging.getLogger("pipeframe.copy")
COPY_MODES = ("append", "replace")


@dataclass(frozen=True)
class CopyResult:
    pipe: str
    target: str
    mode: str
    ingest: IngestResult
    elapsed: float


def run_copy(project: Project, pipe: str, params: Mapping[str, Any] | None = None,
             mode: str | None = None) -> CopyResult:
    """Run the copy pipe `pipe` once (as deployed) and write its rows into its target datasource."""
    start = time.perf_counter()
    endpoints = project.endpoints()
    compiled = endpoints.pipe(pipe, kind="copy")
    node = compiled.definition.typed_node
    mode = mode or (node.copy_mode if node else None) or "append"
    if mode not in COPY_MODES:
        raise PipeframeError("PF806", f"Copy mode `{mode}` is not understood.", "Use append or replace.")
    frame = endpoints.frame(pipe, params or {}, kind="copy")
    target = compiled.target or ""
    result = project.append(target, frame) if mode == "append" else project.replace(target, frame)
    return CopyResult(pipe, target, mode, result, time.perf_counter() - start)


def schedules(project: Project) -> dict[str, str]:
    """Copy pipe name → its cron expression, for the pipes that have one (not @on-demand)."""
    found = {}
    for name, pipe in project.compiled.pipes.items():
        node = pipe.definition.typed_node
        if pipe.type == "copy" and node and node.copy_schedule and node.copy_schedule.lower() != "@on-demand":
            found[name] = node.copy_schedule
    return found


class CopyScheduler:
    """Runs each scheduled copy pipe at its cron times (UTC) while the server runs (a server BackgroundJob).

    `current()` gives the project to use (the dev loop swaps in a new one after each deploy) and `lock` is
    held during a run, so copies never interleave with deploys or other writes. Started by the server, both
    come from its Service. A failed run is logged with its diagnostic and retried at the next scheduled time."""

    def __init__(self, current: Callable[[], Project] | None = None, lock: threading.RLock | None = None,
                 on_run: Callable[[str, CopyResult | PipeframeError], None] | None = None) -> None:
        self.current = current or (lambda: None)  # type: ignore[assignment,return-value]
        self.lock = lock or threading.RLock()
        self.on_run = on_run or _log_run
        self._next: dict[tuple[str, str], datetime] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def due(self, now: datetime) -> list[str]:
        """The pipes whose next run time has come by `now`; each is then scheduled for its following time.
        A pipe seen for the first time (or whose schedule changed) is scheduled from `now` on."""
        from croniter import croniter

        project = self.current()
        wanted = schedules(project)
        self._next = {key: at for key, at in self._next.items() if wanted.get(key[0]) == key[1]}
        ready = []
        for name, cron in sorted(wanted.items()):
            key = (name, cron)
            if key not in self._next:
                self._next[key] = croniter(cron, now).get_next(datetime)
            elif self._next[key] <= now:
                ready.append(name)
                self._next[key] = croniter(cron, now).get_next(datetime)
        return ready

    def tick(self, now: datetime | None = None) -> list[str]:
        """Run every copy pipe that is due at `now` (default: the current UTC time); their names."""
        ran = self.due(now or datetime.now(UTC))
        for name in ran:
            with self.lock:
                try:
                    outcome: CopyResult | PipeframeError = run_copy(self.current(), name)
                except PipeframeError as err:
                    outcome = err
            self.on_run(name, outcome)
        return ran

    def start(self, service: Service | None = None, interval: float = 1.0) -> None:
        if service is not None:
            self.current, self.lock = (lambda: service.project), service.lock

        def loop() -> None:
            while not self._stop.wait(interval):
                try:
                    self.tick()
                except Exception:  # the scheduler outlives one bad tick; the error is logged
                    log.exception("copy scheduler tick failed")

        self._thread = threading.Thread(target=loop, name="pipeframe-copy-scheduler", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)


def _log_run(name: str, outcome: CopyResult | PipeframeError) -> None:
    if isinstance(outcome, PipeframeError):
        log.error("copy %s failed: %s", name, outcome.diagnostics[0].format())
    else:
        log.info("copy %s: %d row(s) %s into %s in %.1f s", name, outcome.ingest.accepted,
                 "appended" if outcome.mode == "append" else "replaced", outcome.target, outcome.elapsed)
