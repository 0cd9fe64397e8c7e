"""Endpoints and copy pipes on real Spark + Delta: parameters, Tinybird's answer shape, the deployed-version
guard, copies in append and replace mode and the COPY_SCHEDULE scheduler."""

from __future__ import annotations

import shutil
from datetime import UTC, datetime
from pathlib import Path

import pytest

from pipeframe.copy import CopyScheduler, run_copy
from pipeframe.errors import PipeframeError
from pipeframe.project import Project
from tests.conftest import EVENTS, HOURLY, write_project

TOP_USERS = """\
TOKEN "dashboard" READ
DESCRIPTION >
    Users by total amount since a day
NODE endpoint
SQL >
    %
    SELECT user_id, sum(amount) AS total, count(*) AS n
    FROM events
    WHERE ts >= {{ DateTime(since, '2024-01-01 00:00:00', description="First instant") }}
    {% if defined(user) %} AND user_id = {{ String(user) }} {% endif %}
    GROUP BY user_id
    ORDER BY total DESC, user_id
    LIMIT {{ Int(limit, 10) }}
TYPE endpoint
"""
SNAPSHOT = """\
NODE snapshot
SQL >
    %
    SELECT hour, n, total FROM hourly WHERE total >= {{ Int(min_total, 0) }}
TYPE copy
TARGET_DATASOURCE hourly_copy
COPY_MODE {mode}
COPY_SCHEDULE {schedule}
"""
HOURLY_COPY = """\
SCHEMA >
    `hour` TIMESTAMP,
    `n` BIGINT,
    `total` BIGINT
"""
ROWS = [{"ts": "2024-05-01 10:00:00", "user_id": "ann", "amount": 5},
        {"ts": "2024-05-01 10:30:00", "user_id": "bob", "amount": 7},
        {"ts": "2024-05-02 11:00:00", "user_id": "ann", "amount": 4},
        {"ts": "2024-05-03 12:00:00", "user_id": "cid", "amount": 1}]


def build(spark, spark_config, name: str, mode: str = "append", schedule: str = "@on-demand") -> Project:
    root = Path(spark_config.root) / "endpoints" / name
    shutil.rmtree(root, ignore_errors=True)
    write_project(root, {"datasources/events.datasource": EVENTS, "pipes/hourly.pipe": HOURLY,
                         "pipes/top_users.pipe": TOP_USERS, "datasources/hourly_copy.datasource": HOURLY_COPY,
                         "pipes/snapshot.pipe": SNAPSHOT.replace("{mode}", mode).replace("{schedule}", schedule)})
    shutil.copy(Path(spark_config.root) / "pipeframe.yaml", root / "pipeframe.yaml")
    project = Project(root, spark=spark, environ={})
    assert project.check().ok, [d.format() for d in project.check().diagnostics]
    project.deploy()
    project.append("events", ROWS)
    return project


@pytest.fixture(scope="module")
def project(spark, spark_config) -> Project:
    return build(spark, spark_config, "shared")


def test_endpoint_answers_with_validated_parameters(project):
    result = project.endpoint("top_users", limit="2", since="2024-05-01 00:00:00")
    assert result.data == [{"user_id": "ann", "total": 9, "n": 2}, {"user_id": "bob", "total": 7, "n": 1}]
    body = result.to_json()
    assert body["meta"] == [{"name": "user_id", "type": "string"}, {"name": "total", "type": "bigint"},
                            {"name": "n", "type": "bigint"}]
    assert body["rows"] == 2 and body["statistics"]["rows_read"] == len(ROWS)
    assert body["statistics"]["bytes_read"] > 0 and body["statistics"]["elapsed"] > 0
    # defaults, an optional filter, and the same rows as a DataFrame through Project.query
    assert [r["user_id"] for r in project.endpoint("top_users", user="cid").data] == ["cid"]
    frame = project.query("top_users", since="2024-05-02 00:00:00")
    assert [tuple(r) for r in frame.collect()] == [("ann", 4, 1), ("cid", 1, 1)]


@pytest.mark.parametrize(("params", "parameter", "expected"), [
    ({"limit": "ten"}, "limit", "Int"),
    ({"since": "yesterday"}, "since", "DateTime"),
])
def test_bad_parameter_names_the_parameter_and_type(project, params, parameter, expected):
    with pytest.raises(PipeframeError) as caught:
        project.endpoint("top_users", **params)
    assert caught.value.code == "PF202" and caught.value.http_status == 400
    message = caught.value.diagnostics[0].message
    assert f"`{parameter}`" in message and expected.lower() in message.lower(), message


def test_injection_in_a_string_parameter_is_an_inert_literal(project):
    before = project.query("SELECT count(*) AS n FROM events").collect()[0].n
    result = project.endpoint("top_users", user="ann' OR '1'='1")
    assert result.data == []
    assert project.endpoint("top_users", user="x'); DROP TABLE events; --").data == []
    assert project.query("SELECT count(*) AS n FROM events").collect()[0].n == before


def test_endpoint_errors_say_what_to_do(project):
    cases = {"top_user": ("PF801", 404, "Did you mean `top_users`?"),
             "hourly": ("PF802", 404, "materialized pipe"),
             "snapshot": ("PF802", 404, "copy pipe")}
    for name, (code, status, text) in cases.items():
        with pytest.raises(PipeframeError) as caught:
            project.endpoint(name)
        assert (caught.value.code, caught.value.http_status) == (code, status)
        assert text in caught.value.diagnostics[0].format()


def test_an_edited_but_undeployed_endpoint_is_refused_until_deployed(spark, spark_config):
    project = build(spark, spark_config, "edited")
    pipe = project.root / "pipes/top_users.pipe"
    pipe.write_text(pipe.read_text().replace("count(*) AS n", "count(*) AS orders"))
    edited = Project(project.root, spark=spark, environ={})
    with pytest.raises(PipeframeError) as caught:
        edited.endpoint("top_users")
    assert caught.value.code == "PF804" and caught.value.http_status == 409
    edited.deploy()
    assert edited.endpoint("top_users", limit=1).columns == ["user_id", "total", "orders"]


def test_copy_appends_or_replaces_into_its_target(spark, spark_config):
    project = build(spark, spark_config, "copy_append")
    first = run_copy(project, "snapshot", {"min_total": "4"})
    assert (first.mode, first.target, first.ingest.accepted, first.ingest.quarantined) == ("append", "hourly_copy",
                                                                                            2, 0)
    run_copy(project, "snapshot")  # append mode: every hour again
    assert project.query("SELECT count(*) AS n FROM hourly_copy").collect()[0].n == 2 + 3
    replaced = run_copy(project, "snapshot", mode="replace")
    assert replaced.ingest.accepted == 3
    rows = project.query("SELECT hour, n, total FROM hourly_copy ORDER BY hour").collect()
    truth = project.query("SELECT hour, n, total FROM hourly ORDER BY hour").collect()
    assert rows == truth
    with pytest.raises(PipeframeError) as caught:
        run_copy(project, "top_users")
    assert caught.value.code == "PF802"


def test_scheduler_runs_a_copy_at_its_cron_times(spark, spark_config):
    project = build(spark, spark_config, "copy_scheduled", mode="replace", schedule="0 1 * * *")
    runs = []
    scheduler = CopyScheduler(lambda: project, on_run=lambda name, outcome: runs.append((name, outcome)))
    assert scheduler.tick(datetime(2024, 6, 1, 0, 30, tzinfo=UTC)) == []  # first sight: next run is 01:00
    assert scheduler.tick(datetime(2024, 6, 1, 0, 59, tzinfo=UTC)) == []
    assert scheduler.tick(datetime(2024, 6, 1, 1, 0, tzinfo=UTC)) == ["snapshot"]
    assert scheduler.tick(datetime(2024, 6, 1, 1, 5, tzinfo=UTC)) == []  # next: tomorrow 01:00
    [(name, outcome)] = runs
    assert name == "snapshot" and outcome.ingest.accepted == 3
    project.append("events", [{"ts": "2024-05-04 09:00:00", "user_id": "dan", "amount": 2}])
    assert scheduler.tick(datetime(2024, 6, 2, 1, 0, 30, tzinfo=UTC)) == ["snapshot"]
    assert project.query("SELECT count(*) AS n FROM hourly_copy").collect()[0].n == 4  # replaced, not appended


@pytest.mark.parametrize(("sql", "error_class"), [
    ("SELECT * FROM nope", "[TABLE_OR_VIEW_NOT_FOUND]"),
    ("SELECT nope FROM events", "[UNRESOLVED_COLUMN.WITH_SUGGESTION]"),
    ("SELECT * FROM events LATERAL VIEW x", "[PARSE_SYNTAX_ERROR]"),  # sqlglot lets it through, Spark does not
])
def test_ad_hoc_sql_that_spark_rejects_is_the_users_error(project, sql, error_class):
    with pytest.raises(PipeframeError) as caught:
        project.query(sql)
    error, [diagnostic] = caught.value, caught.value.diagnostics
    assert error.code == "PF808" and error.exit_code == 1 and error.http_status == 400
    assert diagnostic.message.startswith(f"The query failed: {error_class}")
    assert "\n" not in diagnostic.message and "Project [" not in diagnostic.message  # no logical plan
    assert "events, hourly, hourly_copy" in diagnostic.hint and "pipeframe sql" in diagnostic.hint


def test_ad_hoc_sql_failing_while_it_runs_is_the_users_error(project):
    from pipeframe.engine.query import collect_rows

    frame = project.query("SELECT amount / (amount - amount) AS x FROM events")
    with pytest.raises(PipeframeError) as caught:
        collect_rows(frame, 10, project.readable_names())
    assert caught.value.code == "PF808" and "[DIVIDE_BY_ZERO]" in caught.value.diagnostics[0].message
    assert collect_rows(project.query("SELECT user_id FROM events ORDER BY user_id"), 1) == [{"user_id": "ann"}]


def test_an_endpoint_whose_sql_spark_rejects_names_the_pipe_in_one_line(spark, spark_config):
    # `column()` takes any identifier; Spark finds that the table has no such column.
    root = Path(spark_config.root) / "endpoints" / "by_column"
    shutil.rmtree(root, ignore_errors=True)
    write_project(root, {"datasources/events.datasource": EVENTS, "pipes/by_column.pipe":
                         "NODE endpoint\nSQL >\n    %\n    SELECT {{ column(col, 'amount') }} AS v FROM events\n"
                         "TYPE endpoint\n"})
    shutil.copy(Path(spark_config.root) / "pipeframe.yaml", root / "pipeframe.yaml")
    project = Project(root, spark=spark, environ={})
    project.deploy()
    assert project.endpoint("by_column", col="user_id").data == []
    with pytest.raises(PipeframeError) as caught:
        project.endpoint("by_column", col="nope")
    message = caught.value.diagnostics[0].message
    assert caught.value.code == "PF807" and "`by_column`" in message and "[UNRESOLVED_COLUMN" in message
    assert "\n" not in message and "Project [" not in message
