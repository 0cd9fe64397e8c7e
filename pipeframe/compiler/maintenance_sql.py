"""Decides a view's maintenance plan (`compiler/maintenance.py`) from its SQL: which joined tables it joins
monotonically, its source's partial states, and its SQL with the relations the engine substitutes as placeholders."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace

import sqlglot
from sqlglot import exp

from pipeframe.compiler.dialect import DIALECT
from pipeframe.compiler.maintenance import MaintenancePlan
from pipeframe.compiler.partials import partials
from pipeframe.compiler.sql import rename_tables, to_sql
from pipeframe.compiler.viewplan import BATCH_RELATION

_BATCH = re.compile(rf"\b{BATCH_RELATION}\b")


def maintenance_plan(state_sql: str, compact_sql: str | None, negate_sql: str | None, joined: Sequence[str],
                     source_columns: Iterable[str], other_columns: Mapping[str, Iterable[str]] | None) -> MaintenancePlan:
    """The plan of a view whose state query is `state_sql` (over `__pf_batch`) and which follows the tables `joined`;
    `other_columns`: the columns of every other table its query reads, None when one is not known (a pipe)."""
    derived = partials(state_sql, compact_sql, negate_sql, source_columns, other_columns) \
        if compact_sql and negate_sql and other_columns is not None else None
    if derived is not None:
        derived = replace(derived, sql=placeholders(derived.sql, ()),
                          signed_sql=tuple((name, placeholders(sql, joined)) for name, sql in derived.signed_sql))
    return MaintenancePlan(placeholders(state_sql, joined),
                           tuple(name for name in joined if joined_monotonically(state_sql, name)), derived)


def placeholders(sql: str, joined: Sequence[str]) -> str:
    """`sql` reading `{table}` where it reads the batch `__pf_batch`, and `{table:<name>}` (its alias kept) where it
    reads a table of `joined`."""
    slots = {name: f"__pf_slot{i}" for i, name in enumerate(joined)}
    text = to_sql(rename_tables(sqlglot.parse_one(sql, read=DIALECT), slots)) if slots else sql
    text = _BATCH.sub("{table}", text)
    for name, slot in slots.items():
        text = re.sub(rf"\b{slot}\b", lambda _m, name=name: f"{{table:{name}}}", text)
    return text


def joined_monotonically(sql: str, table: str) -> bool:
    """True when `table` is read in `sql` only as a FROM table or an inner (or cross) join, outside any subquery:
    then every output row that a change to it alters joins a changed row, and the groups those rows fall in are
    all the groups the change touches. An outer join also changes rows that stop or start matching."""
    for node in sqlglot.parse_one(sql, read=DIALECT).find_all(exp.Table):
        if node.name != table:
            continue
        parent = node.parent
        if node.find_ancestor(exp.Subquery, exp.CTE) is not None:
            return False
        if not isinstance(parent, exp.Join | exp.From):
            return False
        select = node.find_ancestor(exp.Select)
        joins = select.args.get("joins") or [] if select is not None else []
        if any(j.side or (j.kind or "").upper() not in ("", "INNER", "CROSS") for j in joins):
            return False
    return True
