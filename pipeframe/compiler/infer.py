"""Light, JVM-free type inference for SELECT outputs: enough to generate and check materialized targets.

Unknown expressions infer as None ("Spark decides at deploy"); a check is skipped rather than guessed.
"""

from __future__ import annotations

from collections.abc import Mapping
from collections.abc import Set as AbstractSet
from dataclasses import dataclass

from sqlglot import exp

from pipeframe.compiler.aggregates import BY_PLAIN_NAME, returns_array, state_type_for
from pipeframe.compiler.dialect import DIALECT
from pipeframe.compiler.functions import call_of, combinator
from pipeframe.compiler.types import from_sqlglot
from pipeframe.datafiles.types import TypeProblem, normalize_type

Scope = Mapping[str, str | None]  # column name (and `alias.column`) -> Spark type

INTEGRAL = ("TINYINT", "SMALLINT", "INT", "BIGINT")
NUMERIC_ORDER = ("TINYINT", "SMALLINT", "INT", "BIGINT", "FLOAT", "DOUBLE")
FUNCTION_TYPES = {
    "date_trunc": "TIMESTAMP", "to_timestamp": "TIMESTAMP", "timestamp_seconds": "TIMESTAMP",
    "from_unixtime": "STRING", "to_date": "DATE", "date": "DATE", "date_add": "DATE", "date_sub": "DATE",
    "current_date": "DATE", "year": "INT", "month": "INT", "day": "INT", "dayofmonth": "INT", "hour": "INT",
    "minute": "INT", "second": "INT", "dayofweek": "INT", "weekofyear": "INT", "quarter": "INT",
    "datediff": "INT", "length": "INT", "char_length": "INT", "size": "INT", "lower": "STRING",
    "upper": "STRING", "concat": "STRING", "concat_ws": "STRING", "substring": "STRING", "substr": "STRING",
    "trim": "STRING", "ltrim": "STRING", "rtrim": "STRING", "regexp_extract": "STRING", "replace": "STRING",
    "regexp_replace": "STRING", "date_format": "STRING", "split_part": "STRING", "md5": "STRING",
    "sha2": "STRING", "initcap": "STRING", "lpad": "STRING", "rpad": "STRING", "get_json_object": "STRING",
    "window": "STRUCT<start: TIMESTAMP, end: TIMESTAMP>", "count": "BIGINT", "count_if": "BIGINT",
    "approx_count_distinct": "BIGINT", "avg": "DOUBLE", "mean": "DOUBLE", "stddev": "DOUBLE",
    "stddev_samp": "DOUBLE", "stddev_pop": "DOUBLE", "std": "DOUBLE", "variance": "DOUBLE", "var_samp": "DOUBLE",
    "var_pop": "DOUBLE", "percentile_approx": "DOUBLE", "approx_percentile": "DOUBLE", "unix_timestamp": "BIGINT",
    "floor": "BIGINT", "ceil": "BIGINT", "ceiling": "BIGINT", "sqrt": "DOUBLE", "ln": "DOUBLE", "log": "DOUBLE",
    "exp": "DOUBLE", "pow": "DOUBLE", "power": "DOUBLE", "hash": "INT", "xxhash64": "BIGINT",
}
SAME_AS_FIRST_ARG = {"min", "max", "abs", "coalesce", "nvl", "ifnull", "greatest", "least", "first", "last",
                     "any_value", "max_by", "min_by", "round", "bround", "nullif", "distinct"}


def widen(a: str | None, b: str | None) -> str | None:
    if a is None or b is None:
        return a or b
    if a == b:
        return a
    if a in NUMERIC_ORDER and b in NUMERIC_ORDER:
        return max(a, b, key=NUMERIC_ORDER.index)
    if {a, b} == {"DATE", "TIMESTAMP"}:
        return "TIMESTAMP"
    return None


def _cast_type(node: exp.Cast) -> str | None:
    try:
        return normalize_type(node.to.sql(dialect=DIALECT))
    except TypeProblem:
        return from_sqlglot(node.to)


def infer(node: exp.Expression, scope: Scope) -> str | None:
    """The Spark type of ``node`` evaluated over ``scope``, or None when unsure."""
    if isinstance(node, (exp.Alias, exp.Paren)):
        return infer(node.this, scope)
    if isinstance(node, exp.Column):
        qualified = f"{node.table}.{node.name}" if node.table else node.name
        return scope.get(qualified, scope.get(node.name))
    if isinstance(node, (exp.Cast, exp.TryCast)):
        return _cast_type(node)
    if isinstance(node, exp.Literal):
        if node.is_string:
            return "STRING"
        return "INT" if node.this.lstrip("-").isdigit() and abs(int(node.this)) < 2**31 else (
            "BIGINT" if node.this.lstrip("-").isdigit() else "DOUBLE")
    if isinstance(node, (exp.Boolean, exp.Predicate, exp.Not, exp.And, exp.Or)):
        return "BOOLEAN"
    if isinstance(node, exp.Null):
        return None
    if isinstance(node, exp.Div):
        return "DOUBLE"
    if isinstance(node, (exp.Add, exp.Sub, exp.Mul, exp.Mod)):
        left, right = infer(node.left, scope), infer(node.right, scope)
        if isinstance(node, (exp.Add, exp.Sub)) and left in ("DATE", "TIMESTAMP"):
            return left
        return widen(left, right) if left in NUMERIC_ORDER and right in NUMERIC_ORDER else None
    if isinstance(node, exp.Case):
        result = None
        for branch in node.args.get("ifs") or []:
            result = widen(result, infer(branch.args["true"], scope))
        if node.args.get("default") is not None:
            result = widen(result, infer(node.args["default"], scope))
        return result
    if isinstance(node, exp.If):
        return widen(infer(node.args["true"], scope),
                     infer(node.args["false"], scope) if node.args.get("false") is not None else None)
    if isinstance(node, exp.Func):
        return _function_type(node, scope)
    return None


def _function_type(node: exp.Func, scope: Scope) -> str | None:
    call = call_of(node)
    if call is None:
        return None
    arg_types = tuple(infer(a, scope) for a in call.args)
    comb = combinator(call)
    quantile = call.name in ("percentile_approx", "approx_percentile") or (
        comb is not None and comb[0].kind == "quantiles" and comb[1] in ("Merge", "Plain", "If"))
    if quantile and returns_array([a.sql(dialect=DIALECT) for a in call.args[1:]]):
        return "ARRAY<DOUBLE>"
    if comb is not None:
        state, form = comb
        if form in ("State", "StateIf", "MergeState"):
            return state_type_for(state, arg_types) if form != "MergeState" else arg_types[0] if arg_types else None
        return FUNCTION_TYPES.get(next(iter(state.plain_names), state.kind), None) if state.kind not in (
            "sum", "min", "max", "any") else (arg_types[0] if state.kind != "sum" else state_type_for(state, arg_types))
    if call.name == "sum":
        return BY_PLAIN_NAME["sum"].state_type(arg_types) if arg_types else None
    if call.name in SAME_AS_FIRST_ARG:
        return arg_types[0] if arg_types else None
    if call.name == "collect_set":
        return f"ARRAY<{arg_types[0]}>" if arg_types and arg_types[0] else None
    return FUNCTION_TYPES.get(call.name)


# Functions whose result is never NULL when every argument is never NULL (under Spark's ANSI mode, the default:
# an overflow fails rather than returning NULL). Anything not listed may return NULL (`x IN (1, NULL)` does; an
# array predicate such as array_contains does when the array holds a NULL).
_NULL_FREE = (exp.Abs, exp.Neg, exp.Floor, exp.Ceil, exp.Round, exp.Greatest, exp.Least, exp.Add, exp.Sub, exp.Mul,
              exp.EQ, exp.NEQ, exp.GT, exp.GTE, exp.LT, exp.LTE, exp.Like, exp.ILike, exp.Between, exp.In, exp.Not,
              exp.And, exp.Or)


@dataclass(frozen=True)
class Nulls:
    """What `never_null` knows of the SELECT an expression is in: the `source.column` names (base tables and earlier
    nodes) that hold no NULL, the SELECT's sources by alias (None: a source it cannot name, such as a subquery, a
    CTE or a lateral view: nothing is known), and the sources a LEFT JOIN pads with NULLs (None: any may be)."""

    not_null: AbstractSet[str] = frozenset()
    sources: Mapping[str, str] | None = None
    padded: AbstractSet[str] | None = None

    def column(self, node: exp.Column, scope: Scope) -> bool:
        if self.sources is None or self.padded is None:
            return False
        if node.table:
            source = self.sources.get(node.table)
        else:  # a bare name: the one source that has that column, if only one has
            having = {s for s in self.sources.values() if f"{s}.{node.name}" in scope}
            source = next(iter(having)) if len(having) == 1 else None
        return source is not None and source not in self.padded and f"{source}.{node.name}" in self.not_null


def sources_of(select: exp.Expression) -> dict[str, str] | None:
    """A SELECT's sources by alias (and by name): base tables and earlier nodes, each read as a plain table; None when
    it reads anything else (a subquery, a CTE, a lateral view or array join, a set operation)."""
    if not isinstance(select, exp.Select) or select.args.get("with") or select.args.get("laterals"):
        return None
    from_ = select.args.get("from_")
    read = [from_.this] if from_ is not None else []
    read += [join.this for join in select.args.get("joins") or []]
    if not all(isinstance(t, exp.Table) and not isinstance(t.this, exp.Func) for t in read):
        return None
    return {**{t.name: t.name for t in read}, **{t.alias_or_name: t.name for t in read}}


def padded_of(select: exp.Expression) -> set[str] | None:
    """The sources a LEFT JOIN of `select` pads with NULLs for unmatched rows; None (any may be) when a join of
    another side may."""
    padded: set[str] = set()
    for join in select.args.get("joins") or []:
        side = (join.side or "").upper()
        if side == "LEFT" and isinstance(join.this, exp.Table) and join.kind in ("", "OUTER"):
            padded.add(join.this.name)
        elif side:
            return None
    return padded


def nulls_of(select: exp.Expression, not_null: AbstractSet[str]) -> Nulls:
    """What `never_null` knows of the expressions of `select`, given the `source.column` names that hold no NULL."""
    return Nulls(not_null, sources_of(select), padded_of(select))


def never_null(node: exp.Expression, scope: Scope, nulls: Nulls) -> bool:
    """Whether `node` is never NULL over its SELECT's rows (`nulls`). Unsure is False: a caller treats the value as
    possibly NULL (a sum over it cannot be subtracted exactly, see ViewPlan.negate_sql)."""
    if isinstance(node, (exp.Alias, exp.Paren)):
        return never_null(node.this, scope, nulls)
    if isinstance(node, exp.Column):
        return nulls.column(node, scope)
    if isinstance(node, (exp.Literal, exp.Boolean, exp.Is, exp.NullSafeEQ)):
        return True
    if isinstance(node, exp.Coalesce):
        return any(never_null(a, scope, nulls) for a in (node.this, *node.expressions))
    if isinstance(node, exp.Case):
        default = node.args.get("default")
        return default is not None and never_null(default, scope, nulls) and all(
            never_null(branch.args["true"], scope, nulls) for branch in node.args.get("ifs") or [])
    if isinstance(node, exp.If):
        false = node.args.get("false")
        return false is not None and never_null(node.args["true"], scope, nulls) and never_null(false, scope, nulls)
    if isinstance(node, (exp.Cast, exp.TryCast)):  # a widening cast of a number (a narrowing try_cast may fail)
        source, target = infer(node.this, scope), _cast_type(node)
        order = ("BOOLEAN", *NUMERIC_ORDER)
        return source in order and target in order and order.index(source) <= order.index(target) and \
            never_null(node.this, scope, nulls)
    if isinstance(node, _NULL_FREE):
        return all(never_null(a, scope, nulls) for a in node.iter_expressions() if not isinstance(a, exp.DataType))
    return False
