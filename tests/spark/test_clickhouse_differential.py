"""ClickHouse itself is the oracle for what pipeframe translates: every ClickHouse function, combinator and construct
of the translation (compiler/clickhouse.py, the State/Merge catalog, what sqlglot translates for us) runs on the same
generated rows in chDB (ClickHouse in process) and, translated by pipeframe, in Spark, and the answers and their types
must be equal.

Kept light on the JVM: the shared session, one temporary view of the generated rows, and the cases batched — every
scalar function in one Spark query, every aggregate in one, every State/Merge pair in one — plus one query per
construct that shapes a whole query (WITH FILL, ARRAY JOIN, numbers(n), ...). A batch that fails in Spark is run case
by case, so the failure names its case. Summary (functions, inputs, equal) prints with `pytest -s`.

Types compare by kind under pipeframe's mapping (any integer width is an integer, Float32/64 a floating point number,
a ClickHouse condition's UInt8 a BOOLEAN, Nullable(T) and LowCardinality(T) are T, arrays by their element); values
exactly (floats to 1e-9 relative), except where ClickHouse itself leaves the answer open or approximates: `any` (a
value of the group), groupArray (its order), uniq (an estimate: within 2%), quantiles (Spark's answer is a value of the
group whose rank is within 2% of the level; ClickHouse interpolates between two).
"""

from __future__ import annotations

import bisect
import json
import math
import random
import re
import shutil
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from decimal import Decimal
from pathlib import Path

import pytest

from pipeframe.compiler.aggregates import STATES
from pipeframe.compiler.clickhouse import SPECIAL, TEMPLATES
from pipeframe.datafiles.types import normalize_type
from pipeframe.project import Project
from tests.conftest import write_project

chdb = pytest.importorskip("chdb")  # a test dependency (pyproject's `test` extra)

ROWS = 240
SEED = 34_034
# The generated table: (column, ClickHouse type); Spark's is pipeframe's mapping of it (datafiles/types.py).
COLUMNS = (
    ("id", "UInt32"), ("k", "UInt8"), ("k2", "UInt8"), ("i", "Int32"), ("u", "UInt32"), ("f", "Float64"),
    ("s", "String"), ("url", "String"), ("ts", "DateTime('UTC')"), ("ts64", "DateTime64(3, 'UTC')"), ("d", "Date"),
    ("tss", "String"), ("junk", "String"), ("num", "String"), ("arr", "Array(Int32)"), ("sarr", "Array(String)"),
    ("n", "Nullable(Int32)"), ("js", "String"), ("ms", "Int64"),
)


@dataclass(frozen=True)
class Case:
    """One thing pipeframe translates, as ClickHouse SQL: an expression over the row (`scalar`), an aggregate per
    group `k` (`aggregate`), a (state, merge) pair built per (k, k2) and merged per k (`state`), or a whole query
    (`query`, compared in its ORDER BY, or as a multiset without one)."""

    sql: str
    kind: str = "scalar"
    compare: str = "exact"  # exact | multiset (order open) | member (any value of the group) | approx | rank:<column>
    merge: str = ""  # for `state`: the merge of the state column `s`


def scalar(*exprs: str | tuple[str, str]) -> list[Case]:
    """Cases of expressions over a row; ("expr", "multiset") where ClickHouse leaves an array's order open."""
    return [Case(e) if isinstance(e, str) else Case(e[0], compare=e[1]) for e in exprs]


SCALARS = scalar(
    # casts and parsing
    "toDateTime(ts64)", "toDateTime64(ts, 3)", "toDate(ts)", "toDate32(ts)", "toString(i)", "toInt8(k)",
    "toInt16(i)", "toInt32(u % 1000)", "toInt64(i)", "toUInt8(k)", "toUInt16(k2)", "toUInt32(u)", "toUInt64(u)",
    "toFloat32(k)", "toFloat64(i)",
    *(f"to{t}Or{o}(num)" for t in ("Int8", "Int16", "Int32", "Int64", "UInt8", "UInt16", "UInt32", "UInt64", "Float32",
                                   "Float64") for o in ("Zero", "Null")),
    "toDateOrNull(junk)", "toDateTimeOrNull(junk)", "parseDateTimeBestEffort(tss)",
    "parseDateTime64BestEffort(tss)", "parseDateTimeBestEffortOrNull(junk)", "i::String",
    # dates and times
    "toYYYYMM(ts)", "toYYYYMMDD(ts)", "toYear(ts)", "toQuarter(ts)", "toMonth(ts)", "toDayOfMonth(ts)",
    "toDayOfYear(ts)", "toHour(ts)", "toMinute(ts)", "toSecond(ts)", "toDayOfWeek(ts)", "toUnixTimestamp(ts)",
    "fromUnixTimestamp(u)", "fromUnixTimestamp64Milli(ms)", "fromUnixTimestamp64Micro(ms)",
    "toUnixTimestamp64Milli(ts64)", "toStartOfMinute(ts)", "toStartOfHour(ts)", "toStartOfDay(ts)",
    "toStartOfFiveMinutes(ts)", "toStartOfTenMinutes(ts)", "toStartOfFifteenMinutes(ts)", "toStartOfWeek(ts)",
    "toStartOfMonth(ts)", "toStartOfQuarter(ts)", "toStartOfYear(ts)", "toMonday(ts)",
    "toStartOfInterval(ts, INTERVAL 10 minute)", "toStartOfInterval(ts, INTERVAL 2 hour)",
    "dateDiff('day', d, toDate(ts))", "dateDiff('hour', ts, ts64)", "dateDiff('minute', ts, ts64)",
    "ts + toIntervalSecond(k)", "ts + toIntervalMinute(i)", "ts + toIntervalHour(k2)", "ts + toIntervalDay(i)",
    "ts + toIntervalWeek(k)", "d + toIntervalMonth(k)", "d + toIntervalQuarter(k)", "d + toIntervalYear(k)",
    "addSeconds(ts, i)", "addMinutes(ts, i)", "addHours(ts, k)", "addDays(ts, i)", "addWeeks(ts, k)",
    "addMonths(d, k)", "addQuarters(d, k)", "addYears(d, k)", "subtractSeconds(ts, i)", "subtractMinutes(ts, k)",
    "subtractHours(ts, k)", "subtractDays(ts, i)", "subtractWeeks(ts, k)", "subtractMonths(d, k)",
    "subtractQuarters(d, k)", "subtractYears(d, k)", "timestampAdd(ts, INTERVAL 3 DAY)",
    "dateDiff('day', yesterday(), today())", "toDate(now()) = today()",
    "formatDateTime(ts, '%Y-%m-%d %H:%i:%S')", "formatDateTime(ts64, '%FT%T.%f')", "formatDateTime(ts, '%FT%T.000Z')",
    "formatDateTime(ts, '%d/%m/%y %a %b %W %M %p %I %r %R %j %c %k %l %s %z %% %D %e')",
    "formatDateTime(ts, 'week of %Y', 'Asia/Tokyo')", "s IN splitByChar(',', 'alpha,x y,dup')",
    # strings
    "lowerUTF8(s)", "upperUTF8(s)", "lengthUTF8(s)", "lower(s)", "upper(s)", "empty(s)", "notEmpty(s)",
    "concat(s, '-', toString(k))", "substring(s, 2, 3)", "replaceAll(s, 'a', 'A')",
    "replaceRegexpAll(s, '[aeiou]', '_')", "replaceRegexpOne(s, '[aeiou]', '_')", "match(s, '^[a-m]')",
    "extractAll(url, '[a-z]+=([0-9]+)')", "extractAll(url, '[a-z]+=[0-9]+')", "splitByChar('/', url)",
    "arrayStringConcat(sarr, ',')", "arrayStringConcat(sarr)", "splitByString('://', url)", "splitByString('a', s)",
    "multiIf(k = 1, concat(s, '!') AS shout, k = 2, upper(s), s)",
    # URLs
    "path(url)", "domain(url)", "domainWithoutWWW(url)", "protocol(url)", "queryString(url)",
    "extractURLParameter(url, 'a')", "URLHierarchy(url)", "pathFull(url)", "fragment(url)", "cutQueryString(url)",
    "topLevelDomain(url)", "encodeURLComponent(s)", "encodeURLFormComponent(s)", "decodeURLComponent(s)",
    "decodeURLFormComponent(s)", "decodeURLComponent(url)",
    # JSON
    "JSONExtractString(js, 'name')", "JSONExtractFloat(js, 'price')", "JSONExtractInt(js, 'qty')",
    "JSONExtractUInt(js, 'qty')", "JSONExtractBool(js, 'ok')", "JSONExtractRaw(js, 'tags')",
    # arrays
    "arr[1]", "arr[-1]", "arr[k]", "has(arr, 3)", "arrayMap(x -> x * 2, arr)", "arrayFilter(x -> x > 0, arr)",
    "range(k)", "range(1, 9, 2)", "range(k, 3)", "arrayElement(arr, 2)", ("arrayIntersect(arr, [1, 2, 3])", "multiset"),
    "multiSearchAny(s, ['a', 'ñ'])", "length(s)", "toLowCardinality(s)", "toTimeZone(ts, 'Europe/Madrid')",
    "toHour(toTimeZone(ts, 'America/New_York'))", "toDate(toTimeZone(ts, 'Asia/Tokyo'))",
    "toDateTime64(ts, 3, 'UTC')", "toDateTime(ts64, 'UTC')", "makeDate(toYear(ts), toMonth(ts), 1)",
    "ts64 + toIntervalMillisecond(i)", "ts64 - toIntervalMicrosecond(u)",
    # conditionals and numbers
    "multiIf(i > 100, 'big', i > 0, 'small', 'none')", "if(i > 0, 'pos', 'neg')", "ifNull(n, -1)",
    "round(f / 3, 2)", "round(f)", "round(toFloat64(i) / 8, 2)", "intDiv(i, 7)", "intDivOrZero(i, k)",
)

AGGREGATES = [Case(e, "aggregate") for e in (
    "count()", "countIf(i > 0)", "sumIf(i, i > 0)", "avg(i > 0)", "sum(f > 0.5)", "uniqExact(s)", "countDistinct(s)",
    "countIf(DISTINCT s, i > 0)", "argMax(s, id)", "argMin(s, id)", "min(ts)", "max(f)", "sum(u)", "avg(f)",
    "varSamp(f)", "varPop(f)", "stddevSamp(f)", "stddevPop(f)",
)] + [
    Case("any(s)", "aggregate", "member"),
    Case("groupUniqArray(k2)", "aggregate", "multiset"),
    Case("groupArray(k2)", "aggregate", "multiset"),
    Case("uniq(s)", "aggregate", "approx"),
    Case("quantile(0.5)(f)", "aggregate", "rank:f"),
    Case("quantiles(0.9)(f)", "aggregate", "rank:f"),
    Case("quantiles(0.25, 0.75)(f)", "aggregate", "rank:f"),
]

STATES_CASES = [Case(state, "state", compare, merge) for state, merge, compare in (
    ("countState()", "countMerge(s)", "exact"),
    ("countIfState(i > 0)", "countIfMerge(s)", "exact"),
    ("sumState(i)", "sumMerge(s)", "exact"),
    ("minState(ts)", "minMerge(s)", "exact"),
    ("maxState(f)", "maxMerge(s)", "exact"),
    ("anyState(s)", "anyMerge(s)", "member"),
    ("avgState(f)", "avgMerge(s)", "exact"),
    ("uniqState(s)", "uniqMerge(s)", "approx"),
    ("uniqExactState(s)", "uniqExactMerge(s)", "exact"),
    ("argMaxState(s, id)", "argMaxMerge(s)", "exact"),
    ("argMinState(s, id)", "argMinMerge(s)", "exact"),
    ("varSampState(f)", "varSampMerge(s)", "exact"),
    ("varPopState(f)", "varPopMerge(s)", "exact"),
    ("stddevSampState(f)", "stddevSampMerge(s)", "exact"),
    ("stddevPopState(f)", "stddevPopMerge(s)", "exact"),
    ("quantilesState(0.5)(f)", "quantilesMerge(0.5)(s)", "rank:f"),
    ("quantilesState(0.9)(f)", "quantilesMerge(0.9)(s)[1]", "rank:f"),
    ("quantileState(0.5)(f)", "quantileMerge(0.5)(s)", "rank:f"),
    ("sumStateIf(i, i > 0)", "sumMerge(s)", "exact"),
    ("sumIfState(i, i > 0)", "sumIfMerge(s)", "exact"),
    ("uniqIfState(s, i > 0)", "uniqIfMerge(s)", "approx"),
    ("countDistinctState(s)", "countDistinctMerge(s)", "exact"),
    ("avgIfState(f, i > 0)", "avgIfMerge(s)", "exact"),
)]

QUERIES = [Case(q, "query") for q in (
    "SELECT k, count() AS c FROM t GROUP BY k ORDER BY k WITH FILL FROM 0 TO 8 STEP 1",
    ("SELECT toStartOfDay(ts) AS day, count() AS c FROM t WHERE k = 1 GROUP BY day "
    "ORDER BY day WITH FILL STEP toIntervalDay(1) LIMIT 40"),
    "SELECT k, count() AS c FROM t WHERE k > 1 GROUP BY k ORDER BY k DESC WITH FILL STEP -1",
    "SELECT k, count() AS c FROM t GROUP BY k ORDER BY k DESC WITH FILL FROM 9 TO 1 STEP -2",
    ("SELECT toStartOfDay(ts) AS day, count() AS c FROM t WHERE k = 2 GROUP BY day ORDER BY day DESC WITH FILL "
     "FROM toStartOfDay(toDateTime('2020-01-09 00:00:00')) TO toStartOfDay(toDateTime('2019-12-01 00:00:00')) "
     "STEP INTERVAL -1 DAY"),
    "SELECT id, x FROM t ARRAY JOIN arr AS x ORDER BY id, x",
    "SELECT id, x FROM t LEFT ARRAY JOIN arr AS x ORDER BY id, x",
    "SELECT number FROM numbers(5) ORDER BY number",
    "SELECT number FROM numbers(3, 4) ORDER BY number",
    "SELECT id, lagInFrame(i) OVER (ORDER BY id) AS prev FROM t ORDER BY id",
    ("SELECT id, leadInFrame(i) OVER (ORDER BY id ROWS BETWEEN UNBOUNDED PRECEDING AND UNBOUNDED FOLLOWING) AS nxt "
    "FROM t ORDER BY id"),
    "WITH 10 AS lim SELECT id FROM t WHERE i < lim ORDER BY id",
    "SELECT toStartOfHour(ts) AS hour, id FROM t WHERE hour > toDateTime('2000-01-01 00:00:00') ORDER BY id",
    "SELECT id FROM t PREWHERE k = 1 WHERE i > 0 ORDER BY id",
    "SELECT id FROM t WHERE 1 AND k = 2 ORDER BY id",
    "SELECT id, arrayJoin(arr) AS e FROM t WHERE k = 3 ORDER BY id, e",
    "SELECT toInt64(n) AS n, id FROM t ORDER BY n, id",
)]

CASES = SCALARS + AGGREGATES + STATES_CASES + QUERIES


# ------------------------------------------------------------------------------------------ the rows

WORDS = ("alpha", "beta", "", "Gamma", "ñandú", "x y", "a%b", "Zoë", "mañana", "tab\there", "UPPER", "dup", "dup",
         "a+b", "~tilde*", "100%", "%zz", "%41%42", "caf%C3%A9")
HOSTS = ("www.example.com", "example.com", "shop.example.co.uk", "localhost:8080", "www.a-b.io", "sub.www.example.org")


def _url(rng: random.Random) -> str:
    """A URL as a browser sends it (percent-encoded), sometimes only a path, sometimes empty."""
    if rng.random() < 0.1:
        return rng.choice(("", "/relative/path?a=1", "//example.com/x"))
    path = "/".join(rng.choice(("", "a", "docs", "b%20c", "x%2Fy", "%C3%B1", "index.html")) for _ in range(rng.randint(0, 3)))
    query = "&".join(f"{rng.choice('abz')}={rng.randint(0, 99)}" for _ in range(rng.randint(0, 3)))
    return f"{rng.choice(('https', 'http'))}://{rng.choice(HOSTS)}/{path}" + (f"?{query}" if query else "") + \
        (f"#{rng.choice(('top', 'a=1'))}" if rng.random() < 0.2 else "")


def generate_rows() -> list[dict]:
    rng = random.Random(SEED)
    epoch = datetime(1975, 1, 1)  # Date and DateTime in ClickHouse start at 1970
    rows = []
    for row_id in range(1, ROWS + 1):
        ts = epoch + timedelta(seconds=rng.randrange(0, 55 * 365 * 86400))
        ts64 = ts + timedelta(milliseconds=rng.randrange(0, 3_600_000))
        num = rng.choice((str(rng.randint(-500, 500)), f"{rng.uniform(-99, 99):.3f}", "", "12abc", " 7", "7 ", "1e3",
                          "+5", ".5", "5.", "inf", "-nan", "0x1A", "1_000", "99999999999", "-0"))
        js = json.dumps({"name": rng.choice(WORDS), "price": round(rng.uniform(0, 100), 2), "qty": rng.randint(0, 9),
                         "ok": rng.random() < 0.5, "tags": rng.sample(["a", "b", "c"], rng.randint(0, 3))}) \
            if rng.random() < 0.9 else rng.choice(("", "{}", "not json"))
        rows.append({
            "id": row_id, "k": rng.randint(0, 4), "k2": rng.randint(0, 3), "i": rng.randint(-1000, 1000),
            "u": rng.randint(0, 4_000_000_000), "f": rng.choice((rng.uniform(-1000, 1000), rng.randint(-80, 80) / 8)),
            "s": rng.choice(WORDS), "url": _url(rng), "ts": ts, "ts64": ts64, "d": ts.date() - timedelta(rng.randint(0, 900)),
            "tss": rng.choice((ts.isoformat(sep=" "), ts.isoformat(), ts.date().isoformat())),
            "junk": rng.choice((ts.isoformat(sep=" "), ts.date().isoformat(), "garbage", "")),
            "num": num, "arr": [rng.randint(-3, 5) for _ in range(rng.randint(0, 4))],
            "sarr": [rng.choice(WORDS) for _ in range(rng.randint(0, 3))],
            "n": None if rng.random() < 0.3 else rng.randint(-50, 50), "js": js,
            "ms": rng.randrange(0, 4_000_000_000_000),
        })
    return rows


def _json_row(row: dict) -> str:
    def plain(value):
        if isinstance(value, datetime):
            return value.isoformat(sep=" ", timespec="milliseconds")
        if isinstance(value, date):
            return value.isoformat()
        return value

    return json.dumps({name: plain(value) for name, value in row.items()})


# ------------------------------------------------------------------------------------------ both engines

class ClickHouse:
    """chDB with the generated rows in table `t` (UTC)."""

    def __init__(self, rows: list[dict]) -> None:
        from chdb import session

        self.session = session.Session()
        columns = ", ".join(f"{name} {ch_type}" for name, ch_type in COLUMNS)
        self.session.query("CREATE DATABASE IF NOT EXISTS diff")
        self.session.query("USE diff")
        self.session.query(f"CREATE TABLE t ({columns}) ENGINE = MergeTree ORDER BY id")
        self.session.query("INSERT INTO t FORMAT JSONEachRow " + "\n".join(_json_row(r) for r in rows))

    def run(self, sql: str) -> tuple[list[str], list[list]]:
        """(types, rows) of a query over `t`."""
        result = self.session.query(
            f"{sql} SETTINGS session_timezone = 'UTC', output_format_json_quote_64bit_integers = 0, "
            "output_format_json_quote_denormals = 1, output_format_json_quote_decimals = 1", "JSONCompact")
        # ClickHouse's byte-wise functions (substring) may cut a character: its bytes read as U+FFFD, as in Spark.
        parsed = json.loads(result.bytes().decode("utf-8", errors="replace"))
        types = [column["type"] for column in parsed["meta"]]
        return types, [[ch_value(v, t) for v, t in zip(row, types)] for row in parsed["data"]]


def _inner(ch_type: str) -> str:
    while (match := re.fullmatch(r"(?:Nullable|LowCardinality)\((.*)\)", ch_type)) is not None:
        ch_type = match.group(1)
    return ch_type


def ch_value(value, ch_type: str):
    ch_type = _inner(ch_type)
    if value is None:
        return None
    if ch_type.startswith("Array("):
        return [ch_value(v, ch_type[6:-1]) for v in value]
    if ch_type.startswith("DateTime"):
        return datetime.fromisoformat(value)
    if ch_type.startswith("Date"):
        return date.fromisoformat(value)
    if ch_type.startswith("Float"):
        return float(value)
    if ch_type.startswith("Decimal"):
        return Decimal(value)
    if ch_type == "Bool":
        return int(value)
    return value


def ch_kind(ch_type: str) -> str:
    """The kind of a ClickHouse type, as pipeframe maps it to Spark."""
    ch_type = _inner(ch_type)
    if ch_type.startswith("Array("):
        return f"array<{ch_kind(ch_type[6:-1])}>"
    for prefix, kind in (("DateTime", "timestamp"), ("Date", "date"), ("Float", "float"), ("Decimal", "decimal"),
                         ("UInt", "integer"), ("Int", "integer"), ("String", "string"), ("FixedString", "string"),
                         ("Bool", "boolean"), ("Nothing", "null"), ("Interval", "interval")):
        if ch_type.startswith(prefix):
            return kind
    return ch_type


def spark_kind(data_type) -> str:
    name = data_type.simpleString()
    if name.startswith("array<"):
        return f"array<{spark_kind(data_type.elementType)}>"
    for prefix, kind in (("timestamp", "timestamp"), ("date", "date"), ("double", "float"), ("float", "float"),
                         ("decimal", "decimal"), ("tinyint", "integer"), ("smallint", "integer"), ("int", "integer"),
                         ("bigint", "integer"), ("string", "string"), ("boolean", "boolean"), ("void", "null"),
                         ("interval", "interval")):
        if name.startswith(prefix):
            return kind
    return name


def same_kind(ch_type: str, data_type) -> bool:
    want, got = ch_kind(ch_type), spark_kind(data_type)
    # A ClickHouse condition is a UInt8 0/1; Spark's is a BOOLEAN. An all-NULL column has no type to compare.
    return want == got or (_inner(ch_type) == "UInt8" and got == "boolean") or "null" in (want, got)


def spark_value(value):
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, list):
        return [spark_value(v) for v in value]
    if hasattr(value, "asDict"):
        return [spark_value(v) for v in value]
    return value


def equal(a, b, tolerance: float = 1e-9) -> bool:
    """Equal values; floats to `tolerance` relative (a Float32's digits: 1e-6)."""
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(equal(x, y, tolerance) for x, y in zip(a, b))
    if isinstance(a, bool) or isinstance(b, bool):
        return int(a) == int(b)
    if isinstance(a, (int, float, Decimal)) and isinstance(b, (int, float, Decimal)) and a is not None:
        a, b = float(a), float(b)
        return (math.isnan(a) and math.isnan(b)) or math.isclose(a, b, rel_tol=tolerance, abs_tol=tolerance)
    return a == b


# ------------------------------------------------------------------------------------------ comparing

@dataclass
class Outcome:
    case: Case
    problem: str | None = None  # None: equal answers and types


def _group_values(rows: list[dict], column: str) -> dict[int, list]:
    groups: dict[int, list] = {}
    for row in rows:
        groups.setdefault(row["k"], []).append(row[column])
    return {k: sorted(v) for k, v in groups.items()}


def _within_rank(got, want, values: list, tolerance: float = 0.02) -> bool:
    """Spark's approximate quantile `got` is a value of the group whose rank is within `tolerance` of the rank of
    ClickHouse's (interpolated) `want`."""
    if isinstance(got, list) or isinstance(want, list):
        return isinstance(got, list) and isinstance(want, list) and len(got) == len(want) and \
            all(_within_rank(g, w, values, tolerance) for g, w in zip(got, want))
    if got is None or want is None:
        return got is None and want is None
    n = len(values)
    lo, hi = bisect.bisect_left(values, got), bisect.bisect_right(values, want)
    return abs(hi - lo) <= max(1, tolerance * n) + 1 and got in values


def compare(case: Case, ch_types: list[str], ch_rows: list[list], spark_schema, spark_rows: list[list],
            rows: list[dict], first: int) -> str | None:
    """Why the answers of `case` (its column `first` on, one column for a batched case) differ, or None."""
    width = len(ch_types) - first if case.kind == "query" else 1
    for offset in range(width):
        column = first + offset
        if not same_kind(ch_types[column], spark_schema.fields[column].dataType):
            return f"types differ: ClickHouse {ch_types[column]}, Spark {spark_schema.fields[column].dataType.simpleString()}"
    if len(ch_rows) != len(spark_rows):
        return f"{len(ch_rows)} rows in ClickHouse, {len(spark_rows)} in Spark"
    want = [row[first:first + width] for row in ch_rows]
    got = [[spark_value(v) for v in row[first:first + width]] for row in spark_rows]
    if case.kind == "query" and " ORDER BY " not in case.sql:
        want, got = sorted(map(repr, want)), sorted(map(repr, got))
    mode = case.compare
    tolerance = 1e-6 if any("Float32" in t for t in ch_types[first:first + width]) else 1e-9
    for index, (w, g) in enumerate(zip(want, got)):
        if mode == "exact" and equal(w, g, tolerance):
            continue
        if mode == "multiset" and equal(sorted(w[0]), sorted(g[0])):
            continue
        if mode == "member" and g[0] in [r[_column_of(case)] for r in rows if r["k"] == ch_rows[index][0]]:
            continue
        if mode == "approx" and equal(w, g) or (mode == "approx" and abs(g[0] - w[0]) <= 0.02 * max(w[0], 1)):
            continue
        if mode.startswith("rank:") and _within_rank(g[0], w[0], _group_values(rows, mode[5:])[ch_rows[index][0]]):
            continue
        return f"row {index + 1}: ClickHouse {w!r}, Spark {g!r}"
    return None


def _column_of(case: Case) -> str:
    match = re.search(r"\((\w+)", case.sql)
    assert match is not None
    return match.group(1)


def batched_sql(cases: list[Case]) -> str:
    """One ClickHouse query for a batch of cases of one kind: the group key first, then a column per case."""
    kind = cases[0].kind
    # The last column, a ClickHouse-only call, makes a case alone read as ClickHouse, as a Tinybird node is read.
    columns = ", ".join(f"{case.sql} AS c{i}" for i, case in enumerate(cases)) + ", toUInt8(1) AS ch"
    if kind == "scalar":
        return f"SELECT id, {columns} FROM t ORDER BY id"
    if kind == "aggregate":
        return f"SELECT k, {columns} FROM t GROUP BY k ORDER BY k"
    states = ", ".join(f"{case.sql} AS s{i}" for i, case in enumerate(cases))
    merges = ", ".join(f"{case.merge.replace('(s)', f'(s{i})')} AS c{i}" for i, case in enumerate(cases))
    return f"SELECT k, {merges}, toUInt8(1) AS ch FROM (SELECT k, k2, {states} FROM t GROUP BY k, k2) GROUP BY k " \
        "ORDER BY k"


def translated(folder: Path, sql: str) -> str:
    """`sql` as pipeframe compiles it in a project: an endpoint pipe reading datasource `t` (the generated table's
    ClickHouse types), so that what the translation takes from the columns' types is there."""
    shutil.rmtree(folder, ignore_errors=True)
    schema = ",\n".join(f"    `{name}` {ch_type}" for name, ch_type in COLUMNS)
    write_project(folder, {"datasources/t.datasource": f"SCHEMA >\n{schema}\n",
                           "pipes/q.pipe": "NODE q\nSQL >\n    " + sql.replace("\n", "\n    ") + "\nTYPE endpoint\n"})
    compiled = Project(folder, environ={}).require_valid()
    return compiled.pipes["q"].sql


def spark_rows(spark, folder: Path, sql: str):
    frame = spark.sql(translated(folder, sql))
    return frame.schema, [list(row) for row in frame.collect()]


def run_batch(spark, clickhouse: ClickHouse, cases: list[Case], rows: list[dict], folder: Path) -> list[Outcome]:
    sql = batched_sql(cases) if cases[0].kind != "query" else cases[0].sql
    ch_types, ch_result = clickhouse.run(sql)
    try:
        schema, result = spark_rows(spark, folder, sql)
    except Exception as err:  # noqa: BLE001 - a batch Spark refuses is run case by case to name the case
        if len(cases) == 1:
            return [Outcome(cases[0], f"pipeframe or Spark: {str(err).strip().splitlines()[0][:300]}")]
        return [o for case in cases for o in run_batch(spark, clickhouse, [case], rows, folder)]
    if cases[0].kind == "query":
        return [Outcome(cases[0], compare(cases[0], ch_types, ch_result, schema, result, rows, 0))]
    return [Outcome(case, compare(case, ch_types, ch_result, schema, result, rows, i + 1))
            for i, case in enumerate(cases)]


@pytest.fixture(scope="module")
def outcomes(spark, tmp_path_factory) -> list[Outcome]:
    rows = generate_rows()
    clickhouse = ClickHouse(rows)
    ddl = ", ".join(f"`{name}` {normalize_type(ch_type)}" for name, ch_type in COLUMNS)
    table = spark.createDataFrame(rows, ddl).cache()  # rows sent to the JVM once, not by every query
    table.count()
    table.createOrReplaceTempView("t")
    folder = tmp_path_factory.mktemp("differential") / "project"
    try:
        found: list[Outcome] = []
        for batch in (SCALARS, AGGREGATES, STATES_CASES):
            found += run_batch(spark, clickhouse, batch, rows, folder)
        for case in QUERIES:
            found += run_batch(spark, clickhouse, [case], rows, folder)
        return found
    finally:
        spark.catalog.dropTempView("t")
        table.unpersist()


def covered_names() -> set[str]:
    text = " ".join(f"{c.sql} {c.merge}" for c in CASES).lower()
    return set(re.findall(r"([a-z][a-z0-9_]*)\s*\(", text))


def test_every_translation_has_a_case():
    """Each ClickHouse function pipeframe translates by template or by its own code, and the State and Merge form of
    each aggregate of the catalog, is exercised by a case."""
    names = covered_names()
    assert not {name for name in TEMPLATES if name not in names} - {"numbers"}
    assert not {name for name in SPECIAL if name not in names}
    for state in STATES:
        for form in ("state", "merge"):
            assert any(f"{base.lower()}{form}" in names for base in state.clickhouse_names), (state.kind, form)


def test_clickhouse_and_spark_agree_on_every_case(outcomes, capsys):
    differ = [f"{o.case.kind} `{o.case.sql}{' / ' + o.case.merge if o.case.merge else ''}`: {o.problem}"
              for o in outcomes if o.problem]
    with capsys.disabled():
        kinds = {kind: sum(1 for o in outcomes if o.case.kind == kind) for kind in ("scalar", "aggregate", "state",
                                                                                   "query")}
        print(f"\nchDB differential: {len(outcomes)} cases ({kinds}), {len(covered_names())} function names, "
              f"{ROWS} generated rows, {len(outcomes) - len(differ)} equal")
    assert not differ, "ClickHouse and pipeframe's Spark translation differ:\n" + "\n".join(differ)
