"""Spark accepts the compiled SQL of every example pipe, and the generated state schemas are what Spark infers.

Empty tables of the declared (or generated) schemas stand in for the datasources; views' targets are read
through their finalizing SQL, as the engine reads them by name.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path

import pytest
from pyspark.sql.types import _parse_datatype_string

from pipeframe.compiler.viewplan import BATCH_RELATION
from pipeframe.project import Project

EXAMPLE = Path(__file__).resolve().parents[2] / "example_project"
PIPES = sorted(p.stem for p in (EXAMPLE / "pipes").glob("*.pipe"))
VIEWS = sorted(name for name, p in Project(EXAMPLE).compiled.pipes.items() if p.view is not None)


@pytest.fixture(scope="module")
def compiled():
    return Project(EXAMPLE).require_valid()


def empty_frame(spark, columns):
    ddl = ", ".join(f"`{c.name}` {c.type}" for c in columns)
    return spark.createDataFrame([], ddl)


@pytest.fixture(scope="module")
def catalog(spark, compiled):
    for name, ds in compiled.datasources.items():
        assert all(c.type for c in ds.columns), f"{name} has a column whose type was not inferred"
        frame = empty_frame(spark, ds.columns)
        view = compiled.pipes[ds.view].view if ds.view else None
        if view is not None and view.plan is not None:
            frame.createOrReplaceTempView(f"{name}__states")
            spark.sql(view.plan.read_sql(f"`{name}__states`")).createOrReplaceTempView(name)
        else:
            frame.createOrReplaceTempView(name)
    return compiled


def test_example_has_every_kind_of_pipe(compiled):
    kinds = {p.type for p in compiled.pipes.values()}
    assert kinds == {"materialized", "endpoint", "copy"}
    assert sum(1 for v in compiled.views if v.plan is not None) >= 3


@pytest.mark.parametrize("pipe_name", PIPES)
def test_compiled_pipe_sql_is_accepted_by_spark(spark, catalog, pipe_name):
    pipe = catalog.pipes[pipe_name]
    plan = spark.sql(f"EXPLAIN EXTENDED {pipe.sql}").collect()[0][0]
    assert "AnalysisException" not in plan and "== Physical Plan ==" in plan, plan
    assert spark.sql(pipe.sql).collect() == []  # runs end to end over empty inputs


@pytest.mark.parametrize("pipe_name", VIEWS)
def test_state_sql_schema_matches_the_generated_target(spark, catalog, pipe_name):
    view = catalog.pipes[pipe_name].view
    trigger = catalog.datasources[view.trigger]
    empty_frame(spark, trigger.columns).createOrReplaceTempView(BATCH_RELATION)
    schema = spark.sql(view.plan.state_sql).schema
    produced = {f.name: f.dataType for f in schema.fields}
    target = catalog.datasources[view.target]
    for column in view.plan.columns:
        expected = _parse_datatype_string(column.type)
        assert column.name in produced, f"{pipe_name}: state SQL does not produce {column.name}"
        assert produced[column.name].simpleString() == expected.simpleString(), (
            pipe_name, column.name, produced[column.name].simpleString(), expected.simpleString())
        assert target.column(column.name).type is not None


FILL_EVENTS = "SCHEMA >\n    `ts` DateTime,\n    `v` Int32\n"
FILL_PIPE = """\
NODE n
SQL >
    SELECT toStartOfMinute(ts) AS minute, count() AS hits, sum(v) AS total, 'x' AS tag
    FROM events
    GROUP BY minute
    ORDER BY minute WITH FILL STEP toIntervalMinute(1)
TYPE endpoint
"""
FILL_RANGE_PIPE = """\
NODE n
SQL >
    SELECT v, count() AS hits FROM events GROUP BY v ORDER BY v WITH FILL FROM 0 TO 10 STEP 2
TYPE endpoint
"""

FILL_TWO_NODES = """\
NODE m
SQL >
    SELECT toStartOfMinute(ts) AS minute, count() AS hits FROM events GROUP BY minute
    ORDER BY minute WITH FILL STEP toIntervalMinute(1)
NODE b
SQL >
    SELECT v, count() AS hits FROM events GROUP BY v ORDER BY v WITH FILL FROM 0 TO 10 STEP 2
NODE both
SQL >
    SELECT (SELECT count(*) FROM m) AS minutes, (SELECT count(*) FROM b) AS values
TYPE endpoint
"""


def test_with_fill_runs_and_fills_the_gaps(spark, make_project):
    """ClickHouse's `ORDER BY ... WITH FILL` as compiled: every minute between the first and the last, the empty
    ones at 0 / ''; a numeric FROM (inclusive) / TO (exclusive) series, off-series rows kept."""
    rows = [(datetime(2024, 5, 1, 10, m, s), m * 10 + s) for m, s in ((0, 5), (0, 40), (3, 1), (7, 59), (7, 2))]
    rows.append((datetime(2024, 5, 1, 10, 5, 0), 3))  # v = 3 is off the 0, 2, 4 ... series
    compiled = Project(make_project({"datasources/events.datasource": FILL_EVENTS, "pipes/per_minute.pipe": FILL_PIPE,
                                     "pipes/by_v.pipe": FILL_RANGE_PIPE, "pipes/both.pipe": FILL_TWO_NODES},
                                    with_sources=False)).require_valid()
    spark.createDataFrame(rows, "ts TIMESTAMP, v INT").createOrReplaceTempView("events")

    got = [tuple(r) for r in spark.sql(compiled.pipes["per_minute"].sql).collect()]
    minutes = [ts.replace(second=0) for ts, _ in rows]
    expected = []
    minute = min(minutes)
    while minute <= max(minutes):
        values = [v for ts, v in rows if ts.replace(second=0) == minute]
        expected.append((minute, len(values), sum(values), "x" if values else ""))
        minute += timedelta(minutes=1)
    assert got == expected

    got = [tuple(r) for r in spark.sql(compiled.pipes["by_v"].sql).collect()]
    keys = sorted(set(range(0, 10, 2)) | {v for _, v in rows})
    assert got == [(k, sum(1 for _, v in rows if v == k)) for k in keys]

    # two filled nodes in one pipe (each node's query becomes one statement: their names must not clash)
    assert [tuple(r) for r in spark.sql(compiled.pipes["both"].sql).collect()] == [(len(expected), len(keys))]
