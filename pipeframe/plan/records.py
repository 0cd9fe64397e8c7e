"""What pipeframe persists in a warehouse, typed and versioned: the `pipeframe` record of each Delta commit's
userMetadata, and the resource states of the state store. The one place that encodes and decodes them.

Every record is written with `"format": FORMAT`. Format 1 is what releases before formats existed wrote (no
`format` key); its keys are the same as format 2's, so it is read as is. Format 3 adds a view's `maintenance` plan
to its resource state; a state of format 1 or 2 reads with none, and the engine refuses to maintain such a view
until `pipeframe deploy` records it (PF612). Format 4 adds the plan's `group_keys`; a plan of format 3 reads with
none (its recomputes aggregate the whole source until a deploy records them). Format 5 adds the plan's
`keys_duckdb`; a plan of format 4 reads with none (its recomputes find the touched groups with a Spark job until a
deploy records it). Format 6 adds the plan's `absorb`; a plan of format 5 reads with none (an update reaching a
view of maxima, minima and distinct counts recomputes the groups it touched until a deploy records it). A record of
a newer format than this code knows is refused (PF610: upgrade pipeframe); a key this code does not know, in a
record of a known format, is an error (PF611), never dropped: it would be lost on the next write.

Commit kinds, told apart by `op` (and, without one, by `view`):

| kind | op | written by |
|---|---|---|
| Ingest | (none) | an append, replace or file ingest of a datasource |
| GroupCommit | events | the group committer (HTTP events, `Project.append` with threads) |
| FixtureLoad | fixture | `pipeframe fixtures` / `Project.load_fixtures` |
| ViewCommit | (none, has `view`) | a view's increment, backfill or rebuild watermark |
| PopulateChunk | populate | one chunk of `pipeframe populate` / a chunked rebuild |
| Compaction | compact (has `compacted`) | `optimize`'s rewrite of a view's states, one row per key |
| CompactionRestore | compact (has `restored`) | states committed during that rewrite, appended again |
| Retention | ttl | the DELETE of the rows past a table's ENGINE_TTL |
| Partials | partials | the partial states of a join view's source |
"""

from __future__ import annotations

import functools
import json
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any, ClassVar

from pipeframe.compiler import maintenance
from pipeframe.errors import PipeframeError

if TYPE_CHECKING:
    from pipeframe.plan.state import ResourceState

FORMAT = 6  # the newest record format; 1: before formats were recorded; 3: maintenance plans; 4: their group
# keys; 5: the touched keys' query in DuckDB's SQL; 6: how an update is absorbed


@dataclass(frozen=True)
class Ingest:
    """Rows landed in a datasource: the commit's id and each idempotency key with (accepted, quarantined)."""

    OP: ClassVar[str | None] = None
    commit: str = ""
    keys: dict[str, tuple[int, int]] = field(default_factory=dict)


@dataclass(frozen=True)
class GroupCommit:
    """The rows of `requests` requests landed in one commit by the group committer (`parse`: spark or arrow)."""

    OP: ClassVar[str | None] = "events"
    commit: str = ""
    keys: dict[str, tuple[int, int]] = field(default_factory=dict)
    requests: int = 0
    parse: str = ""


@dataclass(frozen=True)
class FixtureLoad:
    """A project fixture file loaded into its datasource; `fixture` is its content's digest."""

    OP: ClassVar[str | None] = "fixture"
    commit: str = ""
    keys: dict[str, tuple[int, int]] = field(default_factory=dict)
    fixture: str = ""
    file: str = ""


@dataclass(frozen=True)
class ViewCommit:
    """A view's state rows. With `source_version`, its watermark: the source version (and table) applied.
    `rows`: the source rows applied; `path`: the write strategy taken; `joined`: the version of each joined table
    the rows agree with; `partials`: read through the source's partial states; `backfill`: full or skip."""

    OP: ClassVar[str | None] = None
    view: str
    commit: str = ""
    source: str | None = None
    source_version: int | None = None
    source_path: str | None = None
    rows: int | None = None
    path: str | None = None
    joined: dict[str, int] = field(default_factory=dict)
    partials: bool = False
    backfill: str | None = None


@dataclass(frozen=True)
class PopulateChunk:
    """Chunk `chunk` (from 1) of populate run `run`."""

    OP: ClassVar[str | None] = "populate"
    view: str
    run: str
    chunk: int
    commit: str = ""
    joined: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class Compaction:
    """A view's states rewritten as one row per key, computed from version `compacted` of its table."""

    OP: ClassVar[str | None] = "compact"
    view: str
    compacted: int


@dataclass(frozen=True)
class CompactionRestore:
    """State rows committed while the compaction from version `restored` ran, appended again after it."""

    OP: ClassVar[str | None] = "compact"
    view: str
    restored: int
    commit: str = ""


@dataclass(frozen=True)
class Retention:
    """The DELETE of a table's rows past its ENGINE_TTL (views that do not follow the TTL ignore it)."""

    OP: ClassVar[str | None] = "ttl"


@dataclass(frozen=True)
class Partials:
    """The partial states of a source as of `source_version` (`sql`: the digest of their query); `appended`: the
    increments appended since the last overwrite."""

    OP: ClassVar[str | None] = "partials"
    source_version: int
    source_path: str | None
    sql: str
    appended: int


CommitRecord = (Ingest | GroupCommit | FixtureLoad | ViewCommit | PopulateChunk | Compaction | CompactionRestore
                | Retention | Partials)
IngestRecord = Ingest | GroupCommit | FixtureLoad
KINDS: tuple[type, ...] = typing.get_args(CommitRecord)
_BY_OP = {cls.OP: cls for cls in (GroupCommit, FixtureLoad, PopulateChunk, Retention, Partials)}
_FIELDS = {cls: typing.get_type_hints(cls) for cls in KINDS}  # each kind's fields and their types (ClassVar too)


def encode(record: CommitRecord) -> str:
    """A commit's userMetadata: `{"pipeframe": {...}}` with the record's format, kind and fields (those at their
    default left out, as format 1 did; the fields that tell kinds apart, `view` and `compacted`/`restored`, have
    none)."""
    body: dict[str, Any] = {"format": FORMAT, **({"op": record.OP} if record.OP else {})}
    for f in fields(record):
        value = getattr(record, f.name)
        default = f.default_factory() if callable(f.default_factory) else f.default
        if value != default:
            body[f.name] = {k: list(v) if isinstance(v, tuple) else v for k, v in value.items()} \
                if isinstance(value, Mapping) else value
    return json.dumps({"pipeframe": body})


def decode(text: str | None, where: str) -> CommitRecord | None:
    """The pipeframe record of a commit's userMetadata (`where` names the commit and table in errors); None when
    the commit has none (no userMetadata, or another writer's)."""
    if not text:
        return None
    try:
        data = json.loads(text)
    except ValueError:
        return None
    body = data.get("pipeframe") if isinstance(data, dict) else None
    if not isinstance(body, dict):
        return None
    _check_format(body, where)
    op = body.get("op")
    if op == "compact":
        cls: type = CompactionRestore if "restored" in body else Compaction
    elif op is None:
        cls = ViewCommit if "view" in body else Ingest
    elif op in _BY_OP:
        cls = _BY_OP[op]
    else:
        raise _unreadable(where, f"its kind `{op}` is not one this pipeframe knows")
    return _build(cls, {k: v for k, v in body.items() if k not in ("format", "op")}, where)


def encode_state(state: ResourceState) -> str:
    """A resource's record in the state store: its stored form (`ResourceState.to_json`) with the format."""
    return json.dumps({"format": FORMAT, **state.to_json()})


def decode_state(text: str, where: str) -> ResourceState:
    """A resource's state from its record in the state store (`where` names it in errors)."""
    # here, not at the top: plan.state imports the compiler, which reading a commit's record (the read path) needs not
    from pipeframe.compiler.graph import ResourceKey
    from pipeframe.plan.state import ResourceState

    try:
        data = json.loads(text)
    except ValueError:
        raise _unreadable(where, "it is not JSON") from None
    if not isinstance(data, dict):
        raise _unreadable(where, "it is not a JSON object")
    _check_format(data, where)
    data = {k: v for k, v in data.items() if k != "format"}
    for name in ("key", "name", "kind"):
        if not isinstance(data.get(name), str):
            raise _unreadable(where, f"its `{name}` is missing")
    unknown = sorted(set(data) - set(ResourceState.__dataclass_fields__))
    if unknown:
        raise _unreadable(where, _unknown_keys(unknown))
    pairs = {"columns", "tokens"}
    tuples = {"columns", "sorting_key", "keys", "tokens", "joined", "writers"}
    try:
        fixed = {k: (tuple(tuple(x) if k in pairs else x for x in v) if k in tuples and v is not None else v)
                 for k, v in data.items()}
        fixed["key"] = ResourceKey.parse(data["key"])
        fixed["depends_on"] = tuple(ResourceKey.parse(k) for k in data.get("depends_on") or ())
        fixed["maintenance"] = _maintenance(data.get("maintenance"), where)
        return ResourceState(**fixed)
    except (TypeError, ValueError) as exc:
        raise _unreadable(where, f"a value has the wrong type ({exc})") from None


def _maintenance(data: Any, where: str) -> maintenance.MaintenancePlan | None:
    """A view's maintenance plan from its stored form (None: a record written before plans were recorded)."""
    if data is None:
        return None
    derived = data.get("partials") if isinstance(data, dict) else None
    absorb = data.get("absorb") if isinstance(data, dict) else None
    keys = data.get("group_keys") or [] if isinstance(data, dict) else []
    if not isinstance(keys, list):
        raise TypeError(f"{keys!r} is not a list")
    for body, cls in ((data, maintenance.MaintenancePlan), (derived, maintenance.Partials),
                      (absorb, maintenance.Absorb), *((key, maintenance.GroupKey) for key in keys)):
        if body is not None and not isinstance(body, dict):
            raise TypeError(f"{body!r} is not an object")
        unknown = sorted(set(body or ()) - {f.name for f in fields(cls)})
        if unknown:
            raise _unreadable(where, _unknown_keys(unknown))
    if derived is not None:
        derived = maintenance.Partials(**{**derived, "keys": tuple(derived.get("keys", ())),
                                          "signed_sql": tuple(tuple(p) for p in derived.get("signed_sql", ()))})
    if absorb is not None:
        absorb = maintenance.Absorb(**{**absorb, "rules": tuple(tuple(r) for r in absorb.get("rules", ()))})
    return maintenance.MaintenancePlan(**{**data, "monotonic": tuple(data.get("monotonic", ())),
                                          "partials": derived, "absorb": absorb,
                                          "group_keys": tuple(maintenance.GroupKey(**key) for key in keys)})


def _check_format(body: Mapping[str, Any], where: str) -> None:
    version = body.get("format", 1)
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise _unreadable(where, f"its format `{version}` is not a record format")
    if version > FORMAT:
        raise PipeframeError(
            "PF610", f"{where} was written by a newer pipeframe (record format {version}; this version reads "
            f"formats 1 to {FORMAT}).", "Upgrade pipeframe (`pip install -U pipeframe`) to the release that wrote "
            "this warehouse, or later.")


def _build(cls: type, body: dict[str, Any], where: str) -> CommitRecord:
    hints = _FIELDS[cls]
    unknown = sorted(set(body) - {f.name for f in fields(cls)})
    if unknown:
        raise _unreadable(where, _unknown_keys(unknown))
    try:
        return cls(**{name: _typed(hints[name], value) for name, value in body.items()})
    except (TypeError, ValueError) as exc:
        raise _unreadable(where, f"a value has the wrong type ({exc})") from None


def _typed(hint: Any, value: Any) -> Any:
    """`value` as read from JSON, checked against (and converted to) the field's type `hint`."""
    nullable, base, origin, args = _shape(hint)
    if value is None:
        if nullable:
            return None
        raise TypeError("null where a value is needed")
    if origin is dict:
        if not isinstance(value, dict):
            raise TypeError(f"{value!r} is not an object")
        return {str(k): _typed(args[1], v) for k, v in value.items()}
    if origin is tuple:
        if not isinstance(value, list) or len(value) != len(args):
            raise TypeError(f"{value!r} is not a list of {len(args)}")
        return tuple(_typed(p, v) for p, v in zip(args, value, strict=True))
    if base is int and isinstance(value, bool) or not isinstance(value, base):
        raise TypeError(f"{value!r} is not a {base.__name__}")
    return value


@functools.cache
def _shape(hint: Any) -> tuple[bool, Any, Any, tuple[Any, ...]]:
    """A field type taken apart once: (None allowed, the type without None, its generic origin, its arguments)."""
    options = typing.get_args(hint) if isinstance(hint, types.UnionType) else (hint,)
    base = next(o for o in options if o is not type(None))
    return type(None) in options, base, typing.get_origin(base), typing.get_args(base)


def _unknown_keys(unknown: list[str]) -> str:
    return f"it has key{'s' * (len(unknown) > 1)} this pipeframe does not know ({', '.join(unknown)})"


def _unreadable(where: str, why: str) -> PipeframeError:
    return PipeframeError("PF611", f"{where} has a pipeframe record this version cannot read: {why}.",
                          "Upgrade pipeframe to the release that wrote this warehouse; if none did, the record was "
                          "edited by hand: restore it as pipeframe wrote it.")

