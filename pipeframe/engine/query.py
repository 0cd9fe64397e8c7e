"""Running SQL on Spark, the Spark side of `pipeframe.endpoints` and `Project.query`: the statement planned and
collected, the rows and bytes its scans read, and a Spark error turned into a PF807 naming the pipe (an endpoint or
copy pipe) or a PF808 (ad-hoc SQL: `pipeframe query`, `Project.query(sql)`)."""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pipeframe.errors import PipeframeError

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from pipeframe.compiler.compile import CompiledPipe


@dataclass(frozen=True)
class Answer:
    """A query's rows as Spark returns them, its (column, Spark type) pairs and what its scans read."""

    meta: tuple[tuple[str, str], ...]
    rows: list[tuple[Any, ...]]
    rows_read: int
    bytes_read: int
    engine: str = "spark"


def plan(spark: SparkSession, sql: str, pipe: CompiledPipe) -> DataFrame:
    """The DataFrame of `sql` (analysed, not yet run); a Spark error is a PF807 naming `pipe`."""
    with query_errors(pipe):
        return spark.sql(sql)


def collect(frame: DataFrame, pipe: CompiledPipe) -> Answer:
    """Run `frame` and return its rows, schema and scan statistics; a Spark error is a PF807 naming `pipe`."""
    with query_errors(pipe):
        rows = frame.collect()
    return _answer(frame, rows)


def collect_query(frame: DataFrame, readable: Iterable[str] = ()) -> Answer:
    """`collect` for ad-hoc SQL: a Spark error is a PF808 (`sql_errors`)."""
    with sql_errors(readable):
        rows = frame.collect()
    return _answer(frame, rows)


def _answer(frame: DataFrame, rows: list) -> Answer:
    meta = tuple((f.name, f.dataType.simpleString()) for f in frame.schema.fields)
    return Answer(meta, rows, *scan_statistics(frame))


@contextmanager
def query_errors(pipe: CompiledPipe) -> Iterator[None]:
    """A Spark error while planning or running a pipe's query (say, a division by zero under ANSI mode for
    some parameter values) becomes a PF807 naming the pipe, never a traceback."""
    try:
        yield
    except Exception as exc:
        first = spark_error_line(exc)
        if first is None:
            raise
        raise PipeframeError("PF807", f"The query of `{pipe.name}` failed: {first}",
                             f"Check the SQL of {pipe.definition.location.path} for these parameter values "
                             f"(`pipeframe sql {pipe.name}` prints it).", http_status=500) from None


def run_sql(spark: SparkSession, sql: str, readable: Iterable[str] = ()) -> DataFrame:
    """The DataFrame of ad-hoc SQL (analysed, not yet run); a Spark error is a PF808 (`sql_errors`)."""
    with sql_errors(readable):
        return spark.sql(sql)


def collect_rows(frame: DataFrame, limit: int, readable: Iterable[str] = ()) -> list[dict[str, Any]]:
    """At most `limit` rows of an ad-hoc query's DataFrame as dicts; a Spark error is a PF808 (`sql_errors`)."""
    with sql_errors(readable):
        return [row.asDict(recursive=True) for row in frame.limit(limit).collect()]


@contextmanager
def sql_errors(readable: Iterable[str] = ()) -> Iterator[None]:
    """A Spark SQL error in ad-hoc SQL (an unknown table or column, syntax Spark rejects, a division by zero under
    ANSI mode) is the user's: a PF808 with Spark's error class and first line, never a logical plan or a PF999.
    `readable` are the names the query can read, for the hint. Errors of the JVM itself (py4j) stay internal."""
    try:
        yield
    except Exception as exc:
        first = spark_error_line(exc, sql_only=True)
        if first is None:
            raise
        raise sql_error(first, readable) from None


def sql_error(first: str, readable: Iterable[str] = ()) -> PipeframeError:
    """The PF808 of an ad-hoc query that failed with `first` (an error's first line): what failed, and the names the
    query can read (`readable`) in the hint."""
    names = sorted(readable)
    shown = ", ".join(names[:12]) + (f" and {len(names) - 12} more" if len(names) > 12 else "")
    reads = (f"it reads the deployed resources by name: {shown} (and `<datasource>_quarantine`)" if names
             else "nothing is deployed yet, run `pipeframe deploy` first")
    return PipeframeError("PF808", f"The query failed: {first}",
                          f"Fix the query (Spark SQL): {reads}. `pipeframe sql PIPE` prints a pipe's "
                          "compiled SQL.", http_status=400)


# A Spark SQL exception as py4j shows it when pyspark did not convert it (`: org.apache.spark.sql.AnalysisException:
# [TABLE_OR_VIEW_NOT_FOUND] ...`).
SPARK_SQL_ERROR = re.compile(r"^: org\.apache\.spark\.[\w.$]*(Exception|Error): \[[A-Z_.]+\]", re.MULTILINE)
ERROR_CLASS = re.compile(r"\[[A-Z][A-Z0-9_.]+\]")  # Spark's error classes, e.g. [DIVIDE_BY_ZERO]


def spark_error_line(exc: BaseException, sql_only: bool = False) -> str | None:
    """The first line of a Spark error from its error class on (`[DIVIDE_BY_ZERO] Division by zero. ...`), without
    the logical plan or JVM stack that follow; None when `exc` is not Spark's. `sql_only`: only pyspark's captured
    SQL errors (analysis, parse, runtime), not py4j's errors of the JVM connection."""
    # pyspark may fail while converting a JVM error (a logging TypeError): the JVM error is its context
    error = exc if _from_spark(exc) else exc.__context__
    if error is None or not _from_spark(error):
        return None
    if sql_only and not (type(error).__module__.startswith("pyspark.errors") or SPARK_SQL_ERROR.search(str(error))):
        return None  # py4j's own errors (the JVM connection), not a Spark SQL error pyspark left unconverted
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    first = next((line for line in lines if ERROR_CLASS.search(line)), lines[0] if lines else type(error).__name__)
    return first[first.index("["):] if ERROR_CLASS.search(first) else first


def _from_spark(exc: BaseException) -> bool:
    return type(exc).__module__.startswith(("pyspark", "py4j"))


def scan_statistics(frame: DataFrame) -> tuple[int, int]:
    """(rows, bytes) read by the file scans of an executed DataFrame, from Spark's SQL metrics.

    (0, 0) when the plan is not reachable (Spark Connect, whose client has no JVM plan and no SQL metrics)."""
    from pipeframe.engine.session import is_connect

    if is_connect(frame.sparkSession):
        return 0, 0
    try:
        plan = frame._jdf.queryExecution().executedPlan()  # the scan metrics live on the JVM plan
    except Exception:  # noqa: BLE001
        return 0, 0
    rows = size = 0
    stack = [plan]
    while stack:
        node = stack.pop()
        kind = node.getClass().getSimpleName()
        if kind == "AdaptiveSparkPlanExec":
            stack.append(node.executedPlan())
            continue
        if kind.endswith("QueryStageExec"):
            stack.append(node.plan())
            continue
        if "Scan" in kind:
            metrics = node.metrics()
            found = metrics.get("numOutputRows")
            if found.isDefined():
                rows += int(found.get().value())
            found = metrics.get("filesSize")
            if found.isDefined():
                size += int(found.get().value())
        children = node.children()
        stack.extend(children.apply(i) for i in range(children.size()))
    return rows, size
