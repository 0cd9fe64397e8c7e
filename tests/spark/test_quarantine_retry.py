"""Misfit rows are quarantined once per idempotency key: a request whose misfits landed in quarantine but whose rows
did not (its commit failed after the quarantine's: here a Delta CHECK constraint the rows break, as a process killed
between the two commits would leave it) is sent again with the same key and lands its rows without quarantining its
misfits a second time — by `Project.append`, by the group committer (the events API's and the Kafka consumer's path),
and for an S3 file quarantined whole."""

from __future__ import annotations

import json

import pytest

from pipeframe.engine.ingest import Ingestor
from pipeframe.errors import PipeframeError
from pipeframe.project import Project
from tests.spark.conftest import deployed

EVENTS = """\
SCHEMA >
    `n` Int32 `json:$.n`,
    `tag` String `json:$.tag`
"""


@pytest.fixture(scope="module")
def project(spark, spark_config) -> Project:
    return deployed(spark, spark_config, "quarantine_retry", {"datasources/events.datasource": EVENTS})


def quarantined(project: Project) -> list[tuple]:
    path = project.warehouse.quarantine_path("events")
    if project.warehouse.version_of(path) < 0:  # created by the first quarantined row
        return []
    return sorted(tuple(r) for r in project.spark.sql(f"SELECT raw, source FROM delta.`{path}`").collect())


def landed(project: Project) -> list[tuple]:
    return sorted(tuple(r) for r in project.query("SELECT n, tag FROM events").collect())


def constrained(project: Project, sql: str) -> None:
    path = project.warehouse.snapshot(fresh=True).table("events").path
    project.spark.sql(f"ALTER TABLE delta.`{path}` {sql}")


@pytest.mark.parametrize("how", ["append", "committer"])
def test_a_request_sent_again_after_its_rows_failed_does_not_quarantine_its_misfits_twice(project, how):
    tag = f"retry-{how}"
    lines = [json.dumps({"n": 1000, "tag": tag}), json.dumps({"n": "not a number", "tag": tag}),
             json.dumps({"n": 1001, "tag": tag})]
    before = quarantined(project)

    def send():
        if how == "append":
            return project.append("events", lines, idempotency_key=f"key-{how}")
        return project.committer.append("events", lines, f"key-{how}")

    constrained(project, f"ADD CONSTRAINT held CHECK (tag <> '{tag}')")  # the rows break it: their commit fails
    try:
        with pytest.raises(PipeframeError, match="PF718.*CHECK constraint held"):  # nothing landed: send it again
            send()
    finally:
        constrained(project, "DROP CONSTRAINT held")
    misfit = [(lines[1], r[1]) for r in quarantined(project) if r not in before]
    assert len(misfit) == 1, quarantined(project)  # the first attempt quarantined its misfit
    result = send()  # the same request again, with the same key
    assert (result.accepted, result.quarantined) == (2, 1)
    assert [r for r in quarantined(project) if r not in before] == [(lines[1], misfit[0][1])]  # still once
    assert [r for r in landed(project) if r[1] == tag] == [(1000, tag), (1001, tag)]


def test_a_file_that_cannot_be_read_is_quarantined_once_by_its_key(project):
    table, _ = project.landing_target("events")
    ingestor = Ingestor(project.spark, project.warehouse)
    before = quarantined(project)
    for _ in range(2):  # a pass killed after the quarantine entry, before the ledger's row, then the next pass
        ingestor.quarantine_file(table, "s3://b/broken.csv.gz", "not a complete gzip file", key="s3://b/broken#e1")
    ingestor.quarantine_file(table, "s3://b/broken.csv.gz", "not a complete gzip file", key="s3://b/broken#e2")
    added = [r for r in quarantined(project) if r not in before]
    assert added == [("", "s3://b/broken.csv.gz")] * 2  # once per key: the object's two contents
