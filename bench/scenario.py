"""The benchmark scenario every side runs: an events source, three views over it, and the rows appended to it.

The view SQL is written once, with `{events}` where the source goes: pipeframe reads its datasource `events`,
the other sides read the same Delta table by path.
"""

from __future__ import annotations

from pathlib import Path

EVENTS_DATASOURCE = """\
DESCRIPTION >
    Web request log: one row per request
SCHEMA >
    `ts` TIMESTAMP,
    `user_id` STRING,
    `endpoint` STRING,
    `status` INT,
    `latency` DOUBLE,
    `bytes` BIGINT
"""

# name -> SQL over {events}. Spark's own aggregate spellings: pipeframe turns them into mergeable states
# (HLL for approx_count_distinct, KLL for percentile_approx); the recomputing sides run them as written.
VIEWS = {
    "requests_by_hour": """\
SELECT date_trunc('hour', ts) AS hour, endpoint, status, count(*) AS requests, sum(bytes) AS bytes,
       sum(latency) AS latency_sum
FROM {events}
GROUP BY 1, 2, 3""",
    "users_by_day": """\
SELECT to_date(ts) AS day, approx_count_distinct(user_id) AS users
FROM {events}
GROUP BY 1""",
    "latency_by_endpoint": """\
SELECT endpoint, percentile_approx(latency, 0.5) AS p50, percentile_approx(latency, 0.95) AS p95
FROM {events}
GROUP BY 1""",
}

# The exact view, compared across all sides after the run (the sketch views differ by their algorithms).
EXACT_VIEW = "requests_by_hour"
EXACT_COLUMNS = "hour, endpoint, status, requests, bytes, round(latency_sum, 2) AS latency_sum"

# An endpoint over the hourly view, and the same answer computed from the raw rows.
ENDPOINT_FILTER = """\
    WHERE {time} >= {{{{ DateTime(start, '2024-05-01 00:00:00', description="first hour") }}}}"""
ENDPOINTS = {
    "traffic": """\
    %
    SELECT endpoint, sum(requests) AS requests, sum(bytes) AS bytes
    FROM requests_by_hour
{filter}
    GROUP BY endpoint
    ORDER BY requests DESC, endpoint
    LIMIT 10""".format(filter=ENDPOINT_FILTER.format(time="hour")),
    "traffic_raw": """\
    %
    SELECT endpoint, count(*) AS requests, sum(bytes) AS bytes
    FROM events
{filter}
    GROUP BY endpoint
    ORDER BY requests DESC, endpoint
    LIMIT 10""".format(filter=ENDPOINT_FILTER.format(time="ts")),
}

START_EPOCH = 1714521600  # 2024-05-01 00:00:00 UTC
SECONDS_PER_ROW = 30 * 86400 / 10_000_000  # one traffic density at every scale: 10M requests fill 30 days
ENDPOINT_COUNT = 50


def generate(spark, first_id: int, rows: int):
    """Rows `first_id` .. `first_id + rows - 1` of the request log, in time order as a real log arrives.

    Timestamps advance with the row id (about 3.9 requests a second, with a minute of jitter), so every append
    holds the newest requests; 50 endpoints, 100k users, skewed latencies. About 13,900 requests an hour fall
    into at most 250 (endpoint, status) groups, so the hourly view holds roughly 1 row per 55 requests.
    """
    step = SECONDS_PER_ROW

    def uniform(salt: int) -> str:  # a deterministic number in [0, 1) per row, the same on every run
        return f"(pmod(hash(id, {salt}), 1000003) / CAST(1000003 AS DOUBLE))"

    return spark.range(first_id, first_id + rows).selectExpr(
        f"timestamp_seconds({START_EPOCH} + CAST(id * {step!r} + {uniform(0)} * 60 AS BIGINT)) AS ts",
        f"concat('u', CAST(CAST({uniform(1)} * 100000 AS INT) AS STRING)) AS user_id",
        f"concat('/api/', CAST(CAST({uniform(2)} * {ENDPOINT_COUNT} AS INT) AS STRING)) AS endpoint",
        f"CAST(element_at(array(200, 200, 200, 201, 304, 404, 500), CAST({uniform(3)} * 7 AS INT) + 1) AS INT)"
        " AS status",
        f"round({uniform(4)} * {uniform(5)} * 2000, 2) AS latency",
        f"CAST({uniform(6)} * 100000 AS BIGINT) AS bytes")


def write_pipeframe_project(root: Path) -> None:
    """The scenario as a pipeframe project: the datasource, three materialized pipes, two endpoints."""
    (root / "datasources").mkdir(parents=True)
    (root / "pipes").mkdir()
    (root / "pipeframe.yaml").write_text("name: bench\n")
    (root / "datasources/events.datasource").write_text(EVENTS_DATASOURCE)
    for name, sql in VIEWS.items():
        body = "\n".join("    " + line for line in sql.format(events="events").splitlines())
        (root / f"pipes/{name}.pipe").write_text(f"NODE {name}\nSQL >\n{body}\nTYPE materialized\nDATASOURCE {name}\n")
    for name, sql in ENDPOINTS.items():
        (root / f"pipes/{name}.pipe").write_text(f"NODE {name}\nSQL >\n{sql}\nTYPE endpoint\n")
