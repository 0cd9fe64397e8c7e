"""ClickHouse SQL (Tinybird's dialect) → Spark SQL: sqlglot reads ClickHouse and writes Spark; each transform here
covers one thing it lacks, a small pure function over the ClickHouse tree, composed by `from_clickhouse`.

A node is read as ClickHouse only when its Spark reading fails or shows ClickHouse (`looks_clickhouse`), so hand-
written Spark SQL goes on unchanged. What has no translation is a `Problem` (PF309, with the Spark equivalent
where one exists), reported by `check` at file:line — never a surprise at deploy.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import lru_cache

import sqlglot
from sqlglot import exp
from sqlglot.dialects.clickhouse import ClickHouse
from sqlglot.dialects.dialect import Dialect
from sqlglot.errors import ErrorLevel, UnsupportedError

from pipeframe.compiler.aggregates import ALL_AGGREGATES, split_clickhouse_name
from pipeframe.compiler.final import FINAL_MARK
from pipeframe.compiler.infer import infer
from pipeframe.compiler.spark_functions import SPARK_FUNCTIONS

CLICKHOUSE = Dialect.get_or_raise("clickhouse")
SPARK = Dialect.get_or_raise("spark")
# What sqlglot's ClickHouse parser reads as a function: by name, or with its own parser (arrayJoin, groupConcat...).
CLICKHOUSE_FUNCTIONS = frozenset(name.lower() for name in (*ClickHouse.Parser.FUNCTIONS,
                                                           *ClickHouse.Parser.FUNCTION_PARSERS))


@dataclass(frozen=True)
class Problem:
    """A construct with no Spark translation: the node (for its position), what it is, and what to write instead."""

    node: exp.Expression
    message: str
    hint: str
    keyword: str | None = None  # what to look for in the text when the node has no position of its own


Transform = Callable[[exp.Expression, list[Problem]], exp.Expression]

# ------------------------------------------------------------------------------------------ functions
# ClickHouse functions sqlglot leaves untranslated → a Spark template over the arguments {0}, {1}, ...; the
# arities a call may have. Where ClickHouse returns Date (toStartOfMonth...), so does the template.
SECONDS = {"second": 1, "minute": 60, "hour": 3600, "day": 86400, "week": 7 * 86400}
_INTERVALS = {"second": "make_dt_interval(0, 0, 0, {n})", "minute": "make_dt_interval(0, 0, {n})",
              "hour": "make_dt_interval(0, {n})", "day": "make_dt_interval({n})", "week": "make_dt_interval({n} * 7)",
              "month": "make_ym_interval(0, {n})", "quarter": "make_ym_interval(0, {n} * 3)",
              "year": "make_ym_interval({n})"}


def _bucket(seconds: int) -> str:
    return f"timestamp_seconds(floor(unix_timestamp({{0}}) / {seconds}) * {seconds})"


_DOMAIN = "regexp_extract(coalesce(try_parse_url({0}, 'HOST'), ''), '^(.*[.].*)$', 1)"
_URL_PARTS = "REGEXP_EXTRACT_ALL({0}, '^[A-Za-z0-9+.-]+://[^/?#]*[/?#]?|[/?#]*[^/?#]+[/?#]?', 0)"

TEMPLATES: dict[str, tuple[tuple[int, ...], str]] = {
    # A DateTime has whole seconds: toDateTime drops a DateTime64's (or a number's) fraction.
    "todatetime": ((1, 2), "date_trunc('SECOND', CAST({0} AS TIMESTAMP))"),
    "todatetime64": ((1, 2, 3), "CAST({0} AS TIMESTAMP)"),  # a time zone argument changes how it shows, not when
    "todate": ((1,), "CAST({0} AS DATE)"),
    "todate32": ((1,), "CAST({0} AS DATE)"),
    "tostring": ((1,), "CAST({0} AS STRING)"),
    "toint8": ((1,), "CAST({0} AS TINYINT)"),
    "toint16": ((1,), "CAST({0} AS SMALLINT)"),
    "toint32": ((1,), "CAST({0} AS INT)"),
    "toint64": ((1,), "CAST({0} AS BIGINT)"),
    "touint8": ((1,), "CAST({0} AS INT)"),
    "touint16": ((1,), "CAST({0} AS INT)"),
    "touint32": ((1,), "CAST({0} AS BIGINT)"),
    "touint64": ((1,), "CAST({0} AS BIGINT)"),
    "tofloat32": ((1,), "CAST({0} AS FLOAT)"),
    "tofloat64": ((1,), "CAST({0} AS DOUBLE)"),
    "todateornull": ((1,), "TRY_CAST({0} AS DATE)"),
    "todatetimeornull": ((1,), "date_trunc('SECOND', TRY_CAST({0} AS TIMESTAMP))"),
    "parsedatetimebesteffort": ((1,), "date_trunc('SECOND', CAST({0} AS TIMESTAMP))"),
    "parsedatetime64besteffort": ((1, 2), "CAST({0} AS TIMESTAMP)"),
    "parsedatetimebesteffortornull": ((1,), "date_trunc('SECOND', TRY_CAST({0} AS TIMESTAMP))"),
    "today": ((0,), "current_date()"),
    "yesterday": ((0,), "date_sub(current_date(), 1)"),
    "now": ((0, 1), "current_timestamp()"),  # now('tz') is the same instant
    # Arithmetic rather than date_format: a partition key becomes a Delta generated column.
    "toyyyymm": ((1,), "(year({0}) * 100 + month({0}))"),
    "toyyyymmdd": ((1,), "(year({0}) * 10000 + month({0}) * 100 + dayofmonth({0}))"),
    "toyear": ((1,), "year({0})"),
    "toquarter": ((1,), "quarter({0})"),
    "tomonth": ((1,), "month({0})"),
    "todayofmonth": ((1,), "dayofmonth({0})"),
    "todayofyear": ((1,), "dayofyear({0})"),
    "tohour": ((1,), "hour({0})"),
    "tominute": ((1,), "minute({0})"),
    "tosecond": ((1,), "second({0})"),
    "tounixtimestamp": ((1,), "unix_timestamp({0})"),
    "fromunixtimestamp": ((1,), "timestamp_seconds({0})"),
    "fromunixtimestamp64milli": ((1,), "timestamp_millis({0})"),
    "fromunixtimestamp64micro": ((1,), "timestamp_micros({0})"),
    "tounixtimestamp64milli": ((1,), "unix_millis({0})"),
    "tostartoffiveminutes": ((1,), _bucket(300)),
    "tostartoftenminutes": ((1,), _bucket(600)),
    "tostartoffifteenminutes": ((1,), _bucket(900)),
    # ClickHouse's default week starts on Sunday (mode 0); Spark's date_trunc('WEEK') on Monday.
    "tostartofweek": ((1,), "date_sub(CAST(date_trunc('WEEK', date_add(CAST({0} AS DATE), 1)) AS DATE), 1)"),
    "tolowcardinality": ((1,), "{0}"),  # a storage hint: the same values
    # A DateTime shown in another time zone: its wall-clock time there (toHour, toDate ... of it are local).
    "totimezone": ((2,), "from_utc_timestamp({0}, {1})"),
    "makedate": ((3,), "make_date({0}, {1}, {2})"),
    "arrayintersect": ((2,), "array_intersect({0}, {1})"),
    "multisearchany": ((2,), "exists({1}, needle -> instr({0}, needle) > 0)"),
    "tointervalmillisecond": ((1,), "make_dt_interval(0, 0, 0, {0} / 1000)"),
    "tointervalmicrosecond": ((1,), "make_dt_interval(0, 0, 0, {0} / 1000000)"),
    "lowerutf8": ((1,), "lower({0})"),
    "upperutf8": ((1,), "upper({0})"),
    "lengthutf8": ((1,), "length({0})"),
    "empty": ((1,), "(length({0}) = 0)"),
    "notempty": ((1,), "(length({0}) > 0)"),
    # try_parse_url: a URL Java cannot parse (a space, a raw non-ASCII character) gives '' rather than failing the query.
    "path": ((1,), "coalesce(try_parse_url({0}, 'PATH'), '')"),
    "pathfull": ((1,), ("concat(coalesce(try_parse_url({0}, 'PATH'), ''), coalesce(concat('?', try_parse_url({0}, "
                        "'QUERY')), ''), coalesce(concat('#', try_parse_url({0}, 'REF')), ''))")),
    # ClickHouse's domain is a host name with a dot in it (`localhost` is none).
    "domain": ((1,), _DOMAIN),
    "domainwithoutwww": ((1,), f"regexp_replace({_DOMAIN}, '^www[.]', '')"),
    "topleveldomain": ((1,), f"regexp_extract({_DOMAIN}, '[.]([^.]*[^.0-9][^.]*)$', 1)"),
    "protocol": ((1,), "coalesce(try_parse_url({0}, 'PROTOCOL'), '')"),
    "querystring": ((1,), "coalesce(try_parse_url({0}, 'QUERY'), '')"),
    "fragment": ((1,), "coalesce(try_parse_url({0}, 'REF'), '')"),
    # The first `name=` after a `?`, `&` or `#` anywhere in the URL (a relative one too), up to the next `&` or `#`.
    "extracturlparameter": ((2,), "regexp_extract({0}, concat('[?&#]\\\\Q', {1}, '\\\\E=([^&#]*)'), 1)"),
    "cutquerystring": ((1,), "regexp_replace({0}, '[?][^#]*', '')"),
    # Java's form encoding keeps `*` and encodes `~`; ClickHouse (RFC 3986) does the opposite. A `+` in the text is
    # encoded as %2B, so the `+` left are spaces: %20 for a URL component, `+` for a form component.
    "encodeurlformcomponent": ((1,), "replace(replace(url_encode({0}), '%7E', '~'), '*', '%2A')"),
    "encodeurlcomponent": ((1,), "replace(replace(replace(url_encode({0}), '%7E', '~'), '*', '%2A'), '+', '%20')"),
    # ClickHouse keeps `+` in a URL component and leaves what is not valid %-encoding as it is.
    "decodeurlcomponent": ((1,), "coalesce(try_url_decode(replace({0}, '+', '%2B')), {0})"),
    "decodeurlformcomponent": ((1,), "coalesce(try_url_decode({0}), {0})"),
    # A missing key or invalid JSON is the type's default in ClickHouse, never NULL.
    "jsonextractfloat": ((2,), "coalesce(TRY_CAST(get_json_object({0}, concat('$.', {1})) AS DOUBLE), 0D)"),
    "jsonextractint": ((2,), "coalesce(TRY_CAST(get_json_object({0}, concat('$.', {1})) AS BIGINT), 0)"),
    "jsonextractuint": ((2,), "coalesce(TRY_CAST(get_json_object({0}, concat('$.', {1})) AS BIGINT), 0)"),
    "jsonextractbool": ((2,), "coalesce(TRY_CAST(get_json_object({0}, concat('$.', {1})) AS BOOLEAN), FALSE)"),
    "jsonextractraw": ((2,), "coalesce(get_json_object({0}, concat('$.', {1})), '')"),
    "groupuniqarray": ((1,), "collect_set({0})"),
    "grouparray": ((1,), "collect_list({0})"),
    "arraystringconcat": ((1, 2), "array_join({0}, {1})"),
    "arrayelement": ((2,), ("coalesce(IF(CAST({1} AS INT) = 0, NULL, try_element_at({0}, CAST({1} AS INT))), "
                           "__pf_zero_element({0}))")),  # as arr[i]: see array_indexes
    # The first match only: a lazy prefix up to the leftmost match, kept as group 1.
    "replaceregexpone": ((3,), "regexp_replace({0}, concat('^((?s).*?)(?:', {1}, ')'), concat('$1', {2}))"),
    # The URL cut after each run of / or ? in its path and query ('https://a.com/', 'https://a.com/b/', ...); only
    # for a URL with a protocol, else an empty array.
    "urlhierarchy": ((1,), "IF({0} RLIKE '^[A-Za-z0-9+.-]+://', TRANSFORM(SEQUENCE(1, SIZE(" + _URL_PARTS + ")), "
                           "i -> ARRAY_JOIN(SLICE(" + _URL_PARTS + ", 1, i), '')), SLICE(ARRAY({0}), 1, "
                           "IF({0} = '', 0, 1)))"),
    "range": ((1, 2), "IF({1} > {0}, sequence({0}, {1} - 1), SLICE(ARRAY({0}), 1, 0))"),
    "replaceregexpall": ((3,), "regexp_replace({0}, {1}, {2})"),
    "replaceall": ((3,), "replace({0}, {1}, {2})"),
    # Spark's split takes a pattern: the separator is quoted (\\Q...\\E) to be split on as text.
    "splitbystring": ((2,), "split({1}, concat('\\\\Q', {0}, '\\\\E'))"),
    "intdiv": ((2,), "({0} DIV {1})"),
    "intdivorzero": ((2,), "coalesce(CAST(try_divide({0}, {1}) AS BIGINT), 0)"),
}
# What ClickHouse reads as a number from text: an optional sign and digits (no sign for an unsigned type), or a
# float's usual forms; no spaces around it (Spark's casts trim them), no hexadecimal.
_INTEGER_TEXT, _UNSIGNED_TEXT = "^[+-]?[0-9]+$", "^[+]?[0-9]+$"
_FLOAT_TEXT = "^[+-]?([0-9]+[.]?[0-9]*|[.][0-9]+)([eE][+-]?[0-9]+)?$|^(?i)[+-]?(inf|infinity|nan)$"
# The largest value of each unsigned type pipeframe stores in a wider signed one.
_UNSIGNED_MAX = {"uint8": 255, "uint16": 65535, "uint32": 4294967295}
for _name, _spark, _text in (("int8", "TINYINT", _INTEGER_TEXT), ("int16", "SMALLINT", _INTEGER_TEXT),
                             ("int32", "INT", _INTEGER_TEXT), ("int64", "BIGINT", _INTEGER_TEXT),
                             ("uint8", "SMALLINT", _UNSIGNED_TEXT), ("uint16", "INT", _UNSIGNED_TEXT),
                             ("uint32", "BIGINT", _UNSIGNED_TEXT), ("uint64", "BIGINT", _UNSIGNED_TEXT),
                             ("float32", "FLOAT", _FLOAT_TEXT), ("float64", "DOUBLE", _FLOAT_TEXT)):
    # Spark reads `NaN` but not `-nan`; a value past an unsigned type's range is no value.
    _text_of = "regexp_replace({0}, '^[+-]?(?i)nan$', 'NaN')" if _text is _FLOAT_TEXT else "{0}"
    _parsed = f"TRY_CAST(IF({{0}} RLIKE '{_text}', {_text_of}, NULL) AS {_spark})"
    if _name in _UNSIGNED_MAX:
        _parsed = f"IF({_parsed} <= {_UNSIGNED_MAX[_name]}, {_parsed}, NULL)"
    TEMPLATES[f"to{_name}ornull"] = ((1,), _parsed)
    TEMPLATES[f"to{_name}orzero"] = ((1,), f"coalesce({_parsed}, CAST(0 AS {_spark}))")

# One-argument defaults: `range(n)` counts from 0; `arrayStringConcat(a)` joins with ''.
DEFAULT_FIRST = {"range": "0"}
DEFAULT_LAST = {"arraystringconcat": "''"}
for _unit, _interval in _INTERVALS.items():
    TEMPLATES[f"tointerval{_unit}"] = ((1,), _interval.format(n="{0}"))
    TEMPLATES[f"add{_unit}s"] = ((2,), f"({{0}} + {_interval.format(n='{1}')})")
    TEMPLATES[f"subtract{_unit}s"] = ((2,), f"({{0}} - {_interval.format(n='{1}')})")

# Translated by their own code in `functions` rather than a template.
SPECIAL = frozenset({"multiif", "tostartofinterval", "countdistinct", "extractall", "laginframe", "leadinframe",
                     "numbers"})
# Spark's table-valued functions (`FROM range(10)`).
SPARK_TABLE_FUNCTIONS = frozenset({"range", "explode", "explode_outer", "inline", "inline_outer", "posexplode",
                                   "posexplode_outer", "stack", "json_tuple", "variant_explode"})
# ClickHouse functions with no faithful Spark translation: what to write instead.
HINTS: dict[str, str] = {
    "extractall": "Write the pattern as a string constant, or use regexp_extract_all(s, pattern, group).",
    "anylast": "Use max_by(x, ts) (the value at the latest ts).",
    "anyheavy": "Use mode(x) (the most frequent value) in an endpoint over the raw datasource.",
    "error": "Remove the call, or use raise_error('message').",
    "tuple": "Use struct(a, b) or named_struct('a', a, 'b', b).",
    "tostartofinterval": "Write toStartOfInterval(ts, INTERVAL n unit) with a constant n and a unit from second "
                         "to week, or date_trunc(unit, ts).",
}


@lru_cache(maxsize=256)
def _template(text: str, read: str = "spark") -> exp.Expression:
    return sqlglot.parse_one(text, read=SPARK if read == "spark" else CLICKHOUSE)


def _fill(text: str, args: list[exp.Expression], read: str = "spark") -> exp.Expression:
    """The template `text` (`{0}`, `{1}` ... standing for the arguments) read in `read`'s dialect, arguments in."""
    names = [f"__pf_arg{i}" for i in range(len(args))]
    tree = _template(text.format(*names), read).copy()
    by_name = dict(zip(names, args))
    if isinstance(tree, exp.Column) and tree.name in by_name and not tree.table:  # `{0}`: the argument itself
        return by_name[tree.name].copy()
    for column in list(tree.find_all(exp.Column)):
        if column.name in by_name and not column.table:
            column.replace(by_name[column.name].copy())
    return tree


def _call(name: str, args: list[exp.Expression]) -> exp.Expression:
    """The call `name(args)` as sqlglot's ClickHouse parser reads it (`sum` → exp.Sum, `uniq` → ApproxDistinct)."""
    return _fill(f"{name}({', '.join(f'{{{i}}}' for i in range(len(args)))})", args, read="clickhouse")


def _call_name(node: exp.Expression) -> str | None:
    if isinstance(node, exp.Anonymous):
        return str(node.this)
    if isinstance(node, exp.AnonymousAggFunc | exp.CombinedAggFunc | exp.ParameterizedAgg
                  | exp.CombinedParameterizedAgg):
        return node.name
    return None


def _args(node: exp.Expression) -> list[exp.Expression]:
    return list(node.expressions)


def _interval_seconds(interval: exp.Expression) -> int | None:
    """`INTERVAL 15 minute` → 900; None when not a constant interval of seconds..weeks."""
    if not isinstance(interval, exp.Interval):
        return None
    unit = (interval.text("unit") or "").lower().rstrip("s")
    value = interval.this
    if unit not in SECONDS or not isinstance(value, exp.Literal):
        return None
    try:
        count = int(str(value.this))
    except ValueError:
        return None
    return count * SECONDS[unit] if count > 0 else None


def functions(tree: exp.Expression, problems: list[Problem]) -> exp.Expression:
    """ClickHouse calls sqlglot leaves as they are → their Spark template (`toDateTime(x)` → CAST(x AS TIMESTAMP))."""

    def translate(node: exp.Expression) -> exp.Expression:
        name = _call_name(node)
        if name is None:
            return node
        lowered = name.lower()
        args = _args(node)
        if lowered.endswith("simplestate") and len(lowered) > len("simplestate"):
            # A SimpleAggregateFunction column holds the plain aggregate's value: sumSimpleState(x) is sum(x).
            return translate(_call(name[: -len("SimpleState")], args))
        if lowered == "countdistinct":
            return exp.Count(this=exp.Distinct(expressions=args))
        if lowered == "extractall" and len(args) == 2:
            pattern = args[1].this if isinstance(args[1], exp.Literal) and args[1].is_string else None
            if pattern is not None:
                # ClickHouse returns the first group's matches when the pattern has one, else whole matches.
                group = 1 if "(" in pattern.replace("(?:", "").replace("\\(", "") else 0
                return _fill(f"regexp_extract_all({{0}}, {{1}}, {group})", args)
        if lowered == "multiif":
            return _multi_if(node, args, problems)
        if lowered == "range" and len(args) == 3:  # range(start, end, step): end excluded, sequence includes it
            return _fill("IF({1} > {0}, sequence({0}, {1} - 1, {2}), SLICE(ARRAY({0}), 1, 0))", args)
        if lowered == "tostartofinterval":
            seconds = _interval_seconds(args[1]) if len(args) == 2 else None
            if seconds is None:
                problems.append(Problem(node, f"`{name}` with a non-constant or month-or-longer interval has no "
                                        "Spark translation.", HINTS[lowered], name))
                return node
            return _fill(_bucket(seconds), args[:1])
        entry = TEMPLATES.get(lowered)
        if entry is None:
            return node
        arities, text = entry
        if len(args) not in arities:
            want = " or ".join(str(a) for a in arities)
            problems.append(Problem(node, f"`{name}` takes {want} argument(s), found {len(args)}.",
                                    f"Write {name}({', '.join(f'x{i}' for i in range(arities[0]))}).", name))
            return node
        if len(args) < max(arities):
            if lowered in DEFAULT_FIRST:
                args = [_template(DEFAULT_FIRST[lowered]).copy(), *args]
            elif lowered in DEFAULT_LAST:
                args = [*args, _template(DEFAULT_LAST[lowered]).copy()]
        return _fill(text, args)

    # Children first (reversed pre-order), so `toDate(toDateTime(x))` translates both calls.
    for node in reversed(list(tree.walk(bfs=False))):
        if _call_name(node) is None or isinstance(node.parent, exp.Table):  # a table function, e.g. range(n)
            continue
        new = translate(node)
        if new is not node:
            if node is tree:
                return new
            node.replace(new)
    return tree


def _multi_if(node: exp.Expression, args: list[exp.Expression], problems: list[Problem]) -> exp.Expression:
    """multiIf(c1, v1, c2, v2, ..., else) → CASE WHEN c1 THEN v1 ... ELSE else END."""
    if len(args) < 3 or len(args) % 2 == 0:
        problems.append(Problem(node, f"`multiIf` takes an odd number (3 or more) of arguments, found {len(args)}.",
                                "Write multiIf(cond1, value1, cond2, value2, ..., otherwise).", "multiIf"))
        return node
    case = exp.Case(ifs=[exp.If(this=args[i], true=args[i + 1]) for i in range(0, len(args) - 1, 2)],
                    default=args[-1])
    return case


# ------------------------------------------------------------------------------------------ clauses

RAND_CANONICAL = re.compile(r"\brandCanonical\s*\(", re.IGNORECASE)


def random_integers(tree: exp.Expression, problems: list[Problem]) -> exp.Expression:
    """ClickHouse's `rand()` is a random UInt32 (`rand() % 4` picks 0..3); Spark's is a double in [0, 1) →
    `CAST(floor(rand() * 4294967296) AS BIGINT)`."""
    for node in list(tree.find_all(exp.Rand)):
        if node.this is not None:
            continue
        number = exp.cast(exp.Floor(this=exp.Mul(this=exp.Rand(), expression=exp.Literal.number(4294967296))),
                          exp.DataType.build("BIGINT"))
        if node is tree:
            return number
        node.replace(number)
    return tree


_CONDITIONS = (exp.Predicate, exp.Connector, exp.Not)


def boolean_aggregates(tree: exp.Expression, problems: list[Problem]) -> exp.Expression:
    """A condition is a UInt8 (0 or 1) in ClickHouse, so `avg(x = 'high')` is a share and `sum(x > 0)` a count;
    Spark's avg and sum take numbers → `avg(CAST(x = 'high' AS INT))`."""
    for node in list(tree.find_all(exp.Avg, exp.Sum)):
        if isinstance(node.this, _CONDITIONS) or (
                isinstance(node.this, exp.Paren) and isinstance(node.this.this, _CONDITIONS)):
            node.set("this", exp.cast(node.this, exp.DataType.build("INT")))
    return tree


def _is_float(node: exp.Expression) -> bool:
    """An expression that is a Float64 in ClickHouse whatever its inputs: a division, an average, a float cast."""
    while isinstance(node, exp.Paren):
        node = node.this
    if isinstance(node, exp.Div | exp.Avg):
        return True
    if isinstance(node, exp.Cast):
        return node.to.this in (exp.DataType.Type.DOUBLE, exp.DataType.Type.FLOAT)
    return (_call_name(node) or "").lower() in ("tofloat64", "tofloat32", "tofloat64orzero", "tofloat64ornull")


def _bround(value: exp.Expression, digits: int) -> exp.Expression:
    return exp.Paren(this=_fill("bround({0})", [value]) if digits == 0 else
                     _fill(f"bround(({{0}}) * 1E{digits}) / 1E{digits}", [value]))


def float_rounding(tree: exp.Expression, problems: list[Problem]) -> exp.Expression:
    """ClickHouse's `round(x, n)` of a Float64 rounds x * 10^n half to even (nearbyint): `round(50 / 8, 2)` is 6.25
    but `round(53 / 8, 2)` is 6.62, where Spark's round (half up, on the decimal text) gives 6.63 →
    `bround(x * 1E n) / 1E n`. Where x is certainly a float (a division, avg, toFloat64) now; otherwise by its type
    once the columns' types are known (the ROUND marker): a Decimal or integer round keeps Spark's round."""
    for node in list(tree.find_all(exp.Round)):
        decimals = node.args.get("decimals")
        if decimals is not None and not (isinstance(decimals, exp.Literal) and not decimals.is_string
                                         and decimals.this.isdigit()):
            continue
        digits = int(decimals.this) if decimals is not None else 0
        if _is_float(node.this):
            replacement = _bround(node.this, digits)
        else:
            replacement = exp.Anonymous(this=ROUND, expressions=[node.this] + ([decimals] if decimals else []))
        if node is tree:
            return replacement
        node.replace(replacement)
    return tree


def distinct_ifs(tree: exp.Expression, problems: list[Problem]) -> exp.Expression:
    """`countIf(DISTINCT x, cond)` → `count(DISTINCT IF(cond, x, NULL))`: Spark's count_if takes the condition
    only."""
    for node in list(tree.find_all(exp.CountIf)):
        distinct = node.this
        if not isinstance(distinct, exp.Distinct) or len(distinct.expressions) != 2:
            continue
        value, condition = distinct.expressions
        counted = exp.Count(this=exp.Distinct(expressions=[
            exp.If(this=condition.copy(), true=value.copy(), false=exp.Null())]))
        if node is tree:
            return counted
        node.replace(counted)
    return tree


def count_star(tree: exp.Expression, problems: list[Problem]) -> exp.Expression:
    """`count()` → `count(*)`: Spark's count needs an argument."""
    for count in tree.find_all(exp.Count):
        if count.this is None and not count.expressions:
            count.set("this", exp.Star())
    return tree


def boolean_literals(tree: exp.Expression, problems: list[Problem]) -> exp.Expression:
    """`WHERE 1 AND x` → `WHERE TRUE AND x`: ClickHouse reads numbers as booleans, Spark does not."""

    def as_boolean(node: exp.Expression | None) -> None:
        if isinstance(node, exp.Literal) and not node.is_string:
            node.replace(exp.Boolean(this=str(node.this) not in ("0", "0.0")))

    for node in list(tree.find_all(exp.And, exp.Or, exp.Not, exp.Where, exp.Having)):
        as_boolean(node.this)
        as_boolean(node.args.get("expression"))
    return tree


def prewhere(tree: exp.Expression, problems: list[Problem]) -> exp.Expression:
    """`PREWHERE a WHERE b` → `WHERE a AND b` (PREWHERE is a ClickHouse read optimization, the same filter)."""
    for select in tree.find_all(exp.Select):
        pre = select.args.get("prewhere")
        if pre is None:
            continue
        where = select.args.get("where")
        condition = pre.this if where is None else exp.and_(pre.this, where.this)
        select.set("prewhere", None)
        select.set("where", exp.Where(this=condition))
    return tree


def scalar_with(tree: exp.Expression, problems: list[Problem]) -> exp.Expression:
    """`WITH expr AS x SELECT ... x ...` (a ClickHouse scalar alias, not a CTE) → the expression in place of x."""
    for with_ in list(tree.find_all(exp.With)):
        scalars = [cte for cte in with_.expressions if cte.args.get("scalar")]
        if not scalars:
            continue
        query = with_.parent
        for cte in scalars:
            name, value = cte.alias, cte.this
            cte.pop()
            for column in list(query.find_all(exp.Column)):
                if column.name == name and not column.table and not column.meta.get(ALIAS_BODY):
                    # A bare `SELECT x` keeps its output name; an x inside the value is the column, for good.
                    projected = isinstance(column.parent, exp.Select) and column.arg_key == "expressions"
                    copy = value.copy()
                    for inner in copy.find_all(exp.Column):
                        if inner.name == name and not inner.table:
                            inner.meta[ALIAS_BODY] = True
                    column.replace(exp.alias_(copy, name) if projected else _operand(copy))
        if not with_.expressions:
            with_.pop()
    return tree


def _operand(value: exp.Expression) -> exp.Expression:
    """An expression put in place of a name keeps its meaning inside a larger one: `-x` with x = `a + 1` is
    `-(a + 1)`."""
    atomic = (exp.Column, exp.Literal, exp.Func, exp.Paren, exp.Subquery, exp.Null, exp.Boolean, exp.Cast)
    return value if isinstance(value, atomic) else exp.Paren(this=value)


ALIAS_BODY = "pf_alias_body"  # meta of the column an alias named after it reads, put in place with its expression


def _own_scope_columns(select: exp.Select, parts: list[exp.Expression]) -> list[exp.Column]:
    """Unqualified columns of `parts` that belong to `select` itself: not inside a nested query, not a lambda's
    parameter."""
    found = []
    for part in parts:
        for column in part.find_all(exp.Column):
            if column.table or column.meta.get(ALIAS_BODY):
                continue
            owner = column.find_ancestor(exp.Select)
            if owner is not select and owner is not None:
                continue
            lambda_ = column.find_ancestor(exp.Lambda)
            if lambda_ is not None and column.name in {e.name for e in lambda_.expressions}:
                continue
            found.append(column)
    return found


def select_aliases(tree: exp.Expression, problems: list[Problem], spark_read: bool = False) -> exp.Expression:
    """ClickHouse aliases are visible in the whole SELECT: `SELECT toStartOfHour(ts) AS hour ... WHERE hour > x`, or
    `row_number() OVER (ORDER BY total) AS rank, sum(s) AS total`. Spark sees neither, so the aliased expression is
    put in place of the name in WHERE, GROUP BY, HAVING and the other columns of the SELECT (an alias shadows a column
    of the same name, as in ClickHouse, where Spark's GROUP BY would take the column; inside its own expression the
    name is the column). ORDER BY keeps the name: Spark resolves output names first there.

    On a query read as Spark SQL (`spark_read`), only where Spark cannot see the alias — WHERE, HAVING, a window,
    a column before the alias — and only for an alias whose expression does not read a column of its own name (a
    name that is a column keeps Spark's meaning)."""
    for select in list(tree.find_all(exp.Select)):
        # ClickHouse also names an expression inside another (`multiIf(c, concat(a, b) AS region, d)`); Spark
        # cannot: the inner alias is taken out, its name still read as the expression elsewhere in the SELECT.
        nested = [] if spark_read else [a for a in select.find_all(exp.Alias) if a.parent is not select
                                        and a.find_ancestor(exp.Select) is select]
        aliases = {}
        for projection in select.expressions:
            # `sum(x) AS x, x / 2`: ClickHouse reads the later x as the alias too (inside its own expression x is the
            # column); Spark's lateral alias would not, so read as Spark only an alias not named after its column.
            if isinstance(projection, exp.Alias):
                aliases.setdefault(projection.alias, projection)
        for alias in nested:
            expression = alias.this
            alias.replace(expression)
            if alias.alias not in aliases and not any(c.name == alias.alias for c in expression.find_all(exp.Column)):
                aliases[alias.alias] = exp.alias_(expression.copy(), alias.alias)  # the name, read elsewhere
        if not aliases:
            continue
        if not spark_read and _filters_generated_rows(select, aliases):
            # `SELECT arrayJoin(...) AS d ... WHERE d <= now()`: ClickHouse filters the rows the array joined;
            # the generator cannot move into Spark's WHERE, so the filter moves around the query instead.
            where = select.args["where"].pop()
            outer = exp.select("*").from_(exp.Subquery(this=select.copy(), alias=exp.TableAlias(
                this=exp.to_identifier("_array_join_rows")))).where(where.this)
            if select is tree:
                tree = outer
            else:
                select.replace(outer)
            continue
        for _ in range(len(aliases)):  # an alias may use another one; a cycle stops after as many rounds
            changed = False
            parts = [p for p in select.expressions]
            parts += [select.args[k] for k in ("where", "having", "qualify") if select.args.get(k) is not None]
            if not spark_read and select.args.get("group") is not None:
                parts.append(select.args["group"])
            for column in _own_scope_columns(select, parts):
                definition = aliases.get(column.name)
                if definition is None or column.find_ancestor(exp.Alias) is definition:
                    continue
                if spark_read and not _hidden_from_spark(select, column, definition):
                    continue
                if spark_read and _named_after_its_column(definition) and \
                        not _ungrouped_aggregate_alias(select, column, definition):
                    continue  # Spark reads the column there, and can: its meaning stays
                projected = isinstance(column.parent, exp.Select) and column.arg_key == "expressions"
                value = definition.this.copy()
                for inner in value.find_all(exp.Column):  # `sum(x) AS x`: the x inside is the column, for good
                    if inner.name == column.name and not inner.table:
                        inner.meta[ALIAS_BODY] = True
                column.replace(exp.alias_(value, column.name) if projected else _operand(value))
                changed = True
            if not changed:
                break
    return tree


def _named_after_its_column(definition: exp.Alias) -> bool:
    return any(c.name == definition.alias and not c.table for c in definition.this.find_all(exp.Column))


def _filters_generated_rows(select: exp.Select, aliases: dict[str, exp.Alias]) -> bool:
    """Whether the WHERE of `select` uses an alias of a generator (arrayJoin) and names nothing but aliases, so
    that it can filter the query's rows from outside. Not with GROUP BY, HAVING, ORDER BY or LIMIT."""
    where = select.args.get("where")
    if where is None or any(select.args.get(k) for k in ("group", "having", "order", "limit", "offset")):
        return False
    names = {c.name for c in _own_scope_columns(select, [where])}
    generated = {name for name, alias in aliases.items() if alias.this.find(exp.Explode) is not None}
    return bool(names & generated) and names <= set(aliases) and \
        all(isinstance(p, exp.Alias) for p in select.expressions)


def _hidden_from_spark(select: exp.Select, column: exp.Column, definition: exp.Alias) -> bool:
    """Whether Spark cannot resolve `column` as the alias `definition` (a lateral alias works only in a later column
    of the SELECT, outside window specifications)."""
    if column.find_ancestor(exp.Window) is not None:
        return True
    node: exp.Expression = column
    while node.parent is not None and node.parent is not select:
        node = node.parent
    if node.arg_key != "expressions":  # WHERE, HAVING, QUALIFY
        return True
    positions = {id(p): i for i, p in enumerate(select.expressions)}
    return positions[id(node)] < positions[id(definition)] or _ungrouped_aggregate_alias(select, column, definition)


def _is_aggregate_call(node: exp.Expression) -> bool:
    name = _call_name(node)
    return isinstance(node, exp.AggFunc) or (name is not None and (
        name.lower() in ALL_AGGREGATES or split_clickhouse_name(name) is not None))


def _ungrouped_aggregate_alias(select: exp.Select, column: exp.Column, definition: exp.Alias) -> bool:
    """`uniq(s) AS visits, sum(b) / visits` over a source that has a column `visits`: Spark takes the column (a
    later column sees the alias only when the source has no such column), not grouped by, and rejects the query;
    the alias of an aggregate is the only reading that stands, as in ClickHouse."""
    if not any(_is_aggregate_call(n) for n in definition.this.walk()):
        return False
    group = select.args.get("group")
    if group is not None and any(isinstance(e, exp.Column) and e.name == column.name for e in group.expressions):
        return False
    ancestor = column.parent
    while ancestor is not None and ancestor is not select:
        if _is_aggregate_call(ancestor):
            return False
        ancestor = ancestor.parent
    return True


_ASCII_CASE = ("'ABCDEFGHIJKLMNOPQRSTUVWXYZ'", "'abcdefghijklmnopqrstuvwxyz'")


def byte_strings(tree: exp.Expression, problems: list[Problem]) -> exp.Expression:
    """ClickHouse's plain string functions work on bytes, their -UTF8 forms (lowerUTF8 ...) on characters: `lower` and
    `upper` change ASCII letters only, `length` counts bytes, `substring` cuts bytes. Spark's work on characters →
    `translate` of the ASCII letters, `octet_length`, `substring` of the UTF-8 bytes (a character it cuts reads as
    U+FFFD)."""
    for node in list(tree.find_all(exp.Lower, exp.Upper, exp.Length, exp.Substring)):
        if isinstance(node, exp.Lower | exp.Upper):
            source, target = _ASCII_CASE if isinstance(node, exp.Lower) else reversed(_ASCII_CASE)
            new = _fill(f"translate({{0}}, {source}, {target})", [node.this])
        elif isinstance(node, exp.Length):
            if not node.args.get("binary"):
                continue
            new = _fill("octet_length({0})", [node.this])
        else:
            start, length = node.args.get("start"), node.args.get("length")
            if start is None:
                continue
            args = [node.this, start] + ([length] if length is not None else [])
            cut = "substring(encode({0}, 'UTF-8'), {1}, {2})" if length is not None else \
                "substring(encode({0}, 'UTF-8'), {1})"
            new = _fill(f"make_valid_utf8(CAST({cut} AS STRING))", args)  # a cut character: U+FFFD
        if node is tree:
            return new
        node.replace(new)
    return tree


# formatDateTime's specifiers → Spark's datetime pattern letters (what has none is a problem).
_DATETIME_SPECIFIERS = {
    "Y": "yyyy", "y": "yy", "C": None, "m": "MM", "c": "MM", "d": "dd", "H": "HH", "k": "HH", "I": "hh", "h": "hh",
    "l": "hh", "e": "d", "i": "mm", "M": "MMMM", "S": "ss", "s": "ss", "f": "SSSSSS", "F": "yyyy-MM-dd", "T": "HH:mm:ss",
    "D": "MM/dd/yy", "R": "HH:mm", "r": "hh:mm a", "j": "DDD", "a": "EEE", "b": "MMM", "W": "EEEE", "p": "a",
    "z": "xx", "%": "%",
}


def _datetime_pattern(text: str) -> tuple[str, str | None]:
    """A formatDateTime format as a Spark pattern (letters outside specifiers quoted), and the first specifier with
    no Spark letter, if any."""
    out, literal, i = [], "", 0

    def flush() -> None:
        nonlocal literal
        if literal:
            out.append("'" + literal.replace("'", "''") + "'" if any(c.isalpha() or c == "'" for c in literal)
                       else literal)
            literal = ""

    while i < len(text):
        if text[i] == "%" and i + 1 < len(text):
            letter = text[i + 1]
            pattern = _DATETIME_SPECIFIERS.get(letter)
            if pattern is None:
                return "", f"%{letter}"
            if letter == "%":
                literal += "%"
            else:
                flush()
                out.append(pattern)
            i += 2
        else:
            literal += text[i]
            i += 1
    flush()
    return "".join(out), None


def format_datetimes(tree: exp.Expression, problems: list[Problem]) -> exp.Expression:
    """`formatDateTime(ts, '%FT%T', tz)` → `date_format(from_utc_timestamp(ts, tz), "yyyy-MM-dd'T'HH:mm:ss")`:
    ClickHouse's specifiers (%i is minutes, %M the month's name) as Spark's pattern letters."""
    for node in list(tree.find_all(exp.TimeToStr)):
        fmt = node.args.get("format")
        if not isinstance(fmt, exp.Literal) or not fmt.is_string:
            continue
        pattern, unknown = _datetime_pattern(fmt.this)
        if unknown is not None:
            problems.append(Problem(node, f"formatDateTime's `{unknown}` has no Spark translation yet.",
                                    "Use %Y %m %d %e %H %i %S %F %T %D %R %r %y %j %a %b %W %M %p %I %k %l %f %z, or "
                                    "build the text with toString/leftPad.", "formatDateTime"))
            continue
        value = node.this.copy()
        zone = node.args.get("zone")
        if zone is not None:
            value = exp.Anonymous(this="from_utc_timestamp", expressions=[value, zone.copy()])
        new = exp.Anonymous(this="date_format", expressions=[value, exp.Literal.string(pattern)])
        if node is tree:
            return new
        node.replace(new)
    return tree


def in_arrays(tree: exp.Expression, problems: list[Problem]) -> exp.Expression:
    """`x IN splitByChar(',', s)`: ClickHouse takes an array (a function's) as the set IN reads; Spark's IN takes a
    list or a subquery → `array_contains(splitByChar(...), x)`."""
    for node in list(tree.find_all(exp.In)):
        field = node.args.get("field")
        if not isinstance(field, exp.Func):
            continue
        new = exp.Anonymous(this="array_contains", expressions=[field.copy(), node.this.copy()])
        if node is tree:
            return new
        node.replace(new)
    return tree


def json_defaults(tree: exp.Expression, problems: list[Problem]) -> exp.Expression:
    """`JSONExtractString(j, 'k')` / `JSONExtractRaw` (which sqlglot reads itself) are '' for a missing key or invalid
    JSON in ClickHouse, never NULL → `coalesce(get_json_object(...), '')`."""
    for node in list(tree.find_all(exp.JSONExtractScalar, exp.JSONExtract)):
        if isinstance(node.parent, exp.Coalesce):
            continue
        new = exp.Coalesce(this=node.copy(), expressions=[exp.Literal.string("")])
        if node is tree:
            return new
        node.replace(new)
    return tree


def weekdays(tree: exp.Expression, problems: list[Problem]) -> exp.Expression:
    """`toDayOfWeek(ts)`: Monday 1 to Sunday 7 → `weekday(ts) + 1` (Spark's weekday counts from Monday = 0)."""
    for node in list(tree.find_all(exp.DayOfWeekIso)):
        new = exp.Paren(this=_fill("weekday({0}) + 1", [node.this]))
        if node is tree:
            return new
        node.replace(new)
    return tree


# dateDiff(unit, a, b) counts the unit's boundaries crossed from a to b (toRelativeHourNum(b) - ...), not whole units
# elapsed as Spark's datediff does: 10:59:59 to 11:00:00 is one hour. Weeks start on Monday (1970-01-01 was a
# Thursday, hence + 3 days).
_BOUNDARIES = {
    "second": "(unix_timestamp({1}) - unix_timestamp({0}))",
    "minute": "(floor(unix_timestamp({1}) / 60) - floor(unix_timestamp({0}) / 60))",
    "hour": "(floor(unix_timestamp({1}) / 3600) - floor(unix_timestamp({0}) / 3600))",
    "day": "(floor(unix_timestamp({1}) / 86400) - floor(unix_timestamp({0}) / 86400))",
    "week": "(floor((floor(unix_timestamp({1}) / 86400) + 3) / 7) - floor((floor(unix_timestamp({0}) / 86400) + 3) / 7))",
    "month": "((year({1}) * 12 + month({1})) - (year({0}) * 12 + month({0})))",
    "quarter": "((year({1}) * 4 + quarter({1})) - (year({0}) * 4 + quarter({0})))",
    "year": "(year({1}) - year({0}))",
}


def date_diffs(tree: exp.Expression, problems: list[Problem]) -> exp.Expression:
    """`dateDiff('hour', a, b)` → the difference of the hour numbers of b and a (see _BOUNDARIES)."""
    for node in list(tree.find_all(exp.DateDiff)):
        unit = (node.text("unit") or "day").lower().rstrip("s")
        template = _BOUNDARIES.get(unit)
        if template is None:
            continue
        new = exp.cast(_fill(template, [node.expression, node.this]), exp.DataType.build("BIGINT"))
        if node is tree:
            return new
        node.replace(new)
    return tree


def date_truncs(tree: exp.Expression, problems: list[Problem]) -> exp.Expression:
    """toStartOfWeek/Month/Quarter/Year (and toMonday) return a Date in ClickHouse, not a timestamp; and
    `date_trunc('hour', ts)` keeps its timestamp meaning (sqlglot would write Spark's date-only TRUNC)."""
    for trunc in list(tree.find_all(exp.TimestampTrunc)):
        unit = (trunc.text("unit") or "").upper()
        if unit in ("WEEK", "MONTH", "QUARTER", "YEAR"):
            trunc.replace(exp.Cast(this=trunc.copy(), to=exp.DataType.build("DATE")))
    for trunc in list(tree.find_all(exp.DateTrunc)):
        trunc.replace(exp.TimestampTrunc(this=trunc.this, unit=trunc.args.get("unit")))
    return tree


def final_reads(tree: exp.Expression, problems: list[Problem]) -> exp.Expression:
    """`FROM t FINAL` → `FROM t`, the table marked (`final.FINAL_MARK` in its meta): the compiler, which knows the
    datasource's engine, replaces it by a deduplicating subquery (`final.dedupe_final`)."""
    for final in list(tree.find_all(exp.Final)):
        table = final.this
        if not isinstance(table, exp.Table) or not table.name or table.args.get("db") \
                or not isinstance(table.this, exp.Identifier):
            problems.append(Problem(final, "`FINAL` applies to a datasource read by name.",
                                    "Read the datasource itself with FINAL: FROM name FINAL.", "final"))
            continue
        table.meta[FINAL_MARK] = True
        final.replace(table)
    return tree


def _numbered_tables(tree: exp.Expression) -> list[tuple[tuple[str, str, int], exp.Table]]:
    """Each table with (name, alias, how many tables of that name and alias come before it)."""
    seen: dict[tuple[str, str], int] = {}
    numbered = []
    for table in tree.find_all(exp.Table):
        key = (table.name, table.alias_or_name)
        seen[key] = seen.get(key, -1) + 1
        numbered.append(((*key, seen[key]), table))
    return numbered


def _final_keys(tree: exp.Expression) -> set[tuple[str, str, int]]:
    return {key for key, table in _numbered_tables(tree) if table.meta_get(FINAL_MARK)}


def _mark_final(tree: exp.Expression, keys: set[tuple[str, str, int]]) -> exp.Expression:
    """Mark again the tables read with FINAL in a tree parsed from generated text (meta does not survive it)."""
    for key, table in _numbered_tables(tree):
        if key in keys:
            table.meta[FINAL_MARK] = True
    return tree


def unsupported_clauses(tree: exp.Expression, problems: list[Problem]) -> exp.Expression:
    """ClickHouse clauses with no Spark translation yet, each with what to write instead."""
    for limit in tree.find_all(exp.Limit):
        if limit.expressions:
            problems.append(Problem(limit, "`LIMIT n BY ...` is not supported yet.",
                                    "Use row_number() OVER (PARTITION BY ... ORDER BY ...) <= n in a subquery.", "by"))
    for join in tree.find_all(exp.Join):
        kind = join.text("kind").upper()
        if kind == "ANY":
            problems.append(Problem(join, "`ANY ... JOIN` (one matching row per left row) is not supported yet.",
                                    "Join a subquery that keeps one row per key (GROUP BY key), then a plain JOIN.", "any"))
    return tree


FILL_ROWS, FILL_SERIES, FILL_KEY = "_pf_fill_rows", "_pf_fill", "_pf_fill_key"  # subquery aliases, local
FILL_HINT = ("Write one WITH FILL key, an output column of the SELECT, with a STEP: ORDER BY ts WITH FILL [FROM a] "
             "[TO b] STEP toIntervalMinute(1); or join the result to explode(sequence(start, end, step)) yourself.")
_NUMERIC_AGGREGATES = ("count", "uniq", "sum", "avg")


def _fill_bound(fill: exp.WithFill, arg: str) -> exp.Expression | None:
    value = fill.args.get(arg)
    return value if isinstance(value, exp.Expression) else None


def _fill_problem(select: exp.Expression | None, ordered: exp.Ordered, fill: exp.WithFill) -> str | None:
    """Why this WITH FILL has no translation yet, or None."""
    if not isinstance(select, exp.Select) or len(select.args["order"].expressions) != 1:
        return "`ORDER BY ... WITH FILL` with several ORDER BY keys is not supported yet."
    if fill.args.get("interpolate"):
        return "`WITH FILL ... INTERPOLATE` is not supported yet."
    if _fill_bound(fill, "step") is None:
        return "`WITH FILL` without STEP is not supported yet (ClickHouse's default step depends on the key's type)."
    step = _fill_bound(fill, "step")
    if ordered.args.get("desc") and isinstance(step, exp.Literal) and not step.is_string:
        return "`ORDER BY ... DESC WITH FILL` needs a negative STEP (ClickHouse refuses a positive one)."
    key = ordered.this
    names = [p.alias_or_name for p in select.expressions]
    if any(isinstance(p, exp.Star) or (isinstance(p, exp.Column) and p.is_star) for p in select.expressions) \
            or not isinstance(key, exp.Column) or key.table or key.name not in names:
        return "`WITH FILL` on a key that is not a named output column of the SELECT is not supported yet."
    return None


def _fill_default(projection: exp.Expression) -> exp.Expression | None:
    """The value ClickHouse puts in a filled row for this column, as far as its expression shows its type: 0 for a
    count, sum, average or arithmetic, '' for a string; None (NULL) when the expression does not tell."""
    value = projection.this if isinstance(projection, exp.Alias) else projection
    while isinstance(value, exp.Paren):
        value = value.this
    name = (_call_name(value) or "").lower()
    if isinstance(value, exp.Count | exp.Sum | exp.Avg | exp.ApproxDistinct | exp.CountIf | exp.Add | exp.Sub
                  | exp.Mul | exp.Div | exp.Mod) or name.startswith(_NUMERIC_AGGREGATES) \
            or (isinstance(value, exp.Literal) and not value.is_string):
        return exp.Literal.number(0)
    if isinstance(value, exp.Concat) or (isinstance(value, exp.Literal) and value.is_string):
        return exp.Literal.string("")
    return None


def _filled(select: exp.Select, ordered: exp.Ordered, fill: exp.WithFill) -> exp.Select:
    """`SELECT ... ORDER BY k WITH FILL FROM a TO b STEP s LIMIT n` → the rows, fully joined with the series
    a, a + s, ... < b of k (from the least to the greatest k of the rows when FROM / TO are not given; for DESC from
    the greatest down, > b, by the negative s), the other columns of a filled row at their type's default, ordered by
    k, then LIMIT.
    The rows are a subquery (read twice without FROM / TO), not a CTE: Spark SQL hoists CTEs to the statement, where
    the same name in two nodes would clash; the query's own CTEs move to the outer query."""
    key = ordered.this.name
    rows = select.copy()
    for arg in ("order", "limit", "offset", "with_"):
        rows.set(arg, None)
    start, stop, step = _fill_bound(fill, "from_"), _fill_bound(fill, "to"), _fill_bound(fill, "step")
    assert step is not None
    row_key = exp.column(key, FILL_ROWS, quoted=True)
    desc = bool(ordered.args.get("desc"))  # from the greatest key down, by the (negative) STEP as written
    first, last = (exp.Max, exp.Min) if desc else (exp.Min, exp.Max)
    low = start.copy() if start is not None else first(this=row_key.copy())
    high = stop.copy() if stop is not None else last(this=row_key.copy())
    series: exp.Expression = exp.Anonymous(this="sequence", expressions=[low, high, step.copy()])
    if stop is not None:  # ClickHouse's TO is exclusive
        before = (exp.GT if desc else exp.LT)(this=exp.column("_pf_v"), expression=stop.copy())
        series = exp.Anonymous(this="filter", expressions=[series, exp.Lambda(
            this=before, expressions=[exp.to_identifier("_pf_v")])])
    generate = exp.select(exp.alias_(exp.Explode(this=series), FILL_KEY))
    if start is None or stop is None:
        generate = generate.from_(rows.copy().subquery(FILL_ROWS))
    filled_row = exp.and_(row_key.copy().is_(exp.null()), exp.Not(this=exp.column(FILL_KEY, FILL_SERIES).is_(exp.null())))
    projections: list[exp.Expression] = []
    for projection in select.expressions:
        name = projection.alias_or_name
        mine = exp.column(name, FILL_ROWS, quoted=True)
        if name == key:
            value: exp.Expression = exp.Coalesce(this=mine, expressions=[exp.column(FILL_KEY, FILL_SERIES)])
        else:
            default = _fill_default(projection)
            value = mine if default is None else exp.Case(ifs=[exp.If(this=filled_row.copy(), true=default)],
                                                          default=mine)
        projections.append(exp.alias_(value, name, quoted=True))
    order = ordered.copy()
    order.set("with_fill", None)
    order.set("this", exp.column(key, quoted=True))
    outer = exp.select(*projections).from_(generate.subquery(FILL_SERIES)).join(
        rows.subquery(FILL_ROWS), join_type="FULL OUTER",
        on=exp.EQ(this=exp.column(FILL_KEY, FILL_SERIES), expression=row_key.copy()))
    outer.set("order", exp.Order(expressions=[order]))
    for arg in ("limit", "offset", "with_"):
        if select.args.get(arg) is not None:
            outer.set(arg, select.args[arg].copy())
    return outer


def with_fill(tree: exp.Expression, problems: list[Problem]) -> exp.Expression:
    """`ORDER BY k WITH FILL [FROM a] [TO b] STEP s`: ClickHouse adds a row for each missing k of the series
    a, a + s, ... (FROM inclusive, TO exclusive; the rows' least and greatest k when not given) → the SELECT fully
    joined with `explode(sequence(a, b, s))` (see `_filled`). Several keys, INTERPOLATE, no STEP: problems."""
    for ordered in list(tree.find_all(exp.Ordered)):
        fill = ordered.args.get("with_fill")
        if fill is None:
            continue
        order = ordered.parent
        select = order.parent if isinstance(order, exp.Order) and order.arg_key == "order" else None
        problem = _fill_problem(select, ordered, fill)
        if problem is not None:
            problems.append(Problem(ordered, problem, FILL_HINT, "with fill"))
            continue
        assert isinstance(select, exp.Select)
        filled = _filled(select, ordered, fill)
        if select is tree:
            tree = filled
        else:
            select.replace(filled)
    return tree


def frame_functions(tree: exp.Expression, problems: list[Problem]) -> exp.Expression:
    """`lagInFrame(x) OVER (...)` → `lag(x) OVER (...)` when the frame holds every earlier row (no frame, or from
    UNBOUNDED PRECEDING); `leadInFrame` → `lead` when it holds every later row (to UNBOUNDED FOLLOWING). Spark's
    lag/lead take no frame, so it is dropped; other frames change the answer and are problems."""
    for window in list(tree.find_all(exp.Window)):
        name = _call_name(window.this) or ""
        if name.lower() not in ("laginframe", "leadinframe"):
            continue
        spec = window.args.get("spec")
        lag = name.lower() == "laginframe"
        if lag:
            whole = spec is None or (spec.text("start").upper() == "UNBOUNDED"
                                     and spec.text("start_side").upper() == "PRECEDING")
        else:
            whole = spec is not None and spec.text("end").upper() == "UNBOUNDED" \
                and spec.text("end_side").upper() == "FOLLOWING"
        if not whole:
            problems.append(Problem(window, f"`{name}` over a frame that does not reach the "
                                    f"{'first' if lag else 'last'} row has no Spark translation.",
                                    f"Use {'lag' if lag else 'lead'}(x, offset, default) OVER (PARTITION BY ... "
                                    "ORDER BY ...), which looks outside any frame.", name))
            continue
        args = _args(window.this)
        if len(args) == 1:  # ClickHouse's default for a row outside the frame is the type's default, not NULL
            args = [args[0], exp.Literal.number(1), _zero_of(args[0])]
        elif len(args) == 2:
            args = [*args, _zero_of(args[0])]
        window.set("this", exp.Anonymous(this="lag" if lag else "lead", expressions=args))
        window.set("spec", None)
    return tree


def array_indexes(tree: exp.Expression, problems: list[Problem]) -> exp.Expression:
    """`arr[i]` (1-based, negative from the end, the element type's default when out of range or 0) →
    `coalesce(try_element_at(arr, i), <default>)` (the default filled in by `resolve_defaults` from the array's
    type), where `arr[i - 1]` would fail the query. sqlglot has already shifted integer literals to 0-based; the
    original index is restored. `map['key']` stays as it is."""
    for bracket in list(tree.find_all(exp.Bracket)):
        if len(bracket.expressions) != 1:
            continue
        index = bracket.expressions[0]
        if isinstance(index, exp.Literal) and index.is_string:
            continue
        computed = False
        if isinstance(index, exp.Literal):
            index = exp.Literal.number(int(index.this) + 1)
        elif isinstance(index, exp.Neg) and isinstance(index.this, exp.Literal) and not index.this.is_string:
            index = exp.Literal.number(-int(index.this.this) + 1)
        else:  # a computed index (`arr[rand() % 4 + 1]`, a BIGINT): Spark's try_element_at takes an INT, never 0
            index, computed = exp.cast(index, exp.DataType.build("INT")), True
        if isinstance(index, exp.Literal) and index.this == "0":
            element: exp.Expression = exp.Null()
        elif computed:
            element = _fill("IF({1} = 0, NULL, try_element_at({0}, {1}))", [bracket.this, index])
        else:
            element = exp.Anonymous(this="try_element_at", expressions=[bracket.this, index])
        call = exp.Coalesce(this=element, expressions=[_zero_of(bracket.this, element=True)])
        if bracket is tree:
            return call
        bracket.replace(call)
    return tree


# Markers for what needs a type to be written: the default value ClickHouse gives a missing value of an
# expression's type (`__pf_zero(x)`; `__pf_zero_element(arr)` for an array's elements), and `round` of an expression
# whose type decides how it rounds (`__pf_round(x, n)`). `resolve_defaults` writes them out once the columns' types
# are known; parse_select always does, so no marker reaches Spark.
ZERO, ZERO_ELEMENT, ROUND = "__pf_zero", "__pf_zero_element", "__pf_round"
MARKERS = frozenset({ZERO, ZERO_ELEMENT, ROUND})


def _zero_of(value: exp.Expression, element: bool = False) -> exp.Expression:
    return exp.Anonymous(this=ZERO_ELEMENT if element else ZERO, expressions=[value.copy()])


def _zero(spark_type: str | None) -> exp.Expression:
    """ClickHouse's default of a type (a missing value, an out-of-range element): 0, '', the epoch, an empty array."""
    if spark_type is None:
        return exp.Null()
    if spark_type in ("TINYINT", "SMALLINT", "INT", "BIGINT", "FLOAT", "DOUBLE") or spark_type.startswith("DECIMAL"):
        return exp.cast(exp.Literal.number(0), exp.DataType.build(spark_type))
    literal = {"STRING": "''", "BOOLEAN": "FALSE", "DATE": "DATE '1970-01-01'",
               "TIMESTAMP": "TIMESTAMP '1970-01-01 00:00:00'"}.get(spark_type)
    if literal is not None:
        return _template(literal).copy()
    if spark_type.startswith("ARRAY<"):
        return exp.cast(exp.Array(expressions=[]), exp.DataType.build(spark_type, dialect=SPARK))
    return exp.Null()


def resolve_defaults(tree: exp.Expression, types: dict[str, str | None]) -> exp.Expression:
    """Write out the markers (ZERO, ZERO_ELEMENT, ROUND) with the types of `types` (column name, lower case → Spark
    type): a default of a type that cannot be told is NULL, and `round` of one rounds as Spark does. A boolean
    literal compared with a number is the number ClickHouse reads it as."""
    scope = _CaseInsensitive(types)
    if types:
        tree = _numeric_booleans(tree, scope)
    markers = [node for node in tree.find_all(exp.Anonymous) if str(node.this) in MARKERS]
    if not markers:
        return tree
    for node in reversed(markers):  # innermost first
        name, args = str(node.this), list(node.expressions)
        if name == ROUND:
            kind = infer(args[0], scope)
            digits = args[1] if len(args) > 1 else None
            if kind in ("FLOAT", "DOUBLE") and (digits is None or (isinstance(digits, exp.Literal) and
                                                                   str(digits.this).isdigit())):
                new: exp.Expression = _bround(args[0], int(digits.this) if digits is not None else 0)
            else:
                new = exp.Round(this=args[0], decimals=digits)
        else:
            kind = infer(args[0], scope)
            if name == ZERO_ELEMENT:
                kind = kind[6:-1] if kind is not None and kind.startswith("ARRAY<") else None
            new = _zero(kind)
        parent = node.parent
        if isinstance(new, exp.Null) and isinstance(parent, exp.Coalesce) and parent.expressions == [node]:
            node, new = parent, parent.this  # `coalesce(x, NULL)` is x
        if node is tree:
            return new
        node.replace(new)
    return tree


_NUMBERS = ("TINYINT", "SMALLINT", "INT", "BIGINT", "FLOAT", "DOUBLE")


def _numeric_booleans(tree: exp.Expression, scope: Mapping[str, str | None]) -> exp.Expression:
    """`sent = true` where `sent` is a UInt8 flag: ClickHouse's true is 1 and compares with numbers; Spark's does not
    → `sent = 1`."""
    for node in list(tree.find_all(exp.EQ, exp.NEQ)):
        for side, other in (("expression", node.this), ("this", node.expression)):
            literal = node.args.get(side)
            if isinstance(literal, exp.Boolean) and infer(other, scope) in _NUMBERS:
                literal.replace(exp.Literal.number(1 if literal.this else 0))
    return tree


class _CaseInsensitive(dict):
    """Column types looked up by name in any case, as Spark resolves names."""

    def get(self, key, default=None):  # type: ignore[override]
        return super().get(key.lower() if isinstance(key, str) else key, default)


def numbers_tables(tree: exp.Expression, problems: list[Problem]) -> exp.Expression:
    """`FROM numbers(n)` / `numbers(start, n)` → Spark's `range` table, its `id` column named `number`. ClickHouse's
    `system.` tables (`system.numbers`, endless) have no Spark counterpart."""
    for table in list(tree.find_all(exp.Table)):
        if table.db.lower() == "system":
            problems.append(Problem(table, f"ClickHouse table `system.{table.name}` has no Spark translation.",
                                    "Use numbers(n) (Spark's range(n)) with an explicit count instead of "
                                    "system.numbers ... LIMIT n." if table.name.lower() == "numbers" else
                                    "Read a datasource of the project instead.", "system"))
            continue
        call = table.this
        if not isinstance(call, exp.Anonymous) or str(call.this).lower() != "numbers":
            continue
        args = _args(call)
        if len(args) not in (1, 2):
            problems.append(Problem(call, f"`numbers` takes 1 or 2 arguments, found {len(args)}.",
                                    "Write numbers(n) or numbers(start, n).", "numbers"))
            continue
        bounds = "0, {0}" if len(args) == 1 else "{0}, {0} + {1}"
        query = _fill(f"SELECT id AS number FROM range({bounds})", args)
        table.replace(exp.Subquery(this=query, alias=exp.TableAlias(
            this=exp.to_identifier(table.alias or "numbers"))))
    return tree


def array_joins(tree: exp.Expression, problems: list[Problem]) -> exp.Expression:
    """`FROM t [LEFT] ARRAY JOIN arr AS x` → `FROM t LATERAL VIEW [OUTER] explode(arr) AS x`: one row per element.
    Several arrays at once (zipped) and an array joined under its own name have no such translation."""
    for number, join in enumerate(list(tree.find_all(exp.Join))):
        if join.text("kind").upper() != "ARRAY":
            continue
        target = join.this
        if join.expressions or not isinstance(target, exp.Alias) or not isinstance(join.parent, exp.Select):
            problems.append(Problem(join, "`ARRAY JOIN` of several arrays, or of an array under its own name, is not "
                                    "supported yet.", "Join one array with an alias: ARRAY JOIN arr AS x, or use "
                                    "explode(arr) in the SELECT.", "array join"))
            continue
        select = join.parent
        array = target.this
        if join.side.upper() == "LEFT":  # an empty array gives one row, with the element type's default
            array = _fill("IF(size({0}) > 0, {0}, array({1}))", [array, _zero_of(array, element=True)])
        lateral = exp.Lateral(this=exp.Explode(this=array), view=True,
                              alias=exp.TableAlias(this=exp.to_identifier(f"_array_join{number}"),
                                                   columns=[exp.to_identifier(target.alias)]))
        join.pop()
        select.append("laterals", lateral)
    return tree


# Order matters: clauses first, then the calls inside them; date_truncs before functions adds its own.
TRANSFORMS: tuple[Transform, ...] = (
    final_reads, with_fill, unsupported_clauses, array_joins, numbers_tables, array_indexes, frame_functions, prewhere, scalar_with, select_aliases, distinct_ifs, random_integers, boolean_aggregates, float_rounding,
    boolean_literals, count_star, date_truncs, date_diffs, weekdays, byte_strings, json_defaults,
    in_arrays, format_datetimes, functions,
)


def json_paths(tree: exp.Expression, columns: frozenset[str]) -> exp.Expression:
    """`event.data.user_id` (or `t.event.data.user_id`) where `event` is a ClickHouse JSON column, which pipeframe
    stores as STRING → `get_json_object(event, '$.data.user_id')`. Needs the schema, so the compiler applies it
    with the JSON columns of the datasources a node reads."""
    if not columns:
        return tree
    for column in list(tree.find_all(exp.Column)):
        parts = [part.name for part in column.parts]
        whole: exp.Expression = column  # a path longer than 4 names continues as `.name` (Dot) around the column
        while isinstance(whole.parent, exp.Dot) and whole.arg_key == "this":
            whole = whole.parent
            parts.append(whole.expression.name)
        root = 0 if parts[0] in columns else 1 if len(parts) > 2 and parts[1] in columns else None
        if root is None or len(parts) < root + 2:
            continue
        base = exp.column(parts[root], table=parts[0] if root == 1 else None)
        call = exp.Anonymous(this="get_json_object",
                             expressions=[base, exp.Literal.string("$." + ".".join(parts[root + 1:]))])
        if whole is tree:
            return call
        whole.replace(call)
    return tree


# ------------------------------------------------------------------------------------------ detection

def unknown_functions(tree: exp.Expression) -> list[Problem]:
    """Calls neither Spark nor pipeframe's aggregate catalog knows, each with its Spark equivalent if there is one."""
    problems = []
    for node in tree.find_all(exp.Anonymous, exp.AnonymousAggFunc, exp.CombinedAggFunc, exp.ParameterizedAgg,
                              exp.CombinedParameterizedAgg):
        name = _call_name(node) or ""
        lowered = name.lower()
        if lowered in SPARK_FUNCTIONS or lowered in ALL_AGGREGATES or split_clickhouse_name(name) is not None \
                or name in MARKERS:
            continue
        if lowered in SPARK_TABLE_FUNCTIONS and isinstance(node.parent, exp.Table):
            continue
        if lowered in HINTS:
            problems.append(Problem(node, f"ClickHouse function `{name}` has no Spark translation.", HINTS[lowered],
                                    name))
        elif lowered in CLICKHOUSE_FUNCTIONS or lowered in TEMPLATES:
            problems.append(Problem(node, f"ClickHouse function `{name}` has no Spark translation yet.",
                                    "Rewrite it with Spark SQL functions (see docs/tinybird.md).", name))
        else:
            problems.append(Problem(node, f"Unknown function `{name}`: neither Spark SQL nor ClickHouse has it.",
                                    "Check the spelling; Spark SQL functions are listed at "
                                    "https://spark.apache.org/docs/latest/api/sql/.", name))
    return problems


def subqueries_in_lambdas(tree: exp.Expression) -> list[Problem]:
    """Spark refuses a subquery among the arguments of a function that takes a lambda (`arrayMap(x -> ...,
    range((SELECT start FROM dates), ...))`, often a scalar `WITH (SELECT ...) AS start` put in place)."""
    problems = []
    for lambda_ in tree.find_all(exp.Lambda):
        call = lambda_.parent
        subquery = call.find(exp.Subquery, exp.Select) if call is not None else None
        if subquery is not None:
            problems.append(Problem(subquery, "Spark does not take a subquery inside a function with a lambda "
                                    "(arrayMap, arrayFilter, ...).", "Compute the value in an earlier node and join "
                                    "it, or pass it as a template parameter.", "select"))
            break
    return problems


def _is_clickhouse_call(node: exp.Expression) -> bool:
    name = _call_name(node)
    if name is None:
        return isinstance(node, exp.Count) and node.this is None and not node.expressions
    lowered = name.lower()
    if lowered in SPARK_FUNCTIONS or lowered in ALL_AGGREGATES or split_clickhouse_name(name) is not None:
        return False
    return (lowered in CLICKHOUSE_FUNCTIONS or lowered in TEMPLATES or lowered in HINTS or lowered in SPECIAL
            or lowered.endswith("simplestate"))


def looks_clickhouse(tree: exp.Expression) -> bool:
    """Whether a tree Spark's parser read only makes sense as ClickHouse: a ClickHouse function Spark lacks,
    `count()`, a table aliased FINAL or ARRAY (`t ARRAY JOIN ...` read as Spark), a `system.` table, a number used as a condition (`WHERE 1 AND ...`), `ORDER BY ... WITH FILL`."""
    for node in tree.walk():
        if isinstance(node, exp.Func) and _is_clickhouse_call(node):
            return True
        if isinstance(node, exp.Table) and node.alias.upper() in ("FINAL", "ARRAY"):  # `t FINAL`, `t ARRAY JOIN`
            return True
        if isinstance(node, exp.Table) and node.db.lower() == "system":  # ClickHouse's system tables
            return True
        if isinstance(node, exp.Ordered) and node.args.get("with_fill") is not None:  # ORDER BY ... WITH FILL
            return True
        if isinstance(node, exp.And | exp.Or | exp.Where) and any(
                isinstance(side, exp.Literal) and not side.is_string
                for side in (node.this, node.args.get("expression"))):
            return True
    return False


def translate_calls(tree: exp.Expression, problems: list[Problem]) -> exp.Expression:
    """Only the call translations (a tree Spark read that ClickHouse's parser cannot); a table Spark read as aliased
    FINAL (`FROM t FINAL`) is marked as read with FINAL."""
    for table in tree.find_all(exp.Table):
        if table.alias.upper() == "FINAL":
            table.set("alias", None)
            table.meta[FINAL_MARK] = True
    return functions(count_star(tree, problems), problems)


def from_clickhouse(text: str) -> tuple[exp.Expression, list[Problem]]:
    """Parse ClickHouse SQL and return it as a tree of Spark SQL (as Spark's parser reads the generated text), with
    what could not be translated. Raises sqlglot's ParseError when it is not ClickHouse SQL either."""
    statements = [s for s in sqlglot.parse(text, read=CLICKHOUSE) if s is not None]
    if len(statements) != 1:
        raise sqlglot.errors.ParseError("expected one statement")
    tree = statements[0]
    problems: list[Problem] = []
    for transform in TRANSFORMS:
        if transform is random_integers and RAND_CANONICAL.search(text):
            continue  # sqlglot reads randCanonical() (a double, as Spark's rand()) as rand(): leave both as they are
        tree = transform(tree, problems)
    reported = {id(p.node) for p in problems}
    problems.extend(p for p in unknown_functions(tree) if id(p.node) not in reported)
    problems.extend(subqueries_in_lambdas(tree))
    if problems:
        return tree, problems
    finals = _final_keys(tree)
    try:
        spark_sql = tree.sql(dialect=SPARK, normalize_functions=False, unsupported_level=ErrorLevel.RAISE)
    except UnsupportedError as exc:
        return tree, [Problem(tree, f"ClickHouse SQL with no Spark translation: {str(exc).splitlines()[0]}.",
                              "Rewrite that part in Spark SQL.")]
    spark_tree = spark_intervals(sqlglot.parse_one(spark_sql, read=SPARK))
    for node in spark_tree.walk():  # positions in the generated text are not positions in the file
        if node.meta:
            node.meta.clear()
    return _mark_final(spark_tree, finals) if finals else spark_tree, []


_INTERVAL_SLOTS = {"year": 0, "quarter": 1, "month": 1, "week": 2, "day": 3, "hour": 4, "minute": 5, "second": 6}


def spark_intervals(tree: exp.Expression) -> exp.Expression:
    """Intervals as Spark takes them: `date_add(d, INTERVAL n DAY)` (what `timestampAdd`/`addDays` become; Spark's
    date_add takes a number of days only) → `d + INTERVAL n DAY`, and an interval of a computed amount
    (`INTERVAL -period_days DAY`, which Spark's parser refuses) → `make_interval(0, 0, 0, -period_days, 0, 0, 0)`."""
    for node in list(tree.find_all(exp.DateAdd, exp.DateSub, exp.TsOrDsAdd)):
        interval = node.expression
        if isinstance(interval, exp.Interval):
            combined = (exp.Sub if isinstance(node, exp.DateSub) else exp.Add)(this=node.this, expression=interval)
            if node is tree:
                tree = combined
            else:
                node.replace(combined)
    for interval in list(tree.find_all(exp.Interval)):
        amount, unit = interval.this, (interval.text("unit") or "").lower().rstrip("s")
        if amount is None or isinstance(amount, exp.Literal) or unit not in _INTERVAL_SLOTS:
            continue
        if isinstance(amount, exp.Neg) and isinstance(amount.this, exp.Literal):
            continue
        value = amount.this if isinstance(amount, exp.Paren) else amount
        if unit == "quarter":
            value = exp.Mul(this=exp.Paren(this=value), expression=exp.Literal.number(3))
        args: list[exp.Expression] = [exp.Literal.number(0) for _ in range(7)]
        args[_INTERVAL_SLOTS[unit]] = value
        interval.replace(exp.Anonymous(this="make_interval", expressions=args))
    return tree
