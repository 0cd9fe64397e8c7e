"""Types between the read path's vocabularies: Spark (what pipeframe's tables are declared in and what an answer's
`meta` names) and DuckDB (what its tables are made of); Delta's own (a table log's schema) is read by `snapshots`."""

from __future__ import annotations

from functools import lru_cache

from sqlglot import exp

from pipeframe.serving.translate import DIALECT, DUCKDB


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
