"""The source rows a `recompute` needs: only those of the groups a change touched, where the view's maintenance plan
says how a source row's group is computed (`MaintenancePlan.group_keys`, decided at deploy).

A view whose states cannot take rows back out (max, min, sketches) recomputes the groups a delete or update touched
from the source as of the new version. Aggregating the whole source and keeping the touched groups afterwards costs
a full aggregation for a change to one group. Instead the touched keys come to the driver (at most NARROW_GROUPS of
them), and the source rows are narrowed before aggregating:

- where a key is a floor of one source column (the column, its date, or a truncation of it: `GroupKey.column`), the
  data files whose statistics lie outside the range of the touched keys are not read (`file_test`, on the `add`
  actions of a local table's log; elsewhere Delta's own skipping, from the same range as a filter on literals:
  `maintenance.key_range`), so on data laid out in time a change to one hour reads about that hour's files;
- a semi join of each row's group keys (computed by the plan's expressions) with the touched keys, broadcast: the
  aggregation reads only the touched groups' rows. The ranges only ever keep more rows than it; it decides. A view
  of one key of instants, dates or integers touched in at most LITERAL_KEYS groups (a delete of an hour, a day)
  keeps the rows whose key is one of the touched values as literals instead: the same rows, without a join.

When the change touched most of the view's groups, every group is computed again from all the source's rows instead:
recomputing a group the change did not touch gives the value the view has, and one aggregation costs less than
finding the touched groups' rows among all of them."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, date, datetime, timedelta
from typing import TYPE_CHECKING

from pipeframe.compiler.maintenance import GroupKey, key_range

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame

NARROW_GROUPS = 10_000  # touched groups brought to the driver to narrow the source by; more: the whole source
WIDE_SHARE = 0.5  # of a view's groups touched: every group is recomputed from the whole source, without narrowing
LITERAL_KEYS = 64  # touched values of a view's one key matched as literals (`_as_literals`), not by a join
# `_integers`' kinds as Spark SQL literals of the same value in any session time zone
LITERALS = {"timestamp": "timestamp_micros({})", "date": "date_from_unix_date({})", "integer": "{}"}
DAY = 86_400_000_000  # microseconds
# A truncation unit → the longest span of source values one key covers (microseconds), with room for clock changes.
SPANS = {"SECOND": 1_000_000, "MINUTE": 60_000_000, "HOUR": 3_600_000_000, "DAY": DAY, "WEEK": 7 * DAY,
         "MONTH": 31 * DAY, "QUARTER": 92 * DAY, "YEAR": 366 * DAY}
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
SLACK = DAY  # local time against the UTC of file statistics, and clock changes; the test is a superset anyway

Snapshot = Callable[[Callable[[dict], bool] | None], "DataFrame"]  # the source's rows, of the files a test keeps


def narrowed(group_keys: tuple[GroupKey, ...], keys: pa.Table, frame_of: Callable[[pa.Table], DataFrame],
             snapshot: Snapshot, held: Callable[[], pa.Table | None]) -> tuple[DataFrame, DataFrame | None] | None:
    """(the keys of the groups to replace, as a relation of their own; the source rows their new states are made
    of, None for all of them), or None when the source cannot be narrowed: no group keys in the plan, or more than
    NARROW_GROUPS groups touched.

    `keys`: the distinct keys of the touched groups (at most NARROW_GROUPS + 1 of them), brought to the driver;
    `frame_of(keys)`: such keys as a Spark relation of the view's key columns. `snapshot(test)`: the source's rows
    as of the version recomputed, read only from the data files `test` keeps (where it can tell them apart).
    `held()`: the distinct keys the view holds, where they are cheap to know (None otherwise); when the change
    touched at least WIDE_SHARE of them, every group is replaced."""
    from pyspark.sql import functions as F

    if not group_keys or keys.num_rows > NARROW_GROUPS:
        return None
    if keys.num_rows == 0:
        return frame_of(keys), snapshot(lambda _add: False).limit(0)
    every = _every_group(keys, held())
    if every is not None:
        return frame_of(every), None
    wanted = frame_of(keys)
    ranges = [r for key in group_keys if (r := _range(key, keys.column(key.name))) is not None]
    rows = snapshot(file_test(group_keys, keys))
    rows = rows.where(" AND ".join(f"({r})" for r in ranges)) if ranges else rows
    literals = _as_literals(group_keys, keys)
    if literals is not None:
        return wanted, rows.where(f"({group_keys[0].sql}) IN ({', '.join(literals)})")
    probe = rows.selectExpr("*", *[f"{key.sql} AS `__pf_key{i}`" for i, key in enumerate(group_keys)])
    right = F.broadcast(wanted.selectExpr(*[f"`{key.name}` AS `__pf_want{i}`" for i, key in enumerate(group_keys)]))
    condition = None
    for i in range(len(group_keys)):
        equal = probe[f"__pf_key{i}"].eqNullSafe(right[f"__pf_want{i}"])
        condition = equal if condition is None else condition & equal
    kept = probe.join(right, condition, "left_semi")
    return wanted, kept.drop(*[f"__pf_key{i}" for i in range(len(group_keys))])


def _as_literals(group_keys: tuple[GroupKey, ...], keys: pa.Table) -> list[str] | None:
    """The touched values of a view's only key as Spark SQL literals that name the same values whatever the session's
    time zone (`_integers`), when there are at most LITERAL_KEYS of them, none NULL (`IN` never matches a NULL) and
    none a naive time (no instant); else None."""
    import pyarrow as pa

    if len(group_keys) != 1 or keys.num_rows > LITERAL_KEYS:
        return None
    values = keys.column(group_keys[0].name)
    if values.null_count or pa.types.is_timestamp(values.type) and values.type.tz is None:
        return None
    try:
        found = _integers(values)
        if found is None:
            return None
        kind, numbers = found[0], found[1].cast(pa.int64())
    except pa.ArrowException:  # finer than microseconds, or beyond a BIGINT: the join decides
        return None
    return [LITERALS[kind].format(int(n)) for n in numbers.to_pylist()]


def _every_group(keys: pa.Table, held: pa.Table | None) -> pa.Table | None:
    """Every group's key (`held` and the touched `keys`), when the touched ones are at least WIDE_SHARE of `held`."""
    import pyarrow as pa
    import pyarrow.compute as pc

    from pipeframe.engine.deltaappend import matching

    if held is None or held.num_rows == 0:
        return None
    found = matching(held, keys.column_names, keys)
    if found is None or (pc.sum(found).as_py() or 0) < WIDE_SHARE * held.num_rows:
        return None
    try:
        held = held.select(keys.column_names).cast(keys.schema)
    except (pa.ArrowException, ValueError):
        return None
    return pa.concat_tables([held, keys]).group_by(keys.column_names).aggregate([])


def _range(key: GroupKey, values: pa.ChunkedArray) -> str | None:
    """`key_range` of the touched `values` of one key, with the rows whose column is NULL kept when a touched key
    is NULL (every floor of a NULL is NULL); None when the key has no range or no literal bounds."""
    bounds = literal_bounds(values)
    if bounds is None:
        return None
    found = key_range(key, *bounds)
    if found is None or values.null_count == 0:
        return found
    return f"{found} OR `{key.column}` IS NULL"


def literal_bounds(values: pa.ChunkedArray) -> tuple[str, str] | None:
    """The smallest and largest of `values` as Spark SQL literals, exact whatever the session's time zone
    (timestamps as microseconds since the epoch, dates as days); None for another type, or only NULLs."""
    found = _extremes(values)
    if found is None:
        return None
    kind, low, high = found
    return LITERALS[kind].format(low), LITERALS[kind].format(high)


def _extremes(values: pa.ChunkedArray) -> tuple[str, int, int] | None:
    """(kind, smallest, largest) of `values` as integers: `timestamp` microseconds since the epoch, `date` days,
    `integer` themselves; None for another type, or only NULLs."""
    import pyarrow.compute as pc

    found = _integers(values)
    if found is None:
        return None
    name, numbers = found
    extremes = pc.min_max(numbers)
    low, high = extremes["min"].as_py(), extremes["max"].as_py()
    return None if low is None or high is None else (name, int(low), int(high))


def _integers(values: pa.ChunkedArray) -> tuple[str, pa.ChunkedArray] | None:
    """(kind, the values as integers): `timestamp` microseconds since the epoch, `date` days, `integer` themselves;
    None for another type. Raises pyarrow's error for a timestamp finer than microseconds."""
    import pyarrow as pa

    kind = values.type
    if pa.types.is_timestamp(kind):
        return "timestamp", values.cast(pa.timestamp("us", tz=kind.tz)).cast(pa.int64())
    if pa.types.is_date32(kind):
        return "date", values.cast(pa.int32())
    if pa.types.is_integer(kind):
        return "integer", values
    return None


def file_test(group_keys: tuple[GroupKey, ...], keys: pa.Table) -> Callable[[dict], bool] | None:
    """A test of a data file's `add` action: False when its statistics show that no row of it can fall in a
    touched group (a range key's column entirely outside the touched keys' range, widened by a unit and SLACK:
    never narrower than `key_range`); True when they cannot tell. None when no key ranges over a column."""
    ranges = [found for key in group_keys if (found := _column_range(key, keys.column(key.name))) is not None]
    if not ranges:
        return None

    def keep(add: dict) -> bool:
        try:
            stats = json.loads(add.get("stats") or "")
            for column, kind, low, high, nulls in ranges:
                smallest = _stat(stats["minValues"][column], kind)
                largest = _stat(stats["maxValues"][column], kind)
                if kind == "TIMESTAMP":
                    largest += 1000  # Delta truncates a timestamp's statistics to milliseconds
                in_range = low is not None and smallest <= high and largest >= low
                if not in_range and not (nulls and stats["nullCount"][column] > 0):
                    return False
        except (ValueError, KeyError, TypeError, AttributeError):
            return True  # no statistics for the column (or unreadable ones): the file may hold anything
        return True

    return keep


def _column_range(key: GroupKey, values: pa.ChunkedArray) -> tuple[str, str, int | None, int | None, bool] | None:
    """(column, its type, the lowest and highest value a touched group's rows can have there, in the units of its
    statistics (TIMESTAMP microseconds, DATE days), whether a touched key is NULL) for a key that ranges over one
    column; None for another."""
    if key.column is None or key.column_type not in ("TIMESTAMP", "DATE", "TINYINT", "SMALLINT", "INT", "BIGINT"):
        return None
    found = _extremes(values)
    nulls = values.null_count > 0
    if found is None:
        return (key.column, key.column_type, None, None, True) if nulls and len(values) == values.null_count \
            else None
    kind, low, high = found
    span = SPANS.get(key.unit or "", 0)
    if kind == "date":  # a key of days: from the start of its first day to the end of its last, in any zone
        low, high = low * DAY - SLACK, (high + 1) * DAY + SLACK
    elif kind == "timestamp":
        high += SLACK if key.unit else 0
    elif key.unit is not None or key.column_type in ("TIMESTAMP", "DATE"):
        return None  # an integer key over a time column: no floor this knows
    if key.column_type == "TIMESTAMP":
        return key.column, "TIMESTAMP", low, high + span, nulls
    if key.column_type == "DATE":
        if kind == "integer":
            return None
        return key.column, "DATE", low // DAY - 1, (high + span) // DAY + 1, nulls
    return (key.column, "INTEGER", low, high, nulls) if kind == "integer" else None


def _stat(value: object, kind: str) -> int:
    """A statistic of a file (minValues/maxValues) in the units of `_column_range`."""
    if kind == "TIMESTAMP":
        moment = datetime.fromisoformat(str(value))
        if moment.tzinfo is None:
            raise ValueError("a timestamp statistic without a zone")
        return (moment - EPOCH) // timedelta(microseconds=1)
    if kind == "DATE":
        return (date.fromisoformat(str(value)[:10]) - EPOCH.date()).days
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"not an integer statistic: {value!r}")
    return value
