"""Deploy plan: compares the desired ResourceStates with the deployed ones and decides one Change per resource.

The rules of PRODUCT.md section 6 live here (create, alter, rebuild and its cascade, drop, refusals); pure Python.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Literal

from pipeframe.compiler.compile import UnresolvedRead
from pipeframe.compiler.graph import ResourceKey
from pipeframe.errors import Diagnostic, RefusedError
from pipeframe.plan.state import ResourceState, dag_of

Action = Literal["create", "alter", "rebuild", "drop", "unchanged"]

NO_DATA_MOVED = "no data moved"
FORWARD_QUERY_REBUILD = "rebuild: carry rows over with FORWARD_QUERY"
NOUNS = {"datasource": "datasource", "view": "view", "endpoint": "endpoint", "copy": "copy pipe",
         "materialized": "materialized pipe", "pipe": "pipe", "shared": "datasource written by several pipes"}


@dataclass(frozen=True)
class Change:
    """What deploy does to one resource, and what that means for its data."""

    key: ResourceKey
    name: str
    kind: str
    action: Action
    summary: str  # what happens to the data, for people: "new table", "no data moved", "add column `x`" ...
    details: tuple[str, ...] = ()  # one line per individual difference: "column `amount`: INT → BIGINT"
    desired: ResourceState | None = None
    deployed: ResourceState | None = None
    refused: str | None = None  # why this change is not allowed (then the whole plan is refused)
    hint: str | None = None  # how to fix a refused change
    alter_columns: tuple[tuple[str, str], ...] = ()  # (name, type) to ADD via ALTER TABLE, for additive alters
    cause: ResourceKey | None = None  # for a rebuild forced by an upstream rebuild: the upstream key
    # A view that takes over the table (rows, watermark) another deployed key holds for the same pipe: a second pipe
    # starts writing its target (the first one's view is renamed `target__pipe`), or the last but one stops.
    adopts: ResourceKey | None = None

    def to_json(self) -> dict:
        return {"key": str(self.key), "name": self.name, "kind": self.kind, "action": self.action,
                "summary": self.summary, "details": list(self.details), "refused": self.refused,
                "hint": self.hint, "alter_columns": [list(c) for c in self.alter_columns],
                "cause": str(self.cause) if self.cause else None, "adopts": str(self.adopts) if self.adopts else None}


@dataclass(frozen=True)
class Plan:
    """Every resource's Change: desired order first (dependencies first), then drops (dependents first).

    `base` is the fingerprint of the deployed snapshot the plan was made from; the deployer applies it only to
    that same state."""

    changes: tuple[Change, ...]
    base: str | None = None

    @property
    def pending(self) -> list[Change]:
        return [c for c in self.changes if c.action != "unchanged"]

    @property
    def refused(self) -> list[Change]:
        return [c for c in self.changes if c.refused]

    @property
    def has_changes(self) -> bool:
        return bool(self.pending)

    def exit_code(self) -> int:
        """For `deploy --check`: 0 no changes, 2 changes, 3 refused changes."""
        return 3 if self.refused else 2 if self.has_changes else 0

    def to_json(self) -> dict:
        return {"changes": [c.to_json() for c in self.changes], "has_changes": self.has_changes,
                "refused": len(self.refused), "exit_code": self.exit_code()}


def diff(desired: Mapping[ResourceKey, ResourceState], deployed: Mapping[ResourceKey, ResourceState], *,
         allow_destructive: bool = False, base: str | None = None) -> Plan:
    """The plan that turns `deployed` into `desired` (both keyed by resource key); `base` identifies the
    deployed snapshot."""
    order = [key for key in dag_of(desired.values()).sorted() if key in desired]
    adopted = adoptions(desired, deployed)
    changes = {key: adopt(desired[key], deployed[adopted[key]]) if key in adopted
               else create(desired[key]) if key not in deployed
               else compare(desired[key], deployed[key], allow_destructive) for key in order}
    changes = cascade(changes, desired)
    gone = dag_of(deployed.values()).drop_order(key for key in deployed if key not in desired)
    kept = {old: new for new, old in adopted.items()}
    drops = [replace(drop(deployed[key], desired, True), summary=f"its table is kept by `{desired[kept[key]].name}`")
             if key in kept else drop(deployed[key], desired, allow_destructive) for key in gone]
    return Plan((*changes.values(), *drops), base)


def adoptions(desired: Mapping[ResourceKey, ResourceState], deployed: Mapping[ResourceKey, ResourceState]
              ) -> dict[ResourceKey, ResourceKey]:
    """Desired view → the deployed key whose table it takes over: the same pipe's view, built the same way
    (`physical_hash`), deployed under another name that no longer holds that pipe's view (a target that a second
    pipe starts writing keeps the first one's rows as `target__pipe`; and back)."""
    def holds(states: Mapping[ResourceKey, ResourceState], key: ResourceKey, pipe: str | None) -> bool:
        state = states.get(key)
        return state is not None and state.kind == "view" and state.view_pipe == pipe

    found: dict[ResourceKey, ResourceKey] = {}
    for key, want in desired.items():
        if want.kind != "view" or holds(deployed, key, want.view_pipe):
            continue
        old = next((old for old, have in deployed.items() if old != key and old not in found.values()
                    and holds(deployed, old, want.view_pipe) and not holds(desired, old, want.view_pipe)
                    and have.physical_hash() == want.physical_hash()), None)
        if old is not None:
            found[key] = old
    return found


def drop_views(deployed: Mapping[ResourceKey, ResourceState], view: ResourceKey, force: bool, base: str | None) -> Plan:
    """The views API's delete: drop one view and, with `force`, everything that reads it (refused with the readers
    listed otherwise). Everything that reads what is dropped goes with it, so no remaining reader refuses a drop."""
    readers = readers_of(deployed, view)
    if readers and not force:
        raise ViewInUse(deployed[view].name, [deployed[k] for k in readers])
    gone = dag_of(deployed.values()).drop_order([view, *readers])
    return Plan(tuple(drop(deployed[key], {}, allow_destructive=True) for key in gone), base)


def readers_of(deployed: Mapping[ResourceKey, ResourceState], key: ResourceKey) -> list[ResourceKey]:
    """What reads `key`, directly or through views and pipes, upstream first. A landing datasource (a copy pipe's
    target) never is a reader: its rows are not derived from what it was copied from."""
    dag = dag_of(deployed.values())
    reached, found = {key}, []
    for other in dag.sorted():
        state = deployed.get(other)
        if state is not None and state.kind != "datasource" and reached & set(dag.dependencies(other)):
            reached.add(other)
            found.append(other)
    return found


class ViewInUse(RefusedError):
    """Deleting a view that other views or pipes read, without force (HTTP 409); `dependents` lists them as
    (name, kind) pairs."""

    http_status = 409

    def __init__(self, view: str, dependents: list[ResourceState]) -> None:
        self.dependents = tuple((d.name, d.kind) for d in dependents)
        names = ", ".join(f"{kind} `{name}`" for name, kind in self.dependents)
        super().__init__("PF707", f"View `{view}` is read by {names}.",
                         "Delete it with force (`?force=true` over HTTP) to drop those too, or change them to stop "
                         "reading it and deploy first.")


def refuse_dropping_what_is_read(removed: set[str], unresolved: Iterable[UnresolvedRead],
                                 errors: Iterable[Diagnostic]) -> RefusedError | None:
    """Deployed datasources whose files were removed while pipes still read them: a refused drop (exit 3) listing
    the readers, rather than plain unknown-name errors. Only when every error of the project is such a read."""
    readers: dict[str, list[str]] = {}
    explained = set()
    for read in unresolved:
        if read.name in removed:
            explained.add(read.diagnostic)
            names = readers.setdefault(read.name, [])
            if read.reader not in names:
                names.append(read.reader)
    if not readers or any(d not in explained for d in errors):
        return None
    return RefusedError.many(
        Diagnostic("PF607", f"Cannot drop `{name}`: it is read by {', '.join(sorted(names))}.",
                   "Remove or change those pipes first, then drop it (with --allow-destructive).")
        for name, names in sorted(readers.items()))


# ------------------------------------------------------------------------------------------ one rule each
def create(want: ResourceState) -> Change:
    if want.kind == "view":
        summary = (f"create and backfill from `{want.source}`" if want.backfill != "skip"
                   else "new table, no backfill (BACKFILL skip)")
    elif want.has_table:
        summary = "new table"
    else:
        summary = f"new {NOUNS.get(want.kind, want.kind)}"
    return _change(want, None, "create", summary)


def adopt(want: ResourceState, have: ResourceState) -> Change:
    """A view keeping the table `have` holds (renamed, not rebuilt: its rows and watermark stay)."""
    return replace(_change(want, have, "alter", f"{NO_DATA_MOVED}: keeps the table of `{have.name}`",
                           (f"renamed from `{have.name}`",)), adopts=have.key)


def drop(have: ResourceState, desired: Mapping[ResourceKey, ResourceState], allow_destructive: bool) -> Change:
    """A resource whose file is gone: refused while others read it, and without --allow-destructive."""
    noun = NOUNS.get(have.kind, have.kind)
    summary = "drop table and its rows" if have.has_table else f"remove {noun}"
    readers = sorted(w.name for w in desired.values() if have.key in w.depends_on)
    if readers:
        names = ", ".join(readers)
        return _change(None, have, "drop", summary, refused=f"`{have.name}` is read by {names}",
                       hint=f"Remove or change {names} first, then drop `{have.name}` with --allow-destructive.")
    if allow_destructive:
        return _change(None, have, "drop", summary)
    lost = "its table and all its rows would be lost" if have.has_table else "it would stop being served"
    return _change(None, have, "drop", summary, refused=f"{noun} `{have.name}` was removed: {lost}",
                   hint="Re-run with --allow-destructive to drop it, or restore its file.")


def compare(want: ResourceState, have: ResourceState, allow_destructive: bool) -> Change:
    if want.definition_hash() == have.definition_hash():
        return _change(want, have, "unchanged", "unchanged")
    details = describe(want, have)
    if not want.has_table:
        return _change(want, have, "alter", NO_DATA_MOVED, details)
    if want.kind == "view":
        return compare_view(want, have, details, allow_destructive)
    return compare_landing(want, have, details, allow_destructive)


def compare_view(want: ResourceState, have: ResourceState, details: tuple[str, ...],
                 allow_destructive: bool) -> Change:
    """A view's rows derive from its source: a physical change rebuilds and backfills, nothing is lost."""
    if want.physical_hash() == have.physical_hash():
        return _change(want, have, "alter", NO_DATA_MOVED, details)
    change = _change(want, have, "rebuild", rebuild_summary(want), details)
    if have.kind == "datasource" and not allow_destructive:
        # A landing table turned into a view target: the rows appended to it are replaced by the backfill.
        return replace(change, refused=f"`{want.name}` becomes the target of materialized view `{want.view_pipe}`:"
                                       " the rows appended to it so far would be replaced by the backfill",
                       hint="Re-run with --allow-destructive if those rows can go, or write the view to a new "
                            "datasource.")
    return change


def compare_landing(want: ResourceState, have: ResourceState, details: tuple[str, ...],
                    allow_destructive: bool) -> Change:
    """A landing datasource's rows exist only here: keep them (ALTER, FORWARD_QUERY) or refuse."""
    cols = ColumnChanges.between(have.columns, want.columns)
    repartition = want.partition_key != have.partition_key
    if cols.additive and not repartition:
        if not cols.added:
            return _change(want, have, "alter", NO_DATA_MOVED, details)
        names = ", ".join(f"`{n}`" for n, _ in cols.added)
        summary = f"add column{'s' if len(cols.added) > 1 else ''} {names}"
        return _change(want, have, "alter", summary, details, alter_columns=cols.added)
    if cols.additive:
        return _change(want, have, "rebuild", "rebuild: repartition rows", details)
    if want.forward_query:
        return _change(want, have, "rebuild", FORWARD_QUERY_REBUILD, details)
    if cols.retyped:
        name, _, new = cols.retyped[0]
        what = ", ".join(f"column `{n}` changes type {o} → {t}" for n, o, t in cols.retyped)
        return _change(want, have, "rebuild", "rebuild: convert column types", details,
                       refused=f"{what}; existing rows cannot be converted without a FORWARD_QUERY",
                       hint=f"Add a FORWARD_QUERY > block to {want.name}.datasource that selects the old columns "
                            f"into the new types, e.g. CAST({name} AS {new}) AS {name}")
    if cols.removed:
        names = ", ".join(f"`{n}`" for n in cols.removed)
        plural = len(cols.removed) > 1
        summary = f"rebuild: drop column{'s' if plural else ''} {names} ({'their' if plural else 'its'} values are lost)"
        if allow_destructive:
            return _change(want, have, "rebuild", summary, details)
        return _change(want, have, "rebuild", summary, details,
                       refused=f"removing {names} from `{want.name}` loses {'their' if plural else 'its'} values "
                               "in every existing row",
                       hint="Re-run with --allow-destructive if those values can go; to keep them, keep the "
                            f"column{'s' if plural else ''} in the SCHEMA of {want.name}.datasource.")
    return _change(want, have, "rebuild", "rebuild: carry rows over in the new column order", details)


def cascade(changes: dict[ResourceKey, Change], desired: Mapping[ResourceKey, ResourceState]
            ) -> dict[ResourceKey, Change]:
    """A table built from a rebuilt table is rebuilt too (pipes own no table, so the chain stops at them)."""
    out = dict(changes)
    rebuilt = {key for key, change in out.items() if change.action == "rebuild"}
    for key, change in list(out.items()):  # dependencies first, so a cascade reaches its own dependents
        want = desired[key]
        upstream = next((d for d in want.depends_on if d in rebuilt), None)
        if not want.has_table or upstream is None or change.action not in ("unchanged", "alter"):
            continue
        out[key] = replace(change, action="rebuild", summary=rebuild_summary(want), alter_columns=(),
                           details=(*change.details, f"upstream `{desired[upstream].name}` is rebuilt"),
                           cause=upstream)
        rebuilt.add(key)
    return out


def rebuild_summary(want: ResourceState) -> str:
    if want.kind != "view":
        return FORWARD_QUERY_REBUILD if want.forward_query else "rebuild: carry rows over"
    if want.backfill == "skip":
        return "rebuild, no backfill (BACKFILL skip)"
    return f"rebuild and backfill from `{want.source}`"


# ---------------------------------------------------------------------------------- differences, for people
@dataclass(frozen=True)
class ColumnChanges:
    """How a table's columns changed, by name: appended columns are the only change an ALTER can make."""

    added: tuple[tuple[str, str], ...]
    removed: tuple[str, ...]
    retyped: tuple[tuple[str, str, str], ...]  # (name, deployed type, desired type)
    reordered: bool  # existing columns are no longer first, in their old order

    @classmethod
    def between(cls, old: tuple[tuple[str, str], ...], new: tuple[tuple[str, str], ...]) -> ColumnChanges:
        before, after = dict(old), dict(new)
        kept = [n for n, _ in old if n in after]
        return cls(
            added=tuple((n, t) for n, t in new if n not in before),
            removed=tuple(n for n, _ in old if n not in after),
            retyped=tuple((n, before[n], after[n]) for n in kept if _type(before[n]) != _type(after[n])),
            reordered=[n for n, _ in new][:len(kept)] != kept,
        )

    @property
    def additive(self) -> bool:
        return not (self.removed or self.retyped or self.reordered)

    def lines(self) -> list[str]:
        return ([f"add column `{n}` {t}" for n, t in self.added] + [f"drop column `{n}`" for n in self.removed]
                + [f"column `{n}`: {o} → {t}" for n, o, t in self.retyped]
                + (["column order changed"] if self.reordered else []))


def describe(want: ResourceState, have: ResourceState) -> tuple[str, ...]:
    """One line per individual difference between two versions of a resource."""
    if want.kind == "shared" and want.writers != have.writers:  # what it reads is all it has
        return (f"now read as the union of {', '.join(f'`{w}`' for w in want.writers)}",)
    lines: list[str] = []
    if want.kind != have.kind:
        if want.kind == "view":
            lines.append(f"now filled by materialized view `{want.view_pipe}`")
        elif have.kind == "view":
            lines.append(f"no longer filled by materialized view `{have.view_pipe}`")
        else:
            lines.append(f"type: {have.kind} → {want.kind}")
    lines += ColumnChanges.between(have.columns, want.columns).lines()
    both_views = want.kind == have.kind == "view"
    fields: list[tuple[str, str | tuple[str, ...] | None, str | tuple[str, ...] | None]] = [
        ("partition key", have.partition_key, want.partition_key), ("clustering", have.sorting_key, want.sorting_key)]
    if both_views:
        fields += [("view pipe", have.view_pipe, want.view_pipe), ("source", have.source, want.source),
                   ("follows joined tables", have.joined, want.joined),
                   ("group keys", have.keys, want.keys), ("backfill", have.backfill, want.backfill),
                   ("follows TTL deletes", "yes" if have.follow_ttl else "no", "yes" if want.follow_ttl else "no")]
    fields += [("ttl", have.ttl, want.ttl), ("engine", have.engine, want.engine)]
    lines += [f"{label}: {_show(old)} → {_show(new)}" for label, old, new in fields if old != new]
    if both_views and want.state_sql != have.state_sql:
        lines.append("view query changed")
    elif both_views and want.read_sql != have.read_sql:
        lines.append("read query changed")
    elif both_views and have.maintenance is None and want.maintenance is not None:
        lines.append("maintenance plan recorded (deployed by an older pipeframe)")
    elif both_views and want.maintenance != have.maintenance:
        lines.append("maintenance plan changed")
    if want.sql != have.sql:
        lines.append("query changed")
    if want.description != have.description:
        lines.append("description changed")
    lines += _token_lines(have.tokens, want.tokens)
    if want.forward_query != have.forward_query:
        verb = "added" if not have.forward_query else "removed" if not want.forward_query else "changed"
        lines.append(f"FORWARD_QUERY {verb}")
    if not lines and want.depends_on != have.depends_on:
        lines.append(f"reads: {_show(_names(have.depends_on))} → {_show(_names(want.depends_on))}")
    return tuple(lines) or ("definition changed",)


def _token_lines(old: tuple[tuple[str, str], ...], new: tuple[tuple[str, str], ...]) -> list[str]:
    def scopes(tokens: tuple[tuple[str, str], ...]) -> dict[str, str]:
        grouped: dict[str, list[str]] = {}
        for name, scope in tokens:
            grouped.setdefault(name, []).append(scope)
        return {name: ", ".join(sorted(s)) for name, s in grouped.items()}

    before, after = scopes(old), scopes(new)
    lines = [f"token `{n}` added ({s})" for n, s in after.items() if n not in before]
    lines += [f"token `{n}` removed" for n in before if n not in after]
    lines += [f"token `{n}`: {before[n]} → {s}" for n, s in after.items() if n in before and before[n] != s]
    return lines


def _type(spark_type: str) -> str:
    return " ".join(spark_type.upper().split())


def _names(keys: tuple[ResourceKey, ...]) -> tuple[str, ...]:
    return tuple(k.name for k in keys)


def _show(value: str | tuple[str, ...] | None) -> str:
    if isinstance(value, tuple):
        return ", ".join(value) or "none"
    return value or "none"


def _change(want: ResourceState | None, have: ResourceState | None, action: Action, summary: str,
            details: tuple[str, ...] = (), *, refused: str | None = None, hint: str | None = None,
            alter_columns: tuple[tuple[str, str], ...] = ()) -> Change:
    state = want or have
    assert state is not None
    return Change(key=state.key, name=state.name, kind=state.kind, action=action, summary=summary,
                  details=details, desired=want, deployed=have, refused=refused, hint=hint,
                  alter_columns=alter_columns)
