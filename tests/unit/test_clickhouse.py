"""ClickHouse (Tinybird) SQL → Spark SQL: each transform of compiler/clickhouse.py on its own, then through
parse_select as `check` uses it: Spark SQL passes unchanged, ClickHouse is translated, the rest is PF309 at file:line."""

from __future__ import annotations

import pytest
import sqlglot

from pipeframe.compiler import clickhouse as ch
from pipeframe.compiler.sql import parse_select, to_sql
from pipeframe.errors import Location, PipeframeError

BASE = Location("pipes/p.pipe", 10, 5)


def spark(sql: str) -> str:
    return to_sql(parse_select(sql, BASE))


def problems(sql: str) -> list[tuple[str, Location]]:
    with pytest.raises(PipeframeError) as err:
        parse_select(sql, BASE)
    assert {d.code for d in err.value.diagnostics} == {"PF309"}
    return [(d.message, d.location) for d in err.value.diagnostics]


def transformed(transform: ch.Transform, sql: str) -> tuple[str, list[ch.Problem]]:
    found: list[ch.Problem] = []
    tree = transform(sqlglot.parse_one(sql, read="clickhouse"), found)
    return tree.sql(dialect="spark", normalize_functions=False), found


# ------------------------------------------------------------------------------------------ transforms

@pytest.mark.parametrize(("written", "expected"), [
    # a DateTime has whole seconds: the fraction of a DateTime64 (or of a number of seconds) is dropped
    ("toDateTime(x)", "DATE_TRUNC('SECOND', CAST(x AS TIMESTAMP))"),
    ("toDate(toDateTime(x))", "CAST(DATE_TRUNC('SECOND', CAST(x AS TIMESTAMP)) AS DATE)"),
    ("parseDateTimeBestEffortOrNull(s)", "DATE_TRUNC('SECOND', TRY_CAST(s AS TIMESTAMP))"),
    ("toString(n)", "CAST(n AS STRING)"),
    ("toUInt32(n)", "CAST(n AS BIGINT)"),
    # numbers read from text as ClickHouse reads them: a sign and digits, no spaces (Spark's casts trim them)
    ("toInt32OrZero(s)", "COALESCE(TRY_CAST(IF(s RLIKE '^[+-]?[0-9]+$', s, NULL) AS INT), CAST(0 AS INT))"),
    ("fromUnixTimestamp64Milli(ms)", "timestamp_millis(ms)"),
    ("toYYYYMM(ts)", "(YEAR(ts) * 100 + MONTH(ts))"),
    ("toIntervalDay(90)", "make_dt_interval(90)"),
    ("addMinutes(ts, 5)", "(ts + make_dt_interval(0, 0, 5))"),
    ("today()", "CURRENT_DATE"),
    ("now()", "CURRENT_TIMESTAMP()"),
    ("toStartOfFifteenMinutes(ts)", "timestamp_seconds(FLOOR(UNIX_TIMESTAMP(ts) / 900) * 900)"),
    ("toStartOfInterval(ts, INTERVAL 10 minute)", "timestamp_seconds(FLOOR(UNIX_TIMESTAMP(ts) / 600) * 600)"),
    ("multiIf(a > 1, 'big', a > 0, 'small', 'none')",
     "CASE WHEN a > 1 THEN 'big' WHEN a > 0 THEN 'small' ELSE 'none' END"),
    ("path(url)", "COALESCE(try_parse_url(url, 'PATH'), '')"),  # an invalid URL is '', not a failed query
    ("encodeURLFormComponent(s)", "REPLACE(REPLACE(url_encode(s), '%7E', '~'), '*', '%2A')"),
    ("toLowCardinality(s)", "s"),
    ("toTimeZone(ts, 'Europe/Madrid')", "FROM_UTC_TIMESTAMP(CAST(ts AS TIMESTAMP), 'Europe/Madrid')"),
    ("multiSearchAny(s, ['a', 'b'])", "EXISTS(ARRAY('a', 'b'), needle -> LOCATE(needle, s) > 0)"),
    ("groupUniqArray(x)", "COLLECT_SET(x)"),
    ("arrayStringConcat(a)", "ARRAY_JOIN(a, '')"),
    ("range(3)", "IF(3 > 0, SEQUENCE(0, 3 - 1), SLICE(ARRAY(0), 1, 0))"),  # empty when the end is not past the start
    ("range(1, 31, 2)", "IF(31 > 1, SEQUENCE(1, 31 - 1, 2), SLICE(ARRAY(1), 1, 0))"),
    ("sumSimpleState(x)", "SUM(x)"),
    ("countDistinct(x)", "COUNT(DISTINCT x)"),
    ("extractAll(s, 'id=([0-9]+)')", "REGEXP_EXTRACT_ALL(s, 'id=([0-9]+)')"),
    ("extractAll(s, '[0-9]+')", "REGEXP_EXTRACT_ALL(s, '[0-9]+', 0)"),
])
def test_functions_are_written_as_their_spark_equivalent(written, expected):
    sql, found = transformed(ch.functions, f"SELECT {written}")
    assert (sql, found) == (f"SELECT {expected}", [])


def test_a_wrong_arity_is_a_problem_naming_the_call():
    _, found = transformed(ch.functions, "SELECT toDate(a, b)")
    assert [p.message for p in found] == ["`toDate` takes 1 argument(s), found 2."]
    # and only that one, not also "no translation"
    assert problems("SELECT toDate(a, b) AS d") == [
        ("`toDate` takes 1 argument(s), found 2.", Location("pipes/p.pipe", 10, 12))]


def test_to_start_of_interval_needs_a_constant_sub_month_interval():
    _, found = transformed(ch.functions, "SELECT toStartOfInterval(ts, INTERVAL 1 month)")
    assert found[0].message.startswith("`toStartOfInterval` with a non-constant or month-or-longer interval")


@pytest.mark.parametrize(("transform", "written", "expected"), [
    # Spark's count needs an argument.
    (ch.count_star, "SELECT count() FROM t", "SELECT COUNT(*) FROM t"),
    # ClickHouse reads numbers as conditions, Spark does not.
    (ch.boolean_literals, "SELECT a FROM t WHERE 1 AND a > 2", "SELECT a FROM t WHERE TRUE AND a > 2"),
    (ch.prewhere, "SELECT a FROM t PREWHERE a > 1 WHERE b = 2", "SELECT a FROM t WHERE a > 1 AND b = 2"),
    # 1-based, negative from the end, the element type's default out of range or at 0; a map key stays a key.
    (ch.array_indexes, "SELECT a[1], a[-1], a[i], m['key'] FROM t",
     ("SELECT COALESCE(try_element_at(a, 1), __pf_zero_element(a)), COALESCE(try_element_at(a, -1), "
     "__pf_zero_element(a)), COALESCE(IF(CAST(i AS INT) = 0, NULL, TRY_ELEMENT_AT(a, CAST(i AS INT))), "
     "__pf_zero_element(a)), m['key'] FROM t")),
    # A condition is 0 or 1 in ClickHouse.
    (ch.boolean_aggregates, "SELECT avg(x = 'high'), sum(a > 0 AND b), sum(a) FROM t",
     "SELECT AVG(CAST(x = 'high' AS INT)), SUM(CAST(a > 0 AND b AS INT)), SUM(a) FROM t"),
    (ch.distinct_ifs, "SELECT countIf(DISTINCT u, kind = 's') FROM t",
     "SELECT COUNT(DISTINCT IF(kind = 's', u, NULL)) FROM t"),
    (ch.random_integers, "SELECT rand() % 4 FROM t", "SELECT CAST(FLOOR(RAND() * 4294967296) AS BIGINT) % 4 FROM t"),
    # Week and longer truncations are dates in ClickHouse; date_trunc('hour') keeps its hours.
    (ch.date_truncs, "SELECT toStartOfMonth(ts), toStartOfHour(ts), date_trunc('hour', ts)",
     "SELECT CAST(DATE_TRUNC('MONTH', ts) AS DATE), DATE_TRUNC('HOUR', ts), DATE_TRUNC('HOUR', ts)"),
])
def test_clause_transforms(transform, written, expected):
    assert transformed(transform, written) == (expected, [])


def test_a_scalar_with_is_inlined_and_a_cte_is_kept():
    sql, _ = transformed(ch.scalar_with, "WITH (now() - INTERVAL 30 MINUTE) AS start, recent AS (SELECT * FROM t) "
                                         "SELECT count() FROM recent WHERE ts > start")
    assert sql == ("WITH recent AS (SELECT * FROM t) SELECT COUNT() FROM recent "
                   "WHERE ts > (now() - INTERVAL '30' MINUTE)")


def test_a_scalar_alias_selected_by_name_keeps_its_name():
    sql, _ = transformed(ch.scalar_with, "WITH toDate(now()) AS today_, today_ - 7 AS start SELECT today_, start")
    assert sql == "SELECT toDate(now()) AS today_, toDate(now()) - 7 AS start"


def test_paths_into_json_columns_read_the_json():
    tree = sqlglot.parse_one("SELECT event.a.b, t.event.c, t.other, other.x FROM t", read="spark")
    sql = ch.json_paths(tree, frozenset({"event"})).sql(dialect="spark")
    assert sql == ("SELECT GET_JSON_OBJECT(event, '$.a.b'), GET_JSON_OBJECT(t.event, '$.c'), t.other, other.x FROM t")
    tree = sqlglot.parse_one("SELECT event.event.data.service.summary, t.event.a.b.c.d FROM t", read="clickhouse")
    sql = ch.json_paths(tree, frozenset({"event"})).sql(dialect="spark")
    assert sql == ("SELECT GET_JSON_OBJECT(event, '$.event.data.service.summary'), "
                   "GET_JSON_OBJECT(t.event, '$.a.b.c.d') FROM t")


def test_an_alias_is_visible_in_the_whole_select_as_in_clickhouse():
    assert spark("SELECT toStartOfHour(ts) AS hour, count() AS n FROM logs WHERE hour > now() - 1 GROUP BY hour") == (
        "SELECT DATE_TRUNC('HOUR', ts) AS hour, COUNT(*) AS n FROM logs "
        "WHERE DATE_TRUNC('HOUR', ts) > CURRENT_TIMESTAMP() - 1 GROUP BY DATE_TRUNC('HOUR', ts)")
    # a later alias inside a window, in a query Spark reads; an alias over its own column keeps the column
    assert spark("SELECT row_number() OVER (ORDER BY total DESC) AS r, sum(s) AS total, upper(name) AS name "
                 "FROM t WHERE name = 'x' GROUP BY name") == (
        "SELECT ROW_NUMBER() OVER (ORDER BY SUM(s) DESC) AS r, SUM(s) AS total, UPPER(name) AS name "
        "FROM t WHERE name = 'x' GROUP BY name")
    # a scalar alias put in place keeps its precedence
    assert spark("WITH a + 1 AS n SELECT -n AS m, toString(b) AS c FROM t") == \
        "SELECT -(a + 1) AS m, CAST(b AS STRING) AS c FROM t"


def test_a_filter_on_an_array_join_alias_filters_around_the_query():
    assert spark("SELECT arrayJoin(arrayMap(x -> toDate(x), range(0, 10, 2))) AS d WHERE d <= today()") == (
        "SELECT * FROM (SELECT EXPLODE(TRANSFORM(IF(10 > 0, SEQUENCE(0, 10 - 1, 2), SLICE(ARRAY(0), 1, 0)), "
        "x -> CAST(x AS DATE))) AS d) "
        "AS _array_join_rows "
        "WHERE d <= CURRENT_DATE")


def test_intervals_of_a_computed_amount_and_date_add_are_written_as_spark_takes_them():
    assert spark("SELECT timestampAdd(d, INTERVAL -n DAY) AS a, now() - INTERVAL (rand() % 7) SECOND AS b, "
                 "timestampAdd(d, INTERVAL 1 DAY) AS c, toString(d) AS s FROM t") == (
        "SELECT d + MAKE_INTERVAL(0, 0, 0, -n, 0, 0, 0) AS a, CURRENT_TIMESTAMP() - MAKE_INTERVAL(0, 0, 0, 0, 0, 0, "
        "CAST(FLOOR(RAND() * 4294967296) AS BIGINT) % 7) AS b, d + INTERVAL '1' DAY AS c, CAST(d AS STRING) AS s "
        "FROM t")
    # read as Spark SQL (no ClickHouse function), only what Spark would refuse changes
    assert spark("SELECT timestampAdd(d, INTERVAL -n DAY) AS a, rand() AS r FROM t") == (
        "SELECT d + MAKE_INTERVAL(0, 0, 0, -n, 0, 0, 0) AS a, RAND() AS r FROM t")


def test_array_join_written_after_a_table_and_system_tables():
    assert spark("SELECT p FROM transactions ARRAY JOIN products AS p") == (
        "SELECT p FROM transactions LATERAL VIEW EXPLODE(products) _array_join0 AS p")
    assert problems("SELECT number FROM system.numbers LIMIT 10")[0][0] == \
        "ClickHouse table `system.numbers` has no Spark translation."
    assert problems("WITH (SELECT max(d) FROM t) AS top SELECT arrayMap(x -> x + top, [1, 2]) AS a")[0][0] == \
        "Spark does not take a subquery inside a function with a lambda (arrayMap, arrayFilter, ...)."


def test_array_join_is_a_lateral_view_of_explode():
    sql, found = transformed(ch.array_joins, "SELECT d, p FROM t ARRAY JOIN products AS p WHERE p != ''")
    assert (sql, found) == ("SELECT d, p FROM t LATERAL VIEW EXPLODE(products) _array_join0 AS p WHERE p <> ''", [])
    sql, _ = transformed(ch.array_joins, "SELECT p FROM t LEFT ARRAY JOIN products AS p")
    # an empty array gives one row with the element type's default (written once the types are known)
    assert sql == "SELECT p FROM t LATERAL VIEW EXPLODE(IF(SIZE(products) > 0, products, " \
        "ARRAY(__pf_zero_element(products)))) _array_join0 AS p"
    _, found = transformed(ch.array_joins, "SELECT products FROM t ARRAY JOIN products")
    assert [p.message for p in found] == [
        "`ARRAY JOIN` of several arrays, or of an array under its own name, is not supported yet."]


def test_lag_in_frame_is_lag_when_the_frame_holds_the_earlier_rows():
    sql, found = transformed(ch.frame_functions, "SELECT lagInFrame(ts) OVER (ORDER BY ts), leadInFrame(ts, 1) OVER "
                             "(ORDER BY ts ROWS BETWEEN UNBOUNDED PRECEDING AND UNBOUNDED FOLLOWING) FROM t")
    # outside the frame ClickHouse gives the type's default (written once the types are known), not NULL
    expected = "SELECT lag(ts, 1, __pf_zero(ts)) OVER (ORDER BY ts NULLS LAST), lead(ts, 1, __pf_zero(ts)) OVER " \
        "(ORDER BY ts NULLS LAST) FROM t"
    assert (sql, found) == (expected, [])
    _, found = transformed(ch.frame_functions, "SELECT leadInFrame(ts) OVER (ORDER BY ts) FROM t")
    assert [p.message for p in found] == [
        "`leadInFrame` over a frame that does not reach the last row has no Spark translation."]


@pytest.mark.parametrize(("written", "expected"), [
    # a Float64: x * 10^n rounded half to even, as ClickHouse's nearbyint (Spark's round is half up)
    ("round(total / n, 2)", "(BROUND((total / n) * 1E2) / 1E2)"),
    ("round(avg(x))", "(BROUND(AVG(x)))"),
    ("round(toFloat64(s), 1)", "(BROUND((CAST(s AS DOUBLE)) * 1E1) / 1E1)"),
    # an integer or a Decimal, or digits that are not a constant: Spark's round
    ("round(n, 2)", "ROUND(n, 2)"),
    ("round(x / 2, k)", "ROUND(x / 2, k)"),
])
def test_float_rounding_is_half_to_even_on_the_binary_value(written, expected):
    assert spark(f"SELECT {written} AS r FROM t WHERE 1") == f"SELECT {expected} AS r FROM t WHERE TRUE"


def test_numbers_is_spark_range_with_a_number_column():
    assert spark("SELECT number * 2 AS even FROM numbers(10)") == (
        "SELECT number * 2 AS even FROM (SELECT id AS number FROM RANGE(0, 10)) AS numbers")


@pytest.mark.parametrize(("sql", "message"), [
    ("SELECT d, e FROM t ORDER BY d WITH FILL STEP 1, e",
     "`ORDER BY ... WITH FILL` with several ORDER BY keys is not supported yet."),
    ("SELECT d FROM t ORDER BY d WITH FILL FROM 1 TO 9 STEP 1 INTERPOLATE (x AS x + 1)",
     "`WITH FILL ... INTERPOLATE` is not supported yet."),
    ("SELECT d FROM t ORDER BY d WITH FILL",
     "`WITH FILL` without STEP is not supported yet (ClickHouse's default step depends on the key's type)."),
    ("SELECT d FROM t ORDER BY d DESC WITH FILL FROM 9 TO 1 STEP 1",
     "`ORDER BY ... DESC WITH FILL` needs a negative STEP (ClickHouse refuses a positive one)."),
    ("SELECT d + 1 AS e FROM t ORDER BY d WITH FILL STEP 1",
     "`WITH FILL` on a key that is not a named output column of the SELECT is not supported yet."),
    ("SELECT * FROM t ORDER BY d WITH FILL STEP 1",
     "`WITH FILL` on a key that is not a named output column of the SELECT is not supported yet."),
    ("SELECT a FROM t LIMIT 1 BY a", "`LIMIT n BY ...` is not supported yet."),
    ("SELECT a FROM t ANY LEFT JOIN u USING a", "`ANY ... JOIN` (one matching row per left row) is not supported yet."),
])
def test_clauses_without_translation_are_problems(sql, message):
    found: list[ch.Problem] = []
    tree = sqlglot.parse_one(sql, read="clickhouse")
    for transform in (ch.final_reads, ch.with_fill, ch.unsupported_clauses):
        transform(tree, found)
    assert [p.message for p in found] == [message]
    assert all(p.hint for p in found)


# ------------------------------------------------------------------------------------------ through check

def test_hand_written_spark_sql_is_unchanged():
    sql = "SELECT date_trunc('hour', ts) AS hour, count(*) AS n, arr[0] AS first FROM sales GROUP BY 1, 3"
    assert spark(sql) == ("SELECT DATE_TRUNC('HOUR', ts) AS hour, COUNT(*) AS n, arr[0] AS first "
                          "FROM sales GROUP BY 1, 3")
    assert not ch.looks_clickhouse(sqlglot.parse_one(sql, read="spark"))


def test_clickhouse_sql_is_translated_with_one_based_arrays():
    sql = ("SELECT toStartOfHour(timestamp) AS hour, splitByChar('@', email)[2] AS domain, count() AS hits\n"
           "FROM logs WHERE 1 AND toDate(timestamp) >= today() - 7 GROUP BY hour, domain")
    assert spark(sql) == (
        "SELECT DATE_TRUNC('HOUR', timestamp) AS hour, TRY_ELEMENT_AT(SPLIT(email, CONCAT('\\\\Q', '@', '\\\\E')), 2) AS domain, "
        "COUNT(*) AS hits FROM logs WHERE TRUE AND CAST(timestamp AS DATE) >= CURRENT_DATE - 7 "
        # GROUP BY an alias is GROUP BY its expression, as in ClickHouse (Spark would group by a column of that name)
        "GROUP BY DATE_TRUNC('HOUR', timestamp), TRY_ELEMENT_AT(SPLIT(email, CONCAT('\\\\Q', '@', '\\\\E')), 2)")


def test_a_scalar_alias_spark_cannot_parse_is_read_as_clickhouse():
    sql = "WITH 10 AS top SELECT a FROM t ORDER BY a LIMIT top"
    # ClickHouse sorts NULLs last where Spark sorts them first: sqlglot says so.
    assert spark(sql) == "SELECT a FROM t ORDER BY a NULLS LAST LIMIT 10"


def test_state_combinators_stay_for_the_view_planner():
    sql = "SELECT toStartOfDay(ts) AS day, countIfState(kind = 'view') AS views, uniqState(user) AS users FROM e"
    assert spark(sql) == ("SELECT DATE_TRUNC('DAY', ts) AS day, COUNTIFSTATE(kind = 'view') AS views, "
                          "UNIQSTATE(user) AS users FROM e")


def test_an_unknown_function_is_an_error_at_its_position():
    assert problems("SELECT\n    a,\n    florp(a) AS b\nFROM t") == [
        ("Unknown function `florp`: neither Spark SQL nor ClickHouse has it.", Location("pipes/p.pipe", 12, 9))]


def test_a_clickhouse_function_without_translation_names_the_spark_equivalent():
    with pytest.raises(PipeframeError) as err:
        parse_select("SELECT toDate(ts) AS d, anyLast(v) AS v FROM t GROUP BY d", BASE)
    (d,) = err.value.diagnostics
    assert (d.code, d.message, d.hint, d.location) == (
        "PF309", "ClickHouse function `anyLast` has no Spark translation.",
        "Use max_by(x, ts) (the value at the latest ts).", Location("pipes/p.pipe", 10, 29))


def test_final_is_a_mark_on_the_table_not_an_alias():
    # The deduplication itself needs the datasource's engine: the compiler applies it (tests/unit/test_final.py).
    tree = parse_select("SELECT * FROM t FINAL", BASE)
    assert to_sql(tree) == "SELECT * FROM t"
    assert [table.name for table in tree.find_all(sqlglot.exp.Table) if table.meta_get(ch.FINAL_MARK)] == ["t"]


def test_spark_only_syntax_with_a_clickhouse_call_still_translates_the_call():
    # ClickHouse cannot read LATERAL VIEW; the Spark reading is kept and its calls translated.
    assert spark("SELECT toDate(ts) AS d, x FROM t LATERAL VIEW explode(arr) e AS x") == (
        "SELECT CAST(ts AS DATE) AS d, x FROM t LATERAL VIEW EXPLODE(arr) e AS x")


def test_replace_regexp_one_replaces_the_first_match_and_url_hierarchy_cuts_the_url():
    assert spark("SELECT replaceRegexpOne(title, '\\\\d+', '#') AS t FROM t") == (
        "SELECT REGEXP_REPLACE(title, CONCAT('^((?s).*?)(?:', '\\\\d+', ')'), CONCAT('$1', '#')) AS t FROM t")
    sql = spark("SELECT URLHierarchy(href)[1] AS first FROM t")
    assert sql.startswith("SELECT TRY_ELEMENT_AT(IF(href RLIKE '^[A-Za-z0-9+.-]+://', TRANSFORM(SEQUENCE(1, SIZE(")
    assert "ARRAY_JOIN(SLICE(REGEXP_EXTRACT_ALL(href, " in sql
    assert sql.endswith("SLICE(ARRAY(href), 1, IF(href = '', 0, 1))), 1) AS first FROM t")  # no protocol: itself


FILLED = "CASE WHEN `_pf_fill_rows`.`{k}` IS NULL AND NOT _pf_fill._pf_fill_key IS NULL THEN {d} ELSE `_pf_fill_rows`.`{c}` END"


def test_with_fill_joins_the_rows_to_the_series_of_the_key():
    # Without FROM / TO the series spans the rows' least to greatest key; a filled row counts 0; LIMIT comes after.
    sql = ("SELECT count() AS cnt, toStartOfMinute(ts) AS minute FROM t GROUP BY minute "
           "ORDER BY minute ASC WITH FILL STEP toIntervalMinute(1) LIMIT 60")
    rows = "(SELECT COUNT(*) AS cnt, DATE_TRUNC('MINUTE', ts) AS minute FROM t GROUP BY DATE_TRUNC('MINUTE', ts))"
    assert spark(sql) == (
        f"SELECT {FILLED.format(k='minute', d=0, c='cnt')} AS `cnt`, "
        "COALESCE(`_pf_fill_rows`.`minute`, _pf_fill._pf_fill_key) AS `minute` "
        "FROM (SELECT EXPLODE(SEQUENCE(MIN(`_pf_fill_rows`.`minute`), MAX(`_pf_fill_rows`.`minute`), "
        f"MAKE_DT_INTERVAL(0, 0, 1))) AS _pf_fill_key FROM {rows} AS _pf_fill_rows) AS _pf_fill "
        f"FULL OUTER JOIN {rows} AS _pf_fill_rows ON _pf_fill._pf_fill_key = `_pf_fill_rows`.`minute` "
        "ORDER BY `minute` ASC NULLS LAST LIMIT 60")


def test_with_fill_from_is_inclusive_to_exclusive_and_defaults_follow_the_type():
    empty = "''"
    sql = "SELECT n, 'x' AS s, sum(v) AS total, max(w) AS top FROM t GROUP BY n ORDER BY n WITH FILL FROM 1 TO 9 STEP 2"
    assert spark(sql) == (
        "SELECT COALESCE(`_pf_fill_rows`.`n`, _pf_fill._pf_fill_key) AS `n`, "
        f"{FILLED.format(k='n', d=empty, c='s')} AS `s`, {FILLED.format(k='n', d=0, c='total')} AS `total`, "
        "`_pf_fill_rows`.`top` AS `top` "  # max(w) does not show its type: NULL in a filled row
        "FROM (SELECT EXPLODE(FILTER(SEQUENCE(1, 9, 2), _pf_v -> _pf_v < 9)) AS _pf_fill_key) AS _pf_fill "
        "FULL OUTER JOIN (SELECT n, 'x' AS s, SUM(v) AS total, MAX(w) AS top FROM t GROUP BY n) AS _pf_fill_rows "
        "ON _pf_fill._pf_fill_key = `_pf_fill_rows`.`n` ORDER BY `n` NULLS LAST")


def test_with_fill_descending_steps_down_from_the_greatest_key_or_from_to_exclusive():
    sql = "SELECT n, count() AS c FROM t GROUP BY n ORDER BY n DESC WITH FILL STEP -5"
    assert "SEQUENCE(MAX(`_pf_fill_rows`.`n`), MIN(`_pf_fill_rows`.`n`), -5)" in spark(sql)
    assert spark(sql).endswith("ORDER BY `n` DESC")
    sql = "SELECT n, count() AS c FROM t GROUP BY n ORDER BY n DESC WITH FILL FROM 9 TO 1 STEP -2"
    assert "FILTER(SEQUENCE(9, 1, -2), _pf_v -> _pf_v > 1)" in spark(sql)


def test_with_fill_keeps_the_query_ctes_outside_and_no_cte_of_its_own():
    # Spark SQL hoists every CTE to the statement: a CTE of its own would clash between two nodes of a pipe.
    out = spark("WITH c AS (SELECT n FROM t) SELECT n FROM c ORDER BY n WITH FILL STEP 1")
    assert out.startswith("WITH c AS (SELECT n FROM t) SELECT ") and out.count("WITH") == 1
    assert out.count("(SELECT n FROM c) AS _pf_fill_rows") == 2


def test_an_aggregate_alias_used_outside_an_aggregate_is_the_alias_in_spark_sql_too():
    # zero-dollars-stats kpis.pipe: `hits` has a column `visits`; Spark would take that column, ungrouped, and
    # reject the query. ClickHouse means the alias, the only reading that stands.
    sql = ("SELECT date, uniq(session_id) AS visits, sum(case when a = b then 1 end) / visits AS rate, "
           "max(visits) AS most FROM hits GROUP BY date")
    assert spark(sql) == ("SELECT date, UNIQ(session_id) AS visits, SUM(CASE WHEN a = b THEN 1 END) / "
                          "UNIQ(session_id) AS rate, MAX(visits) AS most FROM hits GROUP BY date")
    # grouped by that name, the column is Spark's meaning and stays
    assert spark("SELECT visits, count(*) AS n, n + visits AS m FROM hits GROUP BY visits") == (
        "SELECT visits, COUNT(*) AS n, COUNT(*) + visits AS m FROM hits GROUP BY visits")


@pytest.mark.parametrize(("types", "expected"), [
    # the columns' types known: ClickHouse's defaults of those types, and a float column rounds half to even
    ({"a": "ARRAY<INT>", "s": "ARRAY<STRING>", "x": "INT", "f": "DOUBLE", "d": "DECIMAL(10,2)"},
     ("SELECT COALESCE(TRY_ELEMENT_AT(a, 1), CAST(0 AS INT)), COALESCE(TRY_ELEMENT_AT(s, 2), ''), "
     "LAG(x, 1, CAST(0 AS INT)) OVER (ORDER BY x NULLS LAST), (BROUND((f) * 1E2) / 1E2), ROUND(d, 2) FROM t")),
    # unknown: NULL, and Spark's round
    ({}, ("SELECT TRY_ELEMENT_AT(a, 1), TRY_ELEMENT_AT(s, 2), LAG(x, 1, NULL) OVER (ORDER BY x NULLS LAST), "
         "ROUND(f, 2), ROUND(d, 2) FROM t")),
])
def test_what_depends_on_a_type_is_written_with_the_columns_types(types, expected):
    sql = "SELECT a[1], s[2], lagInFrame(x) OVER (ORDER BY x), round(f, 2), round(d, 2) FROM t"
    assert to_sql(parse_select(sql, BASE, types)) == expected


def test_clickhouse_aliases_named_after_their_column_are_read_everywhere_else():
    # `sum(p) AS p` then `p` elsewhere: the alias (ClickHouse); inside its own expression, the column
    assert spark("SELECT toDate(ts) AS ts, sum(p) AS p, if(p = 0, 0, c / p) AS rate, count() AS n FROM t "
                 "WHERE ts > '2024-01-01' GROUP BY ts") == (
        "SELECT CAST(ts AS DATE) AS ts, SUM(p) AS p, IF(SUM(p) = 0, 0, c / SUM(p)) AS rate, COUNT(*) AS n FROM t "
        "WHERE CAST(ts AS DATE) > '2024-01-01' GROUP BY CAST(ts AS DATE)")
    # read as Spark SQL (no ClickHouse in it), the later x is Spark's: the column
    assert spark("SELECT sum(p) AS p, p + 1 AS q FROM t GROUP BY p") == "SELECT SUM(p) AS p, p + 1 AS q FROM t GROUP BY p"


def test_double_quoted_column_names_booleans_as_numbers_and_in_an_array():
    types = {"to": "STRING", "sent": "SMALLINT", "ids": "STRING"}
    # "to" is a column of the table read: ClickHouse's quoted name, not Spark's string
    assert to_sql(parse_select('SELECT "to" FROM email WHERE sent = true', BASE, types)) == \
        "SELECT `to` FROM email WHERE sent = 1"
    assert to_sql(parse_select('SELECT "nope" FROM email', BASE, types)) == "SELECT 'nope' FROM email"
    assert spark("SELECT id FROM t WHERE id IN splitByChar(',', ids)") == \
        "SELECT id FROM t WHERE ARRAY_CONTAINS(SPLIT(ids, CONCAT('\\\\Q', ',', '\\\\E')), id)"
