"""Spark's side of Kafka ingest by Structured Streaming (connectors/kafka_stream.py decides what to read and commit):
the Kafka source's package, the query, and a micro-batch's offsets and NDJSON lines as Spark computes them."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming import StreamingQuery

# Spark's Kafka source for pyspark 4.1 (the newest 4.1 release Maven Central serves the connector of; Spark keeps a
# connector binary-compatible within a minor release), and the jars Spark ships itself that it must not bring twice.
SOURCE_PACKAGE = "org.apache.spark:spark-sql-kafka-0-10_2.13:4.1.1"
SOURCE_EXCLUDES = ("org.xerial.snappy:snappy-java", "org.lz4:lz4-java", "com.github.luben:zstd-jni",
                   "org.slf4j:slf4j-api")
TRIGGER = "1 second"

# One message as an NDJSON line, from the source's columns (value, key: binary; topic, partition, offset, timestamp):
# the value's object with the metadata columns spliced in before its closing brace; a value that is not an object
# becomes a JSON string, which the parser quarantines with its reason. `{raw}`: the value again as `__value`.
META_SQL = ("to_json(named_struct('__topic', topic, '__partition', partition, '__offset', offset, "
            "'__timestamp', date_format(timestamp, 'yyyy-MM-dd HH:mm:ss'), "
            "'__key', coalesce(CAST(key AS STRING), ''), '__value', {raw}))")
LINE_SQL = ("CASE WHEN trim(CAST(value AS STRING)) RLIKE '^[{{][\\\\s\\\\S]*[}}]$' THEN concat("
            "substr(trim(CAST(value AS STRING)), 1, length(trim(CAST(value AS STRING))) - 1), "
            "IF(trim(CAST(value AS STRING)) RLIKE '^[{{]\\\\s*[}}]$', '', ','), substr({meta}, 2)) "
            "ELSE substr(to_json(array(coalesce(CAST(value AS STRING), ''))), 2, "
            "length(to_json(array(coalesce(CAST(value AS STRING), '')))) - 2) END")


def line_sql(raw: bool) -> str:
    """`LINE_SQL` for a datasource that keeps the raw value (`KAFKA_STORE_RAW_VALUE true`) or not."""
    return LINE_SQL.format(meta=META_SQL.format(raw="coalesce(CAST(value AS STRING), '')" if raw else "''"))


def start(spark: SparkSession, options: Mapping[str, str], checkpoint: str, name: str,
          on_batch: Callable[[DataFrame, int], None]) -> StreamingQuery:
    """A query reading Spark's Kafka source with `options`, each micro-batch given to `on_batch` on the driver."""
    reader = spark.readStream.format("kafka")
    for key, value in options.items():
        reader = reader.option(key, value)
    return (reader.load().writeStream.foreachBatch(on_batch).queryName(name)
            .option("checkpointLocation", checkpoint).trigger(processingTime=TRIGGER).start())


def spans(frame: DataFrame) -> dict[int, tuple[int, int]]:
    """A micro-batch's offsets: partition -> (first, last)."""
    from pyspark.sql import functions as F

    return {r[0]: (r[1], r[2]) for r in frame.groupBy("partition").agg(F.min("offset"), F.max("offset")).collect()}


def sizes(lines: DataFrame, parts: int) -> list[int]:
    """How many messages of `lines` (`lines()`) each part holds."""
    counted = {r[0]: r[1] for r in lines.groupBy("part").count().collect()}
    return [counted.get(part, 0) for part in range(parts)]


def lines(frame: DataFrame, left: Mapping[int, tuple[int, int]], raw: bool) -> DataFrame:
    """The micro-batch's messages within `left` (partition -> (first, last)) as NDJSON lines (`line`), each with the
    index of its partition among `left`'s, sorted (`part`: its request in the commit)."""
    which = " OR ".join(f"(partition = {p} AND offset BETWEEN {first} AND {last})" for p, (first, last) in left.items())
    part = "CASE partition " + " ".join(f"WHEN {p} THEN {i}" for i, p in enumerate(sorted(left))) + " END"
    return frame.where(which).selectExpr(f"{line_sql(raw)} AS line", f"CAST({part} AS INT) AS part")
