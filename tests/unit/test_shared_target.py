"""Several materialized pipes writing one datasource: what compile accepts (each pipe its own view and state table,
the shared name read as their union), what it refuses (PF314 writers that disagree, PF420 a view over the shared
datasource), and what deploy plans when a second writer arrives or leaves (the first one's table is kept)."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipeframe.compiler.graph import ResourceKey
from pipeframe.errors import PipeframeError
from pipeframe.plan import records
from pipeframe.plan.diff import diff
from pipeframe.plan.snapshot import DeployedResource, DeployedSnapshot, resolve_view
from pipeframe.plan.state import desired_state
from pipeframe.project import Project
from tests.conftest import write_project

CLICKS = """\
SCHEMA >
    `ts` DateTime,
    `page` String,
    `n` Int32
"""
VIEWS = """\
SCHEMA >
    `ts` DateTime,
    `page` String,
    `ms` Int32
"""
COUNTS = """\
SCHEMA >
    `day` Date,
    `page` String,
    `hits` AggregateFunction(count),
    `total` AggregateFunction(sum, Int64)
ENGINE AggregatingMergeTree
ENGINE_SORTING_KEY day, page
"""


def writer(source: str, total: str = "sumState(toInt64(n))", group: str = "day, page",
           extra: str = "") -> str:
    return f"""\
NODE agg
SQL >
    SELECT toDate(ts) AS day, page, countState() AS hits, {total} AS total{extra}
    FROM {source}
    GROUP BY {group}
TYPE materialized
DATASOURCE counts
"""


BASE = {"datasources/clicks.datasource": CLICKS, "datasources/views.datasource": VIEWS,
        "datasources/counts.datasource": COUNTS,
        "pipes/from_clicks.pipe": writer("clicks"),
        "pipes/from_views.pipe": writer("views", "sumState(toInt64(ms))"),
        "pipes/top.pipe": "NODE top\nSQL >\n    SELECT page, countMerge(hits) AS hits FROM counts GROUP BY page\n"
                          "TYPE endpoint\n"}


def compiled(tmp_path: Path, files: dict[str, str | None]):
    merged = {rel: text for rel, text in {**BASE, **files}.items() if text is not None}
    return Project(write_project(tmp_path / f"p{len(list(tmp_path.iterdir()))}", merged), environ={}).compile()


def errors(project) -> list[tuple[str, str, int, str]]:
    return [(d.code, Path(d.location.path).name, d.location.line, d.message) for d in project.errors]


def test_two_pipes_writing_one_target_compile_to_a_view_each_and_a_shared_read(tmp_path):
    project = compiled(tmp_path, {})
    assert errors(project) == []
    assert project.datasources["counts"].writers == ("from_clicks", "from_views")
    states = desired_state(project)
    clicks, views = states[ResourceKey.datasource("counts__from_clicks")], states[ResourceKey.datasource(
        "counts__from_views")]
    assert (clicks.kind, clicks.view_pipe, clicks.source) == ("view", "from_clicks", "clicks")
    assert (views.kind, views.view_pipe, views.source) == ("view", "from_views", "views")
    shared = states[ResourceKey.datasource("counts")]
    assert shared.kind == "shared" and not shared.has_table
    assert shared.writers == ("counts__from_clicks", "counts__from_views")
    assert shared.read_sql == clicks.read_sql == views.read_sql
    assert set(shared.depends_on) == {clicks.key, views.key}
    # the endpoint reads the shared name; its record comes back from the state store equal
    assert ResourceKey.datasource("counts") in states[ResourceKey.pipe("top")].depends_on
    assert records.decode_state(records.encode_state(shared), "counts") == shared
    union = shared.union_sql(["a", "b"])
    assert "SELECT `day`, `page`, `hits`, `total` FROM a UNION ALL SELECT `day`, `page`, `hits`, `total` FROM b" \
        in union and "GROUP BY `day`, `page`" in union


def test_a_writer_producing_another_state_type_is_refused_at_its_select_item(tmp_path):
    project = compiled(tmp_path, {"pipes/from_views.pipe": writer("views", "sumState(toFloat64(ms))")})
    found = errors(project)
    # the declared target takes either sum state, but one merge cannot read a DOUBLE sum and a BIGINT one
    assert [(code, file, line) for code, file, line, _ in found] == [("PF314", "from_views.pipe", 3)]
    assert "`total`" in found[0][3] and "from_clicks" in found[0][3]


def test_writers_merged_otherwise_are_refused(tmp_path):
    counted = {"datasources/counts.datasource": None,
               "pipes/from_clicks.pipe": writer("clicks", "sum(toInt64(n))").replace("countState()", "count()"),
               "pipes/from_views.pipe": writer("views", "sum(toInt64(ms))", group="page, day").replace(
                   "countState()", "count()")}
    assert errors(compiled(tmp_path, counted)) == []  # the same keys in another order group alike
    # count(page) counts no row where page is NULL: a group the other keeps while count() > 0 would vanish
    project = compiled(tmp_path, {**counted, "pipes/from_views.pipe": counted["pipes/from_views.pipe"].replace(
        "count()", "count(page)")})
    found = errors(project)
    assert [(c, f, line) for c, f, line, _ in found] == [("PF314", "from_views.pipe", 7)]
    assert "no count()" in found[0][3] and "`hits`" in found[0][3]


def test_a_writer_with_a_column_the_other_lacks_is_refused(tmp_path):
    generated = {"datasources/counts.datasource": None,
                 "pipes/from_views.pipe": writer("views", "sumState(toInt64(ms))", extra=", max(ms) AS slowest")}
    found = errors(compiled(tmp_path, generated))
    assert [(c, f, line) for c, f, line, _ in found] == [("PF314", "from_views.pipe", 3)]
    assert "`slowest`" in found[0][3]


def test_a_materialized_pipe_over_a_shared_target_is_refused(tmp_path):
    cascade = "NODE pages\nSQL >\n    SELECT page, countMerge(hits) AS hits FROM counts GROUP BY page\n" \
              "TYPE materialized\nDATASOURCE pages\n"
    found = errors(compiled(tmp_path, {"pipes/pages.pipe": cascade}))
    assert [(c, f, line) for c, f, line, _ in found] == [("PF420", "pages.pipe", 3)]
    assert "from_clicks, from_views" in found[0][3]


def test_a_copy_pipe_still_cannot_share_a_target(tmp_path):
    copy = "NODE c\nSQL >\n    SELECT * FROM clicks\nTYPE copy\nTARGET_DATASOURCE counts\n"
    found = errors(compiled(tmp_path, {"pipes/a_copy.pipe": copy}))
    assert [(c, f) for c, f, _, _ in found] == [("PF305", "from_clicks.pipe"), ("PF305", "from_views.pipe")]
    assert "already written by pipe `a_copy`" in found[0][3]


def test_a_writer_table_name_taken_by_a_resource_is_refused(tmp_path):
    found = errors(compiled(tmp_path, {"datasources/counts__from_views.datasource": CLICKS}))
    assert [(c, f) for c, f, _, _ in found] == [("PF305", "from_views.pipe")]


@pytest.mark.parametrize("direction", ["add", "remove"])
def test_a_second_writer_keeps_the_first_ones_table(tmp_path, direction):
    one = {"pipes/from_views.pipe": None}
    before, after = (one, {}) if direction == "add" else ({}, one)
    deployed = {k: records.decode_state(records.encode_state(s), str(k))
                for k, s in desired_state(compiled(tmp_path, before)).items()}
    plan = diff(desired_state(compiled(tmp_path, after)), deployed)
    changes = {str(c.key): (c.action, c.adopts and str(c.adopts)) for c in plan.pending}
    by_key = {str(c.key): c for c in plan.pending}
    if direction == "add":
        assert changes == {"datasource:counts__from_clicks": ("alter", "datasource:counts"),  # renamed, not rebuilt
                           "datasource:counts__from_views": ("create", None),  # backfilled from `views`
                           "datasource:counts": ("alter", None)}  # now the union of both
        union = "now read as the union of `counts__from_clicks`, `counts__from_views`"
        assert by_key["datasource:counts"].details == (union,)
        assert plan.refused == []
    else:
        assert changes == {"datasource:counts": ("alter", "datasource:counts__from_clicks"),
                           "datasource:counts__from_clicks": ("drop", None),  # its table is kept by `counts`
                           "datasource:counts__from_views": ("drop", None)}
        # dropping the second writer's rows wants --allow-destructive, as removing any view does; the kept table not
        assert [str(c.key) for c in plan.refused] == ["datasource:counts__from_views"]


def test_view_commands_take_a_writer_by_its_pipe_and_say_so_for_the_shared_name(tmp_path):
    snapshot = DeployedSnapshot.of(DeployedResource(state, 1, f"/w/{state.name}/v1" if state.has_table else None)
                                   for state in desired_state(compiled(tmp_path, {})).values())
    assert resolve_view(snapshot, "from_views").state.name == "counts__from_views"
    with pytest.raises(PipeframeError) as err:
        resolve_view(snapshot, "counts")
    assert err.value.code == "PF701" and "name one of them (from_clicks, from_views)" in err.value.diagnostics[0].hint


def test_appending_to_a_shared_target_names_every_writer_and_its_source(tmp_path):
    project = Project(write_project(tmp_path / "append", BASE), environ={})
    with pytest.raises(PipeframeError) as err:
        project.append("counts", [{"page": "/"}])  # refused before any engine starts
    diagnostic = err.value.diagnostics[0]
    assert err.value.code == "PF716" and "`from_clicks`, `from_views`" in diagnostic.message
    assert "(`clicks`, `views`)" in diagnostic.hint
