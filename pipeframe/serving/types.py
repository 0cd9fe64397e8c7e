"""Types between the read path's three vocabularies: Arrow (what Delta's files and delta-rs give), Spark (what
pipeframe's tables are declared in and what an answer's `meta` names) and DuckDB (what its tables are made of)."""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from sqlglot import exp

from pipeframe.serving.translate import DIALECT, DUCKDB


def arrow_spark_type(arrow: Any) -> str:
    """An Arrow type as the Spark type Delta stores it as (TIMESTAMP for an instant, TIMESTAMP_NTZ for a wall time)."""
    import pyarrow.types as pt

    simple = [(pt.is_int8, "TINYINT"), (pt.is_int16, "SMALLINT"), (pt.is_int32, "INT"), (pt.is_int64, "BIGINT"),
              (pt.is_float32, "FLOAT"), (pt.is_float64, "DOUBLE"), (pt.is_boolean, "BOOLEAN"),
              (pt.is_date32, "DATE"), (pt.is_string, "STRING"), (pt.is_large_string, "STRING"),
              (pt.is_string_view, "STRING"), (pt.is_binary, "BINARY"), (pt.is_large_binary, "BINARY"),
              (pt.is_binary_view, "BINARY")]
    for test, name in simple:
        if test(arrow):
            return name
    if pt.is_timestamp(arrow):
        return "TIMESTAMP" if arrow.tz else "TIMESTAMP_NTZ"
    if pt.is_decimal(arrow):
        return f"DECIMAL({arrow.precision}, {arrow.scale})"
    if pt.is_list(arrow) or pt.is_large_list(arrow) or pt.is_list_view(arrow):
        return f"ARRAY<{arrow_spark_type(arrow.value_type)}>"
    if pt.is_map(arrow):
        return f"MAP<{arrow_spark_type(arrow.key_type)}, {arrow_spark_type(arrow.item_type)}>"
    if pt.is_struct(arrow):
        return "STRUCT<" + ", ".join(f"`{f.name}`: {arrow_spark_type(f.type)}" for f in arrow) + ">"
    from pipeframe.serving.snapshots import Unreadable

    raise Unreadable(f"a column of Arrow type {arrow}, which has no Spark type")


@lru_cache(maxsize=1024)
def duckdb_type(spark_type: str) -> str:
    """A Spark type as DuckDB declares it (TIMESTAMP is an instant there: TIMESTAMPTZ)."""
    return exp.DataType.build(spark_type, dialect=DIALECT).sql(dialect=DUCKDB)


_SIMPLE = {exp.DType.VARCHAR: "string", exp.DType.TEXT: "string", exp.DType.INT: "int", exp.DType.BIGINT: "bigint",
           exp.DType.SMALLINT: "smallint", exp.DType.TINYINT: "tinyint", exp.DType.DOUBLE: "double",
           exp.DType.FLOAT: "float", exp.DType.BOOLEAN: "boolean", exp.DType.BINARY: "binary",
           exp.DType.VARBINARY: "binary", exp.DType.BLOB: "binary", exp.DType.DATE: "date",
           exp.DType.TIMESTAMP: "timestamp", exp.DType.TIMESTAMPTZ: "timestamp", exp.DType.TIMESTAMPLTZ: "timestamp",
           exp.DType.TIMESTAMPNTZ: "timestamp_ntz", exp.DType.INT128: "bigint"}


@lru_cache(maxsize=1024)
def spark_simple(spark_type: str) -> str:
    """A Spark type as pyspark's `DataType.simpleString()` writes it (`decimal(10,2)`, `array<string>`)."""
    return _simple(exp.DataType.build(spark_type, dialect=DIALECT))


@lru_cache(maxsize=1024)
def spark_type(duckdb: str) -> str:
    """A DuckDB column type as a Spark type (TIMESTAMPTZ is Spark's TIMESTAMP, DuckDB's TIMESTAMP its TIMESTAMP_NTZ)."""
    if duckdb.upper() == "TIMESTAMP":
        return "TIMESTAMP_NTZ"
    return exp.DataType.build(duckdb, dialect=DUCKDB).sql(dialect=DIALECT)


@lru_cache(maxsize=1024)
def duck_simple(duckdb: str) -> str:
    """A DuckDB result type as Spark names it (for columns whose Spark type sqlglot could not infer)."""
    kind = duckdb.upper()
    if kind == "TIMESTAMP":  # DuckDB's TIMESTAMP is a wall time: Spark's TIMESTAMP_NTZ
        return "timestamp_ntz"
    try:
        return _simple(exp.DataType.build(duckdb, dialect=DUCKDB))
    except Exception:  # noqa: BLE001 — a type sqlglot cannot read: named as DuckDB names it
        return duckdb.lower()


def _simple(data_type: exp.DataType) -> str:
    kind = data_type.this
    inner = data_type.expressions
    if kind == exp.DType.ARRAY:
        return f"array<{_simple(inner[0])}>"
    if kind == exp.DType.MAP:
        return f"map<{_simple(inner[0])},{_simple(inner[1])}>"
    if kind == exp.DType.STRUCT:
        return "struct<" + ",".join(f"{field.name}:{_simple(field.args['kind'])}" for field in inner) + ">"
    if kind == exp.DType.DECIMAL:
        params = [p.name for p in inner] or ["10", "0"]
        return f"decimal({','.join(params)})"
    return _SIMPLE.get(kind, data_type.sql(dialect=DIALECT).lower())
