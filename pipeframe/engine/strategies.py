"""How a view applies its source's new commits: one write strategy per kind of change and view, each a small
class with `applies` (a pure decision over the change and the view's recorded plan) and `apply` (reads and one
commit, through a `TableStore`: Spark and Delta, or the in-memory store of the unit tests).

| strategy | applies to | what it commits |
|---|---|---|
| append | commits that only added rows | the states of the added rows, appended |
| negate | deletes/updates; every state can be subtracted; no view reads this one | the added rows' states and the removed rows' negated states, appended |
| fold | the same, but views read this view's rows | the touched groups' rows replaced by one merged row each (the downstream views see old rows go, new ones come) |
| recompute | deletes/updates; some state cannot be subtracted (min, sketches, sets) | the touched groups computed again from the source as of the new version, replacing their rows |
| rows | deletes/updates of a view without GROUP BY | one view row less per removed source row, the added rows' rows added |

Changes to the tables a view joins are applied by the materializer (`join`, `join-negate`, partial states)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from pipeframe.plan import records

if TYPE_CHECKING:
    from pipeframe.compiler.maintenance import MaintenancePlan
    from pipeframe.engine.commits import Commit
    from pipeframe.engine.store import TableStore
    from pipeframe.plan.snapshot import DeployedResource


@dataclass(frozen=True)
class Change:
    """The source commits one refresh applies to one view, and what the strategies need to know around them."""

    view: DeployedResource
    source: DeployedResource
    plan: MaintenancePlan
    commits: tuple[Commit, ...]  # oldest first, as the view follows them (`tables.as_followed`)
    watermark: Mapping[str, Any]  # recorded with the commit: source_version, source_path, after
    joined: Mapping[str, int] = field(default_factory=dict)  # the joined tables' versions the view's rows agree with
    pins: Mapping[str, Any] = field(default_factory=dict)  # those tables as of those versions (the store's frames)
    read_by_views: bool = False  # other views read this view's rows

    @property
    def rows(self) -> int:
        """The source rows the commits changed, as they counted them."""
        return sum(c.changed_rows for c in self.commits)

    @property
    def rewrites(self) -> bool:
        """Whether some commit deleted or updated rows in place (adding states no longer follows it)."""
        return any(c.rewrites_rows() for c in self.commits)

    @property
    def adds(self) -> bool:
        """Whether the commits may have added rows (a DELETE's change feed has only removed ones)."""
        return any(c.operation != "DELETE" for c in self.commits if c.changes_data)

    @property
    def every_group_holds(self) -> bool:
        """Whether recomputing every group of the view from its source gives each group the value it holds: not
        when rows landed before it was deployed were left out (BACKFILL skip), nor when it keeps the aggregates of
        rows a source TTL deleted (the TTL not followed)."""
        state = self.view.state
        return state.backfill != "skip" and (state.follow_ttl or not self.source.state.ttl)

    def record(self, path: str) -> records.ViewCommit:
        """The view commit's record for the strategy `path`."""
        return records.ViewCommit(self.view.state.name, rows=self.rows, path=path, joined=dict(self.joined))


class Strategy:
    """One way to apply a change: `applies` decides, from the change and the view's plan alone; `apply` makes the
    one commit and says whether the store took it (False: another refresher applied the range first)."""

    name: ClassVar[str]

    def applies(self, change: Change) -> bool:
        raise NotImplementedError

    def apply(self, store: TableStore, change: Change) -> bool:
        raise NotImplementedError


class Append(Strategy):
    name = "append"

    def applies(self, change: Change) -> bool:
        return not change.rewrites

    def apply(self, store: TableStore, change: Change) -> bool:
        rows = store.appended(change.source, change.commits)
        return store.append(change.view, states(store, change, rows), metadata=change.record(self.name),
                            watermark=change.watermark)


class Negate(Strategy):
    name = "negate"

    def applies(self, change: Change) -> bool:
        return change.rewrites and bool(change.view.state.negate_sql) and not change.read_by_views

    def apply(self, store: TableStore, change: Change) -> bool:
        return store.append(change.view, signed(store, change), metadata=change.record(self.name),
                            watermark=change.watermark)


class Fold(Strategy):
    name = "fold"

    def applies(self, change: Change) -> bool:
        return change.rewrites and bool(change.view.state.negate_sql) and change.read_by_views

    def apply(self, store: TableStore, change: Change) -> bool:
        state = change.view.state
        delta = signed(store, change)
        touched = store.select(delta, [f"`{k}`" for k in state.keys])
        merged = store.union(store.semi(store.current(change.view), state.keys, touched), delta)
        replacement = store.run(change.view, state.compact_sql or "", merged)
        return store.replace_groups(change.view, state.keys, touched, replacement,
                                    metadata=change.record(self.name), watermark=change.watermark)


class Recompute(Strategy):
    name = "recompute"

    def applies(self, change: Change) -> bool:
        return change.rewrites and not change.view.state.negate_sql and change.view.state.aggregated

    def apply(self, store: TableStore, change: Change) -> bool:
        """The groups the changed rows fall in: their keys computed from each changed row where the plan says how
        (a row the view's WHERE drops names a group it may not hold: recomputing it changes nothing), else by the
        view's query. Their states from the source rows of those groups alone where the store can narrow the
        source (`TableStore.narrowed`), else from all of it."""
        view, plan, keys = change.view, change.plan, change.view.state.keys
        added, removed = store.change_rows(change.source, change.commits)
        changed = store.union(added, removed)
        touched = store.select(changed, [f"{k.sql} AS `{k.name}`" for k in plan.group_keys]) if plan.group_keys \
            else store.select(states(store, change, changed), [f"`{k}`" for k in keys])
        version = int(change.watermark["source_version"])
        narrowed = store.narrowed(view, change.source, plan, touched, version, change.every_group_holds)
        if narrowed is not None:
            wanted, rows = narrowed
            every = rows is None
            replacement = states(store, change, store.snapshot(change.source, version) if every else rows)
            return store.replace_groups(view, keys, wanted, replacement, metadata=change.record(self.name),
                                        watermark=change.watermark, few=True)
        every = states(store, change, store.snapshot(change.source, version))
        return store.replace_groups(view, keys, touched, store.semi(every, keys, touched),
                                    metadata=change.record(self.name), watermark=change.watermark)


class Rows(Strategy):
    name = "rows"

    def applies(self, change: Change) -> bool:
        return change.rewrites and not change.view.state.negate_sql and not change.view.state.aggregated

    def apply(self, store: TableStore, change: Change) -> bool:
        view = change.view
        keys = tuple(n for n, _ in view.state.columns)
        added, removed = store.change_rows(change.source, change.commits)
        gone = states(store, change, removed)
        kept = store.union(store.semi(store.current(view), keys, gone), states(store, change, added))
        return store.replace_groups(view, keys, gone, store.except_all(kept, gone),
                                    metadata=change.record(self.name), watermark=change.watermark)


# In the order they are tried: exactly one applies to any change (tests/unit/test_strategies.py).
STRATEGIES: tuple[Strategy, ...] = (Append(), Negate(), Fold(), Recompute(), Rows())


def choose(change: Change) -> Strategy:
    """The strategy that applies to `change`."""
    return next(s for s in STRATEGIES if s.applies(change))


def states(store: TableStore, change: Change, rows: Any, pins: Mapping[str, Any] | None = None) -> Any:
    """The view's state rows (or plain rows) made from source `rows`, its joined tables as pinned."""
    return store.run(change.view, change.plan.state_sql, rows, change.pins if pins is None else pins)


def signed(store: TableStore, change: Change) -> Any:
    """The states of the added rows and the negated states of the removed ones; only the latter when nothing was
    added (a DELETE): the query over no rows would still cost the store a job."""
    added, removed = store.change_rows(change.source, change.commits)
    negated = store.run(change.view, change.view.state.negate_sql or "", states(store, change, removed), {})
    return store.union(states(store, change, added), negated) if change.adds else negated

