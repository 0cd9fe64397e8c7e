"""Spark SQL as DuckDB runs it: a compiled statement (Spark SQL, ANSI mode, as pipeframe's sessions run it) turned
into DuckDB SQL with the same meaning, or refused with the construct that has none.

sqlglot transpiles (`spark` → `duckdb`); what it cannot know is kept here, each a small function over the tree:

* a whitelist: every node must be of a kind whose DuckDB rendering means what Spark means (`ALLOWED`, `FUNCTIONS`,
  `ANONYMOUS`); anything else raises `Untranslatable` naming it, and the caller asks Spark;
* Spark's ANSI semantics: a division or remainder by zero is an error (DIVIDE_BY_ZERO), not a NULL or infinity;
  CAST is strict (it raises where Spark raises);
* Spark's rounding of doubles (HALF_UP on the decimal the double prints as, not on its binary value);
* the aggregates over DataSketches states, read through `serving.sketches` (DuckDB has no Python aggregates);
* Spark's result types: a function whose DuckDB type is not Spark's is cast to Spark's (`result_type`), so a `sum`
  of BIGINT stays BIGINT (not HUGEINT) and `length` is an INT; an answer's `meta` is read off DuckDB's result.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import sqlglot
from sqlglot import exp
from sqlglot.dialects.spark import Spark
from sqlglot.errors import SqlglotError
from sqlglot.optimizer.annotate_types import annotate_types
from sqlglot.optimizer.qualify import qualify
from sqlglot.parsers.databricks import DatabricksParser


class SparkAnsi(Spark):
    """Spark SQL as pipeframe's sessions run it (Spark 4's default ANSI mode): CAST is strict and a division by zero
    is an error. sqlglot's `spark` reads them as TRY_CAST and NULL-safe division (Spark 3's defaults); its
    `databricks` parser is Spark's with a strict CAST (sqlglot's compiled parsers cannot be subclassed here)."""

    SAFE_DIVISION = False
    Parser = DatabricksParser


DIALECT = SparkAnsi()
DUCKDB = sqlglot.Dialect.get_or_raise("duckdb")


class Untranslatable(Exception):
    """A statement DuckDB cannot answer with Spark's meaning: `construct` names what (a function, an operator, a
    type), `reason` says why; the statement runs on Spark."""

    def __init__(self, construct: str, reason: str) -> None:
        super().__init__(f"{construct}: {reason}")
        self.construct = construct
        self.reason = reason


@dataclass(frozen=True)
class Translation:
    """A statement in DuckDB SQL, the tables it reads (by name, as Spark would resolve them), and its output columns
    that are merged sketch states (bytes whose serialization is Spark's own: `serving.sketches`)."""

    sql: str
    reads: tuple[str, ...]
    sketches: tuple[str, ...] = ()


# ------------------------------------------------------------------------------------------- the whitelist
# Nodes whose DuckDB rendering (sqlglot's) keeps Spark's meaning as they are.
ALLOWED: frozenset[type[exp.Expr]] = frozenset({
    exp.Select, exp.From, exp.Where, exp.Group, exp.Having, exp.Order, exp.Ordered, exp.Limit, exp.Offset,
    exp.With, exp.CTE, exp.Subquery, exp.Union, exp.Intersect, exp.Except, exp.Join, exp.TableAlias, exp.Alias,
    exp.Column, exp.Identifier, exp.Star, exp.Table, exp.Paren, exp.Tuple, exp.Distinct, exp.Literal, exp.Null,
    exp.Boolean, exp.DataType, exp.DataTypeParam, exp.Cast, exp.TryCast, exp.Var, exp.Dot,
    exp.EQ, exp.NEQ, exp.GT, exp.GTE, exp.LT, exp.LTE, exp.And, exp.Or, exp.Not, exp.Is, exp.In, exp.Between,
    exp.NullSafeEQ, exp.Add, exp.Sub, exp.Mul, exp.Mod, exp.Neg, exp.Div, exp.IntDiv, exp.Like, exp.ILike,
    exp.Case, exp.If, exp.Coalesce, exp.Nullif, exp.SafeDivide,
    exp.Count, exp.Sum, exp.Avg, exp.Min, exp.Max, exp.CountIf, exp.ArgMax, exp.ArgMin, exp.Stddev, exp.StddevPop,
    exp.StddevSamp, exp.Variance, exp.VariancePop,
    exp.Abs, exp.Sqrt, exp.Pow, exp.Ln, exp.Exp, exp.Sign, exp.Greatest, exp.Least, exp.Floor, exp.Ceil,
    exp.Round,
    exp.Upper, exp.Lower, exp.Length, exp.Concat, exp.ConcatWs, exp.Trim, exp.StartsWith, exp.EndsWith,
    exp.StrPosition, exp.Left, exp.Right, exp.Reverse, exp.Repeat, exp.Substring, exp.Translate,
    exp.TimestampTrunc, exp.DateTrunc, exp.TsOrDsToDate, exp.Year, exp.Month, exp.Day, exp.Hour, exp.Minute,
    exp.Second, exp.Quarter, exp.DayOfMonth, exp.CurrentTimestamp, exp.CurrentDate,
    exp.Array, exp.ArraySize, exp.ArrayContains, exp.Flatten, exp.ArrayDistinct, exp.ArrayAgg,
    exp.Window, exp.WindowSpec, exp.RowNumber, exp.Rank, exp.DenseRank, exp.Filter,
    exp.Anonymous, exp.Interval, exp.RegexpLike, exp.RegexpReplace, exp.DateDiff, exp.AddMonths,
    exp.JSONExtractScalar, exp.JSONPath, exp.JSONPathRoot, exp.JSONPathKey, exp.JSONPathSubscript,
    exp.Bracket,  # a string-keyed map's only (`_bracket`)
})
# Rendered with a transform of this module (see `_transform`).
# Spark functions sqlglot knows by no class: name → how DuckDB calls them.
ANONYMOUS: dict[str, str] = {
    "bround": "round_even", "weekday": "isodow",
    "hll_union_agg": "pf_hll_union", "hll_sketch_estimate": "pf_hll_estimate",
    "kll_merge_agg_double": "pf_kll_merge", "kll_sketch_get_quantile_double": "pf_kll_quantile",
    "kll_sketch_get_n_double": "pf_kll_n",
}
SKETCH_AGGREGATES = frozenset({"hll_union_agg", "kll_merge_agg_double"})
# What only a view's state queries use: the aggregates that build sketches and the struct states (avg, variance).
# Translated for the in-memory store of view maintenance (serving/memstore.py, `translate(..., states=True)`),
# whose states are read back by the same functions; an endpoint never builds a state, so the read path refuses them.
STATE_FUNCTIONS: dict[str, str] = {"hll_sketch_agg": "pf_hll_sketch", "kll_sketch_agg_double": "pf_kll_sketch"}
STATE_NODES: frozenset[type[exp.Expr]] = frozenset({exp.Struct, exp.PropertyEQ})
# Their Spark result types, for type inference (sqlglot knows nothing of them).
ANONYMOUS_TYPES: dict[str, str] = {
    "hll_union_agg": "BINARY", "hll_sketch_estimate": "BIGINT", "kll_merge_agg_double": "BINARY",
    "kll_sketch_get_quantile_double": "DOUBLE", "kll_sketch_get_n_double": "BIGINT",
    "hll_sketch_agg": "BINARY", "kll_sketch_agg_double": "BINARY", "weekday": "INT",
}
# Types a column of a read table may have (and a CAST may name); anything else (INTERVAL, VARIANT, ...) is refused.
TYPES = frozenset({
    exp.DType.BOOLEAN, exp.DType.TINYINT, exp.DType.SMALLINT, exp.DType.INT, exp.DType.BIGINT, exp.DType.FLOAT,
    exp.DType.DOUBLE, exp.DType.DECIMAL, exp.DType.VARCHAR, exp.DType.TEXT, exp.DType.CHAR, exp.DType.BINARY,
    exp.DType.VARBINARY, exp.DType.DATE, exp.DType.TIMESTAMP, exp.DType.TIMESTAMPTZ, exp.DType.TIMESTAMPLTZ,
    exp.DType.TIMESTAMPNTZ, exp.DType.ARRAY, exp.DType.MAP, exp.DType.STRUCT,
})
# Functions Spark types INT where DuckDB gives BIGINT (`result_type`).
_INT_RESULTS: frozenset[type[exp.Expr]] = frozenset({
    exp.Length, exp.Year, exp.Month, exp.Day, exp.Hour, exp.Minute, exp.Second, exp.Quarter, exp.DayOfMonth,
    exp.ArraySize, exp.RowNumber, exp.Rank, exp.DenseRank, exp.DateDiff,
})
# Interval units whose arithmetic on an instant agrees (in a UTC session) and how DuckDB spells them.
_INTERVAL_UNITS = {"YEAR", "YEARS", "MONTH", "MONTHS", "WEEK", "WEEKS", "DAY", "DAYS", "HOUR", "HOURS", "MINUTE",
                   "MINUTES", "SECOND", "SECONDS"}
# A regular expression both Java (Spark) and RE2 (DuckDB) read alike: literal characters, escaped punctuation,
# classes of literal characters and ranges, \d and \w, anchors, groups, alternation and quantifiers. `.`, \s, \b,
# Unicode classes, flags, lookarounds and back references differ between the two (or only one has them).
_PORTABLE_REGEX = re.compile(r"(?:[A-Za-z0-9_ ,:;!@#%&=<>'/~\-]|\\[.^$|?*+()\[\]{}/\\dw-]|"
                             r"\[\^?(?:[A-Za-z0-9_ .,:;!@#%&=<>'/~+*?(){}|$-]|\\[\\\]\[^dw-])+\]|"
                             r"[\^$|()]|[?*+]|\{\d+(?:,\d*)?\})*")

DIVIDE_BY_ZERO = "[DIVIDE_BY_ZERO] Division by zero. Use `try_divide` to tolerate divisor being 0 and return NULL"
# Spark rounds a double as the decimal it prints as (Scala's BigDecimal(double) reads Double.toString): 2.675 → 2.68.
# DuckDB's shortest round-trip text is that decimal; DECIMAL(38, 18) holds it below 1e20, beyond which doubles have no
# fraction digits left to round. Both round half away from zero (HALF_UP).
_ROUND_DOUBLE = ("CASE WHEN isfinite({x}) AND abs({x}) < 1e20 THEN CAST(round(CAST(CAST({x} AS VARCHAR) AS "
                 "DECIMAL(38, 18)), {d}) AS DOUBLE) ELSE {x} END")


def parse(spark_sql: str) -> exp.Query:
    """A statement as Spark reads it; Untranslatable when sqlglot cannot parse it (Spark may)."""
    try:
        tree = sqlglot.parse_one(spark_sql, dialect=DIALECT)
    except SqlglotError as exc:
        raise Untranslatable("the statement", f"sqlglot cannot parse it ({str(exc).splitlines()[0][:120]})") from None
    if not isinstance(tree, exp.Query):
        raise Untranslatable(type(tree).__name__.upper(), "only queries are read this way")
    return tree


# A string literal of a statement as pipeframe writes Spark SQL (a backslash escapes), or an identifier in backticks
# (skipped: what it holds is no literal).
_STRINGS = re.compile(r"`(?:[^`]|``)*`|'(?:[^'\\]|\\.)*'")
# Where a literal's value may change without changing the translation: a date or a time cast in a comparison (what a
# Date or DateTime parameter renders to). `_cast` decides by the literal's form alone, which `Shape.key` holds.
_COMPARISONS = (exp.EQ, exp.NEQ, exp.GT, exp.GTE, exp.LT, exp.LTE, exp.Between)


@dataclass(frozen=True)
class Shape:
    """A statement with its string literals taken out: `key` is the statement with each one replaced by the forms of
    `_LITERAL_FORMS` its value has (statements of one key differ only in those values); `literals` are their texts
    and `starts` where each begins in the statement."""

    key: str
    literals: tuple[str, ...]
    starts: tuple[int, ...]

    def parameters(self, tree: exp.Query) -> dict[int, str]:
        """Which of the literals a translation of `tree` (this statement, parsed) may take as DuckDB parameters:
        where each starts → its parameter's name."""
        wanted = dict(zip(self.starts, self.literals, strict=True))
        chosen = sorted(node.meta["start"] for node in tree.find_all(exp.Literal)
                        if node.is_string and wanted.get(node.meta.get("start")) == node.name
                        and isinstance(node.parent, exp.Cast)
                        and node.parent.to.is_type(exp.DType.DATE, *_TIMES)
                        and isinstance(node.parent.parent, _COMPARISONS))
        return {start: f"pf{i}" for i, start in enumerate(chosen)}


def shape(spark_sql: str) -> Shape:
    """The shape of a statement (a few microseconds: a regular expression, not a parse)."""
    parts, literals, starts, at = [], [], [], 0
    for match in _STRINGS.finditer(spark_sql):
        if match.group().startswith("`"):
            continue
        text = match.group()[1:-1]
        forms = "".join("1" if form.fullmatch(text) else "0" for form in _LITERAL_FORMS.values())
        parts += [spark_sql[at:match.start()], f"'\x00{forms}'"]
        literals.append(text)
        starts.append(match.start())
        at = match.end()
    parts.append(spark_sql[at:])
    return Shape("".join(parts), tuple(literals), tuple(starts))


def reads(tree: exp.Query) -> tuple[str, ...]:
    """The tables a statement reads by name (its CTEs left out), each once, in order of appearance."""
    ctes = {cte.alias_or_name.lower() for cte in tree.find_all(exp.CTE)}
    found: dict[str, None] = {}
    for table in tree.find_all(exp.Table):
        if table.args.get("db") or table.args.get("catalog"):
            raise Untranslatable(table.sql(dialect=DIALECT), "a qualified table name")
        if not isinstance(table.this, exp.Identifier):
            raise Untranslatable(table.sql(dialect=DIALECT), "a table read through a function")
        if table.name.lower() not in ctes:
            found[table.name] = None
    return tuple(found)


def translate(tree: exp.Query, schema: Mapping[str, Mapping[str, str]],
              renames: Mapping[str, str] | None = None, parameters: Mapping[int, str] | None = None,
              states: bool = False, named: bool = False) -> Translation:
    """`tree` (from `parse`) in DuckDB SQL. `schema`: every table it reads → its columns' Spark types, in order;
    `renames`: tables to read under another name (a view's `{table}`); `parameters`: string literals (by where they
    start in the statement, as `Shape.parameters` chose them) written as DuckDB parameters `$name` instead (a
    ValueError when one is not found in the translation as it was written); `states`: a view's state query, whose
    sketch-building aggregates and structs are translated too (`STATE_FUNCTIONS`); `named`: its columns answer with
    the names Spark gives them (`output_names`), as an endpoint's and a query's must."""
    tree = tree.copy()
    _check(tree, states)
    names = output_names(tree, schema) if named else None
    try:
        typed = annotate_types(qualify(tree, schema=dict(schema), dialect=DIALECT, quote_identifiers=False,
                                       validate_qualify_columns=False), schema=dict(schema), dialect=DIALECT,
                               expression_metadata=_METADATA)
    except SqlglotError as exc:
        raise Untranslatable("the statement", f"its names cannot be resolved ({str(exc).splitlines()[0][:120]})") \
            from None
    sketches = tuple(select.alias_or_name for select in typed.selects
                     if isinstance(select.unalias(), exp.Anonymous) and select.unalias().name.lower() in
                     SKETCH_AGGREGATES)
    duck = _rewrite(typed)
    if names is not None:
        _rename(duck, names)
    for table in duck.find_all(exp.Table):
        if renames and table.name in renames:
            table.set("this", exp.to_identifier(renames[table.name], quoted=True))
    if parameters:
        found = [node for node in duck.find_all(exp.Literal) if node.is_string and node.meta.get("start") in parameters
                 and isinstance(node.parent, exp.Cast)]
        if sorted(node.meta["start"] for node in found) != sorted(parameters):
            raise ValueError("a parameter's literal is not in the translation as written")
        for node in found:
            node.replace(exp.Placeholder(this=parameters[node.meta["start"]]))
    return Translation(duck.sql(dialect=DUCKDB), reads(tree), sketches)


def output_names(tree: exp.Query, schema: Mapping[str, Mapping[str, str]]) -> list[str]:
    """The names Spark gives a statement's columns: an alias and a column as written (`SELECT ORDERID` answers
    `ORDERID`), a star as the table (or the CTE, the subquery) it expands names them, in their order, an aggregate of
    a column as Spark names it (`count(1)`). Another column Spark names after its expression (`sum((n + 1))`), a star
    over a generator or a join with USING or NATURAL, are refused: DuckDB would name them otherwise."""
    return _names(tree, schema, {})


def _names(query: exp.Expr, schema: Mapping[str, Mapping[str, str]], ctes: Mapping[str, exp.Expr]) -> list[str]:
    while isinstance(query, exp.Subquery | exp.Paren):
        query = query.this
    with_ = query.args.get("with_")
    if with_ is not None:
        ctes = {**ctes, **{cte.alias_or_name.lower(): cte.this for cte in with_.expressions}}
    if isinstance(query, exp.SetOperation):
        return _names(query.left, schema, ctes)  # a union's columns are named by its first branch
    if not isinstance(query, exp.Select):
        raise Untranslatable(type(query).__name__, "its columns' names are not known")
    names: list[str] = []
    for column in query.expressions:
        if isinstance(column, exp.Alias):
            names.append(column.alias)
        elif isinstance(column, exp.Star) or isinstance(column, exp.Column) and isinstance(column.this, exp.Star):
            names += _star(query, column.table if isinstance(column, exp.Column) else "", schema, ctes)
        elif isinstance(column, exp.Column):
            names.append(column.name)
        else:
            names.append(_auto_name(column))
    return names


_NAMED_AGGREGATES = {exp.Count: "count", exp.Sum: "sum", exp.Avg: "avg", exp.Min: "min", exp.Max: "max"}


def _auto_name(column: exp.Expr) -> str:
    """The name Spark gives an aggregate of a column written without an alias (`count(1)`, `max(qty)`,
    `count(DISTINCT s)`, the column as written); other expressions are refused."""
    name, argument = _NAMED_AGGREGATES.get(type(column)), column.this
    if name == "count" and (isinstance(argument, exp.Star) or argument is None or
                            isinstance(argument, exp.Literal) and argument.name == "1"):
        return "count(1)"
    if name == "count" and isinstance(argument, exp.Distinct) and len(argument.expressions) == 1 and \
            isinstance(argument.expressions[0], exp.Column):
        return f"count(DISTINCT {argument.expressions[0].name})"
    if name is not None and isinstance(argument, exp.Column) and not isinstance(argument.this, exp.Star):
        return f"{name}({argument.name})"
    raise Untranslatable("an output column without a name",
                         f"Spark names `{column.sql(dialect=DIALECT)[:60]}` after its expression; alias it")


def _star(query: exp.Select, table: str, schema: Mapping[str, Mapping[str, str]],
          ctes: Mapping[str, exp.Expr]) -> list[str]:
    """The names `*` (or `table.*`) expands to in `query`: each source's columns, in the order of FROM and JOINs."""
    if query.args.get("laterals") or any(j.args.get("using") or j.method == "NATURAL"
                                         for j in query.args.get("joins") or ()):
        raise Untranslatable("`*`", "over a generator or a join with USING or NATURAL (Spark's columns are not "
                             "DuckDB's)")
    from_ = query.args.get("from_")
    sources = ([from_.this] if from_ is not None else []) + [j.this for j in query.args.get("joins") or ()]
    names: list[str] = []
    for source in sources:
        if table and source.alias_or_name.lower() != table.lower():
            continue
        if isinstance(source, exp.Table) and source.name.lower() in ctes:
            names += _names(ctes[source.name.lower()], schema, ctes)
        elif isinstance(source, exp.Table):
            columns = next((c for name, c in schema.items() if name.lower() == source.name.lower()), None)
            if columns is None:
                raise Untranslatable(source.name, "its columns are not known")
            names += list(columns)
        elif isinstance(source, exp.Subquery):
            names += _names(source.this, schema, ctes)
        else:
            raise Untranslatable("`*`", f"over {type(source).__name__}")
    return names


def _exploded(node: exp.Lateral) -> bool:
    """`LATERAL VIEW explode(array) t AS x` (what ClickHouse's ARRAY JOIN becomes): a row per element, NULL elements
    included, none for a NULL or empty array, as DuckDB's `CROSS JOIN UNNEST(array) AS t(x)` gives them (OUTER,
    posexplode and explode in the select list are left to Spark; a map's explode by `_unnest`)."""
    alias = node.args.get("alias")
    return bool(node.args.get("view")) and not node.args.get("outer") and type(node.this) is exp.Explode and \
        alias is not None and len(alias.columns) == 1


def _unnest(node: exp.Expr) -> exp.Expr:
    """An exploded array (`_exploded`); a map's explode (a key and a value column in Spark) is refused."""
    if isinstance(node.this, exp.Explode):
        given = node.this.this.type
        if given is None or not given.is_type(exp.DType.ARRAY):
            raise Untranslatable("`explode`", "only of an array (a map's rows are Spark's)")
    return node


def _rename(query: exp.Expr, names: list[str]) -> None:
    """The columns of `query` (qualified: each one aliased) named `names`, as written (quoted: DuckDB keeps case)."""
    while isinstance(query, exp.Subquery | exp.Paren | exp.SetOperation):
        query = query.left if isinstance(query, exp.SetOperation) else query.this
    columns = query.expressions
    if len(columns) != len(names):
        raise Untranslatable("the statement", "its columns could not be matched with the names Spark gives them")
    for column, name in zip(columns, names, strict=True):
        if isinstance(column, exp.Alias):
            column.set("alias", exp.to_identifier(name, quoted=True))
        else:
            column.replace(exp.alias_(column, name, quoted=True))


def _check(tree: exp.Expr, states: bool = False) -> None:
    for node in tree.walk():
        kind = type(node)
        if kind is exp.Lateral and _exploded(node) or kind is exp.Explode and isinstance(node.parent, exp.Lateral):
            continue
        if states and (kind in STATE_NODES or isinstance(node, exp.Anonymous) and len(node.expressions) == 1 and
                       node.name.lower() in STATE_FUNCTIONS):
            continue
        if kind not in ALLOWED:
            name = node.sql_name() if isinstance(node, exp.Func) else kind.__name__
            raise Untranslatable(f"`{name}`", "not translated to DuckDB with Spark's meaning")
        if isinstance(node, exp.Anonymous) and node.name.lower() not in ANONYMOUS:
            raise Untranslatable(f"`{node.name}`", "not translated to DuckDB with Spark's meaning")
        if isinstance(node, exp.DataType) and node.this not in TYPES:
            raise Untranslatable(f"type {node.sql(dialect=DIALECT)}", "no DuckDB type with Spark's meaning")
        if isinstance(node, exp.Like | exp.ILike) and node.args.get("escape") is not None:
            raise Untranslatable("LIKE … ESCAPE", "not translated to DuckDB with Spark's meaning")


def _rewrite(tree: exp.Expr) -> exp.Expr:
    """Every node as DuckDB must read it, children first (a handler sees its children rewritten)."""
    for node in reversed(list(tree.dfs())):
        parent, key, index = node.parent, node.arg_key, node.index
        new = _transform(node)
        if new is node:
            continue
        if new.type is None or new.type.is_type(exp.DType.UNKNOWN):
            new.type = node.type  # what Spark types it (a parent's rule may ask)
        if parent is None:
            tree = new
        else:
            parent.set(key, new, index)
    return tree


def _transform(node: exp.Expr) -> exp.Expr:
    handler = _HANDLERS.get(type(node))
    result = handler(node) if handler is not None else node
    function = node.this if isinstance(node, exp.Window) else node
    if isinstance(node.parent, exp.Window):
        return result  # the window's result is cast, not the function inside it
    spark_type = result_type(function)
    if spark_type is None:
        return result
    to = exp.DataType.build(spark_type, dialect=DIALECT)
    cast = exp.Cast(this=result, to=to)
    cast.type = to.copy()
    return cast


def result_type(node: exp.Expr) -> str | None:
    """The type Spark gives `node` where DuckDB's differs (a wider integer, a double for an integral floor, a
    decimal's precision), from the types of its arguments; None where they agree or are not known."""
    kind = type(node)
    if kind in (exp.Count, exp.CountIf, exp.IntDiv):
        return "BIGINT"
    if kind in _INT_RESULTS:
        return "INT"
    argument = node.this.type if isinstance(node.this, exp.Expr) else None
    if argument is None or argument.is_type(exp.DType.UNKNOWN, exp.DType.NULL):
        return None
    if kind is exp.Sum:
        if argument.is_type(*exp.DataType.INTEGER_TYPES):
            return "BIGINT"
        if argument.is_type(exp.DType.DECIMAL):
            precision, scale = _decimal(argument)
            return f"DECIMAL({min(38, precision + 10)}, {scale})"
    if kind is exp.Avg and argument.is_type(exp.DType.DECIMAL):
        precision, scale = _decimal(argument)
        return f"DECIMAL({min(38, precision + 4)}, {min(38, scale + 4)})"
    if kind in (exp.Add, exp.Sub, exp.Mul):
        return _decimal_arithmetic(node)
    if kind is exp.AddMonths:
        return "DATE"  # DuckDB adds a month interval to a date as a TIMESTAMP
    if kind in (exp.TimestampTrunc, exp.DateTrunc) and argument.is_type(exp.DType.DATE):
        return "TIMESTAMP"  # Spark truncates a date to an instant; DuckDB to a wall time
    if kind in (exp.Floor, exp.Ceil) and not node.args.get("decimals"):
        if argument.is_type(exp.DType.DECIMAL):
            precision, scale = _decimal(argument)
            return f"DECIMAL({min(38, precision - scale + 1)}, 0)"
        if argument.is_type(exp.DType.DOUBLE, exp.DType.FLOAT, *exp.DataType.INTEGER_TYPES):
            return "BIGINT"
    return None


def _decimal_arithmetic(node: exp.Expr) -> str | None:
    """Spark's type of `a + b`, `a - b`, `a * b` over decimals (an integer operand as the decimal that holds it, an
    integer literal as its digits), precision capped at 38 as Spark caps it; None when neither side is a decimal."""
    left, right = _operand(node.this), _operand(node.expression)
    if left is None or right is None or not (_is_decimal(node.this) or _is_decimal(node.expression)):
        return None
    (p1, s1), (p2, s2) = left, right
    if isinstance(node, exp.Mul):
        precision, scale = p1 + p2 + 1, s1 + s2
    else:
        scale = max(s1, s2)
        precision = max(p1 - s1, p2 - s2) + scale + 1
    if precision > 38:  # Spark's adjustPrecisionScale: keep the integer digits, at least min(scale, 6) decimals
        digits = precision - scale
        precision, scale = 38, max(38 - digits, min(scale, 6))
    return f"DECIMAL({precision}, {scale})"


_INTEGER_DECIMALS = {exp.DType.TINYINT: (3, 0), exp.DType.SMALLINT: (5, 0), exp.DType.INT: (10, 0),
                     exp.DType.BIGINT: (20, 0)}


def _is_decimal(node: exp.Expr) -> bool:
    return node.type is not None and node.type.is_type(exp.DType.DECIMAL)


def _operand(node: exp.Expr) -> tuple[int, int] | None:
    """A decimal-arithmetic operand as (precision, scale), as Spark widens it; None for any other type."""
    if isinstance(node, exp.Literal) and node.is_int:
        return max(1, len(node.name.lstrip("-"))), 0
    if node.type is None:
        return None
    if node.type.is_type(exp.DType.DECIMAL):
        return _decimal(node.type)
    return next((found for kind, found in _INTEGER_DECIMALS.items() if node.type.is_type(kind)), None)


def _decimal(data_type: exp.DataType) -> tuple[int, int]:
    """(precision, scale) of a DECIMAL type (Spark's default DECIMAL is (10, 0))."""
    params = [int(p.name) for p in data_type.expressions]
    return (params[0] if params else 10), (params[1] if len(params) > 1 else 0)


def _divide(node: exp.Expr) -> exp.Expr:
    """`a / b` raises on a zero divisor, as Spark's ANSI mode does (DuckDB gives infinity or NULL)."""
    if type(node) is exp.Div and (_is_decimal(node.this) or _is_decimal(node.expression)):
        raise Untranslatable("a division of decimals", "Spark divides them exactly into a decimal, DuckDB into a "
                             "double")
    zero = exp.EQ(this=node.expression.copy(), expression=exp.Literal.number(0))
    raised = exp.func("error", exp.Literal.string(DIVIDE_BY_ZERO))
    kind = type(node)
    if kind is exp.IntDiv:  # Spark's `div` truncates towards zero, DuckDB's `//` rounds down; divide() truncates
        divided: exp.Expr = exp.func("divide", node.this.copy(), node.expression.copy())
    else:
        divided = kind(this=node.this.copy(), expression=node.expression.copy())
    return exp.Case(ifs=[exp.If(this=zero, true=raised)], default=divided)


def _round(node: exp.Expr) -> exp.Expr:
    """Spark's HALF_UP rounding of a double; other types round the same way in both."""
    return _rounded(node.this, node.args.get("decimals"), "round", node)


def _rounded(value: exp.Expr, digits: exp.Expr | None, function: str, node: exp.Expr | None = None) -> exp.Expr:
    """`function` (round: HALF_UP; round_even: bround's HALF_EVEN) of `value` to `digits`, a double rounded as the
    decimal it prints as (Scala's BigDecimal(double)), as Spark rounds it; `node` is the call when DuckDB's own
    rounding of the other types is Spark's (round)."""
    if value.type is None or value.type.is_type(exp.DType.UNKNOWN):
        raise Untranslatable(f"`{'bround' if function == 'round_even' else 'round'}`",
                             "the type of what it rounds is not known")
    digits = digits or exp.Literal.number(0)
    if not isinstance(digits, exp.Literal):
        raise Untranslatable("`round`", "digits that are not a constant")
    if value.type.is_type(exp.DType.DOUBLE, exp.DType.FLOAT):
        template = _ROUND_DOUBLE.replace("round(", f"{function}(")
        return sqlglot.parse_one(template.format(x=f"({value.sql(dialect=DUCKDB)})", d=digits.sql(dialect=DUCKDB)),
                                 dialect=DUCKDB)
    if node is not None:
        return node
    return exp.func(function, value, digits)


_INTEGRAL = (exp.DType.TINYINT, exp.DType.SMALLINT, exp.DType.INT, exp.DType.BIGINT)
_FRACTIONAL = (exp.DType.DOUBLE, exp.DType.FLOAT, exp.DType.DECIMAL)
_TEXT = (exp.DType.VARCHAR, exp.DType.TEXT, exp.DType.CHAR)
_TIMES = (exp.DType.DATE, exp.DType.TIMESTAMP, exp.DType.TIMESTAMPTZ, exp.DType.TIMESTAMPLTZ)
# Text Spark and DuckDB read the same way (and reject the same way): what a typed template parameter renders.
_LITERAL_FORMS = {
    "integral": re.compile(r"[+-]?\d{1,18}"),
    "number": re.compile(r"[+-]?\d{1,30}(\.\d{1,30})?"),
    "date": re.compile(r"\d{4}-\d{2}-\d{2}"),
    "timestamp": re.compile(r"\d{4}-\d{2}-\d{2}([ T]\d{2}:\d{2}:\d{2}(\.\d{1,6})?)?"),
    "boolean": re.compile(r"(?i)true|false"),
}


def _cast(node: exp.Expr) -> exp.Expr:
    """A CAST (or TRY_CAST) whose meaning is Spark's: the pairs of types whose conversions agree, a fraction cast to
    an integer truncated (DuckDB rounds), text only as a literal of a form both read alike; anything else refused
    (DuckDB reads '1.5' as the integer 2 and prints doubles and timestamps otherwise)."""
    source, target = node.this.type, node.to
    if target.is_type(*_INTEGRAL) and source is not None and source.is_type(*_FRACTIONAL):
        node.set("this", exp.func("trunc", node.this))
        return node
    if source is None or source.is_type(exp.DType.UNKNOWN):
        raise Untranslatable("CAST", "the type of what it casts is not known")
    if source.is_type(exp.DType.NULL) or source == target or _cast_agrees(source, target):
        return node
    if source.is_type(*_TEXT) and isinstance(node.this, exp.Literal) and node.this.is_string:
        form = ("integral" if target.is_type(*_INTEGRAL) else "number" if target.is_type(*_FRACTIONAL) else
                "date" if target.is_type(exp.DType.DATE) else "timestamp" if target.is_type(*_TIMES) else
                "boolean" if target.is_type(exp.DType.BOOLEAN) else None)
        if form is not None and _LITERAL_FORMS[form].fullmatch(node.this.name):
            return node
    raise Untranslatable(f"CAST({source.sql(dialect=DIALECT)} AS {target.sql(dialect=DIALECT)})",
                         "Spark and DuckDB convert these differently")


def _cast_agrees(source: exp.DataType, target: exp.DataType) -> bool:
    """Whether Spark and DuckDB convert every value of `source` to `target` alike (or both fail)."""
    if source.is_type(*_INTEGRAL, exp.DType.BOOLEAN):
        return target.is_type(*_INTEGRAL, *_FRACTIONAL, exp.DType.BOOLEAN, *_TEXT)
    if source.is_type(exp.DType.DECIMAL):
        return target.is_type(exp.DType.DECIMAL, exp.DType.DOUBLE, exp.DType.FLOAT, *_TEXT)
    if source.is_type(exp.DType.DOUBLE, exp.DType.FLOAT):
        return target.is_type(exp.DType.DOUBLE, exp.DType.FLOAT)
    if source.is_type(exp.DType.DATE):
        return target.is_type(*_TIMES, *_TEXT)
    if source.is_type(exp.DType.TIMESTAMP, exp.DType.TIMESTAMPTZ, exp.DType.TIMESTAMPLTZ):
        return target.is_type(*_TIMES)
    if source.is_type(*_TEXT):  # text as text (`x::String` of a JSON path): the value as it is
        return target.is_type(*_TEXT)
    return False


def _count_if(node: exp.Expr) -> exp.Expr:
    """Spark's count_if counts 0 in a group with no true value; DuckDB's gives NULL when every value is NULL."""
    return exp.Coalesce(this=node, expressions=[exp.Literal.number(0)])


def _arg_extreme(node: exp.Expr) -> exp.Expr:
    """Spark's max_by/min_by give the value of the row with the greatest/least ordering, NULL when that row's value
    is NULL; DuckDB's arg_max/arg_min skip rows whose value is NULL (its arg_max_null/arg_min_null do not)."""
    if node.args.get("count") is not None:
        raise Untranslatable(f"`{node.sql_name().lower()}`", "a count of values")
    name = "arg_max_null" if isinstance(node, exp.ArgMax) else "arg_min_null"
    return exp.Anonymous(this=name, expressions=[node.this, node.expression])


def _substring(node: exp.Expr) -> exp.Expr:
    """Spark's substring takes a start of 0 as 1 (DuckDB's counts the position before the first character); other
    starts and lengths agree when they are constants, a start of at least 0 and a length of at least 0."""
    start, length = node.args.get("start"), node.args.get("length")
    constant = [a for a in (start, length) if a is not None]
    if not all(isinstance(a, exp.Literal) and a.is_int and int(a.name) >= 0 for a in constant):
        raise Untranslatable("`substring`", "a start or length that is not a constant of at least 0")
    if start is not None and int(start.name) == 0:
        node.set("start", exp.Literal.number(1))
    return node


def _translate_chars(node: exp.Expr) -> exp.Expr:
    """`translate(s, from, to)` (what ClickHouse's ASCII-only `lower`/`upper` become) with constant sets: each character
    of `from` mapped to the one at its place in `to`, or removed past its end, in both. A character twice in `from` is
    left to Spark (which of its places counts is either engine's own rule)."""
    chars, into = node.args.get("from_"), node.args.get("to")
    if not (isinstance(chars, exp.Literal) and chars.is_string and isinstance(into, exp.Literal) and into.is_string) \
            or len(set(chars.name)) != len(chars.name):
        raise Untranslatable("`translate`", "only constant sets of characters, each once in the first, are translated")
    return node


def _interval(node: exp.Expr) -> exp.Expr:
    """An interval of a constant number of one unit, added to or taken from an instant (Spark and DuckDB move a
    TIMESTAMP alike in a UTC session; a DATE plus an interval is a DATE in Spark, a TIMESTAMP in DuckDB)."""
    unit = node.args.get("unit")
    name = (unit.name if unit is not None else "").upper()
    if name not in _INTERVAL_UNITS or not isinstance(node.this, exp.Literal):
        raise Untranslatable("INTERVAL", "only a constant number of one unit (years to seconds) is translated")
    other = node.parent.this if node.parent is not None and node.parent.expression is node else \
        (node.parent.expression if node.parent is not None else None)
    if not isinstance(node.parent, exp.Add | exp.Sub) or other is None or other.type is None or \
            not other.type.is_type(exp.DType.TIMESTAMPTZ, exp.DType.TIMESTAMP, exp.DType.TIMESTAMPLTZ):
        raise Untranslatable("INTERVAL", "only added to or taken from a TIMESTAMP")
    return node


def _regex(node: exp.Expr) -> exp.Expr:
    """A regular expression both engines read alike (`_PORTABLE_REGEX`), a constant; a replacement without `\\`,
    its `$n` group references spelled as RE2's `\\n`. DuckDB replaces every match, as Spark does ('g')."""
    pattern = node.expression if isinstance(node, exp.RegexpLike) else node.args.get("expression")
    if not (isinstance(pattern, exp.Literal) and pattern.is_string and _PORTABLE_REGEX.fullmatch(pattern.name)
            and "(?" not in pattern.name):  # flags, lookarounds and named groups
        raise Untranslatable("a regular expression", "Java's and RE2's meanings differ for this pattern")
    if isinstance(node, exp.RegexpReplace):
        replacement = node.args.get("replacement")
        if not (isinstance(replacement, exp.Literal) and replacement.is_string and "\\" not in replacement.name) \
                or node.args.get("position") is not None:
            raise Untranslatable("regexp_replace", "a replacement or position DuckDB reads otherwise")
        node.set("replacement", exp.Literal.string(re.sub(r"\$(\d)", r"\\\1", replacement.name)))
    return node


# JSON values whose text DuckDB gives as Spark's get_json_object does: a string unquoted, a boolean, an integer. A
# double, an object or an array is printed by each in its own way (1e2 and 100.0, spacing): the query goes to Spark.
_JSON_AGREES = ("VARCHAR", "BOOLEAN", "BIGINT", "UBIGINT", "NULL")
READ_ELSEWHERE = "[PF_READ_PATH]"  # raised from inside a DuckDB query for a value only Spark prints as Spark does


def _json_value(node: exp.Expr) -> exp.Expr:
    """`get_json_object(json, path)` for a path of keys and indexes (no wildcard), where the value found is one whose
    text both give alike; any other value makes DuckDB raise, and Spark answers the query. Text that is not JSON
    does too (Spark answers NULL, DuckDB raises)."""
    path = node.expression
    if not isinstance(path, exp.JSONPath) or any(
            not isinstance(part, exp.JSONPathRoot | exp.JSONPathKey | exp.JSONPathSubscript) or
            (isinstance(part, exp.JSONPathSubscript) and not isinstance(part.this, int))
            for part in path.expressions):
        raise Untranslatable("`get_json_object`", "a JSON path with wildcards or slices")
    value, text = node.this, exp.Literal.string(path.sql(dialect=DUCKDB).strip("'"))
    kind = exp.func("json_type", value.copy(), text.copy())
    extracted = exp.JSONExtractScalar(this=value.copy(), expression=path.copy())
    agrees = exp.Or(this=exp.Is(this=kind.copy(), expression=exp.Null()),
                    expression=exp.In(this=kind, expressions=[exp.Literal.string(k) for k in _JSON_AGREES]))
    raised = exp.func("error", exp.Literal.string(f"{READ_ELSEWHERE} a JSON number, object or array"))
    return exp.Case(ifs=[exp.If(this=agrees, true=extracted)], default=raised)


def _like(node: exp.Expr) -> exp.Expr:
    """Spark's LIKE takes `\\` as its escape character; DuckDB's LIKE has none unless told."""
    return exp.Escape(this=node, expression=exp.Literal.string("\\"))


def _anonymous(node: exp.Expr) -> exp.Expr:
    name = node.name.lower()
    args = [a.copy() for a in node.expressions]
    if name == "bround":
        return _rounded(node.expressions[0], node.expressions[1] if len(node.expressions) > 1 else None, "round_even")
    if name == "weekday":  # Spark's 0 (Monday) to 6 (Sunday) of a date, or of an instant's UTC date
        given = node.expressions[0].type if len(node.expressions) == 1 else None
        if given is None or not given.is_type(exp.DType.DATE, *_TIMES):
            raise Untranslatable("`weekday`", "only of a date or a timestamp")
        return exp.cast(exp.Sub(this=exp.func("isodow", *args), expression=exp.Literal.number(1)), "INT")
    if name in SKETCH_AGGREGATES:
        return exp.func(ANONYMOUS[name], exp.ArrayAgg(this=args[0]))  # hll_union_agg's `true`: see sketches.py
    if name in STATE_FUNCTIONS:  # allowed by `_check` only for a state query
        return exp.func(STATE_FUNCTIONS[name], exp.ArrayAgg(this=args[0]))
    if name == "kll_sketch_get_quantile_double" and len(args) == 2 and isinstance(args[1], exp.Array):
        return exp.func("pf_kll_quantiles", *args)
    return exp.func(ANONYMOUS[name], *args)


def _bracket(node: exp.Expr) -> exp.Expr:
    """`m['key']` of a MAP with string keys: NULL for a missing key in both (DuckDB's `[]` gives the value since 1.1).
    An array's `a[0]` (0-based in Spark, 1-based in DuckDB) and a map with other keys are left to Spark."""
    container = node.this.type if isinstance(node.this, exp.Expr) else None
    keys = container.expressions[0] if container is not None and container.is_type(exp.DType.MAP) and \
        container.expressions else None
    if keys is None or not keys.is_type(*exp.DataType.TEXT_TYPES) or len(node.expressions) != 1:
        raise Untranslatable("`[]`", "not translated to DuckDB with Spark's meaning (only a string-keyed map's)")
    return node


_HANDLERS: dict[type[exp.Expr], Callable[[exp.Expr], exp.Expr]] = {
    exp.Div: _divide, exp.IntDiv: _divide, exp.Mod: _divide, exp.Round: _round, exp.Like: _like,
    exp.ILike: _like, exp.Anonymous: _anonymous, exp.CountIf: _count_if, exp.Substring: _substring,
    exp.ArgMax: _arg_extreme, exp.ArgMin: _arg_extreme, exp.Translate: _translate_chars, exp.Lateral: _unnest,
    exp.Cast: _cast, exp.TryCast: _cast, exp.Interval: _interval, exp.RegexpLike: _regex,
    exp.RegexpReplace: _regex, exp.JSONExtractScalar: _json_value, exp.Bracket: _bracket,
}


def _annotate_anonymous(annotator: Any, expression: exp.Anonymous) -> None:  # sqlglot's TypeAnnotator
    name = expression.name.lower()
    found = ANONYMOUS_TYPES.get(name)
    if name == "kll_sketch_get_quantile_double" and len(expression.expressions) == 2 \
            and isinstance(expression.expressions[1], exp.Array):
        found = "ARRAY<DOUBLE>"
    annotator._set_type(expression, exp.DataType.build(found, dialect=DIALECT) if found else exp.DType.UNKNOWN)


def _annotate_trunc(annotator: Any, expression: exp.TimestampTrunc) -> None:  # sqlglot's TypeAnnotator
    """Spark's date_trunc keeps a wall time a wall time and makes anything else an instant (TIMESTAMP)."""
    given = expression.this.type
    ntz = given is not None and given.is_type(exp.DType.TIMESTAMPNTZ, exp.DType.DATETIME)
    annotator._set_type(expression, exp.DType.TIMESTAMPNTZ if ntz else exp.DType.TIMESTAMPTZ)


_METADATA = {**DIALECT.EXPRESSION_METADATA, exp.Anonymous: {"annotator": _annotate_anonymous},
             exp.TimestampTrunc: {"annotator": _annotate_trunc}}
