"""`FROM t FINAL` on a ReplacingMergeTree: the pure transform (compiler/final.py) and what `check` says about it.
The answers themselves are compared with a plain-Python recomputation in tests/spark/test_compat_projects.py."""

from __future__ import annotations

import pytest
import sqlglot
from sqlglot import exp

from pipeframe.compiler.final import FINAL_MARK, Deduplication, dedupe_final, deduplication, final_tables
from pipeframe.compiler.sql import parse_select, to_sql
from pipeframe.datafiles.model import Column, Datasource
from pipeframe.errors import Location
from pipeframe.project import Project

HERE = Location("pipes/p.pipe", 3, 5)
USERS = Deduplication(key=("id",), version="updated_at", columns=("id", "name", "updated_at", "deleted"),
                      is_deleted="deleted", tiebreak=("name", "deleted"))
DEDUPED = ("(SELECT `id`, `name`, `updated_at`, `deleted` FROM (SELECT *, ROW_NUMBER() OVER (PARTITION BY `id` "
           "ORDER BY `updated_at` DESC, `name` DESC, `deleted` DESC) AS __pf_final_rank FROM `users`) AS __pf_final "
           "WHERE __pf_final_rank = 1 AND `deleted` = 0)")


def marked(sql: str) -> exp.Expression:
    return parse_select(sql, HERE)


# ------------------------------------------------------------------------------------------ the transform

def test_a_final_table_becomes_the_latest_row_per_key_without_deleted_rows():
    tree = dedupe_final(marked("SELECT id, name FROM users FINAL WHERE name <> ''"), {"users": USERS})
    assert to_sql(tree) == f"SELECT id, name FROM {DEDUPED} AS users WHERE name <> ''"


def test_the_alias_is_kept_so_qualified_columns_resolve():
    tree = dedupe_final(marked("SELECT u.name, o.total FROM users AS u FINAL JOIN orders AS o ON u.id = o.user_id"),
                        {"users": USERS})
    assert to_sql(tree) == f"SELECT u.name, o.total FROM {DEDUPED} AS u JOIN orders AS o ON u.id = o.user_id"


def test_only_tables_read_with_final_are_rewritten():
    tree = marked("SELECT id FROM users UNION ALL SELECT id FROM users FINAL")
    assert to_sql(dedupe_final(tree, {"users": USERS})) == f"SELECT id FROM users UNION ALL SELECT id FROM {DEDUPED} AS users"
    assert to_sql(dedupe_final(marked("SELECT * FROM events FINAL"), {"users": USERS})) == "SELECT * FROM events"


def test_without_is_deleted_every_latest_row_is_kept():
    spec = Deduplication(key=("a", "b"), version="v", columns=("a", "b", "v"))
    assert to_sql(dedupe_final(marked("SELECT * FROM t FINAL"), {"t": spec})) == (
        "SELECT * FROM (SELECT `a`, `b`, `v` FROM (SELECT *, ROW_NUMBER() OVER (PARTITION BY `a`, `b` ORDER BY `v` "
        "DESC) AS __pf_final_rank FROM `t`) AS __pf_final WHERE __pf_final_rank = 1) AS t")


def test_the_subquery_is_marked_and_a_tree_that_is_the_table_is_replaced_whole():
    tree = dedupe_final(marked("SELECT id FROM users FINAL"), {"users": USERS})
    assert [node.meta_get(FINAL_MARK) for node in final_tables(tree)] == ["users"]
    table = sqlglot.parse_one("SELECT 1 FROM users", read="spark").find(exp.Table)
    table.meta[FINAL_MARK] = True
    assert isinstance(dedupe_final(table.copy(), {"users": USERS}), exp.Subquery)


def test_final_in_a_subquery_and_a_spark_reading_are_marked():
    assert [t.name for t in final_tables(marked("SELECT * FROM (SELECT id FROM users FINAL) AS x"))] == ["users"]
    # Spark can read `t FINAL` (FINAL as an alias) but not ARRAY JOIN ...: the Spark reading is marked too.
    tree = marked("SELECT toDate(ts) AS d FROM users FINAL LATERAL VIEW explode(tags) e AS tag")
    assert [t.name for t in final_tables(tree)] == ["users"]
    assert "FINAL" not in to_sql(tree)


def test_the_deduplication_of_a_datasource():
    def ds(engine: str, **settings: str) -> Datasource:
        cols = tuple(Column(n, t, t, HERE) for n, t in
                     (("id", "BIGINT"), ("attrs", "MAP<STRING, STRING>"), ("v", "BIGINT"), ("gone", "INT")))
        return Datasource("users", "datasources/users.datasource", HERE, cols, engine=engine, sorting_key=("id",),
                          engine_settings=tuple(settings.items()))

    assert deduplication(ds("ReplacingMergeTree", ENGINE_VER="v", ENGINE_IS_DELETED="gone")) == Deduplication(
        ("id",), "v", ("id", "attrs", "v", "gone"), "gone", ("gone",))  # a MAP cannot be ordered: no tie-break
    assert deduplication(ds("ReplacingMergeTree")) is None  # no ENGINE_VER: check says why (PF311)
    assert deduplication(ds("ReplacingMergeTree", ENGINE_VER="nope")) is None
    assert deduplication(ds("MergeTree", ENGINE_VER="v")) is None


# ------------------------------------------------------------------------------------------ through check

USERS_DS = """SCHEMA >
    `id` Int64,
    `name` String,
    `updated_at` DateTime,
    `deleted` UInt8

ENGINE "ReplacingMergeTree"
ENGINE_SORTING_KEY "id"
{settings}
"""


def endpoint(sql: str) -> str:
    body = "\n".join("    " + line for line in sql.strip().splitlines())
    return f"NODE endpoint\nSQL >\n{body}\n\nTYPE endpoint\n"


def check(make_project, files: dict[str, str], settings: str = 'ENGINE_VER "updated_at"\nENGINE_IS_DELETED "deleted"'):
    root = make_project({"datasources/users.datasource": USERS_DS.format(settings=settings), **files})
    return Project(root).check()


def test_an_endpoint_reading_final_checks_clean_and_runs_deduplicated(make_project):
    report = check(make_project, {
        "pipes/active.pipe": endpoint("%\nSELECT name FROM users FINAL\nWHERE id > {{ Int64(min_id, 0) }}"),
        "pipes/by_name.pipe": endpoint("SELECT name, count() AS n FROM active GROUP BY name"),
        "pipes/plain.pipe": endpoint("SELECT name FROM users"),
    })
    assert report.ok, [d.format() for d in report.diagnostics]
    pipes = report.project.pipes
    assert "ROW_NUMBER() OVER (PARTITION BY `id` ORDER BY `updated_at` DESC" in pipes["active"].sql
    assert "`deleted` = 0" in pipes["active"].render({"min_id": 5})
    assert "WHERE id > 5" in pipes["active"].render({"min_id": 5})
    assert "ROW_NUMBER()" in pipes["by_name"].sql  # read through another pipe
    assert "ROW_NUMBER()" not in pipes["plain"].sql  # without FINAL: ClickHouse's meaning, duplicates possible


def test_a_copy_pipe_reading_final_is_deduplicated(make_project):
    report = check(make_project, {
        "datasources/snapshot.datasource": "SCHEMA >\n    `id` Int64,\n    `name` String\n",
        "pipes/snap.pipe": "NODE n\nSQL >\n    SELECT id, name FROM users FINAL\n\nTYPE copy\n"
                           "TARGET_DATASOURCE snapshot\nCOPY_SCHEDULE @on-demand\n"})
    assert report.ok, [d.format() for d in report.diagnostics]
    assert "__pf_final_rank = 1" in report.project.pipes["snap"].sql


def test_final_without_engine_ver_is_an_error_at_its_line(make_project):
    report = check(make_project, {"pipes/active.pipe": endpoint("SELECT name\nFROM users FINAL")}, settings="")
    (d,) = report.errors
    assert (d.code, d.location.path, d.location.line) == ("PF311", "pipes/active.pipe", 4)
    assert "ENGINE_VER" in d.hint


@pytest.mark.parametrize(("files", "ok"), [
    ({"pipes/e.pipe": endpoint("SELECT * FROM sales FINAL")}, True),  # a MergeTree: FINAL changes nothing
    ({"datasources/sums.datasource": "SCHEMA >\n    `k` String,\n    `n` Int64\n\nENGINE \"SummingMergeTree\"\n"
      "ENGINE_SORTING_KEY \"k\"\n", "pipes/e.pipe": endpoint("SELECT * FROM sums FINAL")}, False),
    ({"pipes/e.pipe": "NODE first\nSQL >\n    SELECT * FROM sales\n\nNODE endpoint\nSQL >\n    SELECT * FROM first "
      "FINAL\n\nTYPE endpoint\n"}, False),  # a node is not a datasource
])
def test_final_on_other_tables(make_project, files, ok):
    report = check(make_project, files)
    assert report.ok is ok, [d.format() for d in report.diagnostics]
    assert {d.code for d in report.errors} == (set() if ok else {"PF311"})


def test_a_materialized_pipe_reading_final_is_rejected(make_project):
    view = ("NODE agg\nSQL >\n    SELECT name, count() AS n\n    FROM users FINAL\n    GROUP BY name\n\n"
            "TYPE materialized\nDATASOURCE per_name\n")
    report = check(make_project, {"pipes/per_name.pipe": view})
    (d,) = report.errors
    assert (d.code, d.location.path, d.location.line) == ("PF417", "pipes/per_name.pipe", 4)
    assert report.project.pipes["per_name"].view.verdict.status == "rejected"


def test_replacing_settings_must_name_columns(make_project):
    report = check(make_project, {}, settings='ENGINE_VER "version"\nENGINE_IS_DELETED "deleted"')
    assert [(d.code, d.message) for d in report.errors] == [
        ("PF307", "ENGINE_VER uses `version`, which is not a column of `users`.")]
    root = make_project({"datasources/users.datasource": USERS_DS.format(settings='ENGINE_VER "updated_at"')
                         .replace('ENGINE_SORTING_KEY "id"\n', "")})
    assert [d.code for d in Project(root).check().errors] == ["PF307"]
