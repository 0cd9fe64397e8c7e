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
_NAMED = re.compile(r"\{table:([^{}]+)\}")


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
class MaintenancePlan:
    """How a deployed view is maintained, as far as its SQL decides it."""

    state_sql: str  # the view's state query over `{table}` (new source rows) and `{table:<name>}` (joined tables)
    # The followed joined tables read only as a FROM table or an inner (or cross) join, outside any subquery or CTE:
    # every output row a change to such a table alters joins a changed row, so the groups of the changed rows' join
    # rows are all the groups the change touches, and its states can be negated. An outer join also changes rows
    # that stop or start matching.
    monotonic: tuple[str, ...] = ()
    partials: Partials | None = None  # None: the query has not their shape, or a state cannot be negated


def fill(sql: str, table: str, named: Mapping[str, str]) -> str:
    """`sql` with `{table}` read from relation `table` and each `{table:<name>}` from `named[name]`, or from the
    table `name` itself when not given (read by name)."""
    return _NAMED.sub(lambda m: named.get(m.group(1), f"`{m.group(1)}`"), sql).replace("{table}", table)
