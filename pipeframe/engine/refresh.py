"""One view's incremental refresh, as a short loop over a `TableStore` (`refresh_view`): the watermark; the commits
of each table the view joins and follows since the version its rows agree with, one commit each (`follow_joined`);
the source's commits after the watermark (`apply_source`); for each, the write strategy that applies
(`engine/strategies.py`) and one commit that records where the view now is. The materializer runs it per view under
the view's lock and keeps the view's record around it; the unit tests run it against the in-memory store."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from pipeframe.engine import strategies
from pipeframe.engine.changes import Change, JoinChange
from pipeframe.engine.commits import FOLLOWED_OPS, as_followed, watermark_app_id
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
    path: str | None = None  # how the rows were applied: a strategy's name (engine/strategies.py)
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


def refresh_view(store: TableStore, view: DeployedResource, source: DeployedResource, plan: MaintenancePlan,
                 deployed: DeployedSnapshot, *, read_by_views: bool = False,
                 history_gone: Callable[[Exception], bool] = lambda _exc: False,
                 on_commit: Callable[[str], None] = lambda _step: None) -> ViewRefresh:
    """The whole loop for one view: its watermark, what changed in the tables it joins (`follow_joined`), then its
    source's new commits (`apply_source`). `read_by_views`: other views read this one's rows; `history_gone`: which
    errors mean a change feed is no longer kept (the view goes stale); `on_commit` hears each commit made ("joined
    committed <view>:<table>", "view committed <view>"). Stale (raised) when the view cannot follow a change."""
    found = watermark(store, view, source)
    followed = follow_joined(store, view, source, plan, found, deployed, read_by_views=read_by_views,
                             history_gone=history_gone, on_commit=on_commit) if view.state.joined else ""
    if followed:
        found = watermark(store, view, source)
    done = apply_source(store, view, source, plan, found, deployed, read_by_views=read_by_views,
                        history_gone=history_gone, followed=followed)
    if done.outcome == "applied" and done.to_version != done.from_version:
        on_commit(f"view committed {view.state.name}")
    return done


def follow_joined(store: TableStore, view: DeployedResource, source: DeployedResource, plan: MaintenancePlan,
                  watermark: Watermark, deployed: DeployedSnapshot, *, read_by_views: bool,
                  history_gone: Callable[[Exception], bool] = lambda _exc: False,
                  on_commit: Callable[[str], None] = lambda _step: None) -> str:
    """Apply what changed in the tables the view joins and follows since the versions its rows agree with, one
    commit per table (`join-negate` or `join`, engine/strategies.py), with the source as of the view's watermark;
    where no file lock guards the view, each an idempotent write under `pipeframe:<view>:<table>`. The path of the
    last commit made ('' when none); Stale when a table was rewritten in a way its change feed does not describe,
    or the feed is gone."""
    state, recorded, committed = view.state, dict(watermark.joined), ""
    for name in state.joined:
        table = deployed.table(name)
        if table is None or not table.path:
            continue
        latest = store.history(table.path)[0].version
        start = recorded.get(name, -1)  # never recorded (a view built before it followed joins): all of it
        if start >= latest:
            continue
        commits = as_followed(store.commits_between(table.path, start, latest), state.follow_ttl)
        unfollowed = [c for c in commits if c.rewrites_rows() and c.operation not in FOLLOWED_OPS]
        if unfollowed:
            raise Stale(f"the joined table `{name}` was rewritten in a way its change feed does not describe "
                        f"({unfollowed[0].describe()})")
        if not any(c.changes_data for c in commits):
            continue
        pins = pinned(store, view, deployed, recorded)
        recorded[name] = latest
        change = JoinChange(view, source, plan, table, tuple(commits), start, watermark.source_version or 0,
                            {"source_version": watermark.source_version or 0, "source_path": watermark.source_path,
                             "app_id": f"{watermark_app_id(state.name)}:{name}", "txn_version": latest},
                            dict(recorded), pins, read_by_views)
        strategy = strategies.choose(change)
        try:
            written = strategy.apply(store, change)
        except Exception as exc:
            if not history_gone(exc):
                raise
            raise Stale(f"the change feed of the joined table `{name}` from version {start + 1} is no longer kept "
                        f"(vacuumed): {first_line(exc)}") from exc
        committed = written or committed
        on_commit(f"joined committed {state.name}:{name}")
        store.forget(view.path or "")
    return committed


def apply_source(store: TableStore, view: DeployedResource, source: DeployedResource, plan: MaintenancePlan,
                 watermark: Watermark, deployed: DeployedSnapshot, *, read_by_views: bool,
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
    change = Change(
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
                       path=written)


def pinned(store: TableStore, view: DeployedResource, deployed: DeployedSnapshot,
           versions: Mapping[str, int]) -> dict:
    """The joined tables a view follows, as of the versions its rows agree with (read by name when unknown)."""
    pins = {}
    for name in view.state.joined:
        table = deployed.table(name)
        if table is not None and table.path and name in versions:
            pins[name] = store.snapshot(table, versions[name])
    return pins

