"""engine.deltalog against real Delta tables: the history read from `_delta_log` equals DESCRIBE HISTORY's (the
Spark path of tables.history) field by field, for every kind of commit, every limit, a checkpointed log, shuffled
file times and other time zones; idempotent-write versions agree with what Delta skips; a log it cannot read
exactly sends tables.history back to Spark."""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path

import pytest

from pipeframe.compiler.graph import ResourceKey
from pipeframe.engine import deltalog, tables
from pipeframe.engine.warehouse import IO, local_version
from pipeframe.plan.state import ResourceState
from pipeframe.sqltext import quote_path

SOURCE = ResourceState(ResourceKey.datasource("t"), "t", "datasource", columns=(("id", "INT"), ("v", "STRING")))


def spark_history(monkeypatch: pytest.MonkeyPatch, spark, path: str, limit: int | None) -> list[tables.Commit]:
    """tables.history as it reads without the commit files: DESCRIBE HISTORY."""
    with monkeypatch.context() as patch:
        patch.setattr(deltalog, "history", lambda folder, limit=None: None)
        before = IO["history"]
        commits = tables.history(spark, path, limit)
        assert IO["history"] == before + 1
    return commits


def assert_same_history(monkeypatch, spark, path: str, limits=(None, 1, 2, 3, 5, 8, 13, 100)) -> None:
    for limit in limits:
        expected = spark_history(monkeypatch, spark, path, limit)
        before = IO["history"]
        actual = tables.history(spark, path, limit)
        assert IO["history"] == before, "the commit files answered: no DESCRIBE HISTORY"
        assert deltalog.history(path, limit) == actual
        assert len(actual) == len(expected), limit
        for mine, theirs in zip(actual, expected, strict=True):
            for name in ("version", "timestamp", "epoch", "operation", "parameters", "metrics", "metadata", "engine"):
                assert getattr(mine, name) == getattr(theirs, name), (limit, mine.version, name)
        assert actual == expected


def append(spark, path: str, rows: list[tuple[int, str]], **options) -> None:
    writer = spark.createDataFrame(rows, "id INT, v STRING").write.format("delta").mode("append")
    for key, value in options.items():
        writer = writer.option(key, value)
    writer.save(path)


@pytest.fixture(scope="module")
def table(spark, spark_config) -> str:
    """One table through every kind of commit, checkpointed every 4 commits."""
    path = str(Path(spark_config.warehouse_uri) / "tests" / "deltalog_every_commit")
    shutil.rmtree(path, ignore_errors=True)
    spark.sql(f"CREATE TABLE {quote_path(path)} (id INT, v STRING) USING DELTA "
              "TBLPROPERTIES ('delta.enableChangeDataFeed' = 'true', 'delta.checkpointInterval' = '4')")
    meta = {"pipeframe": {"view": "v", "source": "s", "source_version": 4, "source_path": "/s"}}
    append(spark, path, [(1, "a"), (2, "b")], userMetadata=json.dumps(meta), txnAppId="app", txnVersion=4)
    append(spark, path, [(3, "c")], txnAppId="other", txnVersion=1)
    spark.createDataFrame([(1, "a"), (2, "b"), (4, "d")], "id INT, v STRING").write.format("delta") \
        .mode("overwrite").save(path)
    spark.sql(f"DELETE FROM {quote_path(path)} WHERE id = 1")
    spark.sql(f"UPDATE {quote_path(path)} SET v = 'z' WHERE id = 2")
    spark.sql(f"MERGE INTO {quote_path(path)} t USING (SELECT 2 AS id, 'm' AS v UNION ALL SELECT 5, 'n') s "
              "ON t.id = s.id WHEN MATCHED THEN UPDATE SET * WHEN NOT MATCHED THEN INSERT *")
    spark.sql(f"OPTIMIZE {quote_path(path)} ZORDER BY (v)")
    spark.sql(f"ALTER TABLE {quote_path(path)} SET TBLPROPERTIES ('pipeframe.note' = 'x')")
    meta["pipeframe"]["source_version"] = 9
    append(spark, path, [(6, "e")], userMetadata=json.dumps(meta), txnAppId="app", txnVersion=9)
    append(spark, path, [(7, "f")], userMetadata=json.dumps({"pipeframe": {"op": "compact", "view": "v",
                                                                          "compacted": 8}}))
    return path


def test_history_equals_describe_history(spark, table, monkeypatch):
    log = Path(table) / "_delta_log"
    assert any(name.endswith(".checkpoint.parquet") for name in os.listdir(log))
    commits = tables.history(spark, table)
    assert [c.operation for c in reversed(commits)] == [
        "CREATE TABLE", "WRITE", "WRITE", "WRITE", "DELETE", "UPDATE", "MERGE", "OPTIMIZE", "SET TBLPROPERTIES",
        "WRITE", "WRITE"]
    assert_same_history(monkeypatch, spark, table)
    assert tables.read_watermark(spark, table) == tables.Watermark(9, "/s", commits[1])
    assert tables.initial_watermark(spark, table).source_version == 4
    assert [c.version for c in tables.commits_between(spark, table, 3, 6)] == [4, 5, 6]
    assert tables.latest_commit(spark, table) == commits[0]
    assert deltalog.latest_version(table) == local_version(table) == commits[0].version == 10
    assert {c.engine.split()[0].split("/")[0] for c in commits} == {"Apache-Spark"}  # who wrote each: Spark's writer


def test_history_in_other_time_zones(spark, table, monkeypatch):
    """The session's time zone plays no part; the Python process's local one does, on both paths."""
    zone = spark.conf.get("spark.sql.session.timeZone")
    monkeypatch.setenv("TZ", "America/Sao_Paulo")
    time.tzset()
    try:
        spark.conf.set("spark.sql.session.timeZone", "Asia/Tokyo")
        assert_same_history(monkeypatch, spark, table, limits=(None, 3))
    finally:
        spark.conf.set("spark.sql.session.timeZone", zone)
        monkeypatch.delenv("TZ")
        time.tzset()


def test_file_times_out_of_order_are_monotonized_like_delta(spark, table, monkeypatch, tmp_path):
    copy = str(tmp_path / "shuffled")
    shutil.copytree(table, copy)  # copy2 keeps the file times
    log = Path(copy) / "_delta_log"

    def mtime(version: int) -> int:
        return os.stat(log / f"{version:020d}.json").st_mtime_ns

    def touch(version: int, ns: int) -> None:
        os.utime(log / f"{version:020d}.json", ns=(ns, ns))

    touch(3, mtime(2))  # the same millisecond as the commit before
    touch(4, mtime(2) - 60_000_000_000)  # a minute older than it
    touch(8, mtime(7) + 400_000)  # within the same millisecond, later
    touch(9, mtime(8) - 1_000_000)
    touch(10, mtime(9) - 1_000_000)
    assert_same_history(monkeypatch, spark, copy)


def test_transaction_versions_agree_with_the_writes_delta_skips(spark, table, tmp_path):
    assert deltalog.transaction_version(table, "app") == 9
    assert deltalog.transaction_version(table, "other") == 1
    assert deltalog.transaction_version(table, "nobody") is None
    copy = str(tmp_path / "txn")
    shutil.copytree(table, copy)
    log = Path(copy) / "_delta_log"
    # with the commit files before the newest checkpoint cleaned up, the checkpoint answers for "other"
    checkpoint = max(int(n[:20]) for n in os.listdir(log) if n.endswith(".checkpoint.parquet"))
    assert checkpoint > 2
    for version in range(checkpoint):
        (log / f"{version:020d}.json").unlink()
    assert deltalog.transaction_version(copy, "other") == 1
    assert deltalog.transaction_version(copy, "app") == 9
    latest = deltalog.latest_version(copy)
    append(spark, copy, [(8, "g")], txnAppId="app", txnVersion=9)  # replayed: Delta skips them
    append(spark, copy, [(8, "g")], txnAppId="other", txnVersion=1)
    assert deltalog.latest_version(copy) == latest
    append(spark, copy, [(8, "g")], txnAppId="other", txnVersion=2)  # newer: committed
    assert deltalog.latest_version(copy) == latest + 1
    assert deltalog.transaction_version(copy, "other") == 2
    assert deltalog.transaction_version(copy, "app") == 9


def test_a_cleaned_or_missing_log_falls_back_to_spark(spark, table, monkeypatch, tmp_path):
    copy = str(tmp_path / "cleaned")
    shutil.copytree(table, copy)
    log = Path(copy) / "_delta_log"
    for version in range(4):  # log cleanup: the checkpoint at 4 remains
        (log / f"{version:020d}.json").unlink()
    assert_same_history(monkeypatch, spark, copy, limits=(None, 1, 7))  # the files that remain answer
    assert deltalog.history(copy, 8) is None  # version 3 is gone: Spark decides
    before = IO["history"]
    assert tables.history(spark, copy, 8) == spark_history(monkeypatch, spark, copy, 8)
    assert IO["history"] == before + 2
    assert [c.version for c in tables.history(spark, copy, 8)] == list(range(10, 3, -1))  # Delta skips the gap
    (log / f"{10:020d}.json").write_text('{"commitInfo": {"timesta')  # unreadable newest commit
    assert deltalog.history(copy, 1) is None
    assert deltalog.history(str(tmp_path / "nothing"), 1) is None
    assert deltalog.latest_version(str(tmp_path / "nothing")) == -1


def test_in_commit_timestamps(spark, spark_config, monkeypatch):
    path = str(Path(spark_config.warehouse_uri) / "tests" / "deltalog_ict")
    shutil.rmtree(path, ignore_errors=True)
    spark.sql(f"CREATE TABLE {quote_path(path)} (id INT, v STRING) USING DELTA")
    append(spark, path, [(1, "a")])
    spark.sql(f"ALTER TABLE {quote_path(path)} SET TBLPROPERTIES ('delta.enableInCommitTimestamps' = 'true')")
    append(spark, path, [(2, "b")])
    append(spark, path, [(3, "c")])
    assert "inCommitTimestamp" in (Path(path) / "_delta_log" / f"{4:020d}.json").read_text()
    assert_same_history(monkeypatch, spark, path, limits=(None, 1, 2, 3, 4))


def test_rows_read_from_the_files_equal_sparks_at_every_version(spark, table, tmp_path):
    """Each version of the table (appends, overwrite, DELETE, UPDATE, MERGE, OPTIMIZE, checkpoints every 4
    commits), copied with its log cut at that version: the rows pyarrow reads from the live files are Spark's."""
    latest = local_version(table)
    for version in range(latest + 1):
        copy = tmp_path / f"v{version}"
        shutil.copytree(table, copy, ignore=shutil.ignore_patterns("_change_data"))
        for name in os.listdir(copy / "_delta_log"):
            if name == "_last_checkpoint" or name[:20].isdigit() and int(name[:20]) > version:
                os.remove(copy / "_delta_log" / name)
        found = deltalog.read_rows(str(copy), ["id", "v", "absent"])
        assert found is not None, version
        expected = sorted((r["id"], r["v"]) for r in spark.read.format("delta").load(str(copy)).collect())
        assert found[0] == version
        assert sorted((r["id"], r["v"]) for r in found[1]) == expected, version
        assert all(r["absent"] is None for r in found[1])


def test_rows_are_left_to_spark_where_the_files_alone_do_not_give_them(spark, spark_config):
    base = Path(spark_config.warehouse_uri) / "tests" / "deltalog_refused"
    shutil.rmtree(base, ignore_errors=True)
    deletion_vectors, partitioned, mapped = (str(base / n) for n in ("dv", "partitioned", "mapped"))
    spark.sql(f"CREATE TABLE {quote_path(deletion_vectors)} (id INT, v STRING) USING DELTA "
              "TBLPROPERTIES ('delta.enableDeletionVectors' = 'true')")
    spark.createDataFrame([(1, "a"), (2, "b")], "id INT, v STRING").coalesce(1).write.format("delta") \
        .mode("append").save(deletion_vectors)  # one file holding both rows
    assert sorted(r["id"] for r in deltalog.read_rows(deletion_vectors, ["id"])[1]) == [1, 2]
    spark.sql(f"DELETE FROM {quote_path(deletion_vectors)} WHERE id = 1")  # marks the row in a deletion vector
    assert deltalog.read_rows(deletion_vectors, ["id"]) is None
    spark.sql(f"CREATE TABLE {quote_path(partitioned)} (id INT, v STRING) USING DELTA PARTITIONED BY (v)")
    append(spark, partitioned, [(1, "a")])
    assert deltalog.read_rows(partitioned, ["id", "v"]) is None  # the partition value is not in the file
    spark.sql(f"CREATE TABLE {quote_path(mapped)} (id INT, v STRING) USING DELTA "
              "TBLPROPERTIES ('delta.columnMapping.mode' = 'name', 'delta.minReaderVersion' = '2', "
              "'delta.minWriterVersion' = '5')")
    append(spark, mapped, [(1, "a")])
    assert deltalog.read_rows(mapped, ["id", "v"]) is None  # the files name their columns by physical names
    assert deltalog.read_rows(str(base / "nothing"), ["id"]) is None


def test_files_appended_by_commits_are_their_change_feeds_inserts(spark, table, spark_config):
    """For every commit of the table (and ranges of them), `appended_files` names files whose rows are exactly the
    inserts Delta's change data feed gives for those versions (also as `tables.read_changes` reads them with Spark),
    or answers None: never for a commit that only appended, always for one that removed rows or changed the
    schema."""
    import pyarrow.parquet as pq

    def feed(first: int, last: int) -> list:
        frame = spark.read.format("delta").option("readChangeFeed", "true").option("startingVersion", first) \
            .option("endingVersion", last).load(table)
        return sorted((r["id"], r["v"], r["_change_type"]) for r in frame.collect())

    latest = local_version(table)
    refused = set()
    for first in range(latest + 1):
        for last in range(first, min(first + 3, latest + 1)):
            files = deltalog.appended_files(table, list(range(first, last + 1)))
            changes = feed(first, last)
            if files is None:
                refused.add((first, last))
                continue
            rows = sorted((r["id"], r["v"], "insert") for f in files for r in pq.read_table(f.path).to_pylist())
            assert rows == changes, (first, last)
            commits = tables.commits_between(spark, table, first - 1, last)
            if not any(c.neutral for c in commits):  # what a view reads: Spark's read of the files
                read = tables.read_changes(spark, SOURCE, table, commits)
                assert sorted((r["id"], r["v"], "insert") for r in read.collect()) == changes, (first, last)
    singles = {first for first, last in refused if first == last}
    # CREATE TABLE and ALTER TABLE change the metadata; the overwrite, DELETE, UPDATE and MERGE remove rows.
    assert singles == {0, 3, 4, 5, 6, 8}
    assert all(any(first <= v <= last for v in singles) for first, last in refused)

    base = Path(spark_config.warehouse_uri) / "tests" / "deltalog_refused_files"
    shutil.rmtree(base, ignore_errors=True)
    mapped = ("TBLPROPERTIES ('delta.columnMapping.mode' = 'name', 'delta.minReaderVersion' = '2', "
              "'delta.minWriterVersion' = '5')")
    path = str(base / "mapped")
    spark.sql(f"CREATE TABLE {quote_path(path)} (id INT, v STRING) USING DELTA {mapped}")
    append(spark, path, [(1, "a")])
    assert deltalog.appended_files(path, [1]) is None
    globbed = str(base / "odd[1] {a,b}")  # a path Spark's file reader would take as a pattern: the change feed
    spark.sql(f"CREATE TABLE {quote_path(globbed)} (id INT, v STRING) USING DELTA "
              "TBLPROPERTIES ('delta.enableChangeDataFeed' = 'true')")
    append(spark, globbed, [(1, "a")])
    append(spark, globbed, [(2, "b")])
    assert deltalog.appended_files(globbed, [2]) is not None
    read = tables.read_changes(spark, SOURCE, globbed, tables.commits_between(spark, globbed, 1, 2))
    assert [(r["id"], r["v"]) for r in read.collect()] == [(2, "b")]
    path = str(base / "gone")
    append(spark, path, [(1, "a")])
    append(spark, path, [(2, "b")])
    assert len(deltalog.appended_files(path, [1])) == 1
    for file in deltalog.appended_files(path, [1]):
        os.remove(file.path)  # vacuumed away: the change feed's own error says so
    assert deltalog.appended_files(path, [1]) is None


@pytest.mark.parametrize("layout, column, values", [
    ("PARTITIONED BY (v)", ("v", "STRING"), ["a", None, "b c/d=é", "a"]),
    ("PARTITIONED BY (p)", ("p", "INT"), [7, None, -3, 7]),
    ("PARTITIONED BY (p)", ("p", "DATE"), ["2024-02-29", None, "1970-01-01", "2024-02-29"]),
    ("PARTITIONED BY (p)", ("p", "TIMESTAMP"), ["2024-05-20 08:00:00.123456", None, "2024-05-20 08:00:00",
                                                "2024-05-20 08:00:00.123456"]),
    ("PARTITIONED BY (m)", ("m", "INT GENERATED ALWAYS AS (id * 2)"), [None, None, None, None]),
])
def test_rows_appended_to_a_partitioned_table_read_as_its_change_feed(spark, spark_config, monkeypatch, layout,
                                                                       column, values):
    """A view reads the rows of a partitioned source's appends from the files the commits added, where Spark's CAST
    of the logged partition value gives the column (Delta keeps it out of the file); a partition column of another
    type, or a generated one the source does not list, is read as the change feed has it. Every read equals the
    feed's inserts, one commit at a time and over ranges, whether Spark or pyarrow wrote the commit."""
    from datetime import date, datetime

    from pipeframe.engine import deltaappend

    name, type_ = column
    path = str(Path(spark_config.warehouse_uri) / "tests" / f"deltalog_partitioned_{name}_{type_.split()[0]}")
    shutil.rmtree(path, ignore_errors=True)
    generated = "GENERATED" in type_
    ddl = f"id INT, v STRING{'' if name == 'v' else f', {name} {type_}'}"
    spark.sql(f"CREATE TABLE {quote_path(path)} ({ddl}) USING DELTA {layout} "
              "TBLPROPERTIES ('delta.enableChangeDataFeed' = 'true')")
    listed = (("id", "INT"), ("v", "STRING")) + (() if generated or name == "v" else ((name, type_),))
    source = ResourceState(ResourceKey.datasource("t"), "t", "datasource", columns=listed)
    select = [f"`{n}`" for n, _ in listed]
    kinds = {"DATE": date.fromisoformat, "TIMESTAMP": datetime.fromisoformat}
    for i, value in enumerate(values):
        rows = [(i * 10 + j, f"r{i}{j}") for j in range(3)]
        if name == "v":
            frame = spark.createDataFrame([(r[0], value) for r in rows], "id INT, v STRING")
        elif generated:
            frame = spark.createDataFrame(rows, "id INT, v STRING")
        else:
            typed = None if value is None else kinds.get(type_, lambda x: x)(value)
            frame = spark.createDataFrame([(*r, typed) for r in rows], f"id INT, v STRING, {name} {type_}")
        if i == 2:  # one commit of pyarrow's beside Spark's
            assert deltaappend.append(path, frame.toArrow()) is not None, "pyarrow refused the append"
        else:
            frame.write.format("delta").mode("append").save(path)
    plain = tables._PARTITION_TYPES.fullmatch(type_) is not None
    latest = local_version(path)
    for first in range(1, latest + 1):
        for last in range(first, min(first + 2, latest + 1)):
            feed = spark.read.format("delta").option("readChangeFeed", "true").option("startingVersion", first) \
                .option("endingVersion", last).load(path).select(*select)
            files = deltalog.appended_files(path, list(range(first, last + 1)))
            assert files is not None and all(f.partition_values for f in files), (first, last)
            assert (tables._appended_rows(spark, source, files) is not None) == (plain or generated), type_
            expected = sorted(map(tuple, feed.collect()), key=repr)
            commits = tables.commits_between(spark, path, first - 1, last)
            read = tables.read_changes(spark, source, path, commits)
            assert sorted(map(tuple, read.select(*select).collect()), key=repr) == expected, (first, last)
            partitions = {tuple(sorted((k, v) for k, v in f.partition_values.items() if k in dict(listed))) for f in files}
            with monkeypatch.context() as patch:  # more partitions than a read takes file by file: the feed
                patch.setattr(tables, "MAX_PARTITIONS", len(partitions) - 1)
                assert tables._appended_rows(spark, source, files) is None
                read = tables.read_changes(spark, source, path, commits)
                assert sorted(map(tuple, read.select(*select).collect()), key=repr) == expected, (first, last)


def test_table_state_follows_each_commit_from_the_one_it_read_before(spark, spark_config):
    """table_state replays only the commits made since the version it read last: every metaData and protocol change
    in between is seen, and a table made again in the same folder is read from scratch."""
    path = str(Path(spark_config.warehouse_uri) / "tests" / "deltalog_state_since")
    shutil.rmtree(path, ignore_errors=True)
    spark.sql(f"CREATE TABLE {quote_path(path)} (id INT, v STRING) USING DELTA "
              "TBLPROPERTIES ('delta.checkpointInterval' = '3')")

    def fresh():  # what a first read of the log says
        saved = dict(deltalog._STATES)
        deltalog._STATES.clear()
        try:
            return deltalog.table_state(path)
        finally:
            deltalog._STATES.update(saved)

    def meaning(state: deltalog.TableState) -> tuple:  # a checkpoint and a commit file spell some fields apart
        protocol = {k: sorted(v) if isinstance(v, list) else v for k, v in state.protocol.items() if v is not None}
        return (state.version, state.metadata["id"], state.metadata["schemaString"],
                list(state.metadata.get("partitionColumns") or []), state.configuration(), protocol)

    def step(change) -> deltalog.TableState:
        change()
        state = deltalog.table_state(path)
        assert meaning(state) == meaning(fresh())
        return state

    first = step(lambda: None)
    state = step(lambda: append(spark, path, [(1, "a")]))
    assert state.version == first.version + 1 and state.metadata == first.metadata
    state = step(lambda: spark.sql(f"ALTER TABLE {quote_path(path)} ADD COLUMNS (extra DOUBLE)"))
    assert "extra" in state.metadata["schemaString"]
    state = step(lambda: spark.sql(f"ALTER TABLE {quote_path(path)} SET TBLPROPERTIES "
                                   "('delta.enableDeletionVectors' = 'true')"))
    assert state.configuration()["delta.enableDeletionVectors"] == "true"
    assert "deletionVectors" in (state.protocol.get("writerFeatures") or [])
    for n in range(4):  # past a checkpoint, several commits between two reads
        spark.createDataFrame([(n, "b", 1.0)], "id INT, v STRING, extra DOUBLE").write.format("delta") \
            .mode("append").save(path)
    state = step(lambda: None)
    # The same folder, a new table with as many versions: read again, not taken for the old one's next commits.
    versions = state.version
    shutil.rmtree(path)
    spark.sql(f"CREATE TABLE {quote_path(path)} (other BIGINT) USING DELTA")
    for n in range(versions):
        spark.createDataFrame([(n,)], "other BIGINT").write.format("delta").mode("append").save(path)
    state = step(lambda: None)
    assert state.version == versions and "other" in state.metadata["schemaString"]
    assert "extra" not in state.metadata["schemaString"]
