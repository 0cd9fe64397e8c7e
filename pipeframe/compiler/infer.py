"""Light, JVM-free type inference for SELECT outputs: enough to generate and check materialized targets.

Unknown expressions infer as None ("Spark decides at deploy"); a check is skipped rather than guessed.
"""

from __future__ import annotations

from collections.abc import Mapping
from collections.abc import Set as AbstractSet

from sqlglot import exp

from pipeframe.compiler.aggregates import BY_PLAIN_NAME, returns_array, state_type_for
from pipeframe.compiler.dialect import DIALECT
from pipeframe.compiler.functions import call_of, combinator
from pipeframe.compiler.types import from_sqlglot
from pipeframe.datafiles.types import TypeProblem, normalize_type

Scope = Mapping[str, str | None]  # column name (and `alias.column`) -> Spark type
NotNull = AbstractSet[str]  # the names of a scope (as Scope spells them) whose values are never NULL

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
# an overflow fails rather than returning NULL). Anything not listed may return NULL.
_NULL_FREE = (exp.Abs, exp.Neg, exp.Floor, exp.Ceil, exp.Round, exp.Greatest, exp.Least, exp.Add, exp.Sub, exp.Mul,
              exp.Predicate, exp.Not, exp.And, exp.Or)


def never_null(node: exp.Expression, scope: Scope, not_null: NotNull) -> bool:
    """Whether `node` is never NULL over rows whose `not_null` columns hold no NULL. Unsure is False: a caller
    treats the value as possibly NULL (a sum over it cannot be subtracted exactly, see ViewPlan.negate_sql)."""
    if isinstance(node, (exp.Alias, exp.Paren)):
        return never_null(node.this, scope, not_null)
    if isinstance(node, exp.Column):  # looked up as `infer` does: qualified when the scope knows that name
        qualified = f"{node.table}.{node.name}" if node.table else node.name
        return (qualified if qualified in scope else node.name) in not_null
    if isinstance(node, (exp.Literal, exp.Boolean)):
        return True
    if isinstance(node, exp.Coalesce):
        return any(never_null(a, scope, not_null) for a in (node.this, *node.expressions))
    if isinstance(node, exp.Case):
        default = node.args.get("default")
        return default is not None and never_null(default, scope, not_null) and all(
            never_null(branch.args["true"], scope, not_null) for branch in node.args.get("ifs") or [])
    if isinstance(node, exp.If):
        false = node.args.get("false")
        return false is not None and never_null(node.args["true"], scope, not_null) and \
            never_null(false, scope, not_null)
    if isinstance(node, (exp.Cast, exp.TryCast)):  # a widening cast of a number (a narrowing try_cast may fail)
        source, target = infer(node.this, scope), _cast_type(node)
        order = ("BOOLEAN", *NUMERIC_ORDER)
        return source in order and target in order and order.index(source) <= order.index(target) and \
            never_null(node.this, scope, not_null)
    if isinstance(node, _NULL_FREE):
        return all(never_null(a, scope, not_null) for a in node.iter_expressions() if not isinstance(a, exp.DataType))
    return False
