"""Rewrites a materialized pipe's output SELECT into the SQL that turns a block of new rows into state
rows, and describes how the target's columns finalize when the target is read by name (section 4)."""

from __future__ import annotations

from collections.abc import Set as AbstractSet

import sqlglot
from sqlglot import exp

from pipeframe.compiler.aggregates import BY_KIND, BY_PLAIN_NAME, AggregateState, returns_array, state_type_for
from pipeframe.compiler.dialect import DIALECT
from pipeframe.compiler.functions import aggregates_in, call_of, combinator
from pipeframe.compiler.incremental import ViewContext, unfiltered
from pipeframe.compiler.infer import Scope, infer, never_null, nulls_of
from pipeframe.compiler.sql import to_sql
from pipeframe.compiler.viewplan import ParsedNodes, StateSelect, ViewColumn, ViewPlan

VALUE_TYPES = {"count": "BIGINT", "count_if": "BIGINT", "avg": "DOUBLE", "uniq": "BIGINT", "uniq_exact": "INT",
               "quantiles": "DOUBLE", "var_samp": "DOUBLE", "var_pop": "DOUBLE", "stddev_samp": "DOUBLE",
               "stddev_pop": "DOUBLE"}


def _params_of(call_args: tuple[exp.Expression, ...]) -> list[str]:
    """Parameters as written: an array stays one parameter (`quantiles(0.9)(x)` is an array of one quantile, as
    preprocessed into `quantiles(x, array(0.9))`; `quantile(0.9)(x)` is a number)."""
    return [to_sql(arg) for arg in call_args]


def combinator_arguments(state: AggregateState, form: str, call_args: tuple[exp.Expression, ...],
                         args: list[str]) -> tuple[AggregateState, list[str], list[str]]:
    """(state, argument SQL, parameters) of a ClickHouse-style call such as `quantilesState(x, 0.5)` (already
    preprocessed from `quantilesState(0.5)(x)`) or `sumStateIf(x, cond)`."""
    if form == "MergeState" or form == "Merge":
        return state, args[:1], _params_of(call_args[1:])
    if state.parametric:
        return state, args[:1], _params_of(call_args[1:])
    if form in ("StateIf", "If"):
        cond = args[-1]
        if state.kind == "count":
            return BY_KIND["count_if"], [cond], []
        return state, [f"CASE WHEN {cond} THEN {a} END" for a in args[:-1]], []
    return state, args, []


def resolve_state(ctx: ViewContext, body: exp.Expression) -> tuple[AggregateState, list[str], list[str], str, bool]:
    """(state, argument SQL, parameters, rewrite note, explicit) for one aggregate projection."""
    call = call_of(body)
    assert call is not None
    args = [to_sql(a) for a in call.args]
    comb = combinator(call)
    if comb is not None:
        state, form = comb
        state, args, params = combinator_arguments(state, form, call.args, args)
        return state, args, params, "", form in ("State", "StateIf", "MergeState")
    if call.name == "count" and call.distinct:
        mode = ctx.output.node.count_distinct
        kind = "uniq_exact" if mode == "exact" else "uniq"
        return BY_KIND[kind], args, [], f"count(DISTINCT …) → {kind} state (COUNT_DISTINCT {mode})", False
    if call.name == "count":
        return BY_KIND["count"], args, [], "", False
    state = BY_PLAIN_NAME[call.name]
    params = _params_of(call.args[1:2]) if state.parametric else []
    return state, args[: state.arity or 1] if state.parametric else args, params, "", False


def filtered(state_sql: str, condition: exp.Expression | None) -> str:
    """A state expression whose every aggregate keeps the pipe's `FILTER (WHERE condition)`: the state then holds
    only the rows the condition keeps, and merges as the unfiltered state does."""
    if condition is None:
        return state_sql
    tree = sqlglot.parse_one(state_sql, read=DIALECT)
    for agg in aggregates_in(tree):
        kept = exp.Filter(this=agg.copy(), expression=exp.Where(this=condition.copy()))
        if agg is tree:
            tree = kept
        else:
            agg.replace(kept)
    return to_sql(tree)


def plan_view(ctx: ViewContext, scope: Scope, not_null: AbstractSet[str], star_columns: list[tuple[str, str | None]]
              ) -> ViewPlan:
    """Describe the target columns of an accepted materialized pipe (`not_null`: the `source.column` names of `scope`
    that hold no NULL); the state SQL is built on first use."""
    tree = ctx.output.tree
    rewrites: list[str] = []
    columns: list[ViewColumn] = []
    keys: list[str] = []
    select = tree if isinstance(tree, exp.Select) else None
    aggregated = select is not None and (bool(aggregates_in(select)) or select.args.get("group") is not None)
    distinct_to_group = select is not None and bool(select.args.get("distinct")) and not aggregated
    if distinct_to_group:
        rewrites.append("SELECT DISTINCT → GROUP BY every column")
        aggregated = True
    replacements: dict[int, str] = {}  # projection index -> state expression SQL
    nulls = nulls_of(tree, not_null)
    row_count: str | None = None
    projections = tree.selects if isinstance(tree, exp.Query) else []
    for index, projection in enumerate(projections):
        if isinstance(projection, exp.Star) or (isinstance(projection, exp.Column) and projection.is_star):
            columns.extend(ViewColumn(n, t, value_type=t, not_null=never_null(exp.column(n), scope, nulls))
                           for n, t in star_columns)
            keys.extend(n for n, _ in star_columns)
            continue
        name = projection.alias_or_name
        body, condition = unfiltered(projection.this if isinstance(projection, exp.Alias) else projection)
        if select is None or not aggregates_in(projection):
            col_type = infer(body, scope)
            columns.append(ViewColumn(name, col_type, value_type=col_type, not_null=never_null(body, scope, nulls)))
            keys.append(name)
            continue
        call = call_of(body)
        assert call is not None
        arg_types = tuple(infer(a, scope) for a in call.args)
        comb = combinator(call)
        # Whether the state's value is never NULL as read: a count's; a sum's when what it sums is never NULL (read
        # as 0 where no value was summed, as ClickHouse answers a sumIf that matched no row or a sum over no row), and
        # a merge's when the merged states are. A FILTER (WHERE …) that keeps no row of a group leaves its sum NULL.
        null_free = condition is None and bool(call.args) and never_null(call.args[0], scope, nulls)
        state, args, params, note, explicit = resolve_state(ctx, body)
        if comb is not None and comb[1] in ("MergeState", "Merge"):
            # xMerge(col) over states (a view's target), grouped again, stores their merge, as xMergeState does;
            # reading the target by name finalizes it, so it answers what xMerge answers.
            replacements[index] = filtered(state.combine_sql(args[0]), condition)
            physical = arg_types[0] if arg_types else None
            if comb[1] == "Merge":
                note = f"{name}: {call.written}(…) → a merge of the {state.kind} states (finalized when read)"
        else:
            replacements[index] = filtered(state.state_sql(args, params), condition)
            physical = state_type_for(state, arg_types)
        value_type = VALUE_TYPES.get(state.kind)
        if state.kind == "sum":
            value_type = physical
        elif state.kind in ("min", "max", "any", "arg_max", "arg_min"):
            value_type = arg_types[0] if arg_types else None
        if state.kind == "quantiles" and returns_array(params):
            value_type = "ARRAY<DOUBLE>"
        if not explicit and not note:
            kept = " FILTER (WHERE …)" if condition is not None else ""
            note = f"{name}: {call.written.lower()}(…){kept} → {state.kind} state{kept and ' with the same FILTER'}"
        if note:
            rewrites.append(note)
        if row_count is None and state.kind == "count" and condition is None and args in ([], ["*"], ["1"]) \
                and (comb is None or comb[1] == "State"):
            row_count = name
        columns.append(ViewColumn(name, physical, state.kind, tuple(params), value_type, explicit,
                                  state.kind in ("count", "count_if") or (state.kind == "sum" and null_free)))

    nodes = ParsedNodes(tuple((nt.node.name, nt.sql, nt.base) for nt in ctx.nodes), [nt.tree for nt in ctx.nodes],
                        frozenset().union(*(nt.json_columns for nt in ctx.nodes)), tuple(nt.types for nt in ctx.nodes),
                        ctx.versions)
    select = StateSelect(nodes, tuple(replacements.items()), distinct_to_group, ctx.trigger)
    return ViewPlan(tuple(keys) if aggregated else (), tuple(columns), tuple(rewrites), aggregated, select,
                    row_count)


def translate_merges(tree: exp.Expression) -> exp.Expression:
    """Rewrite Tinybird/ClickHouse aggregate combinators into the catalog's Spark expressions: `xMerge(col)`
    finalizes a state, `xMergeState(col)` merges states, `xState(...)`/`xStateIf(...)` build a state and
    `xIf(x, cond)` is the plain conditional aggregate."""
    if not any(True for _ in tree.find_all(exp.Anonymous)):
        return tree
    tree = tree.copy()
    for node in list(tree.find_all(exp.Anonymous)):
        call = call_of(node)
        comb = combinator(call) if call is not None else None
        if call is None or comb is None or (not call.args and comb[0].arity):
            continue
        state, form = comb
        state, args, params = combinator_arguments(state, form, call.args, [to_sql(a) for a in call.args])
        if form == "Merge":
            sql = state.finalize_sql(args[0], params)
        elif form == "MergeState":
            sql = state.combine_sql(args[0])
        elif form in ("State", "StateIf"):
            sql = state.state_sql(args, params)
        else:  # plain xIf / uniqExact(x): the ordinary aggregate (over the filtered values)
            sql = state.state_sql(args, params) if state.kind in ("count_if", "count", "sum", "min", "max", "any") \
                else state.plain_sql(args, params)
        node.replace(sqlglot.parse_one(sql, read=DIALECT))
    return tree
