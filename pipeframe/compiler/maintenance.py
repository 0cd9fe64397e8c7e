"""A view's maintenance plan: what the engine needs to keep it up to date, decided from its SQL at compile time
(`compiler/maintenance_sql.py`) and recorded with its deployed state. Plain data: the engine reads it, never parses.

Its SQL names the relations the engine substitutes as placeholders, as a view's `read_sql` does: `{table}` is the
rows the statement runs over (the block of new source rows for the state query), `{table:<name>}` the table `name`
it joins (its followed joined tables, which the engine pins to a version). `fill` substitutes them as text."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

SIGN = "__pf_sign"  # on a changed table's rows: 1 added, -1 removed
CHANGED = "__pf_changed"  # the changed source rows `MaintenancePlan.keys_duckdb` reads
_NAMED = re.compile(r"\{table:([^{}]+)\}")
# A truncation unit → (the interval from a key to the next one, the slack added past it for a timestamp column: a
# local day or hour can be longer than its interval where the clocks change; the range is a superset, never exact).
UNITS = {"YEAR": ("1 YEAR", "1 DAY"), "QUARTER": ("3 MONTH", "1 DAY"), "MONTH": ("1 MONTH", "1 DAY"),
         "WEEK": ("7 DAY", "1 DAY"), "DAY": ("1 DAY", "1 DAY"), "HOUR": ("1 HOUR", "3 HOUR"),
         "MINUTE": ("1 MINUTE", "3 HOUR"), "SECOND": ("1 SECOND", "3 HOUR")}
RANGE_TYPES = ("TIMESTAMP", "DATE", "TINYINT", "SMALLINT", "INT", "BIGINT")  # source columns a key ranges over


@dataclass(frozen=True)
class Partials:
    """The partial states of a join view's source side (`compiler/partials.py` says what and why)."""

    keys: tuple[str, ...]  # the source columns the partial rows are grouped by
    sql: str  # over source rows (`{table}`): one row per key, each aggregate as its state
    negate_sql: str  # over partial rows `{table}`: rows that take them back out when combined
    compact_sql: str  # over partial rows `{table}`: one row per key
    # Per table joined once: the view's state SQL over partial rows (`{table}`) and that table's changed rows
    # (`{table:<name>}`, with a column `__pf_sign`: 1 added, -1 removed), each state merged from the partial states
    # instead of computed, per group and sign, and negated for the removed rows: one join for a whole change.
    signed_sql: tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class GroupKey:
    """One group key of an aggregated view as a value of a source row, so that recomputing the groups a change
    touched reads only their source rows (`sql` among the touched keys) instead of aggregating the whole source."""

    name: str  # the view's key column
    sql: str  # its value over one source row: Spark SQL over the source's (unqualified) columns
    # Where the value is a floor of one source column of a RANGE_TYPES type (the column itself, or a truncation of
    # it to `unit`), the rows of the keys between two values lie in a range of that column: a filter on literals,
    # which Delta's file statistics skip whole files by on data laid out in time.
    column: str | None = None
    column_type: str | None = None
    unit: str | None = None  # None: the column itself; else a UNITS key (DAY: a timestamp's date)


# A state kind whose value depends only on the set of values it was given → how a removed value is covered by the
# added ones of the same group (`Absorb`): a max by a larger or equal one, a min (and `any`, kept as the least) by a
# smaller or equal one, a distinct count by the same value.
ABSORB_RULES = {"max": "max", "min": "min", "any": "min", "uniq": "set", "uniq_exact": "set"}


@dataclass(frozen=True)
class Absorb:
    """How to tell that an update left a view's states as merging in the added rows' states leaves them.

    Each of the view's states depends only on the set of values it was given (`ABSORB_RULES`): taking a row's value
    out changes nothing when the same group keeps a value that covers it. For every group the change removed rows
    from, `sql` (the state query with each sketch collecting the exact set of values it sketches instead) over
    the removed rows and over the added rows gives per state a witness: the removed rows' max (min) against the added
    rows' max (min), their set of values against the added rows' set. Covered in every group (and every such group
    added to): the new states are the old ones merged with the added rows' states, an append."""

    sql: str  # over `{table}` (source rows) and `{table:<name>}` (joined tables): one witness row per group
    rules: tuple[tuple[str, str], ...]  # (state column, "max" | "min" | "set")
    # The same query over the changed source rows (the relation CHANGED, run once over the removed and once over the
    # added ones) in DuckDB's SQL, as the read path translates Spark's: the witnesses found without a Spark job
    # (engine/sparkstore.py). None where the view joins a table, a key is not exact (`keys_duckdb`) or the
    # translation refuses an expression.
    duckdb: str | None = None


@dataclass(frozen=True)
class MaintenancePlan:
    """How a deployed view is maintained, as far as its SQL decides it."""

    state_sql: str  # the view's state query over `{table}` (new source rows) and `{table:<name>}` (joined tables)
    # The followed joined tables read only as a FROM table or an inner (or cross) join, outside any subquery or CTE:
    # every output row a change to such a table alters joins a changed row, so the groups of the changed rows' join
    # rows are all the groups the change touches, and its states can be negated. An outer join also changes rows
    # that stop or start matching.
    monotonic: tuple[str, ...] = ()
    partials: Partials | None = None  # None: the query has not their shape, or a state cannot be negated
    # Every group key of an aggregated view as a value of a source row (`GroupKey`), in the order of the view's
    # keys; () when one is not (a key from a joined table, an aggregate over a subquery that groups or limits).
    group_keys: tuple[GroupKey, ...] = ()
    # The distinct group keys of changed source rows (the relation CHANGED) in DuckDB's SQL, as the read path translates
    # Spark's (serving/translate.py): a recompute finds the touched groups from the change feed's files without a
    # Spark job (engine/sparkstore.py). None without group keys, or where a key's expression has no translation.
    keys_duckdb: str | None = None
    # Where every state of the view depends only on the set of values it was given: how an update that adds rows
    # covering the removed ones is applied as an append (`Absorb`); None otherwise.
    absorb: Absorb | None = None


def fill(sql: str, table: str, named: Mapping[str, str]) -> str:
    """`sql` with `{table}` read from relation `table` and each `{table:<name>}` from `named[name]`, or from the
    table `name` itself when not given (read by name)."""
    return _NAMED.sub(lambda m: named.get(m.group(1), f"`{m.group(1)}`"), sql).replace("{table}", table)


def key_range(key: GroupKey, low: str, high: str) -> str | None:
    """A filter on source rows that keeps at least every row whose value of `key` lies between the SQL literals
    `low` and `high` (of the key's type); None when the key is not a floor of one source column."""
    column, kind = f"`{key.column}`", key.column_type
    if key.column is None or kind not in RANGE_TYPES:
        return None
    if key.unit is None:
        return f"{column} >= {low} AND {column} <= {high}"
    if key.unit not in UNITS or kind not in ("TIMESTAMP", "DATE"):
        return None
    step, slack = UNITS[key.unit]
    if kind == "DATE":  # a truncation of a date below a day is the date itself: ranges of whole days
        step = step if key.unit in ("DAY", "WEEK", "MONTH", "QUARTER", "YEAR") else "1 DAY"
        return f"{column} >= CAST({low} AS DATE) AND {column} < CAST(CAST({high} AS DATE) + INTERVAL {step} AS DATE)"
    return (f"{column} >= CAST({low} AS TIMESTAMP) AND "
            f"{column} < CAST({high} AS TIMESTAMP) + INTERVAL {step} + INTERVAL {slack}")
