"""The read path without a JVM (DuckDB over the tables' snapshots) gives Spark's answers: every endpoint of the
example project, and generated queries over generated data (NULLs, decimals, timestamps, integer division, string
functions, ORDER BY with ties and LIMIT, every aggregate state a view can keep), each run on both engines of one
project and compared value for value (floats within 1e-9 relative), `meta` included.

What the read path will not answer (a construct without Spark's meaning in DuckDB) must say so and answer through
Spark; the tests count those and require the rest equal.
"""

from __future__ import annotations

import bisect
import json
import math
import os
import random
import shutil
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from pipeframe.errors import PipeframeError
from pipeframe.project import Project
from tests.spark.conftest import deployed

EXAMPLE = Path(__file__).resolve().parents[2] / "example_project"
FACTS = """\
SCHEMA >
    `ts` TIMESTAMP `json:$.ts`,
    `day` DATE `json:$.day`,
    `user_id` STRING `json:$.user_id`,
    `country` Nullable(String) `json:$.country`,
    `n` Nullable(Int32) `json:$.n`,
    `big` BIGINT `json:$.big`,
    `x` Nullable(Float64) `json:$.x`,
    `price` Nullable(Decimal(10, 2)) `json:$.price`,
    `flag` Nullable(Bool) `json:$.flag`,
    `tags` Array(String) `json:$.tags[:]`,
    `payload` Nullable(String) `json:$.payload`,
    `userAgent` Nullable(String) `json:$.ua`
"""
# One view holding every kind of aggregate state (count, sums of integers, doubles and decimals, min/max, avg,
# HLL and KLL sketches, a set, arg-max, variance), grouped by a key and a time bucket.
STATES = """\
NODE states
SQL >
    SELECT
        country,
        date_trunc('day', ts) AS day,
        count(*) AS events,
        count_if(flag) AS flagged,
        sum(n) AS n_sum,
        sum(x) AS x_sum,
        sum(price) AS revenue,
        min(x) AS x_min,
        max(ts) AS last_seen,
        avg(x) AS x_avg,
        approx_count_distinct(user_id) AS users,
        uniqExact(user_id) AS users_exact,
        percentile_approx(x, 0.5) AS x_median,
        max_by(user_id, ts) AS last_user,
        var_pop(x) AS x_var,
        stddev_samp(x) AS x_stddev
    FROM facts
    GROUP BY country, date_trunc('day', ts)
TYPE materialized
DATASOURCE states
"""
EXPLICIT = """\
NODE explicit
SQL >
    SELECT country, uniqState(user_id) AS users, sumState(big) AS big_sum, quantilesState(0.25, 0.75)(x) AS x_q
    FROM facts
    GROUP BY country
TYPE materialized
DATASOURCE explicit
"""
EXPLICIT_TARGET = """\
SCHEMA >
    `country` Nullable(String),
    `users` AggregateFunction(uniq, String),
    `big_sum` AggregateFunction(sum, Int64),
    `x_q` AggregateFunction(quantiles(0.25, 0.75), Float64)
"""
MERGES = """\
NODE merged
SQL >
    %
    SELECT country, uniqMerge(users) AS users, sumMerge(big_sum) AS big_sum, quantilesMerge(0.25, 0.75)(x_q) AS x_q
    FROM explicit
    WHERE country != {{ String(skip, 'none') }}
    GROUP BY country
    ORDER BY country
TYPE endpoint
"""
COUNTRIES = ["DE", "FR", "ES", "NL", None]


def facts_rows(rng: random.Random, count: int) -> list[dict]:
    """Generated events: a few users and countries (ties), NULLs in every nullable column, zeros (for division),
    negative numbers, decimals with cents, instants written with and without a UTC offset, unicode."""
    start = datetime(2024, 5, 1, tzinfo=UTC)
    rows = []
    for _ in range(count):
        at = start + timedelta(seconds=rng.randrange(0, 5 * 86400))
        zone = rng.choice([0, 2, -5])
        written = at.astimezone(UTC).replace(tzinfo=None) + timedelta(hours=zone)
        rows.append({
            "ts": written.strftime("%Y-%m-%d %H:%M:%S") + ("" if zone == 0 else f"{zone:+03d}:00"),
            "day": (start + timedelta(days=rng.randrange(0, 40))).strftime("%Y-%m-%d"),
            "user_id": rng.choice(["ann", "bob", "chloé", "dmitri", "eve", "zoë", "li"]),
            "country": rng.choice(COUNTRIES),
            "n": rng.choice([None, 0, 1, 2, 3, 7, -4, 10, 12]),
            "big": rng.choice([0, 1, 5, 10**12, -3, 42]),
            "x": rng.choice([None, 0.0, 1.5, -2.25, 3.125, 2.675, 1e6 / 7, rng.random() * 100]),
            "price": rng.choice([None, "0.00", "2.50", "19.99", "1.005", "-3.10", "1234.56"]),
            "flag": rng.choice([None, True, False]),
            "tags": rng.sample(["a", "b", "c", "d"], rng.randrange(0, 4)),
            "payload": rng.choice([None, '{"page": "/a", "n": 3, "ok": true, "user": {"id": "u1"}}',
                                   '{"page": "/b\\u00e9", "n": -4, "ok": false, "user": {"id": null}, "x": 1.5}',
                                   '{"page": "/c", "list": ["p", "q"], "user": {}}', '{"n": 12345678901234567890}']),
        })
        rows[-1]["ua"] = f"UA/{rows[-1]['user_id']}"  # a column named in camel case (no draw: the rows stay as they were)
    return rows


@pytest.fixture(scope="module")
def generated(spark, spark_config) -> dict[str, Project]:
    rng = random.Random(20261126)
    fixtures = "\n".join(json.dumps(r) for r in facts_rows(rng, 400))
    project = deployed(spark, spark_config, "read_path", {
        "datasources/facts.datasource": FACTS, "pipes/states.pipe": STATES,
        "pipes/explicit.pipe": EXPLICIT, "datasources/explicit.datasource": EXPLICIT_TARGET,
        "pipes/merged.pipe": MERGES, "fixtures/facts.ndjson": fixtures})
    for _ in range(2):  # more blocks: the views hold several state rows per key, sketches are merged
        project.append("facts", facts_rows(rng, 300))
    return engines(project.root, spark)


def engines(root: Path, spark) -> dict[str, Project]:
    """The project answering on Spark alone, and on the read path (Spark where it says it cannot)."""
    return {"spark": Project(root, spark=spark, environ={}, engine="spark"),
            "duckdb": Project(root, spark=spark, environ={}, engine="auto")}


@pytest.fixture(scope="module")
def example(spark, spark_config) -> dict[str, Project]:
    root = Path(spark_config.root) / "read_path_example"
    shutil.rmtree(root, ignore_errors=True)
    shutil.copytree(EXAMPLE, root, ignore=shutil.ignore_patterns(".pipeframe"))
    project = Project(root, spark=spark, environ={})
    project.deploy()
    project.load_fixtures()
    project.append("sales", str(root / "samples" / "more_sales.jsonl"))
    return engines(root, spark)


def same(a: object, b: object) -> bool:
    """Equal values; floats within 1e-9 relative (Spark and DuckDB sum doubles in other orders)."""
    if isinstance(a, float) and isinstance(b, float):
        return (math.isnan(a) and math.isnan(b)) or math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    return a == b


def answers(projects: dict[str, Project], run) -> tuple[object, object]:
    """(Spark's, the read path's) answer of `run(project)`, or the error code and first words each raised."""
    found = []
    for engine in ("spark", "duckdb"):
        try:
            found.append(run(projects[engine]))
        except PipeframeError as err:
            found.append(("error", err.code, err.diagnostics[0].message.split(":", 1)[-1].strip()[:40]))
    return found[0], found[1]


EXAMPLE_CALLS = [
    ("top_products", {}), ("top_products", {"limit": "3", "start": "2024-05-15 00:00:00"}),
    ("top_products", {"product": "espresso-machine"}), ("country_customers", {}),
    ("country_customers", {"min_customers": "5", "limit": "2"}), ("product_hours", {"product": "espresso-machine"}),
    ("product_hours", {"product": "desk-lamp", "start": "2024-05-15 00:00:00"}),
    ("sales_timeseries", {"product": "coffee-grinder"}), ("slow_pages", {}), ("slow_pages", {"min_p95": "0"}),
]


def test_every_endpoint_of_the_example_project_gives_sparks_answer_on_the_read_path(example):
    compared = 0
    for pipe, params in EXAMPLE_CALLS:
        spark, duck = answers(example, lambda p, pipe=pipe, params=params: p.endpoint(pipe, **params))
        assert not isinstance(duck, tuple), (pipe, params, duck)
        assert duck.engine == "duckdb" and spark.engine == "spark", (pipe, duck.engine_reason)
        assert duck.meta == spark.meta, (pipe, duck.meta, spark.meta)
        assert same(duck.data, spark.data), (pipe, params, duck.data, spark.data)
        compared += len(spark.data)
    assert compared > 50


def test_every_state_kind_reads_as_spark_finalizes_it(generated):
    """A plain read of the view (every state finalized), and explicit states merged by an endpoint."""
    spark, duck = answers(generated, lambda p: p.read("SELECT * FROM states ORDER BY country, day"))
    assert duck.engine == "duckdb", duck.engine_reason
    assert duck.meta == spark.meta
    assert len(duck.data) == len(spark.data) > 10
    for ours, theirs in zip(duck.data, spark.data, strict=True):  # groups below k = 200 values: KLL exact too
        assert same(ours, theirs), (ours, theirs)
    for params in ({}, {"skip": "DE"}):
        spark, duck = answers(generated, lambda p, params=params: p.endpoint("merged", **params))
        assert duck.engine == "duckdb", duck.engine_reason
        assert duck.meta == spark.meta and [r["users"] for r in duck.data] == [r["users"] for r in spark.data]
        assert same([r["big_sum"] for r in duck.data], [r["big_sum"] for r in spark.data])


def test_columns_answer_with_the_names_spark_gives_them(generated):
    """As written (an alias, a column in any case), as the table names them (a star), after the expression (an
    aggregate without an alias); a name DuckDB would give otherwise is refused, and Spark answers."""
    for sql in [("SELECT USER_ID, Country AS Land, count(*), max(X), count(DISTINCT user_id), Min(n) FROM facts "
                 "GROUP BY USER_ID, Country ORDER BY USER_ID, Land"), "SELECT * FROM facts ORDER BY ts, user_id LIMIT 5",
                "SELECT f.* FROM (SELECT userAgent, user_id AS Who FROM facts) f ORDER BY Who, userAgent LIMIT 5",
                "WITH w AS (SELECT USERAGENT AS UA, n FROM facts) SELECT * FROM w ORDER BY UA, n LIMIT 4",
                "SELECT Country FROM facts UNION ALL SELECT user_id FROM facts ORDER BY 1 LIMIT 3"]:
        spark, duck = answers(generated, lambda p, sql=sql: p.read(sql, 100))
        assert duck.engine == "duckdb", (sql, duck.engine_reason)
        assert [name for name, _ in duck.meta] == [name for name, _ in spark.meta], sql
        assert duck.meta == spark.meta and same(duck.data, spark.data), sql
    assert [name for name, _ in spark.meta] == ["Country"]
    # Spark answers it, whatever the limit: its in-memory top-K would allocate for 10**9 rows (the driver's heap ran
    # out before `spark.sql.execution.topKSortFallbackThreshold`).
    spark, duck = answers(generated, lambda p: p.read("SELECT country, sum(n + 1) FROM facts GROUP BY country "
                                                      "ORDER BY country", 10**9))
    assert duck.engine == "spark" and "without a name" in duck.engine_reason and duck.meta == spark.meta
    assert [name for name, _ in duck.meta] == ["country", "sum((n + 1))"] and duck.data == spark.data


# --------------------------------------------------------------------------------------- generated queries
NUMERIC = ["n", "big", "x", "price", "n + big", "x * 2", "n DIV 3", "n % 7", "x / 4", "try_divide(x, n)",
           "round(x, 2)", "round(price, 1)", "round(x)", "floor(x)", "ceil(price)", "abs(n)", "-x", "coalesce(n, 0)",
           "greatest(n, big)", "least(x, 0.5)", "n * 1000000", "price * 3", "price + 1.5", "length(user_id)",
           "year(ts)", "month(day)", "hour(ts)", "size(tags)", "CAST(x AS BIGINT)", "CAST(price AS DOUBLE)",
           "CAST(n AS DOUBLE) / 3", "nullif(n, 0)", "if(flag, x, -x)", "sqrt(abs(x))", "pow(n, 2)",
           "CAST(x AS INT)", "CAST(price AS INT)", "CAST(price AS DECIMAL(12, 1))", "CAST(big AS DOUBLE)",
           "CAST(flag AS INT)", "n * big", "big % 7", "x - n", "abs(price)", "round(price * 3, 1)", "greatest(x, n)",
           "price - n", "price * price", "bround(x, 1)", "bround(price, 1)", "datediff(day, to_date(ts))",
           "weekday(day)", "weekday(ts)"]
TEXT = ["user_id", "country", "upper(user_id)", "lower(country)", "concat(user_id, '-', country)",
        "substring(user_id, 2, 3)", "substr(user_id, 0, 2)", "trim(concat(' ', user_id, ' '))",
        "coalesce(country, 'none')", "CAST(n AS STRING)", "CAST(price AS STRING)",
        "CASE WHEN n > 5 THEN 'hi' WHEN n IS NULL THEN 'null' ELSE 'lo' END", "CAST(flag AS STRING)",
        "CAST(day AS STRING)", "CAST(x AS STRING)", "CAST(ts AS STRING)", "upper(substr(user_id, 1, 1))",
        "regexp_replace(user_id, '^([a-z])([a-z]+)', '$2-$1')", "regexp_replace(user_id, '[aeiou]', '')",
        "get_json_object(payload, '$.page')", "get_json_object(payload, '$.user.id')",
        "get_json_object(payload, '$.list[1]')", "get_json_object(payload, '$.ok')", "get_json_object(payload, '$.n')",
        "get_json_object(payload, '$.x')", "CAST(get_json_object(payload, '$.user.id') AS STRING)",
        "CAST(user_id AS VARCHAR(3))", "translate(user_id, 'ABCDEFGHIJKLMNOPQRSTUVWXYZ', 'abcdefghijklmnopqrstuvwxyz')",
        "translate(upper(user_id), 'ABCÉË', 'abe')"]
TIME = ["ts", "day", "date_trunc('hour', ts)", "date_trunc('DAY', ts)", "to_date(ts)", "CAST(day AS TIMESTAMP)",
        "CAST(ts AS DATE)", "date_trunc('MONTH', day)", "ts - INTERVAL 90 MINUTES", "ts + INTERVAL 1 MONTH",
        "add_months(day, 1)"]
PREDICATES = ["flag", "NOT flag", "n > 5 AND flag", "country IS NULL", "n BETWEEN 2 AND 8",
              "country IN ('DE', 'FR')", "user_id LIKE '%o%'", "price > 10",
              "ts >= CAST('2024-05-03 00:00:00' AS TIMESTAMP)", "x < 0 OR n = 0", "array_contains(tags, 'a')", "day = CAST('2024-05-07' AS DATE)",
              "user_id <=> 'ann'", "n IS NOT NULL AND big > 5", "coalesce(flag, false)", "x > 1.5",
              "user_id >= 'c'", "n IN (1, 2, 3)", "NOT (country = 'DE')", "user_id RLIKE '^[a-d]'",
              "user_id RLIKE 'o.'", "ts > CAST('2024-05-04 00:00:00' AS TIMESTAMP) - INTERVAL 36 HOURS"]
AGGREGATES = ["count(*)", "count(x)", "sum(n)", "sum(price)", "avg(x)", "min(ts)", "max(user_id)",
              "count(DISTINCT user_id)", "sum(big)", "avg(price)", "min(day)", "max(x)", "count_if(flag)",
              "stddev_samp(x)", "var_pop(x)", "max_by(user_id, ts)", "min(price)", "sum(x) / count(*)",
              "count(DISTINCT country)", "max(day)", "sum(n * 2)", "avg(n)"]
VIEW_READS = [
    ("SELECT country, sum(events) AS events, round(sum(revenue), 2) AS revenue FROM states GROUP BY country "
     "ORDER BY events DESC, country"),
    "SELECT day, max(users) AS users, min(x_min) AS low FROM states GROUP BY day ORDER BY day",
    "SELECT * FROM states WHERE country = 'DE' ORDER BY day",
    "SELECT country, users, big_sum FROM explicit ORDER BY country",
]
# ClickHouse's ARRAY JOIN as Spark runs it (a row per element, none for an empty array): always on the read path.
ARRAY_JOINS = [
    "SELECT tag, count(*) AS n, sum(x) AS x FROM facts LATERAL VIEW explode(tags) t AS tag GROUP BY tag ORDER BY tag",
    ("SELECT user_id, tag, weekday(day) AS wd FROM facts LATERAL VIEW explode(tags) t AS tag WHERE tag <> 'a' "
     "ORDER BY user_id, tag, wd, ts LIMIT 30"),
]


def generated_queries(rng: random.Random, count: int) -> list[str]:
    """Queries over the generated facts: projections with a filter, ordered by every column (deterministic) or by a
    prefix with LIMIT (ties), and grouped aggregates."""
    queries = VIEW_READS + ARRAY_JOINS
    scalars = NUMERIC + TEXT + TIME
    while len(queries) < count:
        kind = rng.random()
        where = f" WHERE {rng.choice(PREDICATES)}" if rng.random() < 0.6 else ""
        if kind < 0.55:
            columns = rng.sample(scalars, rng.randrange(1, 4))
            select = ", ".join(f"{c} AS c{i}" for i, c in enumerate(columns))
            order = ", ".join(f"c{i} {rng.choice(['ASC', 'DESC'])}" for i in range(len(columns)))
            limit = f" LIMIT {rng.randrange(1, 40)}" if rng.random() < 0.5 else ""
            queries.append(f"SELECT {select} FROM facts{where} ORDER BY {order}{limit}")
        else:
            key = rng.choice(["country", "user_id", "to_date(ts)", "flag", "n % 3"])
            aggregates = rng.sample(AGGREGATES, rng.randrange(1, 4))
            select = ", ".join(f"{a} AS a{i}" for i, a in enumerate(aggregates))
            queries.append(f"SELECT {key} AS k, {select} FROM facts{where} GROUP BY {key} ORDER BY k")
    return queries


def ordered_prefix_equal(spark_rows: list[dict], duck_rows: list[dict]) -> bool:
    return len(spark_rows) == len(duck_rows) and all(same(a, b) for a, b in zip(duck_rows, spark_rows, strict=True))


def test_generated_queries_answer_the_same_on_both_paths(generated):
    rng = random.Random(7)
    queries = generated_queries(rng, 300)
    compared = rows = errors = 0
    refused: dict[str, int] = {}
    for sql in queries:
        spark, duck = answers(generated, lambda p, sql=sql: p.read(sql, 1000))
        if isinstance(spark, tuple) or isinstance(duck, tuple):
            # An error Spark raises (a division by zero) the read path raises too, with Spark's error class.
            assert spark == duck, (sql, spark, duck)
            errors += 1
            continue
        if duck.engine == "spark":  # refused: it said why and Spark answered
            assert duck.engine_reason and sql not in ARRAY_JOINS, (sql, duck.engine_reason)
            refused[duck.engine_reason.split(" is ")[0]] = refused.get(duck.engine_reason.split(" is ")[0], 0) + 1
            assert same(duck.data, spark.data), sql
            continue
        assert duck.meta == spark.meta, (sql, duck.meta, spark.meta)
        assert ordered_prefix_equal(spark.data, duck.data), (sql, duck.data[:5], spark.data[:5])
        compared += 1
        rows += len(spark.data)
    print(f"\ngenerated queries: {compared} compared ({rows} rows), {errors} raising the same error, "
          f"refused by the read path: {refused}")
    assert compared >= 0.8 * len(queries), refused
    assert rows > 2000


def test_order_by_with_ties_and_limit_keeps_sparks_order_and_null_placement(generated):
    """With ties at the LIMIT, which of the tied rows come back is either engine's choice: the ordered keys must be
    Spark's, and every row one the full answer holds."""
    for direction in ("ASC", "DESC"):
        sql = f"SELECT country, n, user_id FROM facts ORDER BY country {direction}, n {direction} LIMIT 25"
        spark, duck = answers(generated, lambda p, sql=sql: p.read(sql))
        assert duck.engine == "duckdb", duck.engine_reason
        keys = [(r["country"], r["n"]) for r in spark.data]
        assert [(r["country"], r["n"]) for r in duck.data] == keys
        full = generated["spark"].read(f"SELECT country, n, user_id FROM facts ORDER BY country {direction}")
        assert all(row in full.data for row in duck.data)
        nulls_first = direction == "ASC"  # Spark's default: NULLS FIRST ascending, NULLS LAST descending
        assert (keys[0][0] is None) == nulls_first


def test_decimals_keep_their_type_and_exact_values(generated):
    sql = "SELECT country, sum(price) AS total, min(price) AS low FROM facts GROUP BY country ORDER BY country"
    spark, duck = answers(generated, lambda p: p.read(sql))
    assert duck.engine == "duckdb", duck.engine_reason
    assert duck.meta == spark.meta and dict(duck.meta)["total"].startswith("decimal(")
    assert duck.data == spark.data and any(r["total"] for r in duck.data)


SAMPLES = """\
SCHEMA >
    `g` String `json:$.g`,
    `u` String `json:$.u`,
    `v` Float64 `json:$.v`
"""
SKETCHES = """\
NODE sketches
SQL >
    SELECT g, count(*) AS n, approx_count_distinct(u) AS users, percentile_approx(v, 0.5) AS median,
           percentile_approx(v, 0.9) AS p90
    FROM samples
    GROUP BY g
TYPE materialized
DATASOURCE sketched
"""


def test_sketches_merged_from_many_blocks_finalize_as_sparks(spark, spark_config):
    """HLL unions are deterministic: the read path's distinct counts equal Spark's exactly, past the sketch's exact
    range too. KLL merges that compact choose items at random in DataSketches (Spark's own answers differ from run
    to run): a quantile of a group that never compacted (at most k = 200 values) equals Spark's, and every other
    one is within the sketch's rank error of the true quantile, as Spark's is."""
    rng = random.Random(3)

    def block(count: int) -> list[dict]:
        return [{"g": g, "u": f"user-{rng.randrange(6000)}", "v": rng.lognormvariate(3, 1)}
                for g in ("big", "small") for _ in range(count if g == "big" else 20)]

    project = deployed(spark, spark_config, "read_path_sketches", {
        "datasources/samples.datasource": SAMPLES, "pipes/sketches.pipe": SKETCHES,
        "fixtures/samples.ndjson": "\n".join(json.dumps(r) for r in block(1500))})
    for _ in range(3):
        project.append("samples", block(1500))
    projects = engines(project.root, spark)
    spark_answer, read_path = answers(projects, lambda p: p.read("SELECT * FROM sketched ORDER BY g"))
    assert read_path.engine == "duckdb", read_path.engine_reason
    values = {g: sorted(r["v"] for r in projects["spark"].read(f"SELECT v FROM samples WHERE g = '{g}'",
                                                                 100_000).data) for g in ("big", "small")}
    for ours, theirs in zip(read_path.data, spark_answer.data, strict=True):
        assert ours["n"] == theirs["n"] and ours["users"] == theirs["users"]
        if theirs["n"] <= 200:
            assert (ours["median"], ours["p90"]) == (theirs["median"], theirs["p90"])
            continue
        seen = values[theirs["g"]]
        for column, rank in (("median", 0.5), ("p90", 0.9)):
            for answer in (ours[column], theirs[column]):
                assert abs(bisect.bisect_right(seen, answer) / len(seen) - rank) <= 0.02, (column, answer)
    assert {r["g"]: r["n"] for r in spark_answer.data} == {"big": 6000, "small": 80}
    assert spark_answer.data[0]["users"] > 3000  # past HLL's exact (list and set) modes


def test_a_table_with_deletion_vectors_is_answered_by_spark_and_says_why(spark, spark_config):
    """Deletion vectors hide rows the data files still hold: the read path (which reads the files) hands the query to
    Spark, and the answer says so."""
    project = deployed(spark, spark_config, "read_path_vectors", {
        "datasources/facts.datasource": FACTS,
        "fixtures/facts.ndjson": "\n".join(json.dumps(r) for r in facts_rows(random.Random(5), 50))})
    path = project.snapshot.table("facts").path
    spark.sql(f"ALTER TABLE delta.`{path}` SET TBLPROPERTIES ('delta.enableDeletionVectors' = 'true')")
    spark.sql(f"DELETE FROM delta.`{path}` WHERE user_id = 'ann'")
    assert spark.sql(f"DESCRIBE DETAIL delta.`{path}`").first()["numFiles"] >= 1
    projects = engines(project.root, spark)
    sql = "SELECT user_id, count(*) AS n FROM facts GROUP BY user_id ORDER BY user_id"
    theirs, ours = answers(projects, lambda p: p.read(sql))
    assert ours.engine == "spark" and "deletion vectors" in ours.engine_reason, (ours.engine, ours.engine_reason)
    assert ours.data == theirs.data and "ann" not in [r["user_id"] for r in ours.data]


TRIPWIRE = r"""
import json, sys


class Tripwire:  # any import of Spark's packages fails at once: a read that needs a JVM would show as an error
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("pyspark", "py4j", "delta"):
            raise ImportError(f"tripwire: {name} imported")
        return None


sys.meta_path.insert(0, Tripwire())
from click.testing import CliRunner
from pipeframe.cli import main

print(json.dumps([CliRunner().invoke(main, args).output for args in json.loads(sys.stdin.read())]))
"""


def test_endpoint_query_and_status_answer_in_a_fresh_process_without_spark(example):
    """The CLI's reads, each in a process where importing pyspark fails: the same answers as Spark's."""
    import subprocess
    import sys

    root = str(example["spark"].root)
    sql = "SELECT product, sum(orders) AS orders FROM sales_by_hour GROUP BY product ORDER BY 2 DESC, 1 LIMIT 4"
    commands = [["endpoint", "top_products", "--param", "limit=3", "--format", "json", "-p", root],
                ["query", sql, "--format", "json", "-p", root], ["status", "--json", "-p", root]]
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIPEFRAME_")}
    env["PYTHONPATH"] = str(EXAMPLE.parents[0])
    done = subprocess.run([sys.executable, "-c", TRIPWIRE], input=json.dumps(commands), capture_output=True,
                          text=True, timeout=300, check=True, env=env)
    endpoint, query, status = json.loads(done.stdout)
    endpoint, query, status = json.loads(endpoint), json.loads(query), json.loads(status)
    assert endpoint["statistics"]["engine"] == "duckdb" and query["statistics"]["engine"] == "duckdb"
    assert endpoint["data"] == example["spark"].endpoint("top_products", limit="3").data
    spark_query = example["spark"].read(sql)
    assert query["data"] == spark_query.data and query["meta"] == spark_query.to_json()["meta"]
    by_spark = {s.name: s.to_json() for s in example["spark"].status()}
    assert {s["name"] for s in status} == set(by_spark) == {"sales_by_hour", "sales_by_day", "customers_by_country",
                                                            "latency_by_path", "sales_by_category"}
    volatile = {"lag_seconds", "lag_ms", "rows_per_second"}  # measured against the clock
    for found in status:
        assert {k: v for k, v in found.items() if k not in volatile} == \
            {k: v for k, v in by_spark[found["name"]].items() if k not in volatile}
