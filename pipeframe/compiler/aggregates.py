"""The State/Merge catalog: for each mergeable aggregate, how a batch becomes a state column, how state
rows combine (compaction, cascades) and how they finalize on read. One entry per aggregate; add one here.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from pipeframe.datafiles.types import normalize_type

# Templates use {x} (the argument SQL), {y} (second argument), {c} (the state column) and {p} (parameters).


@dataclass(frozen=True)
class AggregateState:
    """One mergeable aggregate. ``state`` runs over new rows; ``combine`` merges state rows into one state;
    ``finalize`` turns state rows into the user-visible value."""

    kind: str
    plain_names: tuple[str, ...]  # Spark aggregates converted automatically, lower case
    clickhouse_names: tuple[str, ...]  # base names for xState / xMerge / xMergeState / xIf forms
    state: str
    combine: str
    finalize: str
    state_type: Callable[[tuple[str | None, ...]], str]
    exact: bool = True
    arity: int = 1
    parametric: bool = False  # takes parameters, e.g. quantiles(0.5, 0.9)(x) / percentile_approx(x, 0.5)
    # The aggregate a downstream (cascading) view may apply to this state's *column* to roll it up.
    rollup: tuple[str, ...] = ()
    note: str = ""
    # The plain (non-state) aggregate for ClickHouse spellings outside a materialized pipe, e.g. uniqExact(x).
    plain: str = ""
    # A state that, merged with this one, takes its rows back out (exact); empty when rows cannot be subtracted
    # (min, max, sketches, sets): a view holding such a state recomputes the groups a delete touches.
    negate: str = ""

    def negate_sql(self, column: str) -> str:
        return self.negate.format(c=column)

    def state_sql(self, args: list[str], params: list[str]) -> str:
        return self.state.format(x=args[0] if args else "*", y=args[1] if len(args) > 1 else "NULL",
                                 p=", ".join(params))

    def combine_sql(self, column: str) -> str:
        return self.combine.format(c=column)

    def finalize_sql(self, column: str, params: list[str]) -> str:
        return self.finalize.format(c=column, p=_param(params))

    def plain_sql(self, args: list[str], params: list[str]) -> str:
        if self.plain:
            return self.plain.format(x=args[0] if args else "*")
        return f"{self.plain_names[0]}({', '.join(args + ([_param(params)] if params else []))})"


def returns_array(params: list[str] | tuple[str, ...]) -> bool:
    """Whether a quantile finalized with these parameters is an array (several, or one written as an array: ClickHouse's
    `quantiles(0.9)(x)` is an array of one value, `quantile(0.9)(x)` a number)."""
    return len(params) > 1 or (len(params) == 1 and params[0].replace(" ", "").upper().startswith("ARRAY("))


def _param(params: list[str]) -> str:
    """One parameter as itself, several as an array (quantiles(0.5, 0.9) → array(0.5, 0.9))."""
    return params[0] if len(params) == 1 else f"array({', '.join(params)})"


def _same(types: tuple[str | None, ...]) -> str:
    return types[0] or "DOUBLE"


def _sum_type(types: tuple[str | None, ...]) -> str:
    t = types[0] or "DOUBLE"
    if t in ("TINYINT", "SMALLINT", "INT", "BIGINT"):
        return "BIGINT"
    if t.startswith("DECIMAL("):
        precision, scale = (int(v) for v in t[8:-1].split(","))
        return f"DECIMAL({min(38, precision + 10)},{scale})"
    return "DOUBLE"


def _const(type_: str) -> Callable[[tuple[str | None, ...]], str]:
    return lambda _types: type_


def _set_type(types: tuple[str | None, ...]) -> str:
    return f"ARRAY<{types[0] or 'STRING'}>"


def _by_type(types: tuple[str | None, ...]) -> str:
    value, order = (types + (None, None))[:2]
    return f"STRUCT<t: {order or 'TIMESTAMP'}, v: {value or 'STRING'}>"


HLL = "hll_sketch_estimate(hll_union_agg({c}, true))"
# DataSketches' HLL ignores an empty string, which ClickHouse's uniq counts as a value: it is sketched as "\\u0000".
UNIQ_STATE = "hll_sketch_agg(IF(CAST({x} AS STRING) = '', '\\u0000', CAST({x} AS STRING)))"
KLL_MERGE = "kll_merge_agg_double({c})"
VARIANCE_STATE = ("named_struct('n', count({x}), 'mean', avg(CAST({x} AS DOUBLE)), "
                  "'m2', var_pop(CAST({x} AS DOUBLE)) * count({x}))")
# Chan's parallel combination, written as one aggregate: M2 = Σm2 + Σn·mean² − (Σn·mean)²/Σn. Its rounding
# error is about 1e-16·Σn·mean², so anything below 1e-12·Σn·mean² is cancellation noise (a constant group)
# and reads as 0: never a tiny negative M2 (NaN from sqrt) nor a spurious positive spread.
_M2 = ("(sum({c}.m2) + sum({c}.n * {c}.mean * {c}.mean) "
       "- try_divide(power(sum({c}.n * {c}.mean), 2), sum({c}.n)))")
M2 = (f"CASE WHEN {_M2} > 1e-12 * sum({{c}}.n * {{c}}.mean * {{c}}.mean) THEN {_M2} "
      f"WHEN {_M2} IS NOT NULL THEN 0D END")  # NULL (no values) stays NULL
VARIANCE_COMBINE = ("named_struct('n', sum({c}.n), 'mean', try_divide(sum({c}.n * {c}.mean), sum({c}.n)), "
                    f"'m2', {M2})")
VAR_POP = f"try_divide({M2}, sum({{c}}.n))"
VAR_SAMP = f"try_divide({M2}, sum({{c}}.n) - 1)"
VARIANCE_TYPE = _const("STRUCT<n: BIGINT, mean: DOUBLE, m2: DOUBLE>")
# Chan's combination only needs Σn, Σn·mean and Σ(m2 + n·mean²) = Σx²: negating n and m2 subtracts the rows exactly.
VARIANCE_NEGATE = "named_struct('n', -{c}.n, 'mean', {c}.mean, 'm2', -{c}.m2)"
NEGATE = "-{c}"

STATES: tuple[AggregateState, ...] = (
    AggregateState("count", ("count",), ("count",), "count({x})", "sum({c})", "sum({c})", _const("BIGINT"),
                   arity=0, rollup=("sum",), negate=NEGATE),
    AggregateState("count_if", ("count_if",), ("countIf",), "count_if({x})", "sum({c})", "sum({c})", _const("BIGINT"),
                   rollup=("sum",), negate=NEGATE),
    AggregateState("sum", ("sum",), ("sum",), "sum({x})", "sum({c})", "sum({c})", _sum_type, rollup=("sum",),
                   negate=NEGATE),
    AggregateState("min", ("min",), ("min",), "min({x})", "min({c})", "min({c})", _same, rollup=("min",)),
    AggregateState("max", ("max",), ("max",), "max({x})", "max({c})", "max({c})", _same, rollup=("max",)),
    # ClickHouse's any(x) returns some non-NULL value of the group; the state keeps the least one (min semantics),
    # so a view answers the same whatever blocks its rows arrived in. anyLast/anyHeavy have no such state.
    AggregateState("any", ("any_value",), ("any",), "min({x})", "min({c})", "min({c})", _same, rollup=("min",),
                   note="keeps the least non-NULL value, so the answer does not depend on block order"),
    AggregateState("avg", ("avg", "mean"), ("avg",),
                   "named_struct('sum', sum(CAST({x} AS DOUBLE)), 'count', count({x}))",
                   "named_struct('sum', sum({c}.sum), 'count', sum({c}.count))",
                   "try_divide(sum({c}.sum), sum({c}.count))",
                   _const("STRUCT<sum: DOUBLE, count: BIGINT>"),
                   negate="named_struct('sum', -{c}.sum, 'count', -{c}.count)"),
    AggregateState("uniq", ("approx_count_distinct",), ("uniq", "uniqHLL12", "uniqCombined", "uniqCombined64"),
                   UNIQ_STATE, "hll_union_agg({c}, true)", HLL, _const("BINARY"),
                   exact=False, note="HLL sketch (lgConfigK 12): about 1.6% relative standard error"),
    # countDistinct is uniqExact in ClickHouse (count_distinct_implementation's default).
    AggregateState("uniq_exact", (), ("uniqExact", "countDistinct"), "collect_set({x})",
                   "array_distinct(flatten(collect_list({c})))", "size(array_distinct(flatten(collect_list({c}))))",
                   _set_type, plain="size(collect_set({x}))"),
    AggregateState("quantiles", ("percentile_approx", "approx_percentile"),
                   ("quantile", "quantiles", "quantileTDigest", "quantilesTDigest"),
                   "kll_sketch_agg_double(CAST({x} AS DOUBLE))", KLL_MERGE,
                   f"CASE WHEN kll_sketch_get_n_double({KLL_MERGE}) > 0 "  # an empty sketch cannot be queried
                   f"THEN kll_sketch_get_quantile_double({KLL_MERGE}, {{p}}) END", _const("BINARY"),
                   exact=False, parametric=True, note="KLL sketch (k=200): about 1.3% normalized rank error"),
    AggregateState("arg_max", ("max_by",), ("argMax",), "named_struct('t', max({y}), 'v', max_by({x}, {y}))",
                   "named_struct('t', max({c}.t), 'v', max_by({c}.v, {c}.t))", "max_by({c}.v, {c}.t)",
                   _by_type, arity=2),
    AggregateState("arg_min", ("min_by",), ("argMin",), "named_struct('t', min({y}), 'v', min_by({x}, {y}))",
                   "named_struct('t', min({c}.t), 'v', min_by({c}.v, {c}.t))", "min_by({c}.v, {c}.t)",
                   _by_type, arity=2),
    AggregateState("var_samp", ("var_samp", "variance"), ("varSamp", "variance"), VARIANCE_STATE,
                   VARIANCE_COMBINE, VAR_SAMP, VARIANCE_TYPE, negate=VARIANCE_NEGATE),
    AggregateState("var_pop", ("var_pop",), ("varPop",), VARIANCE_STATE, VARIANCE_COMBINE, VAR_POP, VARIANCE_TYPE, negate=VARIANCE_NEGATE),
    AggregateState("stddev_samp", ("stddev", "stddev_samp", "std"), ("stddevSamp", "stddev"), VARIANCE_STATE,
                   VARIANCE_COMBINE, f"sqrt({VAR_SAMP})", VARIANCE_TYPE, negate=VARIANCE_NEGATE),
    AggregateState("stddev_pop", ("stddev_pop",), ("stddevPop",), VARIANCE_STATE, VARIANCE_COMBINE,
                   f"sqrt({VAR_POP})", VARIANCE_TYPE, negate=VARIANCE_NEGATE),
)

BY_KIND = {s.kind: s for s in STATES}
BY_PLAIN_NAME = {name: s for s in STATES for name in s.plain_names}
BY_CLICKHOUSE_NAME = {name.lower(): s for s in STATES for name in s.clickhouse_names}

# Aggregates that have no mergeable state: name -> (why, fix).
NOT_MERGEABLE: dict[str, tuple[str, str]] = {
    "percentile": ("exact percentiles need every row", "use percentile_approx(x, p) (a KLL sketch state)"),
    "percentile_cont": ("exact percentiles need every row", "use percentile_approx(x, p) (a KLL sketch state)"),
    "percentile_disc": ("exact percentiles need every row", "use percentile_approx(x, p) (a KLL sketch state)"),
    "median": ("an exact median needs every row", "use percentile_approx(x, 0.5) (a KLL sketch state)"),
    "mode": ("the mode needs every row", "compute it in an endpoint over the raw datasource"),
    "collect_list": ("collect_list order depends on how rows are split into blocks",
                     "use collect_set (uniqExactState) or compute it in an endpoint"),
    "array_agg": ("array_agg order depends on how rows are split into blocks",
                  "use collect_set (uniqExactState) or compute it in an endpoint"),
    "first": ("first() without an ordering depends on how rows are split into blocks",
              "use min_by(value, ts) or max_by(value, ts)"),
    "first_value": ("first_value() without an ordering depends on block order", "use min_by(value, ts)"),
    "last": ("last() without an ordering depends on how rows are split into blocks", "use max_by(value, ts)"),
    "last_value": ("last_value() without an ordering depends on block order", "use max_by(value, ts)"),
    "string_agg": ("string_agg order depends on block order", "compute it in an endpoint"),
    "listagg": ("listagg order depends on block order", "compute it in an endpoint"),
    "kurtosis": ("kurtosis has no state in pipeframe yet", "compute it in an endpoint over the raw datasource"),
    "skewness": ("skewness has no state in pipeframe yet", "compute it in an endpoint over the raw datasource"),
    "corr": ("corr has no state in pipeframe yet", "compute it in an endpoint over the raw datasource"),
    "covar_pop": ("covar_pop has no state in pipeframe yet", "compute it in an endpoint"),
    "covar_samp": ("covar_samp has no state in pipeframe yet", "compute it in an endpoint"),
}

ALL_AGGREGATES = set(BY_PLAIN_NAME) | set(NOT_MERGEABLE) | {
    "bool_and", "bool_or", "every", "some", "bit_and", "bit_or", "bit_xor", "collect_set", "count_min_sketch",
    "histogram_numeric", "regr_count", "hll_sketch_agg", "hll_union_agg", "kll_sketch_agg_double",
    "kll_merge_agg_double", "kll_sketch_agg_bigint", "kll_sketch_agg_float", "try_sum", "try_avg",
    "approx_top_k",
}


def split_clickhouse_name(name: str) -> tuple[AggregateState, str] | None:
    """`uniqState` → (uniq, 'State'); `sumMergeState` → (sum, 'MergeState'); `countStateIf` → (count, 'StateIf');
    a plain ClickHouse aggregate Spark does not have, `uniqExact` → (uniq_exact, 'Plain')."""
    lowered = name.lower()
    # countIf(c) stays count's If form; countIfState(c) / countIfMerge(s) are count_if's State and Merge.
    if_form = lowered.endswith("if") and lowered[:-2] in BY_CLICKHOUSE_NAME
    if lowered in BY_CLICKHOUSE_NAME and lowered not in ALL_AGGREGATES and not if_form:
        return BY_CLICKHOUSE_NAME[lowered], "Plain"
    # ClickHouse applies combinators right to left: sumIfState(x, c) is the state of sumIf, the same as pipeframe's
    # sumStateIf(x, c); sumIfMerge merges it as sumMerge does.
    for suffix in ("mergestate", "stateif", "state", "merge", "ifstate", "ifmerge", "if"):
        if lowered.endswith(suffix) and lowered[: -len(suffix)] in BY_CLICKHOUSE_NAME:
            canonical = {"mergestate": "MergeState", "stateif": "StateIf", "ifstate": "StateIf", "state": "State",
                         "ifmerge": "Merge", "merge": "Merge", "if": "If"}[suffix]
            return BY_CLICKHOUSE_NAME[lowered[: -len(suffix)]], canonical
    return None


def state_type_for(state: AggregateState, arg_types: tuple[str | None, ...]) -> str:
    return normalize_type(state.state_type(arg_types))


def explicit_column_state(function: str) -> AggregateState | None:
    """The state behind a declared `AggregateFunction(function, T)` column."""
    return BY_CLICKHOUSE_NAME.get(function.lower()) or BY_PLAIN_NAME.get(function.lower())
