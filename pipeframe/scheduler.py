"""Cron schedules (UTC) run inside `pipeframe serve`, `run` and `dev`: the one loop behind COPY_SCHEDULE
(copy.py's `CopyScheduler`) and EXPORT_SCHEDULE (connectors/sink.py's `SinkScheduler`).

A subclass says which pipes have a schedule (`schedules`) and how one scheduled run goes (`run`, given the
run's scheduled time: a sink names its files by it, so a run done twice writes the same files)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from pipeframe.errors import PipeframeError
from pipeframe.sqltext import first_line

if TYPE_CHECKING:
    from pipeframe.project import Project
    from pipeframe.server import Service

log = logging.getLogger("pipeframe.scheduler")


class CronScheduler:
    """Runs each scheduled pipe at its cron times (UTC) while the server runs (a server BackgroundJob).

    `current()` gives the project to use (the dev loop swaps in a new one after each deploy) and `lock` is
    held during a run, so runs never interleave with deploys or other writes. Started by the server, both
    come from its Service. A failed run is logged with its diagnostic and tried at the next scheduled time."""

    what = "scheduled"  # the word logs use for a run: "copy", "sink"

    def __init__(self, current: Callable[[], Project] | None = None, lock: threading.RLock | None = None,
                 on_run: Callable[[str, Any], None] | None = None) -> None:
        self.current = current or (lambda: None)  # type: ignore[assignment,return-value]
        self.lock = lock or threading.RLock()
        self.on_run = on_run or self.logged
        self._next: dict[tuple[str, str], datetime] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def schedules(self, project: Project) -> dict[str, str]:
        """Pipe name → its cron expression, for the pipes that have one."""
        raise NotImplementedError

    def run(self, project: Project, name: str, at: datetime) -> Any:
        """Run `name` once for its scheduled time `at`; its result (a PipeframeError is caught and reported)."""
        raise NotImplementedError

    def logged(self, name: str, outcome: Any) -> None:
        if isinstance(outcome, PipeframeError):
            log.error("%s %s failed: %s", self.what, name, outcome.diagnostics[0].format())
        else:
            log.info("%s %s: %s", self.what, name, outcome)

    def due(self, now: datetime) -> list[tuple[str, datetime]]:
        """The pipes whose next run time has come by `now`, each with that time; each is then scheduled for its
        following time. A pipe seen for the first time (or whose schedule changed) is scheduled from `now` on."""
        from croniter import croniter

        wanted = self.schedules(self.current())
        self._next = {key: at for key, at in self._next.items() if wanted.get(key[0]) == key[1]}
        ready = []
        for name, cron in sorted(wanted.items()):
            key = (name, cron)
            if key not in self._next:
                self._next[key] = croniter(cron, now).get_next(datetime)
            elif self._next[key] <= now:
                ready.append((name, self._next[key]))
                self._next[key] = croniter(cron, now).get_next(datetime)
        return ready

    def tick(self, now: datetime | None = None) -> list[str]:
        """Run every pipe that is due at `now` (default: the current UTC time); their names."""
        ran = self.due(now or datetime.now(UTC))
        for name, at in ran:
            with self.lock:
                try:
                    outcome = self.run(self.current(), name, at)
                except PipeframeError as err:
                    outcome = err
                except Exception as err:  # one pipe's failure must not cost the others their run
                    log.exception("Scheduled run of %s failed", name)
                    outcome = PipeframeError("PF999", f"The scheduled run of `{name}` at {at.isoformat()} failed: "
                                             f"{first_line(err)}", "The server's log has the details; the next "
                                             "scheduled time runs it again.")
            self.on_run(name, outcome)
        return [name for name, _ in ran]

    def start(self, service: Service | None = None, interval: float = 1.0) -> None:
        if service is not None:
            self.current, self.lock = (lambda: service.project), service.lock

        def loop() -> None:
            while not self._stop.wait(interval):
                try:
                    self.tick()
                except Exception:  # the scheduler outlives one bad tick; the error is logged
                    log.exception("%s scheduler tick failed", self.what)

        self._thread = threading.Thread(target=loop, name=f"pipeframe-{self.what}-scheduler", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)
