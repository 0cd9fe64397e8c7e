"""One view's incremental refresh from its source, as a short loop over a `TableStore`: the watermark, the source
commits after it, the write strategy that applies to them (`engine/strategies.py`), one commit that records the
new watermark. The materializer runs it per view (and follows joined tables and keeps records around it); the
unit tests run it against the in-memory store."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from pipeframe.engine import strategies
from pipeframe.engine.commits import FOLLOWED_OPS, as_followed
from pipeframe.sqltext import first_line

if TYPE_CHECKING:
    from pipeframe.compiler.maintenance import MaintenancePlan
    from pipeframe.engine.commits import Watermark
    from pipeframe.engine.store import TableStore
    from pipeframe.plan.snapshot import DeployedResource, DeployedSnapshot


@dataclass(frozen=True)
class ViewRefresh:
    """What one refresh did to one view."""

    view: str
    outcome: str  # applied | up to date | paused | stale | error | rebuilt
    from_version: int | None = None
    to_version: int | None = None
    message: str | None = None
    rows: int | None = None  # source rows applied (as the source's commits counted them)
    path: str | None = None  # how the rows were applied: a strategy's name (engine/strategies.py), join, join-negate
    waited_ms: float | None = None  # how long the oldest commit applied had waited when the view committed

    @property
    def failed(self) -> bool:
        return self.outcome == "error"


class WatermarkMissing(Exception):
    """A view table whose history no longer says which source version it has applied."""


class Stale(Exception):
    """The view can no longer follow its source incrementally (the reason is the message): it is marked stale until
    it is rebuilt."""


def watermark(store: TableStore, view: DeployedResource, source: DeployedResource) -> Watermark:
    """The source version the view has applied, as its newest commit recording one says; Stale when that was read
    from another physical table than the source's (the source was rebuilt since)."""
    found = store.watermark(view.path or "")
    if found.source_version is None:
        # Every view table records one when it is built; starting over from version 0 would count twice.
        raise WatermarkMissing(f"no source version is recorded in the history of {view.path}; run "
                               f"`pipeframe refresh {view.state.name} --full` to rebuild it")
    if found.source_path not in (None, source.path):
        raise Stale(f"its source `{view.state.source}` was rebuilt since the view last read it")
    return found


def refresh_view(store: TableStore, view: DeployedResource, deployed: DeployedSnapshot, *,
                 read_by_views: bool = False) -> ViewRefresh:
    """The whole loop for a view that joins no table it follows: its watermark, then `apply_source`."""
    source = deployed.table(view.state.source or "")
    if source is None or view.state.maintenance is None:
        raise ValueError(f"view {view.state.name} has no deployed source or no maintenance plan")
    return apply_source(store, view, source, view.state.maintenance, watermark(store, view, source), deployed,
                        read_by_views=read_by_views)


def apply_source(store: TableStore, view: DeployedResource, source: DeployedResource, plan: MaintenancePlan,
                 watermark: Watermark, deployed: DeployedSnapshot | Mapping, *, read_by_views: bool,
                 history_gone: Callable[[Exception], bool] = lambda _exc: False,
                 followed: str = "") -> ViewRefresh:
    """Apply `source`'s commits after the view's `watermark` (read by the caller, after following its joined
    tables: `followed` is the path of the last join commit made, '' when none) in one commit. Stale when a commit
    rewrote rows in a way its change feed does not describe, or the feed is gone (`history_gone` says which errors
    mean that)."""
    state = view.state
    recent = store.history(source.path or "")
    latest = recent[0]
    applied = watermark.source_version or 0
    if applied >= latest.version:
        return ViewRefresh(state.name, "applied" if followed else "up to date", applied, applied,
                           path=followed or None)
    commits = sorted((c for c in recent if c.version > applied), key=lambda c: c.version)
    if len(commits) < latest.version - applied:  # further back than the recent history read
        commits = store.commits_between(source.path or "", applied, latest.version)
    commits = as_followed(commits, state.follow_ttl)
    unfollowed = [c for c in commits if c.rewrites_rows() and c.operation not in FOLLOWED_OPS]
    if unfollowed:
        raise Stale(f"`{state.source}` was rewritten in a way its change feed does not describe "
                    f"({unfollowed[0].describe()})")
    joined = watermark.joined
    change = strategies.Change(
        view, source, plan, tuple(commits),
        watermark={"source_version": latest.version, "source_path": source.path, "after": applied},
        joined=joined, pins=pinned(store, view, deployed, joined), read_by_views=read_by_views)
    strategy = strategies.choose(change)
    try:
        written = strategy.apply(store, change)
    except Exception as exc:
        if strategy.name == "append" or not history_gone(exc):
            raise
        raise Stale(f"the change feed of `{state.source}` from version {applied + 1} is no longer kept "
                    f"(vacuumed): {first_line(exc)}") from exc
    store.forget(view.path or "")  # its history changed: a downstream view reads it afresh
    if not written:
        # Another refresher applied an increment from the same watermark first: the store skipped this one.
        return ViewRefresh(state.name, "up to date", applied, applied, message="applied by another refresher")
    waited = max(0.0, time.time() - min(c.epoch for c in commits)) * 1000
    return ViewRefresh(state.name, "applied", applied, latest.version, rows=change.rows, waited_ms=waited,
                       path=strategy.name)


def pinned(store: TableStore, view: DeployedResource, deployed: DeployedSnapshot | Mapping,
           versions: Mapping[str, int]) -> dict:
    """The joined tables a view follows, as of the versions its rows agree with (read by name when unknown)."""
    pins = {}
    for name in view.state.joined:
        table = deployed.table(name)
        if table is not None and table.path and name in versions:
            pins[name] = store.snapshot(table, versions[name])
    return pins

