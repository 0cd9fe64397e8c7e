"""Spark accepts the compiled SQL of every example pipe, and the generated state schemas are what Spark infers.

Empty tables of the declared (or generated) schemas stand in for the datasources; views' targets are read
through their finalizing SQL, as the engine reads them by name.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from pyspark.sql.types import _parse_datatype_string

from pipeframe.compiler.states import BATCH_RELATION
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
