"""The read path's view of a Delta table without a JVM: the columns' Spark types from the log's schema (every type the
Delta protocol names) and the table's files, on tables delta-rs writes."""

from __future__ import annotations

import datetime as dt
import decimal
import subprocess
import sys

import pyarrow as pa
import pyarrow.parquet
import pytest
from deltalake import DeltaTable, write_deltalake

from pipeframe.serving.snapshots import Unreadable, _snapshot, delta_spark_type

# The Delta protocol's primitive types (PROTOCOL.md, "Primitive Types") and the Spark type each is read as.
PRIMITIVES = [("byte", "TINYINT"), ("short", "SMALLINT"), ("integer", "INT"), ("long", "BIGINT"),
              ("float", "FLOAT"), ("double", "DOUBLE"), ("boolean", "BOOLEAN"), ("date", "DATE"),
              ("string", "STRING"), ("binary", "BINARY"), ("timestamp", "TIMESTAMP"),
              ("timestamp_ntz", "TIMESTAMP_NTZ"), ("decimal(10,2)", "DECIMAL(10, 2)"),
              ("decimal(38, 0)", "DECIMAL(38, 0)")]


@pytest.mark.parametrize(("delta", "spark"), PRIMITIVES)
def test_primitive_types(delta, spark):
    assert delta_spark_type(delta) == spark


def test_nested_types():
    nested = {"type": "struct", "fields": [
        {"name": "tags", "type": {"type": "array", "elementType": "string", "containsNull": True},
         "nullable": True, "metadata": {}},
        {"name": "attrs", "type": {"type": "map", "keyType": "string", "valueType": {
            "type": "array", "elementType": "long", "containsNull": True}, "valueContainsNull": True},
         "nullable": True, "metadata": {}}]}
    assert delta_spark_type(nested) == "STRUCT<`tags`: ARRAY<STRING>, `attrs`: MAP<STRING, ARRAY<BIGINT>>>"


@pytest.mark.parametrize("delta", ["variant", "decimal(10)", {"type": "udt"}])
def test_a_type_the_read_path_does_not_read_is_unreadable(delta):
    with pytest.raises(Unreadable, match="Delta type"):
        delta_spark_type(delta)


def test_snapshot_of_a_partitioned_table_written_by_delta_rs(tmp_path):
    rows = pa.table({
        "day": pa.array([dt.date(2024, 5, 1), dt.date(2024, 5, 1), dt.date(2024, 5, 2)]),
        "ts": pa.array([dt.datetime(2024, 5, 1, 10)] * 3, pa.timestamp("us", tz="UTC")),
        "wall": pa.array([dt.datetime(2024, 5, 1, 10)] * 3, pa.timestamp("us")),
        "n": pa.array([1, 2, 3], pa.int64()), "small": pa.array([1, 2, 3], pa.int16()),
        "amount": pa.array([decimal.Decimal("1.50")] * 3, pa.decimal128(10, 2)),
        "tags": pa.array([["a"], [], None], pa.list_(pa.string())),
        "attrs": pa.array([[("k", 1)], [], None], pa.map_(pa.string(), pa.int32())),
    })
    write_deltalake(str(tmp_path), rows, partition_by=["day"])
    files, columns, partitions = _snapshot(DeltaTable(str(tmp_path)), str(tmp_path))
    assert dict(columns) == {"day": "DATE", "ts": "TIMESTAMP", "wall": "TIMESTAMP_NTZ", "n": "BIGINT",
                             "small": "SMALLINT", "amount": "DECIMAL(10, 2)", "tags": "ARRAY<STRING>",
                             "attrs": "MAP<STRING, INT>"}
    assert partitions == ("day",)
    assert sorted((f.partition, f.rows) for f in files) == [((("day", "2024-05-01"),), 2),
                                                             ((("day", "2024-05-02"),), 1)]
    assert all(pa.parquet.read_metadata(f.path).num_rows == f.rows for f in files)  # local paths of the files


def test_a_snapshot_loads_no_pyarrow(tmp_path):
    """Why the schema is read from the log's JSON and the files through arro3: a fresh `status` or `endpoint`
    process does not pay for pyarrow and numpy. Checked in a child interpreter, where nothing imported them yet."""
    write_deltalake(str(tmp_path), pa.table({"n": [1, 2]}))
    probe = ("import sys; from deltalake import DeltaTable; from pipeframe.serving.snapshots import _snapshot; "
             f"files, columns, _ = _snapshot(DeltaTable({str(tmp_path)!r}), {str(tmp_path)!r}); "
             "print(len(files), columns, 'pyarrow' in sys.modules, 'numpy' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["1", "(('n',", "'BIGINT'),)", "False", "False"]
