"""Incrementality rules for materialized pipes: a materialized pipe only ever sees new rows, so each rule
below rejects (or warns about) a construct whose result would differ from a full recomputation.

Each rule is one small function over a ViewContext that reports with its own code, message and fix;
`RULES` composes them. Adding a rule touches this file only.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from sqlglot import exp
from sqlglot.optimizer.scope import Scope, build_scope

from pipeframe.compiler.aggregates import BY_PLAIN_NAME, NOT_MERGEABLE, AggregateState
from pipeframe.compiler.final import FINAL_MARK
from pipeframe.compiler.functions import NON_DETERMINISTIC, aggregates_in, call_of, combinator, is_aggregate
from pipeframe.compiler.sql import locate
from pipeframe.datafiles.model import Node, Pipe
from pipeframe.errors import Diagnostic, Location, Severity


@dataclass(frozen=True)
class NodeTree:
    """A parsed node: its AST, the SQL text the AST came from, and where that text starts in the file."""

    node: Node
    tree: exp.Query
    sql: str
    base: Location
    json_columns: frozenset[str] = frozenset()  # read JSON columns whose paths the tree reads as JSON
    types: tuple[tuple[str, str | None], ...] = ()  # the types of the columns it reads, by lower-case name


@dataclass
class ViewContext:
    """What the rules look at: the pipe's nodes up to the materialized one, the trigger and the target."""

    pipe: Pipe
    nodes: list[NodeTree]
    target: str
    trigger: str | None
    other_tables: list[tuple[str, NodeTree, exp.Table]]
    # State columns of the trigger when it is itself a materialized target (a cascade): column -> state.
    upstream_states: dict[str, AggregateState] = field(default_factory=dict)
    upstream_name: str | None = None
    problems: list[Diagnostic] = field(default_factory=list)
    walked: list[tuple[NodeTree, exp.Expression]] | None = None
    versions: tuple[tuple[str, str], ...] = ()  # `x` → `x__v3`: how its nodes read VERSION-named resources
    # What the project says of the tables it reads (the compiler knows the project): where it first reads its
    # trigger when that is a pipe, the datasources it joins that are not declared dimensions, those with an
    # ENGINE_TTL, and whether its target says BACKFILL skip.
    trigger_pipe: tuple[NodeTree, exp.Table] | None = None
    joinable: tuple[str, ...] = ()
    ttl_tables: frozenset[str] = frozenset()
    target_backfill_skip: bool = False

    @property
    def output(self) -> NodeTree:
        return self.nodes[-1]

    @property
    def output_select(self) -> exp.Select | None:
        tree = self.output.tree
        return tree if isinstance(tree, exp.Select) else None

    @property
    def aggregated(self) -> bool:
        """Whether the output keeps states per group (GROUP BY, aggregates, or DISTINCT read as a GROUP BY)."""
        select = self.output_select
        return select is not None and bool(aggregates_in(select) or select.args.get("group") is not None
                                           or select.args.get("distinct"))

    def report(self, code: str, message: str, hint: str, where: NodeTree, node: exp.Expression | None = None,
               keyword: str | None = None, severity: Severity = "error", location: Location | None = None) -> None:
        if location is None:
            location = locate(node, where.sql, where.base, keyword) if node is not None else where.node.location
        self.problems.append(Diagnostic(code, message, hint, location, severity))


def _walk(ctx: ViewContext) -> list[tuple[NodeTree, exp.Expression]]:
    """Every AST node of the pipe, walked once and shared by the rules."""
    if ctx.walked is None:
        ctx.walked = [(nt, node) for nt in ctx.nodes for node in nt.tree.walk()]
    return ctx.walked


def window_functions(ctx: ViewContext) -> None:
    for nt, node in _walk(ctx):
        if isinstance(node, exp.Window):
            ctx.report("PF401", "Window functions (OVER) need rows from earlier blocks, so a materialized pipe "
                       "cannot maintain them incrementally.",
                       "Move the window function into an endpoint that reads the materialized target.",
                       nt, node, "over")
            return


def order_by(ctx: ViewContext) -> None:
    for nt, node in _walk(ctx):
        if isinstance(node, exp.Order) and not isinstance(node.parent, exp.Window) \
                and not node.find_ancestor(exp.Window):
            ctx.report("PF402", "ORDER BY has no meaning in a materialized pipe (rows are appended block by block): "
                       "it is dropped from the view's query.", "Remove ORDER BY; sort when reading, in an endpoint. "
                       "For sorted storage use ENGINE_SORTING_KEY on the target.", nt, node, "order by",
                       severity="warning")
            return


def limit_offset(ctx: ViewContext) -> None:
    for nt, node in _walk(ctx):
        if isinstance(node, (exp.Limit, exp.Offset, exp.Fetch)):
            word = "OFFSET" if isinstance(node, exp.Offset) else "LIMIT"
            ctx.report("PF404", f"{word} in a materialized pipe would apply to each block of new rows, not to the "
                       "whole table.", f"Remove {word}; apply it in an endpoint that reads the target.",
                       nt, node, word.lower())
            return


def having(ctx: ViewContext) -> None:
    for nt, node in _walk(ctx):
        if isinstance(node, exp.Having):
            ctx.report("PF405", "HAVING filters on a partial aggregate: a group can pass in one block and fail "
                       "once all blocks are merged.", "Remove HAVING from the materialized pipe and filter on the "
                       "aggregate in an endpoint that reads the target.", nt, node, "having")
            return


def distinct(ctx: ViewContext) -> None:
    for nt, node in _walk(ctx):
        if isinstance(node, exp.Union) and node.args.get("distinct"):
            ctx.report("PF403", "UNION (without ALL) removes duplicates across the whole table, which a block of new "
                       "rows cannot see.", "Use UNION ALL.", nt, node, "union")
            return
        if not (isinstance(node, exp.Select) and node.args.get("distinct")):
            continue
        if node is not ctx.output.tree or aggregates_in(node):  # only a plain output SELECT DISTINCT rewrites
            ctx.report("PF403", "SELECT DISTINCT here cannot be rewritten into a mergeable GROUP BY.",
                       "Use DISTINCT only in the materialized node's SELECT, without aggregates, or "
                       "GROUP BY the columns instead.", nt, node, "distinct")
            return


def non_deterministic(ctx: ViewContext) -> None:
    for nt, node in _walk(ctx):
        call = call_of(node) if isinstance(node, exp.Func) else None
        if call is not None and call.name in NON_DETERMINISTIC:
            ctx.report("PF407", f"{call.written}() is non-deterministic: replaying or backfilling a block would "
                       "give different rows.", "Use a column of the source instead (e.g. the event timestamp), "
                       "or compute it in an endpoint.", nt, node, call.written)
            return


def nested_aggregates(ctx: ViewContext) -> None:
    for nt in ctx.nodes[:-1]:
        for node in nt.tree.walk():
            if is_aggregate(node) and not node.find_ancestor(exp.Window):
                ctx.report("PF406", f"Node `{nt.node.name}` aggregates before the materialized node does: "
                           "aggregates over aggregates in one pipe cannot be merged block by block.",
                           "Split this into cascading materialized pipes: materialize the inner aggregate into a "
                           "datasource, then aggregate that in a second materialized pipe.", nt, node)
                return
    out = ctx.output
    for agg in aggregates_in(out.tree):
        for inner in agg.walk():
            if inner is not agg and is_aggregate(inner):
                ctx.report("PF406", "An aggregate inside another aggregate cannot be merged block by block.",
                           "Split this into cascading materialized pipes.", out, inner)
                return
    for sub in out.tree.find_all(exp.Subquery):
        if any(is_aggregate(n) for n in sub.walk()):
            ctx.report("PF406", "A subquery with an aggregate feeds the materialized node; it would only see "
                       "the new block.", "Split this into cascading materialized pipes.", out, sub)
            return


def unfiltered(expression: exp.Expression) -> tuple[exp.Expression, exp.Expression | None]:
    """`agg(x) FILTER (WHERE c)` → (agg(x), c); anything else → (itself, None)."""
    if isinstance(expression, exp.Filter):
        return expression.this, expression.expression.this
    return expression, None


def mergeable_aggregates(ctx: ViewContext) -> None:
    for nt, node in _walk(ctx):
        if isinstance(node, exp.Filter) and not is_aggregate(node.this):
            ctx.report("PF408", "FILTER (WHERE ...) applies only to an aggregate.",
                       "Move the condition into a CASE WHEN, or into the WHERE clause.", nt, node, "filter")
            return
    select = ctx.output_select
    if select is None:
        return
    out = ctx.output
    for projection in select.expressions:
        aggs = aggregates_in(projection)
        if not aggs:
            continue
        body, condition = unfiltered(projection.this if isinstance(projection, exp.Alias) else projection)
        if condition is not None and aggregates_in(condition):
            ctx.report("PF408", "The FILTER condition of an aggregate cannot itself use an aggregate: it is "
                       "evaluated on each row.", "Compare with a column of the row, or split this into cascading "
                       "materialized pipes.", out, condition)
            continue
        if body is not aggs[0]:
            ctx.report("PF408", "An expression that combines aggregates cannot be stored as one mergeable state.",
                       "Materialize each aggregate as its own column (e.g. sum(x) AS total, count(*) AS n) and "
                       "combine them in an endpoint.", out, projection)
            continue
        call = call_of(body)
        assert call is not None
        comb = combinator(call)
        if comb is not None:
            continue
        if call.name in NOT_MERGEABLE:
            why, fix = NOT_MERGEABLE[call.name]
            ctx.report("PF408", f"{call.written}() has no mergeable state: {why}.", f"Instead, {fix}.", out, body,
                       call.written)
        elif call.distinct:
            if call.name != "count":
                ctx.report("PF403", f"{call.written}(DISTINCT ...) cannot be merged block by block.",
                           "Remove DISTINCT, or compute it in an endpoint.", out, body, "distinct")
            elif ctx.output.node.count_distinct is None:
                ctx.report("PF411", "count(DISTINCT x) needs a set or sketch state to be merged block by block.",
                           "Add `COUNT_DISTINCT exact` (a set of values) or `COUNT_DISTINCT sketch` (an HLL "
                           "sketch, ~1.6% error) to the node, or write approx_count_distinct(x).", out, body)
        elif call.name not in BY_PLAIN_NAME and call.name != "count":
            ctx.report("PF408", f"{call.written}() has no mergeable state in pipeframe.",
                       "Use one of: count, sum, min, max, any, avg, approx_count_distinct, percentile_approx, max_by, "
                       "min_by, variance, stddev (or their State forms).", out, body, call.written)


def reads_own_target(ctx: ViewContext) -> None:
    for nt in ctx.nodes:
        for table in nt.tree.find_all(exp.Table):
            if table.name == ctx.target:
                ctx.report("PF409", f"The pipe reads its own target `{ctx.target}`: every block would feed back "
                           "into itself.", "Read the source datasource instead, or materialize into a different "
                           "datasource.", nt, table)
                return


def final_reads(ctx: ViewContext) -> None:
    """`FROM t FINAL` keeps one row per key across the whole table: a later row replaces an earlier one, which a
    block of new rows cannot take back from the states already written."""
    for nt, node in _walk(ctx):
        if node.meta_get(FINAL_MARK):
            ctx.report("PF417", f"The materialized pipe reads `{node.name or node.alias_or_name} FINAL`: a "
                       "deduplicated read (the latest row per key) cannot be maintained incrementally, since each "
                       "block of new rows would have to take back what the rows it replaces added.",
                       "Read FINAL in an endpoint or a copy pipe (they read every row), or materialize without FINAL "
                       "and deduplicate on read, e.g. argMax(col, version) grouped by the key.", nt, node, "final")
            return


def outer_joins(ctx: ViewContext) -> None:
    for nt, node in _walk(ctx):
        if isinstance(node, exp.Join) and (node.side or "").upper() in ("RIGHT", "FULL"):
            ctx.report("PF415", f"A {node.side.upper()} JOIN would emit the other table's unmatched rows again "
                       "with every block.", "Use an INNER or LEFT JOIN with the triggering datasource on the left.",
                       nt, node, node.side.lower())
            return


def _trigger_reads(scope: Scope, trigger: str, earlier: dict[str, int]) -> list[exp.Expression]:
    """Where one row of `scope` reads rows of the trigger: a table reference per trigger row it combines (a
    self-join reads two). `earlier` counts the trigger rows behind each earlier node; UNION ALL branches are
    separate rows, so a union reads as much as its widest branch."""
    if scope.set_operation_scopes:
        return max((_trigger_reads(s, trigger, earlier) for s in scope.set_operation_scopes), key=len)
    reads: list[exp.Expression] = []
    for name, node in scope.references:  # every FROM/JOIN source, semi and anti joins included
        source = scope.sources.get(name)
        if isinstance(source, Scope):
            inner = _trigger_reads(source, trigger, earlier)
            reads.extend([node] * len(inner) if source.is_cte else inner)
        elif isinstance(source, exp.Table):
            reads.extend([node] * (1 if source.name == trigger else earlier.get(source.name, 0)))
    for subquery in scope.subquery_scopes:  # IN (SELECT ...), EXISTS (...), scalar subqueries
        reads.extend(_trigger_reads(subquery, trigger, earlier))
    return reads


def self_join(ctx: ViewContext) -> None:
    """Each block of new rows stands in for every reference to the trigger, so a second reference would only
    ever meet rows of the same block."""
    if ctx.trigger is None:
        return
    earlier: dict[str, int] = {}
    for nt in ctx.nodes:
        scope = build_scope(nt.tree)
        reads = _trigger_reads(scope, ctx.trigger, earlier) if scope is not None else []
        if len(reads) > 1:
            ctx.report("PF413", f"Node `{nt.node.name}` reads `{ctx.trigger}` more than once (a self-join, or a "
                       "subquery or CTE over it): the view would join each block of new rows only with itself, "
                       "never with earlier rows, so its result would depend on how rows were split into appends.",
                       f"Join a different datasource as a dimension (`DIMENSIONS name`), or make `{ctx.pipe.name}` "
                       "an endpoint or a copy pipe, which read every row.", nt, reads[1])
            return
        earlier[nt.node.name] = len(reads)


def join_triggers(ctx: ViewContext) -> None:
    """A view with GROUP BY follows every table it joins that is not a declared dimension (their changes recompute
    the groups they touch); one without GROUP BY follows its first table only, and says so."""
    if ctx.aggregated:
        return
    declared = set(ctx.output.node.dimensions) | {d for nt in ctx.nodes for d in nt.node.dimensions}
    warned: set[str] = set()
    for name, nt, table in ctx.other_tables:
        if name in declared or name in warned or name == ctx.trigger:
            continue
        warned.add(name)
        ctx.report("PF410", f"Only `{ctx.trigger}` triggers this view; new rows in `{name}` will not update it "
                   "(a view without GROUP BY follows its first table only).",
                   f"If `{name}` is a lookup table, declare it with `DIMENSIONS {name}` on the node; to follow both "
                   "tables, aggregate (GROUP BY) in the materialized pipe.", nt, table, severity="warning")


def cascade_states(ctx: ViewContext) -> None:
    """A view over another view's target sees partial state rows; only roll-ups of those states are correct."""
    if not ctx.upstream_states:
        return
    select = ctx.output_select
    out = ctx.output
    upstream = ctx.upstream_name
    for nt in ctx.nodes:
        for column in nt.tree.find_all(exp.Column):
            state = ctx.upstream_states.get(column.name)
            if state is None:
                continue
            agg = column.find_ancestor(exp.AggFunc, exp.Anonymous)
            call = call_of(agg) if agg is not None else None
            ok = False
            if call is not None and nt is out and select is not None:
                comb = combinator(call)
                if comb is not None:
                    ok = comb[0].kind == state.kind and comb[1] in ("MergeState", "Merge")
                else:
                    ok = call.name in state.rollup and not call.distinct
            if not ok:
                fixes = [f"{r}({column.name})" for r in state.rollup]
                if state.clickhouse_names:
                    fixes.append(f"{state.clickhouse_names[0]}MergeState({column.name})")
                ctx.report("PF412", f"`{column.name}` of `{upstream}` holds partial {state.kind} states: a view over "
                           "it sees one row per block, not final values.",
                           f"Roll it up with {' or '.join(fixes)}.", nt, column)
                return
    if select is not None:
        for agg in aggregates_in(select):
            call = call_of(agg)
            if call is not None and call.name == "count" and (call.star or not call.args):
                ctx.report("PF412", f"count(*) over `{upstream}` counts partial state rows, not source rows.",
                           f"Sum the upstream count column instead, e.g. sum(<count column of {upstream}>).",
                           out, agg)
                return


def reads_pipe(ctx: ViewContext) -> None:
    """A view triggered by a pipe runs that pipe on each block of new rows: only an endpoint pipe that needs no
    request parameter can (its nodes are inlined and the view is triggered by its datasource)."""
    if ctx.trigger_pipe is not None:
        nt, table = ctx.trigger_pipe
        ctx.report("PF416", f"The materialized pipe reads pipe `{ctx.trigger}`, which cannot run on each block of new "
                   "rows (only an endpoint pipe that needs no request parameter can).", f"Copy the nodes of "
                   f"`{ctx.trigger}` into this pipe so that it reads the datasource, or materialize from the "
                   "datasource directly.", nt, table)


def follow_ttl(ctx: ViewContext) -> None:
    """FOLLOW_TTL true retracts the rows an ENGINE_TTL deletes from the tables the view follows (its trigger, and
    the tables an aggregating view joins): a warning when none has one, or when the target skipped its backfill
    (the TTL would retract rows the view never counted)."""
    own = ctx.pipe.nodes[: ctx.pipe.nodes.index(ctx.output.node) + 1] if ctx.output.node in ctx.pipe.nodes else []
    node = next((n for n in own if n.follow_ttl), None)
    if node is None:
        return
    followed = [n for n in (ctx.trigger, *(ctx.joinable if ctx.aggregated else ())) if n]
    if not any(n in ctx.ttl_tables for n in followed):
        names = ", ".join(f"`{n}`" for n in followed) or "no table it reads"
        ctx.report("PF418", f"FOLLOW_TTL true does nothing here: no ENGINE_TTL on {names}.",
                   "Add ENGINE_TTL to the datasource whose expired rows the view must forget, or remove FOLLOW_TTL.",
                   ctx.output, severity="warning", location=node.where("FOLLOW_TTL"))
    elif ctx.target_backfill_skip:
        ctx.report("PF418", f"FOLLOW_TTL true with BACKFILL skip on `{ctx.target}`: the TTL expires the oldest rows "
                   "first, which this view never counted, and taking them out would take them from the rows it did "
                   "count.", f"Fill its history first (`pipeframe populate {ctx.target}`), or remove BACKFILL skip or "
                   "FOLLOW_TTL.", ctx.output, severity="warning", location=node.where("FOLLOW_TTL"))


def fold_projection(trees: list[NodeTree]) -> tuple[list[NodeTree], str | None]:
    """A materialized node that only picks columns of the node before it, which aggregates (or is SELECT DISTINCT):
    `NODE agg: SELECT day, count() AS n FROM src GROUP BY day` then `NODE mv: SELECT day, n AS hits FROM agg` is the
    one aggregating SELECT `SELECT day, count() AS hits FROM src GROUP BY day`, whose states the view keeps. Anything
    more in the last node (a filter, a join, an aggregate of its own) stays as written, for the rules to judge."""
    if len(trees) < 2:
        return trees, None
    *rest, inner, outer = trees
    i, o = inner.tree, outer.tree
    if not isinstance(i, exp.Select) or not isinstance(o, exp.Select) or aggregates_in(o):
        return trees, None
    if not (aggregates_in(i) or i.args.get("group") is not None or i.args.get("distinct")):
        return trees, None
    if any(o.args.get(k) for k in ("where", "group", "having", "distinct", "joins", "laterals", "with_", "limit",
                                    "order", "qualify")):
        return trees, None
    source = o.args.get("from_")
    table = source.this if source is not None else None
    if not isinstance(table, exp.Table) or table.name != inner.node.name or table.args.get("db"):
        return trees, None
    if any(isinstance(p, exp.Star) or (isinstance(p, exp.Column) and p.is_star) for p in i.expressions):
        return trees, None
    produced = {p.alias_or_name: p.this if isinstance(p, exp.Alias) else p for p in i.expressions}
    projections = []
    for projection in o.expressions:
        if isinstance(projection, exp.Star) or (isinstance(projection, exp.Column) and projection.is_star):
            projections.extend(p.copy() for p in i.expressions)
            continue
        value = projection.copy()
        name = projection.alias_or_name
        for column in list(value.find_all(exp.Column)):
            if column.name not in produced or (column.table and column.table != table.alias_or_name):
                return trees, None
            replacement = produced[column.name].copy()
            if column is value:
                value = replacement
            else:
                column.replace(replacement)
        body = value.this if isinstance(value, exp.Alias) else value
        projections.append(exp.alias_(body, name, quoted=True))
    merged = i.copy()
    merged.set("expressions", projections)
    from pipeframe.compiler.sql import to_sql

    text = to_sql(merged)  # what a parse again (the check cache keeps text) reads back as this tree
    folded = NodeTree(outer.node, merged, text, inner.base, inner.json_columns | outer.json_columns, inner.types)
    what = "aggregates" if aggregates_in(i) or i.args.get("group") is not None else "is SELECT DISTINCT"
    return [*rest, folded], (f"node `{inner.node.name}` {what} and `{outer.node.name}` picks its columns: one "
                             "SELECT, whose states the view keeps")


RULES: tuple[Callable[[ViewContext], None], ...] = (
    window_functions, order_by, limit_offset, having, distinct, non_deterministic, nested_aggregates,
    mergeable_aggregates, reads_own_target, final_reads, outer_joins, self_join, cascade_states, join_triggers,
    reads_pipe, follow_ttl,
)


def check_view(ctx: ViewContext) -> list[Diagnostic]:
    """Run every rule; returns the problems found (errors reject the view, warnings do not)."""
    for rule in RULES:
        rule(ctx)
    return ctx.problems
