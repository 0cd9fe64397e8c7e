"""The engine's pure bookkeeping (no JVM): which Delta commits a view must follow, skip or go stale on,
backfill progress arithmetic, view statuses and input formats."""

from __future__ import annotations

import os
from datetime import datetime

import pytest

from pipeframe.engine.commits import Commit
from pipeframe.engine.ingest import detect_format
from pipeframe.engine.lifecycle import effective_status
from pipeframe.engine.materialize import BackfillProgress
from pipeframe.engine.warehouse import ViewRecord
from pipeframe.errors import PipeframeError
from pipeframe.plan import records


def commit(operation: str, parameters: dict | None = None, metrics: dict | None = None,
           metadata: records.CommitRecord | None = None) -> Commit:
    return Commit(7, datetime(2024, 5, 1), 0.0, operation, parameters or {}, metrics or {}, metadata)


@pytest.mark.parametrize(("operation", "parameters", "metrics", "rewrites"), [
    ("WRITE", {"mode": "Append"}, {}, False),
    ("WRITE", {"mode": "Overwrite"}, {}, True),
    ("STREAMING UPDATE", {"outputMode": "Append"}, {}, False),
    ("DELETE", {}, {"numDeletedRows": "3"}, True),
    ("DELETE", {}, {"numDeletedRows": "0"}, False),  # matched nothing
    ("DELETE", {}, {}, True),  # a metadata-only delete of whole files reports no row count
    ("UPDATE", {}, {"numUpdatedRows": "1"}, True),
    ("MERGE", {}, {"numTargetRowsUpdated": "0", "numTargetRowsDeleted": "0"}, False),  # insert-only merge
    ("MERGE", {}, {"numTargetRowsUpdated": "2", "numTargetRowsDeleted": "0"}, True),
    ("TRUNCATE", {}, {}, True),
    ("RESTORE", {}, {}, True),
    ("OPTIMIZE", {}, {"numRemovedFiles": "9"}, False),
    ("SET TBLPROPERTIES", {}, {}, False),
])
def test_which_commits_rewrite_rows_in_place(operation, parameters, metrics, rewrites):
    assert commit(operation, parameters, metrics).rewrites_rows() is rewrites


def test_compaction_and_ttl_commits_are_neutral_for_views_downstream():
    compaction = commit("WRITE", {"mode": "Overwrite"}, metadata=records.Compaction("v", 3))
    restore = commit("WRITE", {"mode": "Append"}, {"numOutputRows": "2"}, records.CompactionRestore("v", "c1", 3))
    ttl = commit("DELETE", {}, {"numDeletedRows": "100"}, metadata=records.Retention())
    for neutral in (compaction, restore, ttl):
        assert neutral.neutral and not neutral.rewrites_rows() and not neutral.changes_data
    assert commit("WRITE", {"mode": "Append"}).changes_data
    assert not commit("VACUUM END").changes_data


def test_user_metadata_is_read_only_from_pipeframe_commits():
    assert records.decode('{"pipeframe": {"view": "v", "source_version": 4}}', "c") == \
        records.ViewCommit("v", source_version=4)
    assert records.decode('{"other": 1}', "c") is None
    assert records.decode("free text someone wrote", "c") is None
    assert records.decode(None, "c") is None


def run(done: int, **extra) -> dict:
    return {"mode": "rebuilding", "chunks": ["a < 1", "a >= 1 AND a < 2", "a >= 2"], "chunk_rows": [10, 30, 60],
            "done": done, "total_rows": 100, "started_at": 1000.0, "updated_at": 1010.0, "pinned_version": 3,
            "pid": os.getpid(), "host": __import__("socket").gethostname(), **extra}


def test_backfill_progress_counts_rows_rate_eta_and_cursor():
    progress = BackfillProgress.from_run("hourly", run(2))
    assert (progress.processed_rows, progress.percent, progress.rate) == (40, 40.0, 4.0)
    assert progress.eta_seconds == 15.0 and progress.cursor == "a >= 2" and progress.running
    finished = BackfillProgress.from_run("hourly", run(3))
    assert finished.percent == 100.0 and finished.cursor is None and finished.eta_seconds == 0.0
    dead = BackfillProgress.from_run("hourly", run(1, pid=2**22 + 12345))
    assert not dead.running and dead.to_json()["running"] is False


@pytest.mark.parametrize(("record", "status"), [
    (ViewRecord("v"), "active"),
    (ViewRecord("v", paused=True), "paused"),
    (ViewRecord("v", stale_reason="UPDATE at version 3"), "stale"),
    (ViewRecord("v", paused=True, error="boom"), "error"),
    (ViewRecord("v", backfill={"mode": "backfilling"}), "backfilling"),
    (ViewRecord("v", backfill={"mode": "rebuilding"}, paused=True), "rebuilding"),
])
def test_effective_status(record, status):
    assert effective_status(record) == status


def test_input_format_from_extension_or_flag():
    assert detect_format("a/b.ndjson", None) == "ndjson"
    assert detect_format("b.JSONL.gz", None) == "ndjson"
    assert detect_format("b.csv", None) == "csv" and detect_format("b.parquet", None) == "parquet"
    assert detect_format("-", "csv") == "csv"
    with pytest.raises(PipeframeError, match="PF710"):
        detect_format("data.txt", None)
    with pytest.raises(PipeframeError, match="PF710"):
        detect_format("data.csv", "xml")
