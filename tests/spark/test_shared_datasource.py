"""Two materialized pipes from two sources writing one AggregatingMergeTree datasource (a common Tinybird pattern):
each keeps its own state table and watermark, so appends to either are applied exactly once; a read of the shared
name (an endpoint, on Spark and on the read path) finalizes the union of both; adding the second pipe keeps the
first one's table; a rebuild or populate of one leaves the other's table as it was."""

from __future__ import annotations

import random
from collections import Counter
from datetime import date, datetime, timedelta

from pipeframe.engine.warehouse import local_version
from pipeframe.project import Project
from tests.spark.conftest import deployed
from tests.spark.test_read_path import answers, engines
from tests.unit.test_shared_target import CLICKS, COUNTS, VIEWS

WRITER = """\
NODE agg
SQL >
    SELECT toDate(ts) AS day, page, countState() AS hits, sumState(toInt64({value})) AS total
    FROM {source}
    GROUP BY day, page
TYPE materialized
DATASOURCE counts
"""
TOP = """\
NODE top
SQL >
    SELECT day, page, countMerge(hits) AS hits, sumMerge(total) AS total
    FROM counts GROUP BY day, page ORDER BY day, page
TYPE endpoint
"""


def rows(rng: random.Random, value: str, count: int) -> list[dict]:
    start = datetime(2026, 5, 1)
    return [{"ts": (start + timedelta(hours=rng.randrange(72))).strftime("%Y-%m-%d %H:%M:%S"),
             "page": rng.choice(["/", "/a", "/b", "/c"]), value: rng.randrange(-5, 100)} for _ in range(count)]


def expected(sent: dict[str, list[dict]]) -> list[dict]:
    """The endpoint's answer (days as ISO text, as endpoints answer) recomputed from every row sent to both sources."""
    hits: Counter = Counter()
    total: Counter = Counter()
    for value, batch in (("n", sent["clicks"]), ("ms", sent["views"])):
        for row in batch:
            key = (date.fromisoformat(row["ts"][:10]), row["page"])
            hits[key] += 1
            total[key] += row[value]
    return [{"day": day.isoformat(), "page": page, "hits": hits[(day, page)], "total": total[(day, page)]}
            for day, page in sorted(hits)]


def table(project: Project, name: str) -> tuple[str, int]:
    """Where the deployed table `name` is, and its Delta version."""
    resource = project.warehouse.snapshot(fresh=True).table(name)
    assert resource is not None and resource.path
    return resource.path, local_version(resource.path)


def test_two_pipes_writing_one_datasource(spark, spark_config):
    rng = random.Random(34)
    sent = {"clicks": rows(rng, "n", 40), "views": []}
    project = deployed(spark, spark_config, "shared_target", {
        "datasources/clicks.datasource": CLICKS, "datasources/views.datasource": VIEWS,
        "datasources/counts.datasource": COUNTS, "pipes/top.pipe": TOP,
        "pipes/from_clicks.pipe": WRITER.format(value="n", source="clicks")})
    project.append("clicks", sent["clicks"])
    alone = table(project, "counts")

    # a second pipe starts writing `counts`: the first one's table is kept (renamed), the second one's backfilled
    (project.root / "pipes" / "from_views.pipe").write_text(WRITER.format(value="ms", source="views"))
    project = Project(project.root, spark=spark, environ={})
    project.deploy()
    assert table(project, "counts__from_clicks")[0] == alone[0]
    for source, value, by_append in (("clicks", "n", True), ("views", "ms", False)):
        batch = rows(rng, value, rng.randrange(1, 30))  # applied by the append, or by the refresh below
        sent[source] += batch
        project.append(source, batch, views=by_append)
    project.refresh()
    projects = engines(project.root, spark)
    on_spark, on_read_path = answers(projects, lambda p: p.endpoint("top"))
    assert on_read_path.engine == "duckdb", on_read_path.engine_reason
    assert on_spark.data == on_read_path.data == expected(sent)

    # a rebuild of one writer, then a populate of the other: each leaves the other's table as it was
    views_before = table(project, "counts__from_views")
    project.refresh("from_clicks", full=True)
    assert table(project, "counts__from_views") == views_before
    assert table(project, "counts__from_clicks")[0] != alone[0]  # rebuilt into a new version of its table
    clicks_before = table(project, "counts__from_clicks")
    project.populate("from_views", truncate=True)
    assert table(project, "counts__from_clicks") == clicks_before
    batch = rows(rng, "ms", 10)
    sent["views"] += batch
    project.append("views", batch)
    on_spark, on_read_path = answers(engines(project.root, spark), lambda p: p.endpoint("top"))
    assert on_read_path.engine == "duckdb", on_read_path.engine_reason
    assert on_spark.data == on_read_path.data == expected(sent)
    refreshed = project.refresh()
    assert {r.view: r.outcome for r in refreshed} == {"counts__from_clicks": "up to date",
                                                      "counts__from_views": "up to date"}
