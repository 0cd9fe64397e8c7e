"""engine.deltaappend against real Delta tables: rows appended by pyarrow and a commit file read back by Spark equal
the same rows appended by Spark's writer (values, types, change feed, history, statistics used to skip files), the
table goes on working under Spark's writes (DELETE, UPDATE, MERGE, OPTIMIZE, checkpoints), two appenders never take
one version, and every table or batch it must not write is left to Spark with nothing committed."""

from __future__ import annotations

import json
import os
import threading
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal

import pytest

from pipeframe.engine import deltaappend, deltalog
from pipeframe.plan import records
from pipeframe.sqltext import quote_path

SCHEMA = ("id BIGINT, n INT, s SMALLINT, name STRING, amount DOUBLE, price DECIMAL(10,2), ok BOOLEAN, day DATE, "
          "ts TIMESTAMP, tags ARRAY<STRING>, attrs MAP<STRING,INT>, point STRUCT<x: DOUBLE, y: DOUBLE>, raw BINARY")


def rows(first: int, count: int) -> list[tuple]:
    out = []
    for i in range(first, first + count):
        none = i % 7 == 3  # some NULLs in every column
        out.append((i, None if none else i * 3 - 50, i % 5, None if none else f"name-{i % 11}" + "x" * (i % 40),
                    None if none else i / 7, None if none else Decimal(f"{i}.{i % 100:02d}"), i % 2 == 0,
                    date(2024, 1, 1 + i % 28), datetime(2024, 5, 1, i % 24, i % 60, i % 60, i * 7 % 1_000_000,
                                                         tzinfo=UTC),
                    None if none else [f"t{i % 3}", None], {"k": i}, (i * 0.5, -i * 0.25), bytes([i % 256])))
    return out


def frame(spark, first: int, count: int):
    return spark.createDataFrame(rows(first, count), SCHEMA)


def create(spark, path: str, extra: str = "") -> None:
    spark.sql(f"CREATE TABLE {quote_path(path)} ({SCHEMA}) USING DELTA "
              f"TBLPROPERTIES ('delta.enableChangeDataFeed' = 'true'{extra})")


def direct(spark, path: str, first: int, count: int, metadata: records.CommitRecord | None = None) -> int | None:
    arrow = frame(spark, first, count).toArrow()
    return deltaappend.append(path, arrow, records.encode(metadata) if metadata else None)


def sorted_rows(spark, sql: str) -> list:
    return sorted(spark.sql(sql).collect(), key=lambda r: r["id"])


def test_rows_appended_without_spark_equal_sparks_own_append(spark, table_path):
    ours, theirs = f"{table_path}_ours", f"{table_path}_theirs"
    for path in (ours, theirs):
        create(spark, path)
    batches = [(0, 40), (40, 1), (41, 120)]
    versions = [direct(spark, ours, first, count, records.Ingest(f"batch{i}"))
                for i, (first, count) in enumerate(batches)]
    for first, count in batches:
        frame(spark, first, count).write.format("delta").mode("append").save(theirs)
    assert versions == [1, 2, 3]

    assert sorted_rows(spark, f"SELECT * FROM delta.`{ours}`") == sorted_rows(spark, f"SELECT * FROM delta.`{theirs}`")
    assert spark.read.format("delta").load(ours).schema == spark.read.format("delta").load(theirs).schema
    # The change feed gives the same inserts, each at the version that holds it.
    feed = "SELECT *, _change_type AS change, _commit_version AS v FROM table_changes_by_path('{}', 1)"
    mine = sorted_rows(spark, feed.format(ours))
    assert [(r["id"], r["change"], r["v"]) for r in mine] == \
        [(r["id"], r["change"], r["v"]) for r in sorted_rows(spark, feed.format(theirs))]
    # History as DESCRIBE HISTORY shows it: an append with its row count and the userMetadata given.
    history = spark.sql(f"DESCRIBE HISTORY {quote_path(ours)}").orderBy("version").collect()
    assert [(h["version"], h["operation"], h["operationMetrics"].get("numOutputRows")) for h in history[1:]] == \
        [(1, "WRITE", "40"), (2, "WRITE", "1"), (3, "WRITE", "120")]
    assert json.loads(history[2]["userMetadata"]) == {"pipeframe": {"format": records.FORMAT, "commit": "batch1"}}
    assert deltalog.history(ours, 1)[0].metadata == records.Ingest("batch2")


def test_statistics_skip_files_without_changing_answers(spark, table_path):
    ours, theirs = f"{table_path}_ours", f"{table_path}_theirs"
    create(spark, ours)
    for first in (0, 100, 200):
        direct(spark, ours, first, 100)
    frame(spark, 0, 300).write.format("delta").save(theirs)
    for condition in ("id >= 150 AND id < 160", "n = -50", "day = DATE'2024-01-05'", "name = 'name-3'",
                      "name > 'name-9'", "amount > 30", "ts < TIMESTAMP'2024-05-01 02:00:00+00:00'", "n IS NULL"):
        count = f"SELECT count(*) FROM delta.`{{}}` WHERE {condition}"
        assert spark.sql(count.format(ours)).first()[0] == spark.sql(count.format(theirs)).first()[0], condition
    # Numbers as written (a float would turn 100.00 into 100.0, still equal to Decimal("100.00")).
    stats = [json.loads(a["add"]["stats"], parse_float=Decimal) for a in deltalog.commit_actions(ours, 2) if "add" in a]
    assert stats[0]["numRecords"] == 100 and stats[0]["minValues"]["id"] == 100 and stats[0]["maxValues"]["id"] == 199
    names = [r[3] for r in rows(100, 100) if r[3] is not None]
    assert max(len(n) for n in names) > 32
    assert stats[0]["minValues"]["name"] == min(names)[:32]
    assert stats[0]["maxValues"]["name"] == (max(names) if len(max(names)) <= 32 else max(names)[:32] + "\U0010FFFF"), \
        "a string longer than Delta's 32-character prefix: the maximum's prefix and U+10FFFF"
    price = min(r[5] for r in rows(100, 100) if r[5] is not None)
    assert str(stats[0]["minValues"]["price"]) == str(price) == "100.00", "a decimal with every digit"
    assert "point" not in stats[0]["nullCount"], "a struct's null counts are nested in Delta's statistics: none"
    assert stats[0]["nullCount"]["n"] == sum(1 for r in rows(100, 100) if r[1] is None)


def test_files_are_skipped_on_their_bounds(spark, table_path):
    """Three files of disjoint ids, days, short names and times: with two of them deleted from disk, a filter that
    only the third can match still reads (its bounds let Spark skip the others), also at the exact microsecond of
    its latest time (Delta keeps milliseconds: the maximum is rounded up); one the others could match fails."""
    import pyarrow as pa

    spark.sql(f"CREATE TABLE {quote_path(table_path)} (id BIGINT, day DATE, name STRING, ts TIMESTAMP, "
              "local TIMESTAMP_NTZ) USING DELTA")

    def at(i: int) -> datetime:  # microseconds past a millisecond; the middle file's is 2024-02-01 00:00:00-00:01:40
        return datetime(2024, 1 + i // 100, 1) + timedelta(seconds=i % 100, microseconds=250_001 + i)

    for batch in range(3):
        ids = list(range(batch * 100, batch * 100 + 100))
        deltaappend.append(table_path, pa.table({
            "id": pa.array(ids, pa.int64()), "day": pa.array([date(2024, batch + 1, 1 + i % 28) for i in ids]),
            "name": pa.array([f"b{batch}-{i:03d}" for i in ids]),
            "ts": pa.array([at(i).replace(tzinfo=UTC) for i in ids], pa.timestamp("us", "UTC")),
            "local": pa.array([at(i) for i in ids], pa.timestamp("us"))}))
    stats = next(json.loads(a["add"]["stats"]) for a in deltalog.commit_actions(table_path, 2) if "add" in a)
    assert (stats["minValues"]["ts"], stats["maxValues"]["ts"]) == ("2024-02-01T00:00:00.250Z",
                                                                    "2024-02-01T00:01:39.251Z")
    assert (stats["minValues"]["local"], stats["maxValues"]["local"]) == ("2024-02-01T00:00:00.250",
                                                                          "2024-02-01T00:01:39.251")
    files = [a["add"]["path"] for v in (1, 2, 3) for a in deltalog.commit_actions(table_path, v) if "add" in a]
    for name in (files[0], files[2]):
        os.remove(os.path.join(table_path, name))
    table = f"delta.`{table_path}`"
    assert spark.sql(f"SELECT count(*) FROM {table} WHERE id BETWEEN 150 AND 159").first()[0] == 10
    assert spark.sql(f"SELECT count(*) FROM {table} WHERE day = DATE'2024-02-05'").first()[0] == \
        sum(1 for i in range(100, 200) if i % 28 == 4)
    assert spark.sql(f"SELECT count(*) FROM {table} WHERE name = 'b1-150'").first()[0] == 1
    latest = at(199).isoformat(sep=" ")
    assert spark.sql(f"SELECT count(*) FROM {table} WHERE ts = TIMESTAMP'{latest}+00:00'").first()[0] == 1
    assert spark.sql(f"SELECT count(*) FROM {table} WHERE local = TIMESTAMP_NTZ'{latest}'").first()[0] == 1
    for condition in ("id < 10", "ts < TIMESTAMP'2024-01-15 00:00:00+00:00'",
                      "local > TIMESTAMP_NTZ'2024-03-01 00:00:00'"):
        with pytest.raises(Exception, match="(?i)not.*(exist|found)|FileNotFound|FAILED_READ"):
            spark.sql(f"SELECT count(*) FROM {table} WHERE {condition}").collect()


def test_a_commit_on_a_checkpoint_version_has_its_checkpoint_written(spark, table_path, monkeypatch):
    from pipeframe.engine import tables

    monkeypatch.setattr(tables, "CHECKPOINT_SECONDS", 3600.0)  # no second checkpoint of a table within the hour
    create(spark, table_path)
    arrow = frame(spark, 0, 3).toArrow()
    versions = []
    for _ in range(22):
        versions.append(deltaappend.append(table_path, arrow, None, tables.checkpoint_later(spark, table_path)))
        for thread in threading.enumerate():
            if thread.name == "pipeframe-checkpoint":
                thread.join()
    assert versions == list(range(1, 23)), "the checkpoint versions are committed here too"
    checkpoints = [int(n[:20]) for n in os.listdir(os.path.join(table_path, "_delta_log"))
                   if n.endswith(".checkpoint.parquet")]
    # Version 10's checkpoint was written (by delta-rs, of the version it found: 10 here, each one awaited); version 20
    # came due within CHECKPOINT_SECONDS of it, and was left to the next one due after them.
    assert checkpoints == [10]
    assert spark.read.format("delta").load(table_path).count() == 66


def test_a_checkpoint_asked_from_a_thread_without_an_active_session_is_written(spark, table_path):
    """A server's request threads run on JVM threads with no active Spark session, where Delta's checkpoint failed
    inside Delta, which swallows the error: no checkpoint was ever written while the server ingested. (Deletion
    vectors: a table whose checkpoint Delta writes, not delta-rs.)"""
    from pipeframe.engine import tables

    create(spark, table_path, ", 'delta.enableDeletionVectors' = 'true'")
    assert not deltaappend.checkpoint(table_path)
    arrow = frame(spark, 0, 3).toArrow()
    for _ in range(3):
        deltaappend.append(table_path, arrow)
    assert tables.checkpoint(spark, table_path)  # this thread has its session: Delta reads from this checkpoint on
    for _ in range(3):
        deltaappend.append(table_path, arrow)
    written: list[bool] = []

    def without_a_session() -> None:
        getattr(spark.sparkContext._jvm, "org.apache.spark.sql.classic.SparkSession").clearActiveSession()
        written.append(tables.checkpoint(spark, table_path))

    thread = threading.Thread(target=without_a_session)
    thread.start()
    thread.join()
    assert written == [True]
    assert os.path.exists(os.path.join(table_path, "_delta_log", f"{6:020d}.checkpoint.parquet"))
    assert spark.read.format("delta").load(table_path).count() == 18


def test_sparks_writes_checkpoints_and_rewrites_follow_direct_appends(spark, table_path):
    ours, theirs = f"{table_path}_ours", f"{table_path}_theirs"
    create(spark, ours)
    create(spark, theirs)
    written = [direct(spark, ours, i * 10, 10) for i in range(10)]
    # Version 10 is a checkpoint version: left to Spark, which writes it and its checkpoint.
    assert written[:9] == list(range(1, 10)) and written[9] is None
    frame(spark, 90, 10).write.format("delta").mode("append").save(ours)
    frame(spark, 0, 100).write.format("delta").mode("append").save(theirs)
    assert os.path.exists(os.path.join(ours, "_delta_log", f"{10:020d}.checkpoint.parquet"))
    assert direct(spark, ours, 100, 10) == 11
    frame(spark, 100, 10).write.format("delta").mode("append").save(theirs)
    frame(spark, 200, 5).createOrReplaceTempView("incoming")
    for path in map(quote_path, (ours, theirs)):
        spark.sql(f"DELETE FROM {path} WHERE id % 4 = 0")
        spark.sql(f"UPDATE {path} SET n = n + 1000 WHERE id % 4 = 1")
        spark.sql(f"MERGE INTO {path} t USING incoming s ON t.id = s.id - 100 "
                  "WHEN MATCHED THEN UPDATE SET name = 'merged' WHEN NOT MATCHED THEN INSERT *")
        spark.sql(f"OPTIMIZE {path}")
    assert direct(spark, ours, 300, 10) is not None
    frame(spark, 300, 10).write.format("delta").mode("append").save(theirs)
    assert sorted_rows(spark, f"SELECT * FROM delta.`{ours}`") == sorted_rows(spark, f"SELECT * FROM delta.`{theirs}`")
    assert spark.sql(f"SELECT count(*) FROM delta.`{ours}` WHERE name = 'merged'").first()[0] == 3


def test_two_appenders_never_take_one_version(spark, table_path):
    create(spark, table_path)
    batches = [frame(spark, i * 10, 10).toArrow() for i in range(16)]
    results: list = [None] * len(batches)

    def appender(index: int) -> None:
        results[index] = deltaappend.append(table_path, batches[index])

    threads = [threading.Thread(target=appender, args=(i,)) for i in range(len(batches))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    landed = [v for v in results if v is not None]
    # Versions 1..9 are taken, each once; 10 is a checkpoint version, left to Spark by the rest.
    assert sorted(landed) == list(range(1, 10)), "two appends took one version, or one was lost"
    expected = sorted(i for index, v in enumerate(results) if v is not None for i in range(index * 10, index * 10 + 10))
    assert sorted(r["id"] for r in spark.read.format("delta").load(table_path).collect()) == expected


def test_metadata_change_won_is_checked_again(spark, table_path, monkeypatch):
    create(spark, table_path)
    arrow = frame(spark, 0, 5).toArrow()
    commit = deltaappend._commit

    def late(folder, version, *args, **kwargs):  # another writer adds a column just before this commit
        monkeypatch.setattr(deltaappend, "_commit", commit)
        spark.sql(f"ALTER TABLE {quote_path(table_path)} ADD COLUMNS (extra STRING)")
        return commit(folder, version, *args, **kwargs)

    monkeypatch.setattr(deltaappend, "_commit", late)
    assert deltaappend.append(table_path, arrow) is None, "the rows lack the new column: Spark must write them"
    assert spark.read.format("delta").load(table_path).count() == 0


@pytest.mark.parametrize("kind, setup", [
    ("partitioned by a float", "PARTITIONED BY (amount)"),
    ("partitioned by an expression it does not compute", "PARTITION EXPRESSION"),
    ("column mapping", "TBLPROPERTIES ('delta.columnMapping.mode' = 'name')"),
    ("check constraint", "CONSTRAINT"),
    ("generated column", "GENERATED"),
    ("not null", "NOT NULL"),
    ("row tracking", "TBLPROPERTIES ('delta.enableRowTracking' = 'true')"),
    ("in-commit timestamps", "TBLPROPERTIES ('delta.enableInCommitTimestamps' = 'true')"),
    ("other columns", "OTHER"),
])
def test_what_it_must_not_write_is_left_to_spark(spark, table_path, kind, setup):
    path = quote_path(table_path)
    if setup in ("CONSTRAINT", "OTHER", "NOT NULL"):
        schema = SCHEMA.replace("name STRING", "name STRING NOT NULL") if setup == "NOT NULL" else SCHEMA
        spark.sql(f"CREATE TABLE {path} ({schema if setup != 'OTHER' else SCHEMA + ', more INT'}) USING DELTA")
        if setup == "CONSTRAINT":
            spark.sql(f"ALTER TABLE {path} ADD CONSTRAINT positive CHECK (id >= 0)")
    elif setup == "GENERATED":  # a generated column that is not a partition column: Spark's writer checks it
        spark.sql(f"CREATE TABLE {path} ({SCHEMA}, d2 DATE GENERATED ALWAYS AS (to_date(ts))) USING DELTA")
    elif setup == "PARTITION EXPRESSION":
        spark.sql(f"CREATE TABLE {path} ({SCHEMA}, p STRING GENERATED ALWAYS AS (substring(name, 1, 1))) USING DELTA "
                  "PARTITIONED BY (p)")
    else:
        spark.sql(f"CREATE TABLE {path} ({SCHEMA}) USING DELTA {setup}")
    before = deltalog.latest_version(table_path)
    arrow = frame(spark, 0, 10).toArrow()
    if setup == "GENERATED":
        import pyarrow as pa

        arrow = arrow.append_column("d2", pa.array([None] * 10, pa.date32()))
    assert deltaappend.append(table_path, arrow) is None, kind
    assert deltalog.latest_version(table_path) == before


def test_a_batch_of_other_types_is_left_to_spark(spark, table_path):
    create(spark, table_path)
    arrow = frame(spark, 0, 3).toArrow()
    import pyarrow as pa

    narrowed = arrow.set_column(arrow.column_names.index("id"), "id", arrow.column("id").cast(pa.int32()))
    assert deltaappend.append(table_path, narrowed) is None
    assert deltaappend.append(table_path, arrow.drop_columns(["raw"])) is None
    assert deltaappend.append(f"{table_path}_missing", arrow) is None
    assert deltalog.latest_version(table_path) == 0


@pytest.mark.parametrize("direct_commit", [True, False])
def test_group_commits_land_through_pyarrow_unless_told_not_to(spark, spark_config, direct_commit):
    from tests.spark.conftest import deployed
    from tests.spark.test_events import FILES

    project = deployed(spark, spark_config, f"direct_{direct_commit}", FILES,
                       f"ingest:\n  direct_commit: {str(direct_commit).lower()}\n")
    path = project.snapshot.table("events").path
    lines = [{"ts": "2024-05-01 10:00:00", "user": f"u{i % 3}", "amount": i} for i in range(30)]
    lines += [{"ts": "not a time", "user": "bad", "amount": 1}, "not json"]
    result = project.append("events", lines, idempotency_key="k1")
    assert (result.accepted, result.quarantined) == (30, 2)
    assert len(result.reasons) == 2 and "cannot read" in result.reasons[0]
    [info] = [a["commitInfo"] for a in deltalog.commit_actions(path, result.version) if "commitInfo" in a]
    assert (info["engineInfo"] == deltaappend.ENGINE) is direct_commit
    replay = project.append("events", lines, idempotency_key="k1")
    assert replay.replayed and (replay.accepted, replay.version) == (30, result.version)
    quarantine = spark.read.format("delta").load(project.warehouse.quarantine_path("events"))
    assert {r["raw"] for r in quarantine.collect()} == {json.dumps(lines[30]), "not json"}
    view = {r["user_id"]: (r["orders"], r["revenue"]) for r in project.query("SELECT * FROM by_user").collect()}
    assert view == {f"u{u}": (10, float(sum(i for i in range(30) if i % 3 == u))) for u in range(3)}
    assert project.query("SELECT orders FROM total").first()["orders"] == 30
    # The views' increments were appended the same way (the watermark in the commit), and cascaded.
    applied = result.version
    for view in ("by_user", "total"):
        folder = project.snapshot.table(view).path
        [info] = [a["commitInfo"] for a in deltalog.commit_actions(folder, deltalog.latest_version(folder))
                  if "commitInfo" in a]
        assert (info["engineInfo"] == deltaappend.ENGINE) is direct_commit, view
        assert json.loads(info["userMetadata"])["pipeframe"]["source_version"] == applied, view
        applied = deltalog.latest_version(folder)  # what the cascading view applied


def test_a_group_commit_the_table_refuses_meanwhile_lands_through_sparks_writer(spark, spark_config, monkeypatch):
    """The rows already brought to the driver go to Spark's writer as they are (a race with a schema change, or a
    checkpoint version on Spark Connect), with the same counts and keys."""
    from tests.spark.conftest import deployed
    from tests.spark.test_events import FILES

    project = deployed(spark, spark_config, "direct_refused", FILES)
    monkeypatch.setattr(deltaappend, "append", lambda *args, **kwargs: None)
    lines = [{"ts": "2024-05-01 10:00:00", "user": "r", "amount": 2}] * 5 + ["{"]
    result = project.append("events", lines, idempotency_key="r1")
    assert (result.accepted, result.quarantined) == (5, 1)
    path = project.snapshot.table("events").path
    [info] = [a["commitInfo"] for a in deltalog.commit_actions(path, result.version) if "commitInfo" in a]
    assert info["engineInfo"] != deltaappend.ENGINE
    assert json.loads(info["userMetadata"])["pipeframe"]["keys"] == {"r1": [5, 1]}
    assert project.query("SELECT orders, revenue FROM by_user WHERE user_id = 'r'").first().asDict() == \
        {"orders": 5, "revenue": 10.0}


def test_a_group_commit_of_rows_that_all_fit_runs_no_spark_job(spark, spark_config):
    """Lines typed without Spark (`jsonlines.type_lines`) are committed without Spark: no job runs between the request
    and its commit, and the rows read back as sent."""
    from pipeframe.engine.ingest import Batch, Ingestor
    from pipeframe.engine.jsonlines import type_lines
    from tests.spark.conftest import deployed
    from tests.spark.test_events import FILES

    project = deployed(spark, spark_config, "direct_typed", FILES)
    table, definition = project.landing_target("events")
    lines = [json.dumps({"ts": f"2024-05-01T10:00:0{i}Z", "user": f"t{i}", "amount": i}) for i in range(5)]
    typed = type_lines(lines, definition, "UTC")
    assert typed is not None and not typed.misfits
    tracker = spark.sparkContext.statusTracker()
    jobs = set(tracker.getJobIdsForGroup())
    version, [landed] = Ingestor(spark, project.warehouse).commit(
        table, Batch(None, "events", typed.rows, parts=(0,) * 5), 1, ["t"], sizes=[5])
    assert set(tracker.getJobIdsForGroup()) == jobs
    assert (landed.accepted, landed.quarantined) == (5, 0)
    [info] = [a["commitInfo"] for a in deltalog.commit_actions(table.path, version) if "commitInfo" in a]
    assert info["engineInfo"] == deltaappend.ENGINE
    read = spark.read.format("delta").load(table.path).where("user_id LIKE 't%'")
    assert sorted((r["user_id"], r["amount"], r["ts"].second) for r in read.collect()) == \
        [(f"t{i}", i, i) for i in range(5)]


def test_a_dataframe_append_goes_through_the_driver_while_its_size_is_known_small(spark, spark_config,
                                                                                 monkeypatch):
    """`Project.append` of a Spark DataFrame Spark's optimizer estimates at most `ingest.DIRECT_BYTES` (or a pandas
    DataFrame that size in memory) is conformed in one job and appended by pyarrow; one estimated bigger, one whose
    plan makes more rows than estimated (explode), one whose rows the driver refuses (`toArrow` fails on
    spark.driver.maxResultSize) and any with `ingest.direct_commit: false` go to Spark's writer. Every way lands
    the same rows, quarantines the same misfits once, keeps the idempotency key with its counts, and feeds the
    views."""
    from datetime import datetime

    from pyspark.sql.classic.dataframe import DataFrame

    from pipeframe.engine import ingest
    from pipeframe.project import Project
    from tests.spark.conftest import deployed
    from tests.spark.test_events import FILES

    project = deployed(spark, spark_config, "frame_appends", FILES)
    path = project.snapshot.table("events").path
    quarantine = project.warehouse.quarantine_path("events")

    def data(case: str):
        # Built by Spark (a range), so its optimizer knows its size (a frame made from Python rows it does not).
        frame = spark.range(40).selectExpr("concat('2024-05-01 10:', lpad(CAST(id AS STRING), 2, '0'), ':07.25') AS ts",
                                           f"concat('{case}-', id % 4) AS user_id",
                                           "CASE WHEN id % 9 = 0 THEN 'nine' ELSE CAST(id AS STRING) END AS amount")
        if case == "exploded":  # one row per array element: Spark estimates the rows before explode
            frame = frame.selectExpr("ts", "user_id", "explode(array(amount)) AS amount")
        return frame.toPandas() if case == "pandas" else frame

    def refused(*_args, **_kwargs):
        raise RuntimeError("Total size of serialized results of 1 tasks is bigger than spark.driver.maxResultSize")

    cases = {"small": True, "pandas": True, "big": False, "exploded": False, "refused": False, "spark": False}
    for case, direct in cases.items():
        with monkeypatch.context() as patch:
            target = project
            if case == "big":
                patch.setattr(ingest, "DIRECT_BYTES", 0)
            if case == "refused":
                patch.setattr(DataFrame, "toArrow", refused)
            if case == "spark":
                (project.root / "pipeframe.yaml").write_text((project.root / "pipeframe.yaml").read_text()
                                                             + "ingest:\n  direct_commit: false\n")
                target = Project(project.root, spark=spark, environ={})
            result = target.append("events", data(case), idempotency_key=case)
        assert (result.accepted, result.quarantined) == (35, 5), case
        assert "cannot read \"nine\"" in result.reasons[0], case
        [info] = [a["commitInfo"] for a in deltalog.commit_actions(path, result.version) if "commitInfo" in a]
        assert (info["engineInfo"] == deltaappend.ENGINE) is direct, case
        assert json.loads(info["userMetadata"])["pipeframe"]["keys"] == {case: [35, 5]}, case
        assert target.append("events", data(case), idempotency_key=case).replayed, case
        misfits = spark.read.format("delta").load(quarantine).where(f"raw LIKE '%{case}-%'").collect()
        assert sorted(json.loads(r["raw"])["amount"] for r in misfits) == ["nine"] * 5, case
        landed = spark.read.format("delta").load(path).where(f"user_id LIKE '{case}-%'").collect()
        assert sorted((r["user_id"], r["amount"], r["ts"]) for r in landed) == sorted(
            (f"{case}-{i % 4}", float(i), datetime(2024, 5, 1, 10, i, 7, 250_000)) for i in range(40) if i % 9), case
        view = {r["user_id"]: (r["orders"], r["revenue"]) for r in
                project.query(f"SELECT * FROM by_user WHERE user_id LIKE '{case}-%'").collect()}
        assert view == {f"{case}-{u}": (sum(1 for i in range(40) if i % 4 == u and i % 9),
                                        float(sum(i for i in range(40) if i % 4 == u and i % 9))) for u in range(4)}


# ------------------------------------------------------------------------------------ partitions and clustering
PARTITIONED = "ts TIMESTAMP, host STRING, n INT, day DATE, ok BOOLEAN"
# Every partition key expression `compiler.compile.spark_keys` writes for a ClickHouse one, and Spark's own.
EXPRESSIONS = ["CAST(ts AS DATE)", "to_date(ts)", "(YEAR(ts) * 100 + MONTH(ts))",
               "(YEAR(ts) * 10000 + MONTH(ts) * 100 + DAYOFMONTH(ts))", "DATE_TRUNC('DAY', ts)",
               "DATE_TRUNC('HOUR', ts)", "CAST(DATE_TRUNC('MONTH', ts) AS DATE)", "CAST(DATE_TRUNC('WEEK', ts) AS DATE)",
               "YEAR(ts)", "CAST(DATE_TRUNC('QUARTER', day) AS DATE)", "DATE_TRUNC('YEAR', ts)"]


def partitioned_rows(first: int, count: int):
    """Times at the edges that partition values are made of (before 1970, the last microsecond of a day, leap days,
    week, month and year boundaries, years 1 and 9999), NULLs, empty and odd strings."""
    import pyarrow as pa

    edges = [datetime(1969, 12, 31, 23, 59, 59, 999_999), datetime(1970, 1, 1), datetime(2024, 2, 29, 12),
             datetime(2024, 12, 30, 0, 0, 0, 1), datetime(2023, 1, 1, 23), datetime(2024, 3, 31, 23, 59, 59),
             datetime(1, 1, 1), datetime(9999, 12, 31, 23, 59, 59, 999_999), datetime(1900, 2, 28, 5)]
    def at(i: int) -> datetime | None:
        edge = edges[i % len(edges)]
        later = edge if edge.year == 9999 else edge + timedelta(hours=i // len(edges) * 7)
        return None if i % 11 == 5 else later.replace(tzinfo=UTC)

    times = [at(i) for i in range(first, first + count)]
    hosts = ["a", "", None, "x y/z%=", "b"]
    return pa.table({"ts": pa.array(times, pa.timestamp("us", "UTC")),
                     "host": pa.array([hosts[i % 5] for i in range(first, first + count)]),
                     "n": pa.array([None if i % 7 == 0 else i % 3 - 1 for i in range(first, first + count)], pa.int32()),
                     "day": pa.array([None if t is None else t.date() for t in times], pa.date32()),
                     "ok": pa.array([None if i % 6 == 0 else i % 2 == 0 for i in range(first, first + count)])})


def test_partitions_and_generated_partition_columns_land_as_sparks(spark, table_path):
    """Appended by pyarrow to tables partitioned by a column of each type, or by generated columns of every partition
    key expression (computed here): one file per partition with its partitionValues (no partition column in it), and
    Spark reads back the rows it appends itself (so each partition value is serialized as it reads it), every
    generated value equal to Spark's own evaluation of its expression (`<=>`), with the same answers where Spark
    prunes partitions by the expressions."""
    import pyarrow.parquet as pq

    theirs = f"{table_path}_theirs"
    spark.sql(f"CREATE TABLE {quote_path(theirs)} ({PARTITIONED}) USING DELTA")
    batches = ((0, 45), (45, 60))
    for first, count in batches:
        spark.createDataFrame(partitioned_rows(first, count)).write.format("delta").mode("append").save(theirs)
    data = ("ts", "host", "n", "day", "ok")
    # Plain partition columns of a string (empty, NULL, characters to escape) and a boolean; integers, dates and
    # timestamps as generated ones (few partitions per table: each is a file to read back).
    layouts = [([], "host, ok"), (EXPRESSIONS[:6], None), (EXPRESSIONS[6:], None)]
    for index, (expressions, plain) in enumerate(layouts):
        ours = f"{table_path}_{index}"
        generated = [f"p{i}" for i in range(len(expressions))]
        columns = PARTITIONED + "".join(
            f", {name} {spark.createDataFrame([], PARTITIONED).selectExpr(f'{key} AS p').schema[0].dataType.simpleString()}"
            f" GENERATED ALWAYS AS ({key})" for name, key in zip(generated, expressions, strict=True))
        partitions = plain or ", ".join(generated)
        spark.sql(f"CREATE TABLE {quote_path(ours)} ({columns}) USING DELTA PARTITIONED BY ({partitions})")
        for first, count in batches:
            assert deltaappend.append(ours, partitioned_rows(first, count)) is not None, partitions
        # Spark's writer stores an empty string partition value as NULL (Delta has no other spelling for it).
        reference = f"(SELECT ts, {'nullif(host, {})'.format(repr(''))  if plain else 'host'} AS host, n, day, ok " \
                    f"FROM delta.`{theirs}`)"
        # As Spark's text: exact, and a time in year 1 (before Python's local time) compares too.
        texts = ", ".join(f"CAST({c} AS STRING)" for c in data)
        read = [sorted(map(tuple, spark.sql(f"SELECT {texts} FROM {source}").collect()), key=repr)
                for source in (f"delta.`{ours}`", reference)]
        assert read[0] == read[1], partitions
        adds = [a["add"] for v in (1, 2) for a in deltalog.commit_actions(ours, v) if "add" in a]
        assert len(adds) > 10 and all(list(a["partitionValues"]) == partitions.split(", ") for a in adds)
        assert pq.read_schema(os.path.join(ours, adds[0]["path"])).names == \
            [c for c in data if c not in partitions.split(", ")], "partition columns are not in the files"
        if generated:  # one query: how many rows hold another value than Spark's, per generated column
            wrong = ", ".join(f"count_if(NOT ({name} <=> ({key})))" for name, key in zip(generated, expressions,
                                                                                          strict=True))
            assert list(spark.sql(f"SELECT {wrong} FROM delta.`{ours}`").first()) == [0] * len(generated), expressions
        conditions = ["ts >= TIMESTAMP'2024-01-01 00:00:00+00:00' AND ts < TIMESTAMP'2024-03-01 00:00:00+00:00'",
                      "ts < TIMESTAMP'1970-01-01 00:00:00+00:00'", "day = DATE'2024-02-29'", "host IS NULL", "n = -1",
                      "ok"]
        counts = "SELECT " + ", ".join(f"(SELECT count(*) FROM {{0}} WHERE {c})" for c in conditions)
        assert list(spark.sql(counts.format(f"delta.`{ours}`")).first()) == \
            list(spark.sql(counts.format(reference)).first()), conditions


def test_partition_columns_of_every_integer_width_and_a_wall_clock_land_as_sparks(spark, table_path):
    """Plain partition columns of TINYINT, SMALLINT, BIGINT and TIMESTAMP_NTZ (INT, DATE and TIMESTAMP ones are the
    generated columns above), at their types' edges and NULL: Spark reads back every value as appended, and prunes
    partitions by them to the right rows."""
    import pyarrow as pa

    wall = [datetime(1, 1, 1), datetime(9999, 12, 31, 23, 59, 59, 999_999), datetime(2024, 2, 29, 12, 0, 0, 1), None]
    data = pa.table({"id": pa.array(range(6), pa.int32()),
                     "b": pa.array([-128, 127, None, -128, 5, 5], pa.int8()),
                     "s": pa.array([-32768, 32767, 7, None, 7, 7], pa.int16()),
                     "l": pa.array([-(2 ** 63), 2 ** 63 - 1, 0, 0, None, None], pa.int64()),
                     "t": pa.array([wall[0], wall[1], wall[2], wall[3], wall[2], wall[2]], pa.timestamp("us"))})
    spark.sql(f"CREATE TABLE {quote_path(table_path)} (id INT, b TINYINT, s SMALLINT, l BIGINT, t TIMESTAMP_NTZ) "
              "USING DELTA PARTITIONED BY (b, s, l, t)")
    assert deltaappend.append(table_path, data) == 1
    assert len([a for a in deltalog.commit_actions(table_path, 1) if "add" in a]) == 5, "a file per partition"
    texts = ", ".join(f"CAST({c} AS STRING)" for c in ("b", "s", "l", "t"))
    read = {r[0]: tuple(r[1:]) for r in spark.sql(f"SELECT id, {texts} FROM delta.`{table_path}`").collect()}
    assert read == {i: tuple(None if v is None else str(v) for v in row) for i, row in enumerate(zip(
        *(data.column(c).to_pylist() for c in ("b", "s", "l")),
        ["0001-01-01 00:00:00", "9999-12-31 23:59:59.999999", "2024-02-29 12:00:00.000001", None,
         "2024-02-29 12:00:00.000001", "2024-02-29 12:00:00.000001"], strict=True))}
    conditions = {"b = -128": [0, 3], "b IS NULL": [2], "s = 32767": [1], "s IS NULL": [3],
                  "l = 9223372036854775807": [1], "l = 0": [2, 3], "t = TIMESTAMP_NTZ'2024-02-29 12:00:00.000001'":
                  [2, 4, 5], "t < TIMESTAMP_NTZ'1000-01-01 00:00:00'": [0], "t IS NULL": [3]}
    found = spark.sql("SELECT " + ", ".join(f"(SELECT sort_array(collect_list(id)) FROM delta.`{table_path}` "
                                            f"WHERE {c})" for c in conditions)).first()
    assert dict(zip(conditions, map(list, found), strict=True)) == conditions


def test_a_clustered_table_takes_appends_and_optimize_clusters_them(spark, table_path):
    """A table with liquid clustering (an ENGINE_SORTING_KEY) takes pyarrow appends with the clustering columns'
    statistics the protocol requires, Spark reads them back, and OPTIMIZE clusters the files (its clusteringProvider on
    the files it writes), rows unchanged; a NaN in a column Delta may cluster by leaves that batch to Spark."""
    import pyarrow as pa

    spark.sql(f"CREATE TABLE {quote_path(table_path)} ({SCHEMA}) USING DELTA CLUSTER BY (name, ts, price, amount)")
    for first in (0, 100, 200):
        assert direct(spark, table_path, first, 100) is not None
    expected = sorted(frame(spark, 0, 300).collect(), key=lambda r: r["id"])
    assert sorted_rows(spark, f"SELECT * FROM delta.`{table_path}`") == expected
    for version in (1, 2, 3):
        [add] = [a["add"] for a in deltalog.commit_actions(table_path, version) if "add" in a]
        stats = json.loads(add["stats"])
        assert {"name", "ts", "price", "amount"} <= set(stats["minValues"]) & set(stats["maxValues"])
        assert "clusteringProvider" not in add, "an append leaves clustering to OPTIMIZE"
    spark.sql(f"OPTIMIZE {quote_path(table_path)}")
    clustered = [a["add"] for a in deltalog.commit_actions(table_path, 4) if "add" in a]
    assert clustered and all(a.get("clusteringProvider") == "liquid" for a in clustered)
    assert sorted_rows(spark, f"SELECT * FROM delta.`{table_path}`") == expected
    nan = frame(spark, 300, 3).toArrow()
    nan = nan.set_column(nan.column_names.index("amount"), "amount", pa.array([float("nan"), 1.0, None]))
    assert deltaappend.append(table_path, nan) is None
    assert deltalog.latest_version(table_path) == 4


REAL_SHAPED = """\
SCHEMA >
    `ts` DateTime64(3, 'UTC') `json:$.ts`,
    `host` LowCardinality(String) `json:$.host`,
    `path` String `json:$.req.path`,
    `status` UInt16 `json:$.status`,
    `tags` Array(String) `json:$.tags[:]`,
    `attrs` Map(String, String) `json:$.attrs`,
    `user_id` Nullable(String) `json:$['user info'].id`,
    `price` Decimal(10, 2) `json:$.price`,
    `retries` UInt8 `json:$.retries` DEFAULT 1
ENGINE_SORTING_KEY host, ts
ENGINE_TTL ts + INTERVAL 3650 DAYS
"""
BY_HOST = """\
NODE {name}
SQL >
    SELECT host, count(*) AS hits, sum(price) AS revenue, sum(retries) AS retries FROM {source} GROUP BY host
TYPE materialized
DATASOURCE {name}
"""


def test_datasources_as_real_projects_declare_them_take_pyarrow_commits(spark, spark_config):
    """A clustered datasource (ENGINE_SORTING_KEY) and a partitioned and sorted one (ENGINE_PARTITION_KEY
    toYYYYMM(ts): a generated partition column) with nested paths, an array, a map, Nullable, LowCardinality,
    DateTime64, Decimal, UInt and DEFAULT columns: their group commits are typed and committed without Spark, the
    misfit quarantined, Spark reads every row back, the views follow, and `optimize` clusters and compacts them with
    the rows unchanged."""
    from tests.spark.conftest import deployed

    files = {"datasources/clustered.datasource": REAL_SHAPED,
             "datasources/partitioned.datasource": REAL_SHAPED.replace("ENGINE_SORTING_KEY",
                                                                       "ENGINE_PARTITION_KEY toYYYYMM(ts)\nENGINE_SORTING_KEY"),
             "pipes/clustered_by_host.pipe": BY_HOST.format(name="clustered_by_host", source="clustered"),
             "pipes/partitioned_by_host.pipe": BY_HOST.format(name="partitioned_by_host", source="partitioned")}
    project = deployed(spark, spark_config, "real_shaped", files)
    lines = [json.dumps({"ts": f"2024-0{1 + i % 3}-28 23:59:59.{i:03d}", "host": f"h{i % 2}",
                         "req": {"path": f"/p/{i}"}, "status": 200 + i, "tags": ["a", str(i)],
                         "attrs": {"k": f"v{i}"}, "user info": {"id": f"u{i}"} if i % 4 else {},
                         "price": i + 0.25, **({"retries": 2} if i % 2 else {})}) for i in range(12)]
    lines.append(json.dumps({"ts": "2024-01-01 00:00:00", "host": "h0", "status": -5}))
    versions = {}
    for name in ("clustered", "partitioned"):
        result = project.append(name, lines)
        versions[name] = result.version
        assert (result.accepted, result.quarantined) == (12, 1), name
        assert result.reasons == ('column `status`: cannot read "-5" as UInt16',)
        path = project.snapshot.table(name).path
        [info] = [a["commitInfo"] for a in deltalog.commit_actions(path, result.version) if "commitInfo" in a]
        assert info["engineInfo"] == deltaappend.ENGINE, name
        assert json.loads(info["userMetadata"])["pipeframe"]["parse"] == "arrow", name
        expected = sorted((f"h{i % 2}", f"/p/{i}", 200 + i, f"u{i}" if i % 4 else None, Decimal(f"{i}.25"),
                           2 if i % 2 else 1) for i in range(12))

        def landed(table: str = path) -> list:
            return sorted(tuple(r) for r in spark.read.format("delta").load(table).selectExpr(
                "host", "path", "status", "user_id", "price", "retries").collect())

        assert landed() == expected, name
        view = {r["host"]: (r["hits"], r["revenue"], r["retries"])
                for r in project.query(f"SELECT * FROM {name}_by_host").collect()}
        assert view == {f"h{h}": (6, sum(Decimal(f"{i}.25") for i in range(h, 12, 2)), 6 * (2 if h else 1))
                        for h in (0, 1)}, name
        project.optimize(name)
        assert landed() == expected, name
    clustered = project.snapshot.table("clustered").path
    commits = [deltalog.commit_actions(clustered, v) for v in range(deltalog.latest_version(clustered) + 1)]
    [optimize] = [c for c in commits if any(a.get("commitInfo", {}).get("operation") == "OPTIMIZE" for a in c)]
    optimized = [a["add"] for a in optimize if "add" in a]
    assert optimized and all(a.get("clusteringProvider") == "liquid" for a in optimized)
    partitioned = project.snapshot.table("partitioned").path
    adds = [a["add"] for a in deltalog.commit_actions(partitioned, versions["partitioned"]) if "add" in a]
    assert {a["partitionValues"]["__pf_partition"] for a in adds} == {"202401", "202402", "202403"}


def test_lines_typed_without_spark_to_a_table_spark_writes(spark, spark_config, monkeypatch):
    """A group typed without Spark, to a table `deltaappend` does not write (column mapping, constraints, object
    storage...): Spark's writer takes its rows, the misfit is quarantined with its reason, counts and keys kept."""
    from tests.spark.conftest import deployed
    from tests.spark.test_events import FILES

    project = deployed(spark, spark_config, "typed_spark_writes", FILES)
    monkeypatch.setattr(deltaappend, "writable", lambda _folder: False)
    lines = [{"ts": "2024-05-01 10:00:00", "user": "sw", "amount": 3}] * 4 + [{"ts": "never", "user": "sw"}]
    result = project.append("events", lines, idempotency_key="sw1")
    assert (result.accepted, result.quarantined) == (4, 1)
    assert result.reasons == ('column `ts`: cannot read "never" as TIMESTAMP',)
    path = project.snapshot.table("events").path
    [info] = [a["commitInfo"] for a in deltalog.commit_actions(path, result.version) if "commitInfo" in a]
    assert info["engineInfo"] != deltaappend.ENGINE
    meta = json.loads(info["userMetadata"])["pipeframe"]
    assert (meta["parse"], meta["keys"]) == ("arrow", {"sw1": [4, 1]})
    assert project.query("SELECT orders, revenue FROM by_user WHERE user_id = 'sw'").first().asDict() == \
        {"orders": 4, "revenue": 12.0}
    quarantine = spark.read.format("delta").load(project.warehouse.quarantine_path("events"))
    assert [r["reason"] for r in quarantine.where("raw LIKE '%never%'").collect()] == [result.reasons[0]]


def test_pipeframes_own_tables_written_without_spark_read_and_update_as_sparks_own(spark, table_path):
    """The state store, lock and view records of a local warehouse are created and rewritten by pyarrow
    (`deltaappend.create`/`rewrite`); Spark reads every version, its UPDATE continues the log (and writes the
    checkpoint version a rewrite leaves to it), and a rewrite after it starts from Spark's rows and checkpoint."""
    from pipeframe.engine.warehouse import LOCK_SCHEMA

    folder = table_path
    stamp = datetime(2026, 11, 27, 9, 30, 1, 250000)
    assert deltaappend.create(folder, LOCK_SCHEMA, [{"id": 1}]) is True
    for version in range(1, 10):
        done = deltaappend.rewrite(folder, lambda rs, v=version: [{**r, "pid": v, "acquired_at": stamp} for r in rs])
        assert done is not None and done[0] == version
    assert deltaappend.rewrite(folder, lambda rs: [{**r, "pid": 10} for r in rs]) is None  # a checkpoint version
    read = spark.read.format("delta").load(folder)
    assert [tuple(r) for r in read.collect()] == [(1, None, None, 9, stamp, None)]
    assert [r.version for r in spark.sql(f"DESCRIBE HISTORY {quote_path(folder)}").collect()] == list(range(9, -1, -1))
    assert [tuple(r) for r in spark.read.format("delta").option("versionAsOf", 4).load(folder).collect()] == [
        (1, None, None, 4, stamp, None)]

    spark.sql(f"UPDATE {quote_path(folder)} SET pid = 10, holder = 'spark' WHERE id = 1")
    assert os.path.exists(os.path.join(folder, "_delta_log", f"{10:020d}.checkpoint.parquet"))
    done = deltaappend.rewrite(folder, lambda rs: [{**r, "pid": r["pid"] + 1} for r in rs])
    assert done is not None and done[0] == 11 and done[1][0]["holder"] == "spark"
    assert [tuple(r) for r in spark.read.format("delta").load(folder).collect()] == [(1, "spark", None, 11, stamp, None)]


TABLE_COLUMNS = (("id", "BIGINT"), ("n", "INT"), ("s", "SMALLINT"), ("name", "STRING"), ("amount", "DOUBLE"),
                 ("price", "DECIMAL(10,2)"), ("ok", "BOOLEAN"), ("day", "DATE"), ("ts", "TIMESTAMP"),
                 ("tags", "ARRAY<STRING>"), ("attrs", "MAP<STRING,INT>"), ("point", "STRUCT<x: DOUBLE, y: DOUBLE>"),
                 ("raw", "BINARY"))


@pytest.mark.parametrize("layout", [{}, {"partition_key": "day"}, {"sorting_key": ("name", "ts")},
                                    {"partition_key": "day", "sorting_key": ("name", "ts"), "ttl": "ts + 1 day"}])
def test_tables_created_without_spark_are_the_tables_sparks_create_table_makes(spark, table_path, layout):
    """Deploy's tables in a local warehouse are created by pyarrow (`tables.create_table` → `deltaappend.create`):
    Spark's DESCRIBE DETAIL, schema and properties equal those of the table its own CREATE TABLE makes, and both
    take the same rows, change feed and OPTIMIZE (clustering by the sorting key)."""
    from pipeframe.compiler.graph import ResourceKey
    from pipeframe.engine import tables
    from pipeframe.plan.state import ResourceState

    state = ResourceState(ResourceKey.datasource("t"), "t", "datasource", columns=TABLE_COLUMNS,
                          description="A table 'quoted'", **layout)
    ours, sparks = f"{table_path}_ours", f"{table_path}_spark"
    assert tables.creates_directly(spark, shared_disk=True)
    tables.create_table(spark, ours, state, direct=True)
    tables.create_table(spark, sparks, state, direct=False)
    engines = [next(a["commitInfo"]["engineInfo"] for a in deltalog.commit_actions(p, 0) if "commitInfo" in a)
               for p in (ours, sparks)]
    assert engines[0] == deltaappend.ENGINE and engines[1] != deltaappend.ENGINE

    def detail(path: str) -> dict:
        row = spark.sql(f"DESCRIBE DETAIL {quote_path(path)}").first().asDict()
        return {k: sorted(v) if k == "tableFeatures" else v for k, v in row.items()
                if k in ("description", "partitionColumns", "clusteringColumns", "properties", "minReaderVersion",
                         "minWriterVersion", "tableFeatures", "numFiles")}

    assert detail(ours) == detail(sparks)
    assert spark.read.format("delta").load(ours).schema == spark.read.format("delta").load(sparks).schema
    for path in (ours, sparks):
        frame(spark, 0, 40).write.format("delta").mode("append").save(path)
        assert direct(spark, path, 40, 10) == 2
        spark.sql(f"OPTIMIZE {quote_path(path)}")
    changes = "SELECT id, _change_type FROM table_changes_by_path('{}', 1) ORDER BY id"
    assert spark.sql(changes.format(ours)).collect() == spark.sql(changes.format(sparks)).collect()
    assert sorted_rows(spark, f"SELECT * FROM {quote_path(ours)}") == \
        sorted_rows(spark, f"SELECT * FROM {quote_path(sparks)}")
    assert detail(ours) == detail(sparks)


def test_a_table_spark_would_make_differently_is_left_to_its_create_table(spark, table_path):
    """A partition key expression (a generated column Spark types), a type spelled with metadata (VARCHAR) and a
    session default for new tables are Spark's to create: the first commit is its own."""
    from dataclasses import replace

    from pipeframe.compiler.graph import ResourceKey
    from pipeframe.engine import tables
    from pipeframe.plan.state import ResourceState

    cases = [ResourceState(ResourceKey.datasource("t"), "t", "datasource", columns=TABLE_COLUMNS,
                           partition_key="to_date(ts)"),
             ResourceState(ResourceKey.datasource("t"), "t", "datasource", columns=(("code", "VARCHAR(3)"),))]
    for i, state in enumerate(cases):
        tables.create_table(spark, f"{table_path}_{i}", state, direct=True)
    key = "spark.databricks.delta.properties.defaults.enableDeletionVectors"
    spark.conf.set(key, "true")
    try:
        direct = tables.creates_directly(spark, shared_disk=True)
        tables.create_table(spark, f"{table_path}_2", replace(cases[0], partition_key=None), direct)
    finally:
        spark.conf.unset(key)
    assert direct is False
    for i in range(3):
        info = next(a["commitInfo"] for a in deltalog.commit_actions(f"{table_path}_{i}", 0) if "commitInfo" in a)
        assert info["engineInfo"] != deltaappend.ENGINE, i
    assert "deletionVectors" in spark.sql(f"DESCRIBE DETAIL {quote_path(table_path + '_2')}").first()["tableFeatures"]
