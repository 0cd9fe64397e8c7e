"""The read path's translation of Spark SQL to DuckDB (`pipeframe.serving.translate`), run in an in-process DuckDB: each
transform gives Spark's answer where DuckDB's own would differ, and what has no translation is refused by name."""

from __future__ import annotations

import math
import re

import duckdb
import pytest

from pipeframe.serving import sketches, translate
from pipeframe.serving.translate import Untranslatable

SCHEMA = {"t": {"n": "INT", "big": "BIGINT", "x": "DOUBLE", "s": "STRING", "ts": "TIMESTAMP", "d": "DECIMAL(10,2)",
                "h": "BINARY"},
          "m": {"p": "MAP<STRING, STRING>", "a": "ARRAY<INT>", "im": "MAP<INT, STRING>"}}


@pytest.fixture(scope="module")
def db() -> duckdb.DuckDBPyConnection:
    con = duckdb.connect()
    con.execute("SET TimeZone = 'UTC'")
    con.execute("CREATE TABLE t (n INTEGER, big BIGINT, x DOUBLE, s VARCHAR, ts TIMESTAMPTZ, d DECIMAL(10,2), "
                "h BLOB)")
    con.execute("INSERT INTO t VALUES (7, 9223372036854775000, 2.675, 'héllo', '2024-05-01 10:30:00+00', 1.25, "
                "NULL), (-7, 1, 1.005, NULL, '2024-05-01 23:59:59+00', 2.50, NULL), (0, 2, -0.5, 'ab', NULL, NULL, "
                "NULL)")
    con.execute("CREATE TABLE m (p MAP(VARCHAR, VARCHAR), a INTEGER[], im MAP(INTEGER, VARCHAR))")
    con.execute("INSERT INTO m VALUES (MAP {'org': '42', 'q': 'x'}, [5, 6], MAP {0: 'zero'}), (MAP {}, [], MAP {})")
    sketches.register(con)
    return con


def run(db: duckdb.DuckDBPyConnection, spark_sql: str) -> tuple[list[tuple], translate.Translation]:
    translation = translate.translate(translate.parse(spark_sql), SCHEMA)
    return db.execute(translation.sql).fetchall(), translation


def test_round_of_a_double_is_half_up_on_the_decimal_it_prints_as(db):
    # Spark: round(2.675, 2) = 2.68, round(1.005, 2) = 1.01, round(-0.5) = -1 (DuckDB's own: 2.67, 1.0)
    rows, _ = run(db, "SELECT round(x, 2) AS r, round(x) AS r0 FROM t ORDER BY n DESC")
    assert rows == [(2.68, 3.0), (-0.5, -1.0), (1.01, 1.0)]
    assert db.execute("SELECT round(2.675::DOUBLE, 2)").fetchone() == (2.67,)  # what the transform is for


def test_division_by_zero_raises_sparks_error_class_and_div_truncates(db):
    rows, _ = run(db, "SELECT n DIV 2 AS q, x / 4 AS f, try_divide(x, n) AS safe FROM t ORDER BY n")
    assert rows == [(-3, 1.005 / 4, 1.005 / -7), (0, -0.125, None), (3, 2.675 / 4, 2.675 / 7)]
    for sql in ("SELECT x / n FROM t", "SELECT n % 0 FROM t", "SELECT n DIV 0 FROM t"):
        translation = translate.translate(translate.parse(sql), SCHEMA)
        with pytest.raises(duckdb.Error, match=r"\[DIVIDE_BY_ZERO\]"):
            db.execute(translation.sql).fetchall()


def test_results_take_sparks_types(db):
    _, translation = run(db, "SELECT sum(big) AS total, max(length(s)) AS len, max(floor(x)) AS fl, "
                             "max(year(ts)) AS y, count(*) AS c FROM t")
    described = [str(c[1]) for c in db.execute(translation.sql).description]
    assert described == ["BIGINT", "INTEGER", "BIGINT", "INTEGER", "BIGINT"]  # not HUGEINT, BIGINT, DOUBLE
    with pytest.raises(duckdb.Error, match="Overflow|out of range"):  # Spark's ANSI sum overflows too
        db.execute(translate.translate(translate.parse("SELECT sum(big) + 1000 AS t FROM t"), SCHEMA).sql).fetchall()


def test_max_by_and_min_by_give_the_extreme_rows_value_even_when_it_is_null(db):
    # The latest `ts` has s NULL: Spark's max_by gives NULL (DuckDB's arg_max skips the row and gives 'héllo'); the
    # row whose ts is NULL is skipped by both.
    rows, _ = run(db, "SELECT max_by(s, ts) AS latest, min_by(s, ts) AS earliest, max_by(n, x) AS top FROM t")
    assert rows == [(None, "héllo", 7)]
    assert db.execute("SELECT arg_max(s, ts) FROM t").fetchone() == ("héllo",)  # what the transform is for


def test_like_escapes_with_a_backslash_as_spark_does(db):
    rows, _ = run(db, r"SELECT count_if(s LIKE 'h\_llo') AS plain, count_if('a_b' LIKE 'a\_b') AS escaped FROM t")
    assert rows == [(0, 3)]


def test_timestamps_are_instants_truncated_in_the_session_zone(db):
    rows, translation = run(db, "SELECT date_trunc('HOUR', ts) AS h, to_date(ts) AS d FROM t WHERE ts >= "
                                "CAST('2024-05-01 10:00:00' AS TIMESTAMP) ORDER BY ts")
    assert [str(c[1]) for c in db.execute(translation.sql).description] == ["TIMESTAMP WITH TIME ZONE", "DATE"]
    assert [(r[0].isoformat(), r[1].isoformat()) for r in rows] == [
        ("2024-05-01T10:00:00+00:00", "2024-05-01"), ("2024-05-01T23:00:00+00:00", "2024-05-01")]


def test_nulls_sort_where_spark_puts_them(db):
    rows, _ = run(db, "SELECT s FROM t ORDER BY s")
    assert rows == [(None,), ("ab",), ("héllo",)]  # ascending: NULLS FIRST (DuckDB's default is last)
    rows, _ = run(db, "SELECT s FROM t ORDER BY s DESC")
    assert rows == [("héllo",), ("ab",), (None,)]


def test_json_values_whose_text_spark_gives_alike_are_read_and_others_raise_for_spark(db):
    def value(document: str, path: str) -> object:
        translation = translate.translate(translate.parse(f"SELECT get_json_object(s, '{path}') FROM t"), SCHEMA)
        return db.execute(translation.sql.replace("FROM t", f"FROM (SELECT '{document}' AS s)")).fetchone()[0]

    document = '{"a": {"b": "x\\u00e9"}, "n": -4, "ok": true, "l": ["p", "q"], "z": null, "f": 1.5}'
    assert [value(document, path) for path in ("$.a.b", "$.n", "$.ok", "$.l[1]", "$.z", "$.missing")] == \
        ["xé", "-4", "true", "q", None, None]
    for path in ("$.f", "$.a", "$.l"):  # Spark prints doubles, objects and arrays its own way
        with pytest.raises(duckdb.Error, match=re.escape(translate.READ_ELSEWHERE)):
            value(document, path)
    with pytest.raises(duckdb.Error):  # not JSON: Spark answers NULL, so DuckDB must not answer
        value("{not json", "$.a")


@pytest.mark.parametrize(("sql", "construct"), [
    ("SELECT approx_count_distinct(s) FROM t", "APPROX_DISTINCT"),  # Spark's HLL++ is not DuckDB's HLL
    ("SELECT percentile_approx(x, 0.5) FROM t", "APPROX_QUANTILE"),
    ("SELECT get_json_object(s, '$.a[*]') FROM t", "JSONPathWildcard"),  # Spark prints the array its own way
    ("SELECT explode(array(1, 2))", "Explode"),
    ("SELECT my_udf(x) FROM t", "my_udf"),
    ("SELECT x FROM db.t", "db.t"),
    ("SELECT s LIKE 'a!%' ESCAPE '!' FROM t", "ESCAPE"),
    ("SELECT CAST(x AS INTERVAL DAY) FROM t", "INTERVAL"),
    ("SELECT a[0] FROM m", "[]"),  # 0-based in Spark, 1-based in DuckDB
    ("SELECT im[0] FROM m", "[]"),  # an integer key sqlglot would shift like an array's index
])
def test_what_has_no_translation_is_refused_by_name(sql, construct):
    with pytest.raises(Untranslatable) as refused:
        translate.translate(translate.parse(sql), SCHEMA)
    assert construct.lower() in refused.value.construct.lower()


def test_reads_names_the_tables_and_not_the_ctes():
    tree = translate.parse("WITH a AS (SELECT * FROM t), b AS (SELECT * FROM a JOIN u ON a.n = u.n) "
                           "SELECT * FROM b JOIN t AS again ON b.n = again.n")
    assert translate.reads(tree) == ("t", "u")


def test_sketch_aggregates_merge_as_lists_of_states(db):
    import datasketches as ds

    parts = []
    for start in (0, 500, 900):
        sketch = ds.hll_sketch(12, ds.tgt_hll_type.HLL_8)
        for value in range(start, start + 600):
            sketch.update(str(value))
        parts.append(sketch.serialize_compact())
    db.execute("CREATE TABLE states (k VARCHAR, h BLOB)")
    db.executemany("INSERT INTO states VALUES ('a', ?)", [[p] for p in parts])
    translation = translate.translate(translate.parse(
        "SELECT k, hll_sketch_estimate(hll_union_agg(h, true)) AS users FROM states GROUP BY k"),
        {"states": {"k": "STRING", "h": "BINARY"}})
    assert "PF_HLL_UNION" in translation.sql.upper()
    ((key, users),) = db.execute(translation.sql).fetchall()
    assert key == "a" and abs(users - 1500) <= 1500 * 0.05 and users == math.floor(users)


def test_kll_quantiles_are_inclusive_as_sparks():
    import datasketches as ds

    sketch = ds.kll_doubles_sketch(200)
    for value in (1.0, 2.0, 3.0, 4.0):
        sketch.update(value)
    blob = sketch.serialize()
    assert sketches.kll_quantile(blob, 0.5) == 2.0  # inclusive; the library's default (exclusive) gives 3.0
    assert sketches.kll_quantiles(blob, [0.25, 1.0]) == [1.0, 4.0]
    assert sketches.kll_n(sketches.kll_merge([blob, None, blob])) == 8
    assert sketches.hll_union([None]) is None
    with pytest.raises(ValueError, match="KLL_SKETCH_INVALID_QUANTILE_RANGE"):
        sketches.kll_quantile(blob, 1.5)


def test_intervals_move_instants_and_are_refused_on_dates(db):
    rows, _ = run(db, "SELECT ts - INTERVAL 90 MINUTES AS a, ts + INTERVAL 1 MONTH AS b FROM t WHERE n = 7")
    assert [(a.isoformat(), b.isoformat()) for a, b in rows] == [("2024-05-01T09:00:00+00:00",
                                                                  "2024-06-01T10:30:00+00:00")]
    with pytest.raises(Untranslatable, match="INTERVAL"):  # a DATE plus an interval: Spark's DATE, DuckDB's TIMESTAMP
        translate.translate(translate.parse("SELECT CAST(ts AS DATE) + INTERVAL 1 DAY FROM t"), SCHEMA)


@pytest.mark.parametrize(("pattern", "portable"), [
    ("^/api/[0-9]+$", True), ("[aeiou]", True), ("(foo|bar)+", True), (r"a\.b\d{2,3}", True),
    ("a.b", False), (r"\s+", False), (r"(?i)abc", False), (r"(a)\1", False), (r"\bword", False), ("x(?=y)", False),
])
def test_regular_expressions_are_translated_only_where_java_and_re2_agree(pattern, portable):
    sql = f"SELECT s RLIKE '{pattern}' AS m FROM t".replace("\\", "\\\\")
    if portable:
        assert "REGEXP_MATCHES" in translate.translate(translate.parse(sql), SCHEMA).sql
    else:
        with pytest.raises(Untranslatable, match="regular expression"):
            translate.translate(translate.parse(sql), SCHEMA)


def test_regexp_replace_takes_sparks_group_references_and_replaces_every_match(db):
    rows, _ = run(db, "SELECT regexp_replace(s, '([a-z])l', '$1L') AS r FROM t WHERE n = 7")
    assert rows == [("héLLo",)] or rows == [("hélLo",)]
    rows, _ = run(db, "SELECT regexp_replace('a-b-c', '-', '+') AS r")
    assert rows == [("a+b+c",)]


def test_text_cast_as_text_keeps_the_value(db):
    rows, _ = run(db, "SELECT CAST(get_json_object(s, '$.a') AS STRING) AS a, CAST(s AS VARCHAR(3)) AS b FROM "
                      "(SELECT '{\"a\": \"x y\"}' AS s UNION ALL SELECT NULL) ORDER BY b NULLS FIRST")
    assert rows == [(None, None), ("x y", '{"a": "x y"}')]  # Spark casts to a VARCHAR(n) as to a STRING


@pytest.mark.parametrize(("sql", "names"), [  # each as Spark 4.1 named it (checked in a session)
    ("SELECT N, Big, t.X AS Total FROM t", ["N", "Big", "Total"]),
    ("SELECT count(*), COUNT(1), Count(Big), MAX(t.n), avg(X), count(distinct S) FROM t",
     ["count(1)", "count(1)", "count(Big)", "max(n)", "avg(X)", "count(DISTINCT S)"]),
    ("SELECT * FROM t", ["n", "big", "x", "s", "ts", "d", "h"]),
    ("WITH w AS (SELECT S AS Name, n FROM t) SELECT * FROM w", ["Name", "n"]),
    ("SELECT x.*, m.a FROM (SELECT Big FROM t) x JOIN m ON TRUE", ["Big", "a"]),
    ("SELECT N FROM t UNION ALL SELECT big FROM t", ["N"]),
])
def test_columns_are_named_as_spark_names_them_in_duckdbs_answer(db, sql, names):
    assert translate.output_names(translate.parse(sql), SCHEMA) == names
    translation = translate.translate(translate.parse(sql), SCHEMA, named=True)
    assert [column[0] for column in db.execute(translation.sql).description] == names


@pytest.mark.parametrize("sql", ["SELECT sum(n + 1) FROM t", "SELECT approx_count_distinct(s) AS a, n * 2 FROM t",
                                 "SELECT * FROM t JOIN m USING (a)", "SELECT * FROM t NATURAL JOIN m"])
def test_a_column_spark_would_name_otherwise_is_refused(sql):
    with pytest.raises(Untranslatable):
        translate.translate(translate.parse(sql), SCHEMA, named=True)


def test_an_exploded_array_gives_a_row_per_element_and_none_for_null_or_empty_arrays(db):
    rows, _ = run(db, "SELECT k, e FROM (SELECT 1 AS k, array(5, NULL) AS a UNION ALL SELECT 2, array() UNION ALL "
                      "SELECT 3, NULL) LATERAL VIEW explode(a) t AS e ORDER BY k, e NULLS FIRST")
    assert rows == [(1, None), (1, 5)]  # as Spark's explode (not explode_outer)
    for sql in ("SELECT e FROM m LATERAL VIEW OUTER explode(a) t AS e", "SELECT e FROM m LATERAL VIEW posexplode(a) t AS e",
                "SELECT k FROM m LATERAL VIEW explode(p) t AS k, v", "SELECT explode(a) AS e FROM m",
                "SELECT * FROM m LATERAL VIEW explode(a) t AS e"):
        with pytest.raises(Untranslatable):
            translate.translate(translate.parse(sql), SCHEMA, named=True)


def test_weekday_counts_from_monday_as_spark(db):
    rows, translation = run(db, "SELECT weekday(CAST('2024-05-06' AS DATE)) AS mon, weekday(ts) AS d FROM t "
                                "ORDER BY n")  # a Monday; 2024-05-01, a Wednesday
    assert rows == [(0, 2), (0, None), (0, 2)] and "INTEGER" in str(db.execute(translation.sql).description[1][1])
    with pytest.raises(Untranslatable, match="weekday"):  # Spark casts text to a date first
        translate.translate(translate.parse("SELECT weekday(s) AS w FROM t"), SCHEMA)


def test_translate_maps_each_character_of_a_constant_set_and_removes_those_past_the_second(db):
    rows, _ = run(db, "SELECT translate(s, 'HÉLéo', 'hél') AS r FROM t ORDER BY n")
    assert rows == [(None,), ("ab",), ("hll",)]  # 'héllo': é → l (its place in the second set), o removed
    rows, _ = run(db, "SELECT translate('ABC-abc', 'ABCDEFGHIJKLMNOPQRSTUVWXYZ', 'abcdefghijklmnopqrstuvwxyz') AS r")
    assert rows == [("abc-abc",)]  # ClickHouse's ASCII-only lower()
    for sql in ("SELECT translate(s, 'aa', 'xy') FROM t", "SELECT translate(s, s, 'x') FROM t"):
        with pytest.raises(Untranslatable, match="translate"):
            translate.translate(translate.parse(sql), SCHEMA)


def test_bround_rounds_half_to_even_on_the_decimal_a_double_prints_as(db):
    rows, _ = run(db, "SELECT bround(x, 2) AS r FROM t ORDER BY n")
    assert rows == [(1.0,), (-0.5,), (2.68,)]  # 1.005 → 1.00, 2.675 → 2.68 (ties to even on 1.005 / 2.675)


def test_statements_differing_in_a_time_value_have_one_shape_and_bind_it():
    from pipeframe.serving.translate import parse, shape

    first = "SELECT a FROM t WHERE ts >= CAST('2024-05-01 10:00:00' AS TIMESTAMP) AND k = 'it\\'s' LIMIT 10"
    second = first.replace("2024-05-01 10:00:00", "2025-01-31 23:59:59")
    assert shape(first).key == shape(second).key
    assert shape(second).literals == ("2025-01-31 23:59:59", "it\\'s")
    assert shape(first).key != shape(first.replace("2024-05-01 10:00:00", "2024-05-01")).key  # another form
    assert shape(first).key != shape(first.replace("LIMIT 10", "LIMIT 11")).key
    chosen = shape(first).parameters(parse(first))
    assert chosen == {first.index("'2024"): "pf0"}  # the time compared; the string is no parameter


def test_a_time_literal_outside_a_comparison_is_no_parameter():
    from pipeframe.serving.translate import parse, shape

    sql = "SELECT CAST('2024-05-01' AS DATE) AS d, a FROM t WHERE d IN (CAST('2024-05-02' AS DATE))"
    assert shape(sql).parameters(parse(sql)) == {}


def test_a_string_keyed_maps_value_is_read_and_a_missing_key_is_null(db):
    # Spark: map['org'] → '42', a missing key → NULL (as pipeframe.pipe_stats' parameters are read)
    rows, _ = run(db, "SELECT p['org'] AS org, p['nope'] AS nope FROM m ORDER BY org NULLS LAST")
    assert rows == [("42", None), (None, None)]
