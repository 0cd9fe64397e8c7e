"""engine.deltalog on hand-written `_delta_log` folders: history, latest version and idempotent-write versions read
without Spark, and None wherever the log cannot answer exactly (partial files, cleaned-up commits, gaps)."""

from __future__ import annotations

import json
import os
import time
from datetime import datetime, timedelta
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipeframe.engine import deltalog
from pipeframe.engine.commits import Commit
from pipeframe.plan import records

BASE_MS = 1_700_000_000_000
META = {"metaData": {"id": "t", "format": {"provider": "parquet", "options": {}}, "schemaString": "{}",
                     "partitionColumns": [], "configuration": {}}}


def commit_info(operation: str = "WRITE", **extra) -> dict:
    return {"commitInfo": {"timestamp": 1, "operation": operation, "operationParameters": {"mode": "Append"},
                           "operationMetrics": {"numFiles": "1"}, **extra}}


def write_commit(log: Path, version: int, *actions: dict, mtime_ms: int | None = None) -> Path:
    log.mkdir(parents=True, exist_ok=True)
    path = log / f"{version:020d}.json"
    path.write_text("\n".join(json.dumps(a) for a in actions), encoding="utf-8")
    ms = BASE_MS + version * 1000 if mtime_ms is None else mtime_ms
    os.utime(path, ns=(ms * 1_000_000 + 123_456, ms * 1_000_000 + 123_456))
    return path


def write_checkpoint(log: Path, version: int, txns: list[tuple[str, int]], configuration: dict | None = None,
                     name: str | None = None) -> None:
    txn_type = pa.struct([("appId", pa.string()), ("version", pa.int64()), ("lastUpdated", pa.int64())])
    meta_type = pa.struct([("id", pa.string()), ("configuration", pa.map_(pa.string(), pa.string()))])
    add_type = pa.struct([("path", pa.string())])
    rows_txn = [{"appId": a, "version": v, "lastUpdated": 0} for a, v in txns] + [None, None]
    rows_meta = [None] * len(txns) + [{"id": "t", "configuration": list((configuration or {}).items())}, None]
    rows_add = [None] * (len(txns) + 1) + [{"path": "part-0.parquet"}]
    table = pa.table({"txn": pa.array(rows_txn, txn_type), "metaData": pa.array(rows_meta, meta_type),
                      "add": pa.array(rows_add, add_type)})
    log.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, log / (name or f"{version:020d}.checkpoint.parquet"))


def test_history_reads_commit_files_as_describe_history_does(tmp_path):
    log = tmp_path / "_delta_log"
    write_commit(log, 0, commit_info("CREATE TABLE", operationParameters={"description": None, "isManaged": "false"}),
                 META)
    meta = json.dumps({"pipeframe": {"view": "v", "source_version": 3, "source_path": "/s"}})
    write_commit(log, 1, {"txn": {"appId": "a", "version": 3, "lastUpdated": 1}},
                 commit_info(userMetadata=meta, operationParameters={"auto": False, "n": 5, "mode": "Append"}))
    write_commit(log, 2, {"add": {"path": "x"}})  # no commitInfo at all: an empty entry, like Delta's
    (log / ".00000000000000000003.json.0b1c.tmp").write_text("{")  # a commit being written: not listed yet
    (log / ".00000000000000000002.json.crc").write_text("crc")
    (log / "00000000000000000002.crc").write_text("{}")

    commits = deltalog.history(str(tmp_path), None)
    assert [c.version for c in commits] == [2, 1, 0]
    newest, second, first = commits
    assert newest == Commit(2, datetime.fromtimestamp(BASE_MS // 1000 + 2), BASE_MS / 1000 + 2, "", {}, {}, None)
    assert second.operation == "WRITE" and second.metrics == {"numFiles": "1"}
    assert second.parameters == {"auto": "false", "n": "5", "mode": "Append"}
    assert second.metadata == records.ViewCommit("v", source_version=3, source_path="/s")
    assert first.parameters == {"description": None, "isManaged": "false"}
    assert deltalog.history(str(tmp_path), 2) == commits[:2]
    assert deltalog.history(str(tmp_path), 50) == commits  # a limit past version 0 stops there
    assert deltalog.latest_version(str(tmp_path)) == 2


def test_timestamps_are_file_times_made_increasing_over_the_range_read(tmp_path):
    log = tmp_path / "_delta_log"
    write_commit(log, 0, commit_info(), META, mtime_ms=BASE_MS + 5000)
    write_commit(log, 1, commit_info(), mtime_ms=BASE_MS + 5000)  # same ms: one more than the commit before
    write_commit(log, 2, commit_info(), mtime_ms=BASE_MS + 1000)  # older than its predecessor
    write_commit(log, 3, commit_info(), mtime_ms=BASE_MS + 9000)
    everything = {c.version: c.epoch for c in deltalog.history(str(tmp_path))}
    assert everything == {0: 1_700_000_005.0, 1: 1_700_000_005.001, 2: 1_700_000_005.002, 3: 1_700_000_009.0}
    # Delta monotonizes only the commits it reads: with LIMIT 2 version 2 keeps its own time
    assert {c.version: c.epoch for c in deltalog.history(str(tmp_path), 2)} == {2: 1_700_000_001.0,
                                                                                  3: 1_700_000_009.0}


def test_timestamps_are_naive_local_times_of_this_process(tmp_path, monkeypatch):
    log = tmp_path / "_delta_log"
    write_commit(log, 0, commit_info(), META, mtime_ms=BASE_MS + 250)
    monkeypatch.setenv("TZ", "Asia/Tokyo")
    time.tzset()
    try:
        deltalog._parse_commit_info.cache_clear()
        (commit,) = deltalog.history(str(tmp_path), 1)
        assert commit.timestamp == datetime(2023, 11, 15, 7, 13, 20, 250000)  # 22:13:20.25 UTC
    finally:
        monkeypatch.undo()
        time.tzset()


def test_a_partial_or_empty_commit_file_is_not_trusted(tmp_path):
    log = tmp_path / "_delta_log"
    write_commit(log, 0, commit_info(), META)
    write_commit(log, 1, commit_info())
    (log / f"{2:020d}.json").write_text('{"commitInfo": {"timestamp": 1, "operat')
    assert deltalog.history(str(tmp_path), 1) is None
    assert deltalog.history(str(tmp_path)) is None
    assert deltalog.latest_version(str(tmp_path)) == 2
    (log / f"{2:020d}.json").write_text("")
    assert deltalog.history(str(tmp_path), 3) is None
    assert deltalog.transaction_version(str(tmp_path), "a") is None


def test_cleaned_up_commits_answer_only_the_range_that_remains(tmp_path):
    log = tmp_path / "_delta_log"
    write_checkpoint(log, 5, [("app", 7)])
    for version in range(5, 9):
        write_commit(log, version, commit_info())
    assert deltalog.latest_version(str(tmp_path)) == 8
    assert [c.version for c in deltalog.history(str(tmp_path), 4)] == [8, 7, 6, 5]
    assert deltalog.history(str(tmp_path), 5) is None  # version 4 was cleaned up: Spark decides
    assert [c.version for c in deltalog.history(str(tmp_path))] == [8, 7, 6, 5]  # from the earliest commit file
    assert deltalog.transaction_version(str(tmp_path), "app") == 7


def test_a_listing_kept_between_calls_follows_new_commits_checkpoints_and_a_table_made_again(tmp_path):
    """The listing is kept per folder: later commits are found by looking for each next file, a checkpoint by
    `_last_checkpoint`; a folder whose newest commit is not the file it was (the table was dropped and made again)
    is listed afresh. Every answer equals a listing made from scratch."""
    folder, log = str(tmp_path), tmp_path / "_delta_log"

    def fresh() -> tuple[int, list[int], dict]:
        listed = deltalog._list_folder(folder)
        return listed.latest, sorted(listed.commits), listed.checkpoints

    for version in range(3):
        write_commit(log, version, commit_info(), META)
    assert deltalog.latest_version(folder) == 2
    for version in range(3, 12):  # another writer's commits
        write_commit(log, version, commit_info())
    write_checkpoint(log, 10, [("app", 4)])
    (log / "_last_checkpoint").write_text(json.dumps({"version": 10, "size": 3}))
    listed = deltalog.list_log(folder)
    assert (listed.latest, sorted(listed.commits), listed.checkpoints) == fresh() == (
        11, list(range(12)), {10: [f"{10:020d}.checkpoint.parquet"]})
    assert deltalog.transaction_version(folder, "app") == 4  # read from the checkpoint the listing learned of

    for name in os.listdir(log):  # dropped, and made again with two commits
        os.remove(log / name)
    write_commit(log, 0, commit_info(), META, mtime_ms=BASE_MS + 99_000)
    write_commit(log, 1, commit_info())
    listed = deltalog.list_log(folder)
    assert (listed.latest, sorted(listed.commits), listed.checkpoints) == fresh() == (1, [0, 1], {})


def test_transaction_versions_newest_first_then_the_checkpoint(tmp_path):
    log = tmp_path / "_delta_log"
    for version in range(4):
        write_commit(log, version, commit_info(), *([META] if version == 0 else []),
                     {"txn": {"appId": "app", "version": 10 + version, "lastUpdated": 0}})
    write_checkpoint(log, 3, [("app", 13), ("only-in-checkpoint", 42)])
    write_commit(log, 4, commit_info(), {"txn": {"appId": "other", "version": 1, "lastUpdated": 0}})
    write_commit(log, 5, commit_info(), {"txn": {"appId": "app", "version": 20, "lastUpdated": 0}})
    for version in range(3):  # cleaned up: the checkpoint is all there is before version 4
        (log / f"{version:020d}.json").unlink()
    folder = str(tmp_path)
    assert deltalog.transaction_version(folder, "app") == 20
    assert deltalog.transaction_version(folder, "other") == 1
    assert deltalog.transaction_version(folder, "only-in-checkpoint") == 42
    assert deltalog.transaction_version(folder, "nobody") is None
    (log / f"{4:020d}.json").unlink()  # a gap after the checkpoint: cannot say
    assert deltalog.transaction_version(folder, "only-in-checkpoint") is None


def test_checkpoints_multi_part_incomplete_and_retention(tmp_path):
    log = tmp_path / "_delta_log"
    write_commit(log, 0, commit_info(), META)
    write_checkpoint(log, 2, [("a", 1)], name=f"{2:020d}.checkpoint.{1:010d}.{2:010d}.parquet")
    write_checkpoint(log, 2, [("b", 2)], name=f"{2:020d}.checkpoint.{2:010d}.{2:010d}.parquet")
    write_checkpoint(log, 4, [("a", 9)], name=f"{4:020d}.checkpoint.{1:010d}.{2:010d}.parquet")  # part 2 missing
    for version in (3, 4, 5):
        write_commit(log, version, commit_info())
    listing = deltalog.list_log(str(tmp_path))
    assert sorted(listing.checkpoints) == [2] and listing.latest == 5
    assert deltalog.transaction_version(str(tmp_path), "a") == 1
    assert deltalog.transaction_version(str(tmp_path), "b") == 2
    write_commit(log, 6, commit_info(), {"metaData": {**META["metaData"],
                                                      "configuration": {deltalog.TXN_RETENTION: "interval 1 day"}}})
    assert deltalog.transaction_version(str(tmp_path), "a") is None  # the snapshot may have expired it


def test_latest_version_without_a_log(tmp_path):
    assert deltalog.latest_version(str(tmp_path / "missing")) == -1
    (tmp_path / "_delta_log").mkdir()
    assert deltalog.latest_version(str(tmp_path)) == -1
    assert deltalog.history(str(tmp_path)) is None
    assert deltalog.history(str(tmp_path / "missing"), 1) is None
    assert deltalog.transaction_version(str(tmp_path), "a") is None
    write_checkpoint(tmp_path / "_delta_log", 7, [])
    assert deltalog.latest_version(str(tmp_path)) == 7


def test_in_commit_timestamps_from_their_enablement_version(tmp_path):
    log = tmp_path / "_delta_log"
    write_commit(log, 0, commit_info(), META, mtime_ms=BASE_MS)
    write_commit(log, 1, commit_info(), mtime_ms=BASE_MS + 1000)
    config = {deltalog.ICT_ENABLED: "true", deltalog.ICT_VERSION: "2", deltalog.ICT_TIMESTAMP: str(BASE_MS + 1500)}
    write_commit(log, 2, {"commitInfo": {**commit_info("SET TBLPROPERTIES")["commitInfo"],
                                         "inCommitTimestamp": BASE_MS + 1500}},
                 {"metaData": {**META["metaData"], "configuration": config}}, mtime_ms=BASE_MS + 99_000)
    write_commit(log, 3, {"commitInfo": {**commit_info()["commitInfo"], "inCommitTimestamp": BASE_MS + 2500}},
                 mtime_ms=BASE_MS)
    epochs = {c.version: c.epoch for c in deltalog.history(str(tmp_path))}
    assert epochs == {0: BASE_MS / 1000, 1: BASE_MS / 1000 + 1, 2: BASE_MS / 1000 + 1.5, 3: BASE_MS / 1000 + 2.5}
    write_commit(log, 4, commit_info(), mtime_ms=BASE_MS)  # no in-commit timestamp where one is required
    write_commit(log, 5, {"commitInfo": {**commit_info()["commitInfo"], "inCommitTimestamp": BASE_MS + 3000}})
    assert deltalog.history(str(tmp_path)) is None
    assert deltalog.history(str(tmp_path), 1) is not None


@pytest.mark.parametrize("value", [1.5, ["x"], {"k": "v"}])
def test_parameters_whose_text_delta_would_render_differently_fall_back(tmp_path, value):
    log = tmp_path / "_delta_log"
    write_commit(log, 0, commit_info(operationParameters={"p": value}), META)
    assert deltalog.history(str(tmp_path)) is None


def test_file_count_reads_tables_of_any_layout_where_live_files_refuses(tmp_path):
    """`file_count` (a deploy's "does the source hold rows") answers for a partitioned table too, which `live_files`
    (files read as the table's rows) refuses; a deletion vector leaves both unanswered."""
    log = tmp_path / "_delta_log"
    partitioned = {"metaData": {**META["metaData"], "partitionColumns": ["day"]}}
    write_commit(log, 0, commit_info("CREATE TABLE"), partitioned)
    assert deltalog.file_count(str(tmp_path)) == (0, 0)
    assert deltalog.live_files(str(tmp_path)) is None
    add = {"path": "day=2024-05-01/a.parquet", "partitionValues": {"day": "2024-05-01"}, "size": 1,
           "modificationTime": 1, "dataChange": True}
    write_commit(log, 1, commit_info(), {"add": add}, {"add": {**add, "path": "day=2024-05-02/b.parquet"}})
    assert deltalog.file_count(str(tmp_path)) == (1, 2)
    write_commit(log, 2, commit_info("DELETE"), {"remove": {"path": add["path"], "dataChange": True}},
                 {"remove": {"path": "day=2024-05-02/b.parquet", "dataChange": True}})
    assert deltalog.file_count(str(tmp_path)) == (2, 0)
    write_commit(log, 3, commit_info(), {"add": {**add, "deletionVector": {"storageType": "u", "cardinality": 1}}})
    assert deltalog.file_count(str(tmp_path)) is None


def test_files_added_since_the_newest_optimize_and_the_commits_it_did_not_read(tmp_path):
    """`added_since_optimize` (may `optimize` leave a table's OPTIMIZE out): adds after the newest OPTIMIZE, or
    committed between the version it read and its own commit, count; its own compacted files and the empty VACUUM
    commits do not; an unreadable range says nothing."""
    log, folder = tmp_path / "_delta_log", str(tmp_path)
    add = {"add": {"path": "a.parquet", "partitionValues": {}, "size": 1, "modificationTime": 1, "dataChange": True}}
    write_commit(log, 0, commit_info("CREATE TABLE"), META)
    assert deltalog.added_since_optimize(folder) is False  # an empty table
    write_commit(log, 1, commit_info(), add)
    assert deltalog.added_since_optimize(folder) is True
    write_commit(log, 2, commit_info(), add)
    write_commit(log, 3, commit_info("OPTIMIZE", readVersion=2), add, {"remove": {"path": "a.parquet"}})
    write_commit(log, 4, commit_info("VACUUM START"))
    write_commit(log, 5, commit_info("VACUUM END"))
    assert deltalog.added_since_optimize(folder) is False
    write_commit(log, 6, commit_info(), add)
    assert deltalog.added_since_optimize(folder) is True
    write_commit(log, 7, commit_info("OPTIMIZE", readVersion=5), add)  # version 6 landed while it ran
    assert deltalog.added_since_optimize(folder) is True
    assert deltalog.added_since_optimize(folder, within=1) is None  # the version it did not read is not looked at
    write_commit(log, 8, commit_info("OPTIMIZE", readVersion=7), add)
    write_commit(log, 9, commit_info("VACUUM START"))
    assert deltalog.added_since_optimize(folder) is False
    assert deltalog.added_since_optimize(folder, within=2) is False
    assert deltalog.added_since_optimize(folder, within=1) is None  # no OPTIMIZE among the commits looked at
    (log / f"{8:020d}.json").unlink()  # a gap
    assert deltalog.added_since_optimize(folder) is None
    assert deltalog.added_since_optimize(str(tmp_path / "nothing")) is None


def test_the_oldest_commit_time_is_the_smallest_clock_of_the_earliest_commit(tmp_path):
    """`oldest_commit_ms` (may `optimize` leave VACUUM out): of the earliest retained commit, the smallest of its file
    time, its in-commit timestamp and its writer's clock, so a copied file's new time does not make a table young."""
    log, folder = tmp_path / "_delta_log", str(tmp_path)
    assert deltalog.oldest_commit_ms(folder) is None
    write_commit(log, 0, {"commitInfo": {"operation": "CREATE TABLE", "timestamp": BASE_MS + 5_000}}, META,
                 mtime_ms=BASE_MS + 9_000)
    write_commit(log, 1, commit_info(timestamp=BASE_MS - 40_000), mtime_ms=BASE_MS - 50_000)  # not read
    assert deltalog.oldest_commit_ms(folder) == BASE_MS + 5_000
    write_commit(log, 0, {"commitInfo": {"operation": "CREATE TABLE", "timestamp": BASE_MS + 5_000,
                                         "inCommitTimestamp": BASE_MS + 1_000}}, META, mtime_ms=BASE_MS + 9_000)
    deltalog._LISTINGS.clear()
    assert deltalog.oldest_commit_ms(folder) == BASE_MS + 1_000
    (log / f"{0:020d}.json").unlink()  # cleaned up: the earliest retained commit is version 1
    deltalog._LISTINGS.clear()
    assert deltalog.oldest_commit_ms(folder) == BASE_MS - 50_000


def test_no_row_before_a_time_is_read_from_the_files_statistics(tmp_path):
    """`tables.nothing_before` (may the service log leave its hourly DELETE out): every live file's minimum of the
    time column is at or after the bound; files of NULLs only or no rows do not count; a file without bounds, a
    zone-less bound or a table the log cannot read says nothing."""
    from datetime import UTC

    from pipeframe.engine import tables

    log, folder = tmp_path / "_delta_log", str(tmp_path)
    bound = datetime(2026, 11, 26, 12, 0, tzinfo=UTC)

    def add(name: str, stats: dict | None) -> dict:
        action = {"path": name, "partitionValues": {}, "size": 1, "modificationTime": 1, "dataChange": True}
        return {"add": {**action, **({"stats": json.dumps(stats)} if stats is not None else {})}}

    write_commit(log, 0, commit_info("CREATE TABLE"), META)
    assert tables.nothing_before(folder, "ts", bound) is True  # no file at all
    write_commit(log, 1, commit_info(), add("a.parquet", {"numRecords": 2, "minValues": {"ts": "2026-11-26T12:00:00.000Z"},
                                                          "nullCount": {"ts": 0}}),
                 add("b.parquet", {"numRecords": 3, "minValues": {}, "nullCount": {"ts": 3}}),
                 add("c.parquet", {"numRecords": 0}))
    assert tables.nothing_before(folder, "ts", bound) is True
    assert tables.nothing_before(folder, "ts", bound + timedelta(milliseconds=1)) is False
    write_commit(log, 2, commit_info(), add("d.parquet", {"numRecords": 1, "minValues": {"ts": "2026-11-26T12:30:00.000+01:00"},
                                                          "nullCount": {"ts": 0}}))
    assert tables.nothing_before(folder, "ts", bound) is False  # 12:30+01:00 is 11:30 UTC
    write_commit(log, 3, commit_info("DELETE"), {"remove": {"path": "d.parquet", "dataChange": True}},
                 add("e.parquet", {"numRecords": 1, "minValues": {"ts": "2026-11-27T00:00:00.000"}, "nullCount": {"ts": 0}}))
    assert tables.nothing_before(folder, "ts", bound) is False  # a zone-less bound: not comparable
    write_commit(log, 4, commit_info("DELETE"), {"remove": {"path": "e.parquet", "dataChange": True}},
                 add("f.parquet", None))
    assert tables.nothing_before(folder, "ts", bound) is False  # no statistics
    write_commit(log, 5, commit_info("DELETE"), {"remove": {"path": "f.parquet", "dataChange": True}})
    assert tables.nothing_before(folder, "ts", bound) is True
    assert tables.nothing_before(str(tmp_path / "nothing"), "ts", bound) is False
