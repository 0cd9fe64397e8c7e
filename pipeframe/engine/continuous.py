"""The continuous materializer: a background loop that keeps views in step with their sources while `pipeframe
serve`, `pipeframe dev` or `pipeframe run` is up.

Each round looks at the latest version of every deployed table (a directory listing in a local warehouse), and
refreshes the views downstream of those that moved: every source commit since a view's watermark in one batch,
cascades in graph order, views of one source sharing one read of its change feed (`Materializer.refresh`). A
round starts when a commit of this process wakes it (`wake`), or every `poll_ms` to pick up what other writers
committed (another Spark job, a `pipeframe append` elsewhere). Refreshing is exactly once whoever else refreshes
the same views at the same time (the per-view lock and Delta's transaction ids; see `Materializer`).

`wait` is how `POST /v0/events?wait=true` answers only once every dependent view has applied its rows: it waits
for a round that started after the rows were committed."""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from pipeframe.sqltext import first_line

if TYPE_CHECKING:
    from pipeframe.engine.materialize import Materializer, ViewRefresh

log = logging.getLogger("pipeframe.materializer")


@dataclass
class ViewFigures:
    """What the loop saw of one view: its last refresh (and the round of it), and how long the newest rows it
    applied had waited for it (commit → visible)."""

    last: ViewRefresh | None = None
    round: int = 0  # the round of `last`
    visible_ms: float | None = None
    applied: ViewRefresh | None = None  # the last refresh that applied rows
    applied_round: int = 0
    lag_versions: int | None = None  # source commits not applied yet when its last round looked


@dataclass(frozen=True)
class ViewLag:
    """A view's lag as the loop last saw it (for metrics): commit → visible of its newest rows, commits behind."""

    visible_ms: float | None
    versions: int | None


class ContinuousMaterializer:
    """`materializer()` gives a Materializer over what is deployed now (asked every round, so deploys are
    followed). Start it with `start()`, stop it with `stop()`; `BackgroundJob`-shaped for the server."""

    def __init__(self, materializer: Callable[[], Materializer], poll_ms: int = 1000) -> None:
        self.materializer = materializer
        self.poll = poll_ms / 1000
        self.rounds = 0  # rounds started
        self.done = 0  # rounds finished
        self.figures: dict[str, ViewFigures] = {}
        self.problem: str | None = None  # why the last round failed
        # Told of each round that ran (its seconds and refreshes): the server's metrics, the service log.
        self.on_round: list[Callable[[float, list[ViewRefresh]], None]] = []
        self._seen: dict[str, int] = {}  # table path -> its version when the last round started
        self._forced: set[str] = set()  # views a waiter needs refreshed by the next round
        self._cond = threading.Condition()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # ------------------------------------------------------------------------------ lifecycle
    def start(self, _service: object = None) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="pipeframe-materializer", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(60)
        with self._cond:
            self._cond.notify_all()

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def wake(self, *_args: object) -> None:
        """Start a round now (a commit was made); safe to call from any thread, as often as wanted."""
        self._wake.set()

    def committed(self, _datasource: str, _version: int) -> int:
        """Told by the group committer after each commit: wakes a round; the rounds started so far (`after` for
        `wait`: any later round sees the commit)."""
        with self._cond:
            started = self.rounds
        self.wake()
        return started

    def wait(self, views: Iterable[str], timeout: float, after: int | None = None) -> list[ViewRefresh] | None:
        """Wait until a round that starts after this call has finished; each of `views`' refresh that applied rows
        in a round after `after` (the rounds started before the commit waited for), else its last refresh. None when
        it did not finish within `timeout` seconds (or the loop stopped)."""
        views = list(views)
        with self._cond:
            needed = self.rounds + 1
            self._forced.update(views)  # the next round refreshes them, whatever an earlier round saw
        self.wake()
        deadline = time.monotonic() + timeout
        with self._cond:
            while self.done < needed:
                left = deadline - time.monotonic()
                if left <= 0 or self._stop.is_set():
                    return None
                self._cond.wait(left)
            return [self._since(name, needed, after) for name in views]

    def _since(self, view: str, round_: int, after: int | None) -> ViewRefresh:
        from pipeframe.engine.materialize import ViewRefresh

        figures = self.figures.get(view)
        if figures is not None and figures.last is not None and figures.round >= round_:
            # The waiter's own round found the view up to date: a round since the commit was waited for (`after`:
            # the rounds started by then, so the round in progress at the commit counts too: it may have read the
            # commit) applied the rows. Any other outcome of its own round (paused, error, applied) is the answer:
            # the round in progress at the commit may have applied only rows committed before it.
            if figures.last.outcome == "up to date" and after is not None and figures.applied is not None and \
                    figures.applied_round >= after:
                return figures.applied
            return figures.last
        if figures is not None and after is not None and figures.applied is not None and figures.applied_round >= after:
            return figures.applied  # its own round did not get to the view (it failed): the rows were applied
        return ViewRefresh(view, "pending", message=self.problem or "not refreshed yet: the next round applies it")

    def view_json(self, view: str) -> dict:
        """The loop's figure of one view for `GET /v0/views/<name>`: how long the newest rows it applied had waited
        since their commit (commit → visible), in ms."""
        figures = self.figures.get(view)
        visible = figures.visible_ms if figures is not None else None
        return {"visible_ms": None if visible is None else round(visible, 1)}

    def lag(self) -> dict[str, ViewLag]:
        """Every view the loop refreshed: its lag as of its last round (in memory: cheap enough for every scrape)."""
        return {view: ViewLag(f.visible_ms, f.lag_versions) for view, f in list(self.figures.items())}

    # ---------------------------------------------------------------------------------- rounds
    def _run(self) -> None:
        from pipeframe.engine.session import scheduler_pool

        with contextlib.suppress(Exception):  # nothing to read yet: the default pool
            scheduler_pool(self.materializer().spark, "views")
        while not self._stop.is_set():
            self._wake.wait(self.poll)
            self._wake.clear()
            if self._stop.is_set():
                break
            with self._cond:
                self.rounds += 1
                round_, forced, self._forced = self.rounds, self._forced, set()
            started = time.perf_counter()
            try:
                refreshed = self.run_round(round_, forced)
                self.problem = None
                for told in self.on_round:
                    told(time.perf_counter() - started, refreshed)
            except Exception as exc:
                log.warning("A materializer round failed; the next one tries again.", exc_info=True)
                self.problem = f"the materializer's last round failed ({first_line(exc)}); the next one tries again"
            with self._cond:
                self.done = round_
                self._cond.notify_all()

    def run_round(self, round_: int = 0, forced: set[str] = frozenset()) -> list[ViewRefresh]:
        """Refresh the views downstream of every table that moved since the previous round (and `forced`)."""
        materializer = self.materializer()
        moved, seen, path_of = [], {}, {}
        for resource in materializer.deployed.values():
            if resource.state.has_table and resource.path:
                path_of[resource.state.name] = resource.path
                seen[resource.path] = version = materializer.warehouse.version_of(resource.path)
                if self._seen.get(resource.path) != version:
                    moved.append(resource.state.name)
        wanted = {v.state.name for v in materializer.downstream(moved)} | set(forced) if moved or forced else set()
        views = [v for v in materializer.views() if v.state.name in wanted]  # upstream first
        results = materializer.refresh(views) if views else []
        self._seen = seen  # only once refreshed: a round that failed looks at the same tables again
        sources = {v.state.name: v.state.source for v in views}
        for result in results:
            figures = self.figures.setdefault(result.view, ViewFigures())
            figures.last, figures.round = result, round_
            latest = seen.get(path_of.get(sources.get(result.view) or "", ""))
            if latest is not None and result.to_version is not None:
                figures.lag_versions = max(0, latest - result.to_version)
            if result.outcome == "applied":
                figures.applied, figures.applied_round = result, round_
                figures.visible_ms = result.waited_ms
            elif result.outcome == "up to date" and figures.visible_ms is None:
                figures.visible_ms = 0.0
        return results
