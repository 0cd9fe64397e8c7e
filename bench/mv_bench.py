"""Incremental materialized views vs recomputation, on real Spark + Delta (PRODUCT.md section 8).

Usage: python bench/mv_bench.py [--rows 10000000] [--fraction 0.01] [--repeats 3] [--small-rows 1000000] [--json F]

One run, one Spark session, the same data for every side:
  1. refresh vs recompute: an events source of --rows rows with three views (hourly counts/sums by endpoint and
     status; daily distinct users, HLL; p50/p95 latency per endpoint, KLL). Append --fraction of new rows, then
     time `pipeframe refresh` of the three views against recomputing the same three views with
     CREATE OR REPLACE TABLE AS SELECT over all rows (what a full-refresh materialized view does).
  2. cost follows the batch: the refresh time of the same batch size at --small-rows total rows and at --rows.
  3. append overhead: `Project.append` of a batch (schema check, quarantine split, source commit, three views)
     against a plain Delta append of the same rows.
Prints a JSON summary (min / median / max per measure, and ratios).
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

from common import emit, ratio, summary  # bench/common.py (the script's folder is on sys.path)

EVENTS = """\
DESCRIPTION >
    Web request log
SCHEMA >
    `ts` TIMESTAMP,
    `user_id` STRING,
    `endpoint` STRING,
    `status` INT,
    `latency` DOUBLE,
    `bytes` BIGINT
"""
VIEWS = {
    "requests_by_hour": """\
SELECT date_trunc('hour', ts) AS hour, endpoint, status, count(*) AS requests, sum(bytes) AS bytes,
       sum(latency) AS latency_sum
FROM events
GROUP BY 1, 2, 3""",
    "users_by_day": """\
SELECT to_date(ts) AS day, approx_count_distinct(user_id) AS users
FROM events
GROUP BY 1""",
    "latency_by_endpoint": """\
SELECT endpoint, percentile_approx(latency, 0.5) AS p50, percentile_approx(latency, 0.95) AS p95
FROM events
GROUP BY 1""",
}


def generate(spark, rows: int, seed: int):
    """`rows` synthetic requests spread over 30 days, 200 endpoints, 100k users."""
    return spark.range(rows).selectExpr(
        f"timestamp_seconds(1714521600 + CAST(rand({seed}) * 2592000 AS BIGINT)) AS ts",
        f"concat('u', CAST(CAST(rand({seed + 1}) * 100000 AS INT) AS STRING)) AS user_id",
        f"concat('/api/', CAST(CAST(rand({seed + 2}) * 200 AS INT) AS STRING)) AS endpoint",
        f"CAST(element_at(array(200, 200, 200, 201, 304, 404, 500), CAST(rand({seed + 3}) * 7 AS INT) + 1) AS INT)"
        " AS status",
        f"round(rand({seed + 4}) * rand({seed + 5}) * 2000, 2) AS latency",
        f"CAST(rand({seed + 6}) * 100000 AS BIGINT) AS bytes")


def write_project(root: Path) -> None:
    (root / "datasources").mkdir(parents=True)
    (root / "pipes").mkdir()
    (root / "datasources/events.datasource").write_text(EVENTS)
    (root / "pipeframe.yaml").write_text("name: mvbench\n")
    for name, sql in VIEWS.items():
        body = "\n".join("    " + line for line in sql.splitlines())
        (root / f"pipes/{name}.pipe").write_text(f"NODE {name}\nSQL >\n{body}\nTYPE materialized\nDATASOURCE {name}\n")


def timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start




def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--small-rows", type=int, default=1_000_000)
    parser.add_argument("--fraction", type=float, default=0.01)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json", type=Path, default=None, help="Also write the summary to this file.")
    args = parser.parse_args()

    from pipeframe.engine.warehouse import quote_path
    from pipeframe.project import Project

    work = Path(tempfile.mkdtemp(prefix="pipeframe-mvbench-"))
    try:
        root = work / "project"
        write_project(root)
        project = Project(root, environ={})
        spark = project.spark
        project.deploy()
        source = project.warehouse.deployed()["datasource:events"].path
        batch_rows = int(args.rows * args.fraction)
        seed = iter(range(1000, 100000, 10))

        def land(rows: int) -> None:  # another job writes to the source; pipeframe picks it up with refresh
            generate(spark, rows, next(seed)).write.format("delta").mode("append").save(source)

        results: dict = {"rows": args.rows, "small_rows": args.small_rows, "batch_rows": batch_rows,
                         "spark": spark.version, "python": sys.version.split()[0]}

        # --- 2a. refresh of a batch at the small table size
        land(args.small_rows)
        project.refresh()
        small = []
        for _ in range(args.repeats):
            land(batch_rows)
            small.append(timed(project.refresh))
        # --- grow to the full size, then 1. and 2b.
        land(args.rows - spark.read.format("delta").load(source).count())
        initial = timed(project.refresh)
        results["initial_refresh_of_all_rows_s"] = round(initial, 2)
        refresh, recompute = [], []
        for _ in range(args.repeats):
            land(batch_rows)
            refresh.append(timed(project.refresh))
            project.warehouse.register(project.warehouse.deployed())

            def recompute_all() -> None:
                for name, sql in VIEWS.items():
                    spark.sql(f"CREATE OR REPLACE TABLE {quote_path(str(work / 'ctas' / name))} USING DELTA AS {sql}")

            recompute.append(timed(recompute_all))
        # The exact view reads the same as its recomputation (the sketch views are covered by the tests).
        exact = "SELECT hour, endpoint, status, requests, bytes, round(latency_sum, 2) FROM {}"
        view = project.query(exact.format("requests_by_hour"))
        truth = spark.sql(exact.format(quote_path(str(work / "ctas" / "requests_by_hour"))))
        if view.exceptAll(truth).count() or truth.exceptAll(view).count():
            raise SystemExit("requests_by_hour differs from its recomputation")
        results["refresh_s"] = summary(refresh)
        results["recompute_ctas_s"] = summary(recompute)
        results["recompute_over_refresh"] = ratio(recompute, refresh)
        results["refresh_small_table_s"] = summary(small)
        results["refresh_large_over_small"] = ratio(refresh, small)

        # --- 3. append through pipeframe (3 views) vs a plain Delta append of the same rows
        plain_path = str(work / "plain")
        generate(spark, 10, 1).limit(0).write.format("delta").save(plain_path)
        appends, plains = [], []
        for _ in range(args.repeats):
            frame = generate(spark, batch_rows, next(seed)).cache()
            frame.count()
            plains.append(timed(lambda f=frame: f.write.format("delta").mode("append").save(plain_path)))
            appends.append(timed(lambda f=frame: project.append("events", f)))
            frame.unpersist()
        results["plain_append_s"] = summary(plains)
        results["append_with_3_views_s"] = summary(appends)
        results["append_over_plain"] = ratio(appends, plains)
        emit(results, args.json)
        return 0
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
