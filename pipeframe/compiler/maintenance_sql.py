"""Decides a view's maintenance plan (`compiler/maintenance.py`) from its SQL: which joined tables it joins
monotonically, its source's partial states, and its SQL with the relations the engine substitutes as placeholders."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace

import sqlglot
from sqlglot import exp
from sqlglot.errors import SqlglotError
from sqlglot.optimizer.eliminate_ctes import eliminate_ctes
from sqlglot.optimizer.merge_subqueries import merge_subqueries
from sqlglot.optimizer.qualify import qualify

from pipeframe.compiler.dialect import DIALECT
from pipeframe.compiler.maintenance import (
    ABSORB_RULES,
    CHANGED,
    RANGE_TYPES,
    UNITS,
    Absorb,
    GroupKey,
    MaintenancePlan,
    fill,
)
from pipeframe.compiler.partials import partials
from pipeframe.compiler.sql import rename_tables, to_sql
from pipeframe.compiler.viewplan import BATCH_RELATION

_BATCH = re.compile(rf"\b{BATCH_RELATION}\b")


def maintenance_plan(state_sql: str, compact_sql: str | None, negate_sql: str | None, joined: Sequence[str],
                     source_columns: Sequence[tuple[str, str]], other_columns: Mapping[str, Iterable[str]] | None,
                     keys: Sequence[str] = (), states: Sequence[tuple[str, str]] = ()) -> MaintenancePlan:
    """The plan of a view whose state query is `state_sql` (over `__pf_batch`), grouped by `keys`, and which
    follows the tables `joined`; `source_columns`: its source's (name, type); `other_columns`: the columns of every
    other table its query reads, None when one is not known (a pipe); `states`: its state columns' (name, kind)."""
    names = [name for name, _ in source_columns]
    derived = partials(state_sql, compact_sql, negate_sql, names, other_columns) \
        if compact_sql and negate_sql and other_columns is not None else None
    if derived is not None:
        derived = replace(derived, sql=placeholders(derived.sql, ()),
                          signed_sql=tuple((name, placeholders(sql, joined)) for name, sql in derived.signed_sql))
    found = group_keys(state_sql, keys, source_columns, other_columns)
    exact = keys_duckdb(found, source_columns)
    return MaintenancePlan(placeholders(state_sql, joined),
                           tuple(name for name in joined if joined_monotonically(state_sql, name)), derived,
                           found, exact, absorb(state_sql, states, joined, source_columns if exact else None)
                           if keys or states else None)


# The sketch aggregates of a distinct count's state (its values, its merge of sketches) → their argument's exact set
_SKETCHES = {"hll_sketch_agg", "hll_union_agg"}


def absorb(state_sql: str, states: Sequence[tuple[str, str]], joined: Sequence[str],
           source_columns: Sequence[tuple[str, str]] | None) -> Absorb | None:
    """`MaintenancePlan.absorb` of a view whose state query is `state_sql` and whose state columns are `states`
    (name, kind): the query with each sketch aggregate of a distinct count collecting its argument's distinct values
    instead, so that a group's witness of it is the exact set of values its sketch was given; None when a
    state's kind depends on more than the set of its values (a count, a sum, a quantile sketch, argMax).
    `source_columns`: the source's (name, type) where the view's keys are exact in DuckDB (`keys_duckdb`), for
    the query's translation (`Absorb.duckdb`); None for none."""
    kinds = dict(states)
    if any(kind not in ABSORB_RULES for kind in kinds.values()):
        return None
    tree = sqlglot.parse_one(state_sql, read=DIALECT)
    if not isinstance(tree, exp.Select):
        return None
    for projection in tree.expressions:
        if kinds.get(projection.alias_or_name) not in ("uniq", None):
            continue
        for call in list(projection.find_all(exp.Anonymous)):
            if call.name.lower() in _SKETCHES and call.expressions:
                # array_distinct(collect_list(x) [FILTER (WHERE …)]): its values without NULLs, as the sketch takes
                # them (collect_set has no DuckDB translation with Spark's meaning for the in-memory store)
                gathered: exp.Expression = exp.ArrayAgg(this=call.expressions[0].copy(), nulls_excluded=True)
                outer = call.parent if isinstance(call.parent, exp.Filter) else call
                if outer is not call:
                    gathered = exp.Filter(this=gathered, expression=outer.expression.copy())
                outer.replace(exp.ArrayDistinct(this=gathered))
    if any(isinstance(node, exp.Anonymous) and node.name.lower() in _SKETCHES for node in tree.walk()):
        return None  # a sketch outside the state columns (an earlier node's): its set is not what a witness knows
    sql = placeholders(to_sql(tree), joined)
    return Absorb(sql, tuple((name, ABSORB_RULES[kind]) for name, kind in states),
                  over_changed(fill(sql, CHANGED, {}), source_columns)
                  if source_columns is not None and not joined else None)


def over_changed(spark_sql: str, source_columns: Sequence[tuple[str, str]]) -> str | None:
    """Spark SQL over the changed source rows (CHANGED, of the source's (name, type) `source_columns`) in DuckDB's
    SQL, as the read path translates Spark's; None where the translation refuses it."""
    from pipeframe.serving.translate import Untranslatable, parse, translate

    try:
        return translate(parse(spark_sql), {CHANGED: dict(source_columns)}).sql
    except (Untranslatable, SqlglotError, ValueError):
        return None


def keys_duckdb(keys: Sequence[GroupKey], source_columns: Sequence[tuple[str, str]]) -> str | None:
    """`MaintenancePlan.keys_duckdb`: SELECT DISTINCT of every key's value over the changed source rows (CHANGED),
    in DuckDB's SQL as the read path translates Spark's; None without keys, where a key is not exactly what DuckDB
    computes as Spark does, or where the translation refuses one. Exact: a source column itself, or a floor of one
    (its date, a truncation: `GroupKey.column`). Anything else may differ in a corner (a string function's Unicode
    case rules) and a key computed differently names a group the view does not hold: the touched group would keep
    its old value, so such keys are left to Spark."""
    if not keys or not all(k.column is not None or isinstance(sqlglot.parse_one(k.sql, read=DIALECT), exp.Column)
                           for k in keys):
        return None
    return over_changed(f"SELECT DISTINCT {', '.join(f'{k.sql} AS `{k.name}`' for k in keys)} FROM {CHANGED}",
                        source_columns)


def group_keys(sql: str, keys: Sequence[str], source_columns: Sequence[tuple[str, str]],
               other_columns: Mapping[str, Iterable[str]] | None) -> tuple[GroupKey, ...]:
    """Each of `keys` (the GROUP BY outputs of state query `sql` over `__pf_batch`) as a value of one source row,
    or () when one is not: the query's CTEs and subqueries are merged into it first (sqlglot's optimizer, where it
    can: a node that only filters and projects), so a key computed in an earlier node of the pipe is followed to
    the source columns it is made of. A key that reads a joined table's column, an aggregate or a window is not a
    value of a source row."""
    if not keys or other_columns is None:
        return ()
    types = dict(source_columns)
    schema = {BATCH_RELATION: types, **{name: {c: "STRING" for c in columns} for name, columns in other_columns.items()}}
    try:
        tree = eliminate_ctes(merge_subqueries(qualify(sqlglot.parse_one(sql, read=DIALECT), schema=schema,
                                                       dialect=DIALECT, validate_qualify_columns=False)))
    except SqlglotError:
        return ()
    start = tree.args.get("from_") if isinstance(tree, exp.Select) else None
    source = start.this if start is not None else None
    if not isinstance(source, exp.Table) or source.name != BATCH_RELATION or not tree.args.get("group"):
        return ()
    outputs = {e.alias_or_name: e.unalias() for e in tree.expressions}
    found = []
    for key in keys:
        value = outputs.get(key)
        columns = list(value.find_all(exp.Column)) if value is not None else []
        if value is None or value.find(exp.AggFunc, exp.Window, exp.Subquery) is not None or \
                any(c.table != source.alias_or_name or c.name not in types for c in columns):
            return ()
        bare = value.transform(lambda n: exp.column(n.name, quoted=True) if isinstance(n, exp.Column) else n)
        column, unit = _floor_of(bare)
        kind = types.get(column or "", "").upper()
        found.append(GroupKey(key, to_sql(bare), column if kind in RANGE_TYPES else None,
                              kind if kind in RANGE_TYPES else None, unit))
    return tuple(found)


_DAY_OR_LONGER = ("DAY", "WEEK", "MONTH", "QUARTER", "YEAR")
_UNIT_NAMES = {"YYYY": "YEAR", "YY": "YEAR", "MM": "MONTH", "MON": "MONTH", "DD": "DAY"}


def _floor_of(value: exp.Expression) -> tuple[str | None, str | None]:
    """(column, unit) when `value` is a floor of one column: the column itself (unit None), its truncation to a
    UNITS unit, or its date (DAY); (None, None) otherwise."""
    if isinstance(value, exp.Column):
        return value.name, None
    if isinstance(value, exp.Cast | exp.TryCast | exp.TsOrDsToDate) and isinstance(value.this, exp.Column) and \
            (not isinstance(value, exp.Cast) or value.to.is_type(exp.DataType.Type.DATE)):
        return value.this.name, "DAY"
    if isinstance(value, exp.Cast) and value.to.is_type(exp.DataType.Type.DATE):
        column, unit = _floor_of(value.this)  # the date of a truncation: a floor to the day, or to its unit
        return (column, unit if unit in _DAY_OR_LONGER else "DAY") if column is not None else (None, None)
    if isinstance(value, exp.TimestampTrunc | exp.DateTrunc) and isinstance(value.this, exp.Column):
        unit = value.args.get("unit")
        name = (unit.name if isinstance(unit, exp.Var | exp.Literal) else "").upper()
        name = _UNIT_NAMES.get(name, name)
        # Spark's trunc(date, unit) (DateTrunc) gives NULL for a unit below a week: no floor of its column
        if name in UNITS and (isinstance(value, exp.TimestampTrunc) or name in ("WEEK", "MONTH", "QUARTER", "YEAR")):
            return value.this.name, name
    return None, None


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
