"""How a view applies its source's new commits: one write strategy per kind of change and view, each a small
class with `applies` (a pure decision over the change and the view's recorded plan) and `apply` (reads and one
commit, through a `TableStore`: Spark and Delta, or the in-memory store of the unit tests).

| strategy | applies to | what it commits |
|---|---|---|
| append | commits that only added rows | the states of the added rows, appended |
| negate | deletes/updates; every state can be subtracted; no view reads this one | the added rows' states and the removed rows' negated states, appended |
| fold | the same, but views read this view's rows | the touched groups' rows replaced by one merged row each (the downstream views see old rows go, new ones come) |
| absorb | deletes/updates of a view whose every state depends only on its set of values (max, min, any, distinct counts; deletes: no distinct count) | the added rows' states, appended, where every removed value is covered (by an added one of its group, or strictly inside the group's current max or min); the groups where one is not, recomputed in the same commit (`absorb-recompute`) |
| recompute | deletes/updates; some state cannot be subtracted (min, sketches, sets) | the touched groups computed again from the source as of the new version, replacing their rows |
| rows | deletes/updates of a view without GROUP BY | one view row less per removed source row, the added rows' rows added |

And for the changes of a table the view joins and follows (`JoinChange`), applied with the source as of the view's
watermark, one commit per joined table:

| strategy | applies to | what it commits |
|---|---|---|
| join-negate | an inner join (or FROM list) whose states can all be subtracted, read by no view | the states of the source joined with the table's added rows, and negated with its removed rows, appended (from the source's partial states where the store keeps them) |
| join | any other | the groups the change touches recomputed with the table as of now, replacing their rows |"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from datetime import date
from decimal import Decimal
from typing import TYPE_CHECKING, Any, ClassVar

from pipeframe.compiler.maintenance import SIGN
from pipeframe.engine.changes import Change, JoinChange
from pipeframe.engine.recompute import NARROW_GROUPS

if TYPE_CHECKING:
    from pipeframe.engine.store import TableStore

# The changed rows an update may have for `absorb` to compare its witnesses (sets of values among them) on the driver
ABSORB_ROWS = 2_000_000
# Witness values compared in Python exactly as Spark orders them (datetime is a date; str by code point, as UTF-8 bytes)
ORDERED = (bool, int, float, Decimal, str, bytes, date)


class Strategy:
    """One way to apply a change: `applies` decides, from the change and the view's plan alone; `apply` makes the
    one commit and says how: the strategy's name (or that of the one it fell back to, when what it found in the
    rows rules it out), None when the store skipped the commit (another refresher applied the range first)."""

    name: ClassVar[str]

    def applies(self, change: Any) -> bool:
        raise NotImplementedError

    def apply(self, store: TableStore, change: Any) -> str | None:
        raise NotImplementedError

    def taken(self, written: bool) -> str | None:
        """What `apply` answers for a commit the store took (`written`) or skipped."""
        return self.name if written else None


class Append(Strategy):
    name = "append"

    def applies(self, change: Change) -> bool:
        return not change.rewrites

    def apply(self, store: TableStore, change: Change) -> str | None:
        rows = store.appended(change.source, change.commits)
        return self.taken(store.append(change.view, states(store, change, rows), metadata=change.record(self.name),
                                       watermark=change.watermark))


class Negate(Strategy):
    name = "negate"

    def applies(self, change: Change) -> bool:
        return change.rewrites and bool(change.view.state.negate_sql) and not change.read_by_views

    def apply(self, store: TableStore, change: Change) -> str | None:
        added, removed = store.change_rows(change.source, change.commits)
        return self.taken(store.append(change.view, signed(store, change, added, removed, change.pins, change.pins),
                                       metadata=change.record(self.name), watermark=change.watermark))


class Fold(Strategy):
    name = "fold"

    def applies(self, change: Change) -> bool:
        return change.rewrites and bool(change.view.state.negate_sql) and change.read_by_views

    def apply(self, store: TableStore, change: Change) -> str | None:
        state = change.view.state
        added, removed = store.change_rows(change.source, change.commits)
        delta = signed(store, change, added, removed, change.pins, change.pins)
        touched = store.select(delta, [f"`{k}`" for k in state.keys])
        merged = store.union(store.semi(store.current(change.view), state.keys, touched), delta)
        replacement = store.run(change.view, state.compact_sql or "", merged)
        return self.taken(store.replace_groups(change.view, state.keys, touched, replacement,
                                               metadata=change.record(self.name), watermark=change.watermark))


class Absorb(Strategy):
    name = "absorb"
    partly = "absorb-recompute"  # the path where some groups' removed values were not covered: those recomputed

    def applies(self, change: Change) -> bool:
        """A delete or update of a view whose states depend only on the sets of their values (max, min, any,
        distinct counts: `MaintenancePlan.absorb`), when the change is small enough to compare and its rows can be
        netted where they must be (`apply`: Spark's set operations refuse a map column); a delete only where no state
        is a set (a set cannot tell whether another row holds a removed value: nothing would be covered)."""
        absorb = change.plan.absorb
        nettable = change.settled or not any("MAP<" in type_.upper() for _, type_ in change.source.state.columns)
        return change.rewrites and not change.view.state.negate_sql and change.view.state.aggregated and \
            absorb is not None and change.rows <= ABSORB_ROWS and nettable and \
            (change.adds or all(rule != "set" for _, rule in absorb.rules))

    def apply(self, store: TableStore, change: Change) -> str | None:
        """The groups whose removed values are covered (`uncovered`: by the added rows, or strictly inside the
        view's current max or min) keep their states: the added rows' states are appended. Where some group's are
        not, that group alone is recomputed from its source rows, in the same commit (a MERGE replacing those groups,
        inserting the added states as well: merging a set-like state with the states of some of its own rows again
        changes nothing); where the store cannot narrow the source to them, every touched group (`Recompute`).

        Where a row may be among both the added and the removed rows of the commits (`Change.settled`: the change
        feed does not net them out), both sides are netted first (as multisets, in the store and for the witnesses):
        such a row's value would cover itself, and its state be appended, though it is gone."""
        absorb, view, keys = change.plan.absorb, change.view, change.view.state.keys
        assert absorb is not None
        found = store.witnesses(change, NARROW_GROUPS)
        removed = sum(1 for row in found if row[SIGN] < 0)
        if removed > NARROW_GROUPS or len(found) - removed > NARROW_GROUPS:
            return RECOMPUTE.apply(store, change)
        missing = uncovered(found, keys, absorb.rules)
        extremes = tuple((column, rule) for column, rule in absorb.rules if rule != "set")
        if missing and extremes:
            missing = uncovered(found, keys, absorb.rules, store.extremes(view, missing, extremes))
        if change.adds:
            added, gone = store.change_rows(change.source, change.commits)
            gained = states(store, change, added if change.settled else store.except_all(added, gone))
        else:  # a delete: no state to add (a query over no rows would still cost the store a job)
            gained = store.none(view)
        if not missing:
            return self.taken(store.append(view, gained, metadata=change.record(self.name),
                                           watermark=change.watermark))
        version = int(change.watermark["source_version"])
        narrowed = store.narrowed(change, version, missing) if change.plan.group_keys else None
        if narrowed is None:
            return RECOMPUTE.apply(store, change)
        wanted, rows = narrowed
        replacement = states(store, change, store.snapshot(change.source, version) if rows is None else rows)
        if change.adds:
            replacement = store.union(replacement, gained)
        written = store.replace_groups(view, keys, wanted, replacement, metadata=change.record(self.partly),
                                       watermark=change.watermark, few=True)
        return self.partly if written else None


class Recompute(Strategy):
    name = "recompute"

    def applies(self, change: Change) -> bool:
        return change.rewrites and not change.view.state.negate_sql and change.view.state.aggregated and \
            not ABSORB.applies(change)

    def apply(self, store: TableStore, change: Change) -> str | None:
        """The groups the changed rows fall in: their keys computed from each changed row where the plan says how
        (a row the view's WHERE drops names a group it may not hold: recomputing it changes nothing), else by the
        view's query. Their states from the source rows of those groups alone where the store can narrow the
        source (`TableStore.narrowed`), else from all of it."""
        view, plan, keys = change.view, change.plan, change.view.state.keys
        version = int(change.watermark["source_version"])
        narrowed = store.narrowed(change, version) if plan.group_keys else None
        if narrowed is not None:
            wanted, rows = narrowed
            every = rows is None
            replacement = states(store, change, store.snapshot(change.source, version) if every else rows)
            return self.taken(store.replace_groups(view, keys, wanted, replacement,
                                                   metadata=change.record(self.name), watermark=change.watermark,
                                                   few=True))
        added, removed = store.change_rows(change.source, change.commits)
        changed = store.union(added, removed)
        touched = store.select(changed, [f"{k.sql} AS `{k.name}`" for k in plan.group_keys]) if plan.group_keys \
            else store.select(states(store, change, changed), [f"`{k}`" for k in keys])
        every = states(store, change, store.snapshot(change.source, version))
        return self.taken(store.replace_groups(view, keys, touched, store.semi(every, keys, touched),
                                               metadata=change.record(self.name), watermark=change.watermark))


class Rows(Strategy):
    name = "rows"

    def applies(self, change: Change) -> bool:
        return change.rewrites and not change.view.state.negate_sql and not change.view.state.aggregated

    def apply(self, store: TableStore, change: Change) -> str | None:
        view = change.view
        keys = tuple(n for n, _ in view.state.columns)
        added, removed = store.change_rows(change.source, change.commits)
        gone = states(store, change, removed)
        kept = store.union(store.semi(store.current(view), keys, gone), states(store, change, added))
        return self.taken(store.replace_groups(view, keys, gone, store.except_all(kept, gone),
                                               metadata=change.record(self.name), watermark=change.watermark))


class JoinNegate(Strategy):
    name = "join-negate"

    def applies(self, change: JoinChange) -> bool:
        """a ⋈ (b − removed + added) = a ⋈ b − a ⋈ removed + a ⋈ added, where every output row a change to b alters
        joins a changed row of b (`MaintenancePlan.monotonic`) and the view's rows agree with a known version of b."""
        return change.name in change.plan.monotonic and change.start >= 0 and \
            bool(change.view.state.negate_sql) and not change.read_by_views

    def apply(self, store: TableStore, change: JoinChange) -> str | None:
        partial = store.partial_states(change)
        if partial is not None:  # a ⋈ Δb with a = the source's partial states: fewer rows, the same states
            return self.taken(store.append(change.view, partial, metadata=change.record(self.name, partials=True),
                                           watermark=change.watermark))
        added, removed = store.change_rows(change.table, change.commits)
        rows = store.snapshot(change.source, change.source_version)
        delta = signed(store, change, rows, rows, {**change.pins, change.name: added},
                       {**change.pins, change.name: removed})
        return self.taken(store.append(change.view, delta, metadata=change.record(self.name),
                                       watermark=change.watermark, few=False))


class Join(Strategy):
    name = "join"

    def applies(self, change: JoinChange) -> bool:
        return not JoinNegate().applies(change)

    def apply(self, store: TableStore, change: JoinChange) -> str | None:
        """The groups of the changed rows' join rows where the join is monotonic (`JoinNegate.applies`); else (an
        outer join, a subquery over the table) the groups whose states differ between before and now."""
        view, name, keys = change.view, change.name, change.view.state.keys
        added, removed = store.change_rows(change.table, change.commits)
        rows = store.snapshot(change.source, change.source_version)
        now = states(store, change, rows, {**change.pins, name: store.snapshot(change.table, change.commits[-1].version)})
        if name in change.plan.monotonic:
            touched = states(store, change, rows, {**change.pins, name: store.union(added, removed)})
        else:
            before = store.snapshot(change.table, change.start) if change.start >= 0 else store.none(change.table)
            old = states(store, change, rows, {**change.pins, name: before})
            touched = store.union(store.except_all(old, now), store.except_all(now, old))
        touched = store.select(touched, [f"`{k}`" for k in keys])
        return self.taken(store.replace_groups(view, keys, touched, store.semi(now, keys, touched),
                                               metadata=change.record(self.name), watermark=change.watermark))


ABSORB, RECOMPUTE = Absorb(), Recompute()
# In the order they are tried: exactly one applies to any change (tests/unit/test_strategies.py).
STRATEGIES: tuple[Strategy, ...] = (Append(), Negate(), Fold(), ABSORB, RECOMPUTE, Rows())
JOIN_STRATEGIES: tuple[Strategy, ...] = (JoinNegate(), Join())


def choose(change: Change | JoinChange) -> Strategy:
    """The strategy that applies to `change`."""
    listed = JOIN_STRATEGIES if isinstance(change, JoinChange) else STRATEGIES
    return next(s for s in listed if s.applies(change))


def states(store: TableStore, change: Change | JoinChange, rows: Any, pins: Mapping[str, Any] | None = None) -> Any:
    """The view's state rows (or plain rows) made from source `rows`, its joined tables as pinned."""
    return store.run(change.view, change.plan.state_sql, rows, change.pins if pins is None else pins)


def uncovered(witnesses: Sequence[Mapping[str, Any]], keys: Sequence[str], rules: Sequence[tuple[str, str]],
              held: Sequence[Mapping[str, Any]] = ()) -> list[dict]:
    """The keys of the groups whose states taking the removed rows out may change, once the added rows' states are
    merged in, for a view whose states depend only on sets of values: `witnesses` holds per group and side (`SIGN`:
    -1 the removed rows, 1 the added ones) each state's witness (`Absorb.sql`); `held`, per group, the view's
    current value of each max and min state (`TableStore.extremes`).

    A removed max (min) is covered by an added max (min) at least (at most) as large, or by a current max (min)
    strictly larger (smaller): the row holding that value was not removed. A removed set is covered by the added set
    alone. A group that gained no row must also be shown to keep one (a current max or min that no removed row
    held), or it may be gone. A value this cannot compare exactly as Spark orders it (a struct, a NaN) is not
    covered: its group is recomputed."""
    added = {_key(row, keys): row for row in witnesses if row[SIGN] > 0}
    now = {_key(row, keys): row for row in held}
    missing = []
    for row in witnesses:
        if row[SIGN] > 0:
            continue
        gained, current = added.get(_key(row, keys)), now.get(_key(row, keys))
        within = {column: current is not None and rule != "set" and current[column] is not None and
                  (row[column] is None or _covers(rule, row[column], current[column], strict=True))
                  for column, rule in rules}
        kept = gained is not None or any(within.values())
        if not kept or not all(within[column] or _covers(rule, row[column], None if gained is None else gained[column])
                               for column, rule in rules):
            missing.append({k: row[k] for k in keys})
    return missing


def _covers(rule: str, gone: Any, kept: Any, strict: bool = False) -> bool:
    if rule == "set":
        return {_exact(v) for v in gone or ()} <= {_exact(v) for v in kept or ()}
    if gone is None:
        return True
    if kept is None or type(gone) is not type(kept) or not isinstance(gone, ORDERED) or \
            isinstance(gone, float) and (math.isnan(gone) or math.isnan(kept)):
        return False
    if strict:
        return gone < kept if rule == "max" else gone > kept
    return gone <= kept if rule == "max" else gone >= kept


def _key(row: Mapping[str, Any], keys: Sequence[str]) -> tuple:
    return tuple(_exact(row[k]) for k in keys)


def _exact(value: Any) -> Any:
    """`value` hashable, and equal to another only where Spark's equality says so as well (-0.0 is not 0.0 here)."""
    if isinstance(value, float):
        return "float", value.hex()
    if isinstance(value, list | tuple):
        return tuple(_exact(v) for v in value)
    if isinstance(value, dict):
        return tuple((k, _exact(v)) for k, v in value.items())
    return value


def signed(store: TableStore, change: Change | JoinChange, added: Any, removed: Any, added_pins: Mapping[str, Any],
           removed_pins: Mapping[str, Any]) -> Any:
    """The states of `added` and the negated states of `removed`; only the latter when nothing was added (a
    DELETE): the query over no rows would still cost the store a job."""
    negated = store.run(change.view, change.view.state.negate_sql or "", states(store, change, removed, removed_pins))
    return store.union(states(store, change, added, added_pins), negated) if change.adds else negated

