"""The session builder against real Spark: Delta tables work, settings apply, the session is reused.

Everything here shares the one session of tests/spark/conftest.py; nothing starts a second JVM.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from pipeframe.config import ProjectConfig, SparkSettings
from pipeframe.engine.session import DELTA_EXTENSION, LOG_FILE, get_session
from pipeframe.errors import PipeframeError


def test_a_delta_table_is_created_written_and_read_back(spark, table_path):
    from delta.tables import DeltaTable

    rows = [("2024-01-01 10:00:00", "apple", 1.5), ("2024-01-01 11:00:00", "pear", 2.0)]
    frame = spark.createDataFrame(rows, "ts STRING, product STRING, amount DOUBLE")
    frame.write.format("delta").save(table_path)

    read = spark.read.format("delta").load(table_path)
    assert sorted(tuple(r) for r in read.collect()) == sorted(rows)
    detail = spark.sql(f"DESCRIBE DETAIL delta.`{table_path}`").first()
    assert detail.format == "delta"
    assert detail.location.rstrip("/").endswith(Path(table_path).name)
    assert (Path(table_path) / "_delta_log").is_dir()

    table = DeltaTable.forPath(spark, table_path)
    assert table.history().first().version == 0
    frame.write.format("delta").mode("append").save(table_path)
    assert table.history().first().version == 1
    assert table.toDF().count() == 4


def test_the_session_uses_pipeframe_settings_and_the_projects_spark_conf(spark, spark_config):
    assert DELTA_EXTENSION in spark.conf.get("spark.sql.extensions")
    assert spark.conf.get("spark.sql.shuffle.partitions") == "2"  # from the project's pipeframe.yaml
    assert spark.conf.get("spark.sql.session.timeZone") == "UTC"
    assert spark.sparkContext.appName == "pipeframe:spark_tests"
    assert spark.sparkContext.master == "local[*]"
    warehouse = Path(spark_config.warehouse_uri)
    assert warehouse.is_dir()
    assert spark.conf.get("spark.sql.warehouse.dir").removeprefix("file:").startswith(str(warehouse))


def test_a_managed_table_lands_in_the_projects_warehouse(spark, spark_config):
    spark.sql("CREATE TABLE session_test_managed (x INT) USING delta")
    try:
        spark.sql("INSERT INTO session_test_managed VALUES (1), (2)")
        location = spark.sql("DESCRIBE DETAIL session_test_managed").first().location
        assert location.removeprefix("file:").startswith(spark_config.warehouse_uri)
        assert spark.table("session_test_managed").count() == 2
    finally:
        spark.sql("DROP TABLE IF EXISTS session_test_managed")


def test_get_session_returns_the_same_live_session(spark, spark_config):
    assert get_session(spark_config) is spark
    assert spark.range(3).count() == 3


def test_spark_output_goes_to_the_project_log_not_the_terminal(spark, spark_config):
    log = spark_config.root / ".pipeframe" / LOG_FILE
    assert log.is_file()
    assert "Setting Spark log level" in log.read_text(encoding="utf-8", errors="replace")


def test_spark_connect_without_its_extras_is_a_clear_error_and_keeps_the_session(spark, spark_config, monkeypatch):
    # The test extras install Spark Connect's packages; hide grpc (an import of it fails, as where it is missing)
    # and forget pyspark's Connect modules so they are imported again. monkeypatch puts both back.
    monkeypatch.setitem(sys.modules, "grpc", None)
    for name in [n for n in sys.modules if n.startswith("pyspark.sql.connect")]:
        monkeypatch.delitem(sys.modules, name)
    remote = ProjectConfig(root=spark_config.root, name="remote", warehouse=spark_config.warehouse,
                           spark=SparkSettings(remote="sc://localhost:15002"))
    with pytest.raises(PipeframeError) as caught:
        get_session(remote)
    assert caught.value.code == "PF502"
    assert 'pip install "pyspark[connect]==' in caught.value.diagnostics[0].hint
    assert get_session(spark_config) is spark  # the failed attempt left the running session alone
