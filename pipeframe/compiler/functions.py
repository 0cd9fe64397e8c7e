"""How pipeframe reads function calls in a sqlglot tree: their Spark name, their arguments, and whether
they are aggregates, State/Merge combinators or non-deterministic."""

from __future__ import annotations

from dataclasses import dataclass

from sqlglot import exp

from pipeframe.compiler.aggregates import ALL_AGGREGATES, AggregateState, split_clickhouse_name
from pipeframe.compiler.dialect import DIALECT

NON_DETERMINISTIC = {
    "rand", "random", "randn", "uuid", "shuffle", "current_timestamp", "now", "current_date", "curdate",
    "localtimestamp", "current_time", "monotonically_increasing_id", "spark_partition_id", "input_file_name",
    "input_file_block_start", "input_file_block_length", "randstr", "uniform", "current_timezone",
}


@dataclass(frozen=True)
class Call:
    """A function call as pipeframe sees it."""

    node: exp.Expression
    name: str  # Spark spelling, lower case (ClickHouse combinators keep their case in `written`)
    written: str
    args: tuple[exp.Expression, ...]
    distinct: bool = False
    star: bool = False


_NAMES: dict[type, str] = {}


def spark_name(node: exp.Expression) -> str:
    """How Spark spells this call (sqlglot's class names differ, e.g. ApproxDistinct → APPROX_COUNT_DISTINCT)."""
    if isinstance(node, exp.Anonymous):
        return str(node.this)
    cls = type(node)
    name = _NAMES.get(cls)
    if name is None:
        rendered = node.sql(dialect=DIALECT) if isinstance(node, exp.Func) else ""
        head = rendered.split("(", 1)[0].strip()
        name = head if head and " " not in head else (node.sql_name() if isinstance(node, exp.Func) else node.key)
        _NAMES[cls] = name
    return name


def call_of(node: exp.Expression) -> Call | None:
    if not isinstance(node, exp.Func):
        return None
    written = spark_name(node)
    name = written.lower()
    if isinstance(node, exp.Anonymous):
        args = tuple(node.expressions)
    else:
        args = []
        for key in node.arg_types:
            value = node.args.get(key)
            if isinstance(value, list):
                args.extend(v for v in value if isinstance(v, exp.Expression))
            elif isinstance(value, exp.Expression):
                args.append(value)
        args = tuple(args)
    distinct = False
    if args and isinstance(args[0], exp.Distinct):
        distinct = True
        args = tuple(args[0].expressions) + args[1:]
    star = bool(args) and isinstance(args[0], exp.Star)
    if star:
        args = args[1:]
    return Call(node, name, written, args, distinct, star)


def is_aggregate(node: exp.Expression) -> bool:
    if isinstance(node, exp.AggFunc):
        return True
    if isinstance(node, exp.Anonymous):
        name = str(node.this)
        return name.lower() in ALL_AGGREGATES or split_clickhouse_name(name) is not None
    return False


def combinator(call: Call) -> tuple[AggregateState, str] | None:
    """(state, 'State'|'Merge'|'MergeState'|'If'|'StateIf') for ClickHouse-style names, else None."""
    if not isinstance(call.node, exp.Anonymous):
        return None
    return split_clickhouse_name(call.written)


def aggregates_in(node: exp.Expression) -> list[exp.Expression]:
    """Aggregate calls under ``node`` that are not window functions or inside subqueries."""
    found = []
    for child in node.walk(prune=lambda n: isinstance(n, (exp.Subquery, exp.Window)) and n is not node):
        if is_aggregate(child) and not isinstance(child.parent, exp.Window):
            found.append(child)
    return found
