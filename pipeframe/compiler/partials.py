"""Partial states of a join view's source side (eager aggregation), for following a joined table cheaply.

A view `SELECT u.country, count(*), sum(e.bytes) FROM events e JOIN users u ON e.user_id = u.user_id GROUP BY 1`
whose aggregates read only the source (`events`) gives the same states when the source is first grouped by every
source column the rest of the query reads (here `user_id`), each aggregate kept as its state, and the view's query
then run over those partial rows with each state combined instead of computed. The partial rows are far fewer than
the source's, so a change to `users` (retract the old join rows, add the new ones) joins them instead of the whole
source. Duplicated partial rows (one per joined row) combine exactly as the duplicated source rows would: every
state here is a sum of per-row terms, which is also why partial rows can be negated to follow the source's deletes.

`partials()` derives the SQL or returns None when the query is not of that shape. Pure SQL: no Spark here."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import sqlglot
from sqlglot import exp

from pipeframe.compiler.maintenance import SIGN, Partials
from pipeframe.compiler.sql import DIALECT, to_sql
from pipeframe.compiler.viewplan import BATCH_RELATION

PREFIX = "__pf_p"  # partial state columns: __pf_p0, __pf_p1, ... (by the projection's position)


def partials(state_sql: str, compact_sql: str, negate_sql: str, source_columns: Iterable[str],
             other_columns: Mapping[str, Iterable[str]]) -> Partials | None:
    """The partial states of a view whose states can all be negated (`negate_sql`), given the columns of its source
    and of every other table its query reads; None unless the query is one SELECT over the source and joined
    tables (no subquery, CTE, lambda, HAVING, USING or NATURAL join, and plain GROUP BY expressions) whose
    aggregates read only source columns."""
    if not negate_sql:
        return None
    tree = sqlglot.parse_one(state_sql, read=DIALECT)
    if not isinstance(tree, exp.Select) or tree.args.get("with_") or tree.args.get("having") or \
            tree.find(exp.Subquery, exp.Exists, exp.Lambda, exp.Window) is not None or \
            any(query is not tree for query in tree.find_all(exp.Select, exp.SetOperation)):
        return None
    group = tree.args.get("group")
    if group is not None and any(value for key, value in group.args.items() if key != "expressions"):
        return None  # GROUP BY ALL, WITH ROLLUP, CUBE, GROUPING SETS: only plain grouping expressions are kept
    if any(join.args.get("using") or join.method for join in tree.args.get("joins") or []):
        return None  # USING and NATURAL join on columns the query does not name: they would not be kept
    start = tree.args.get("from_") or tree.args.get("from")
    table = start.this if start is not None else None
    if not isinstance(table, exp.Table) or table.name != BATCH_RELATION:
        return None
    alias = exp.to_identifier(table.alias_or_name, quoted=True).sql(dialect=DIALECT)
    # Spark resolves names in any case: so are they compared here.
    source = {name.lower() for name in source_columns}
    others = {name.lower() for columns in other_columns.values() for name in columns}
    combines, negations = _per_column(compact_sql), _per_column(negate_sql)
    names = [p.alias_or_name for p in tree.expressions]
    aliases = {n.lower() for n in names} - source - others  # output names read back, e.g. in GROUP BY
    states = {i for i, name in enumerate(names) if name in combines}

    def side(column: exp.Column) -> str | None:
        name = column.name.lower()
        if column.args.get("db") or column.args.get("catalog"):
            return None  # a.b.c: a struct field of a qualified column, or a qualified table
        if column.table:
            return "source" if column.table.lower() == table.alias_or_name.lower() else "other"
        if name in source and name not in others:
            return "source"
        if name in others and name not in source:
            return "other"
        return "alias" if name in aliases else None

    keys: dict[str, str] = {}  # lower case -> as first written
    for index, projection in enumerate(tree.expressions):
        sides = [side(c) for c in projection.find_all(exp.Column)]
        if index in states:
            if any(s != "source" for s in sides):
                return None
        elif None in sides or isinstance(projection, exp.Star) or projection.find(exp.Star):
            return None
    in_states = {id(c) for i in states for c in tree.expressions[i].find_all(exp.Column)}
    for column in tree.find_all(exp.Column):
        if id(column) in in_states:
            continue
        found = side(column)
        if found is None:
            return None
        if found == "source":
            keys.setdefault(column.name.lower(), column.name)
    if not states or any(names[i] not in negations for i in states):
        return None
    key_list = tuple(keys.values())
    parts = [f"{alias}.`{k}` AS `{k}`" for k in key_list] + \
            [f"{to_sql(tree.expressions[i].this)} AS `{PREFIX}{i}`" for i in sorted(states)]
    group = f" GROUP BY {', '.join(f'{alias}.`{k}`' for k in key_list)}" if key_list else ""
    partial_sql = f"SELECT {', '.join(parts)} FROM {BATCH_RELATION} AS {alias}{group}"

    def combined(sign: str) -> str:
        new = tree.copy()
        for i in states:
            merged = to_sql(_substituted(combines[names[i]], names[i], f"{alias}.`{PREFIX}{i}`"))
            negated = to_sql(_substituted(negations[names[i]], names[i], f"({merged})"))
            signed = sqlglot.parse_one(f"CASE WHEN `{sign}`.`{SIGN}` < 0 THEN {negated} ELSE {merged} END",
                                       read=DIALECT)
            new.expressions[i].replace(exp.alias_(signed, names[i], quoted=True))
        # The added and the removed rows of a group merge into one state each, and the latter is negated: a state
        # merged from negated rows is not always the negated state (a variance clamps a negative m2 to 0).
        by_sign = exp.column(SIGN, table=sign, quoted=True)
        group = new.args.get("group")
        new.set("group", exp.Group(expressions=[*(group.expressions if group else []), by_sign]))
        return to_sql(new)

    joined = [t for t in tree.find_all(exp.Table) if t is not table]
    once = [t for t in joined if sum(o.name == t.name for o in joined) == 1]
    own = [f"`{k}`" for k in key_list]

    def over_partials(templates: dict[str, exp.Expression]) -> str:
        """The keys, and each partial state column through its state's template (negate or combine)."""
        return ", ".join(own + [f"{to_sql(_substituted(templates[names[i]], names[i], f'`{PREFIX}{i}`'))} AS "
                                f"`{PREFIX}{i}`" for i in sorted(states)])

    fold_group = f" GROUP BY {', '.join(own)}" if own else ""
    return Partials(key_list, partial_sql, f"SELECT {over_partials(negations)} FROM {{table}}",
                    f"SELECT {over_partials(combines)} FROM {{table}}{fold_group}",
                    tuple((t.name, combined(t.alias_or_name)) for t in once))


def _per_column(sql: str) -> dict[str, exp.Expression]:
    """The expressions of a SELECT over a view's state columns that are not the bare column (its states)."""
    tree = sqlglot.parse_one(sql.replace("{table}", "__pf_table"), read=DIALECT)
    out = {}
    for projection in tree.expressions:
        body = projection.this if isinstance(projection, exp.Alias) else projection
        if not isinstance(body, exp.Column):
            out[projection.alias_or_name] = body
    return out


def _substituted(expression: exp.Expression, column: str, replacement: str) -> exp.Expression:
    """`expression` with every reference to `column` read from `replacement` instead."""
    def swap(node: exp.Expression) -> exp.Expression:
        if not isinstance(node, exp.Column) or node.args.get("db"):
            return node
        if node.name == column and not node.table:
            return sqlglot.parse_one(replacement, read=DIALECT)
        if node.table == column:  # a field of a struct state: `c`.sum
            return sqlglot.parse_one(f"({replacement}).`{node.name}`" if replacement.startswith("(") else
                                     f"{replacement}.`{node.name}`", read=DIALECT)
        return node

    return expression.copy().transform(swap)
