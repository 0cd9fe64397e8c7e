"""Checkpoints written by delta-rs (`deltaappend.checkpoint`) read back by Spark and by `deltalog` as the log they
replace: the same rows, files, partitions, clustering, change feed and `txn` fences, with the JSON commits before
the checkpoint removed (as Delta's log cleanup does), so nothing but the checkpoint can answer; tables delta-rs does
not take are checkpointed by Delta's own code (tests/spark/test_deltaappend.py)."""

from __future__ import annotations

import os

import pytest

from pipeframe.engine import deltaappend, deltalog, tables
from pipeframe.sqltext import quote_path
from tests.spark.test_deltaappend import PARTITIONED, SCHEMA, frame, partitioned_rows

LAYOUTS = {
    "clustered": f"({SCHEMA}) USING DELTA CLUSTER BY (name, ts)",
    "partitioned": f"({PARTITIONED}, month INT GENERATED ALWAYS AS (YEAR(ts) * 100 + MONTH(ts))) USING DELTA "
                   "PARTITIONED BY (month, host) TBLPROPERTIES ('delta.enableChangeDataFeed' = 'true')",
    "change feed": f"({SCHEMA}) USING DELTA TBLPROPERTIES ('delta.enableChangeDataFeed' = 'true')",
}


def batch(spark, layout: str, first: int):
    return partitioned_rows(first, 30) if layout == "partitioned" else frame(spark, first, 30).toArrow()


def snapshot(spark, path: str) -> tuple:
    """What a reader sees of the table: Spark's rows (as text, in order), files and detail, and `deltalog`'s files and
    fences."""
    detail = spark.sql(f"DESCRIBE DETAIL {quote_path(path)}").first()
    table = spark.read.format("delta").load(path)  # as Spark's text: a time in year 1 compares too
    rows = sorted(map(tuple, table.selectExpr(*(f"CAST(`{c}` AS STRING)" for c in table.columns)).collect()), key=repr)
    return (rows, sorted(table.inputFiles()), detail["partitionColumns"], detail["clusteringColumns"],
            deltalog.file_count(path), deltalog.transaction_versions(path, frozenset({"part-0", "part-1"})))


def forget_logs(spark) -> None:
    """Spark reads the log again from the files, not from the snapshots it keeps per table."""
    spark.sparkContext._jvm.org.apache.spark.sql.delta.DeltaLog.clearCache()


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_a_delta_rs_checkpoint_reads_back_as_the_log_it_replaces(spark, table_path, layout):
    spark.sql(f"CREATE TABLE {quote_path(table_path)} {LAYOUTS[layout]}")
    for number, first in enumerate(range(0, 120, 30)):
        fences = {f"part-{number % 2}": (first, first + 29)}
        assert deltaappend.append(table_path, batch(spark, layout, first), fences=fences) is not None
    key = "n" if layout == "partitioned" else "id"
    spark.sql(f"DELETE FROM {quote_path(table_path)} WHERE {key} % 5 = 1")  # removes in the log
    if layout == "clustered":
        spark.sql(f"OPTIMIZE {quote_path(table_path)}")
    version = deltalog.latest_version(table_path)
    before = snapshot(spark, table_path)

    assert deltaappend.checkpoint(table_path), "written by delta-rs, no Spark job"
    log_folder = os.path.join(table_path, "_delta_log")
    assert os.path.exists(os.path.join(log_folder, f"{version:020d}.checkpoint.parquet"))
    for name in os.listdir(log_folder):  # only the checkpoint can tell what the table held
        if name[:20].isdigit() and int(name[:20]) < version and name.endswith((".json", ".crc")):
            os.remove(os.path.join(log_folder, name))
    forget_logs(spark)
    assert snapshot(spark, table_path) == before
    assert before[5] == {"part-0": 89, "part-1": 119}

    # Spark's idempotent writes see the fences: a batch under a txn version already held is skipped.
    rows = spark.createDataFrame(partitioned_rows(500, 3)) if layout == "partitioned" else frame(spark, 500, 3)
    rows.write.format("delta").mode("append") \
        .option("txnAppId", "part-1").option("txnVersion", 119).save(table_path)
    assert deltalog.latest_version(table_path) == version
    with pytest.raises(deltaappend.Fenced):
        deltaappend.append(table_path, batch(spark, layout, 100), fences={"part-0": (60, 89)})
    # The table goes on: appends by pyarrow and by Spark, and the change feed across the checkpoint.
    assert deltaappend.append(table_path, batch(spark, layout, 200), fences={"part-0": (90, 119)}) == version + 1
    if layout == "clustered":
        spark.sql(f"OPTIMIZE {quote_path(table_path)}")
        assert spark.sql(f"DESCRIBE DETAIL {quote_path(table_path)}").first()["clusteringColumns"] == ["name", "ts"]
    if layout != "clustered":
        changes = spark.read.format("delta").option("readChangeFeed", "true").option("startingVersion", version + 1) \
            .load(table_path).groupBy("_change_type").count().collect()
        assert {row["_change_type"]: row["count"] for row in changes} == {"insert": 30}
    assert spark.read.format("delta").load(table_path).count() == len(before[0]) + 30


def test_a_table_delta_rs_is_not_trusted_with_is_checkpointed_by_delta(spark, table_path):
    """Deletion vectors (reader version 3): delta-rs writes nothing, Delta's own code writes the checkpoint."""
    spark.sql(f"CREATE TABLE {quote_path(table_path)} ({SCHEMA}) USING DELTA "
              "TBLPROPERTIES ('delta.enableDeletionVectors' = 'true')")
    assert deltaappend.append(table_path, frame(spark, 0, 10).toArrow()) == 1
    spark.sql(f"DELETE FROM {quote_path(table_path)} WHERE id = 3")
    assert not deltaappend.checkpoint(table_path)
    assert not any(n.endswith(".checkpoint.parquet") for n in os.listdir(os.path.join(table_path, "_delta_log")))
    assert tables.checkpoint(spark, table_path)
    assert os.path.exists(os.path.join(table_path, "_delta_log", f"{2:020d}.checkpoint.parquet"))
    forget_logs(spark)
    assert spark.read.format("delta").load(table_path).count() == 9
