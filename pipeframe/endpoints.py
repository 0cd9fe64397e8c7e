"""Endpoints: an endpoint pipe run with request parameters over the deployed resources.

One code path for `pipeframe endpoint`, `Project.endpoint()`/`Project.query(pipe, ...)`, the HTTP server and
`pipeframe test`: parameters are validated and rendered as SQL literals by the template sandbox (a bad one is a
PF202 naming the parameter and the expected type, HTTP 400), the statement runs on Spark over the deployed tables
by name, and the answer has Tinybird's shape: `meta`, `data`, `rows`, `statistics`.
"""

from __future__ import annotations

import base64
import datetime as dt
import decimal
import difflib
import re
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pipeframe.errors import PipeframeError

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from pipeframe.compiler.compile import CompiledPipe, CompiledProject
    from pipeframe.engine.warehouse import DeployedResource, Warehouse

# Query-string names that are never template parameters.
RESERVED_PARAMS = frozenset({"token", "q"})


@dataclass(frozen=True)
class EndpointResult:
    """One endpoint answer. `meta` holds (column, Spark type) pairs; `data` JSON-ready rows."""

    pipe: str
    meta: tuple[tuple[str, str], ...]
    data: list[dict[str, Any]]
    elapsed: float
    rows_read: int
    bytes_read: int

    @property
    def columns(self) -> list[str]:
        return [name for name, _ in self.meta]

    def to_json(self) -> dict[str, Any]:
        return {"meta": [{"name": n, "type": t} for n, t in self.meta], "data": self.data, "rows": len(self.data),
                "statistics": {"elapsed": round(self.elapsed, 6), "rows_read": self.rows_read,
                               "bytes_read": self.bytes_read}}


def jsonable(value: Any) -> Any:
    """A Spark value as JSON: timestamps as 'YYYY-MM-DD HH:MM:SS' (Tinybird's format), decimals as numbers."""
    if isinstance(value, dt.datetime):
        return value.isoformat(sep=" ", timespec="microseconds" if value.microsecond else "seconds")
    if isinstance(value, dt.date):
        return value.isoformat()
    if isinstance(value, decimal.Decimal):
        return int(value) if value == value.to_integral_value() and value.as_tuple().exponent >= 0 else float(value)
    if isinstance(value, bytes | bytearray):
        return base64.b64encode(bytes(value)).decode("ascii")
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [jsonable(v) for v in value]
    return value


class Endpoints:
    """The endpoint pipes of a compiled project, served over the warehouse's deployed tables.

    Tables are registered by name once (`refresh()` again after a deploy); each call renders the pipe with
    its parameters and runs it."""

    def __init__(self, compiled: CompiledProject, spark: SparkSession, warehouse: Warehouse,
                 deployed: Mapping[str, DeployedResource] | None = None) -> None:
        self.compiled = compiled
        self.spark = spark
        self.warehouse = warehouse
        self.deployed: dict = {}
        self.refresh(deployed)

    def refresh(self, deployed: Mapping[str, DeployedResource] | None = None) -> None:
        """Read the deployed state again (or take `deployed`, known to the caller) and register every table by
        name in the session."""
        self.deployed = dict(self.warehouse.deployed() if deployed is None else deployed)
        self.warehouse.register(self.deployed)

    @property
    def names(self) -> list[str]:
        return sorted(name for name, pipe in self.compiled.pipes.items() if pipe.type == "endpoint")

    def pipe(self, name: str, kind: str = "endpoint") -> CompiledPipe:
        """The `kind` pipe `name` (endpoint or copy), deployed as it is in the files; a PipeframeError
        (PF801–804) otherwise."""
        pipe = self.compiled.pipes.get(name)
        if pipe is None:
            names = sorted(n for n, p in self.compiled.pipes.items() if p.type == kind)
            close = difflib.get_close_matches(name, names, n=1)
            hint = f"Did you mean `{close[0]}`?" if close else (
                f"{kind.capitalize()} pipes: {', '.join(names)}." if names else f"The project has no {kind} pipes.")
            raise PipeframeError("PF801", f"There is no pipe `{name}`.", hint, http_status=404)
        if pipe.type != kind:
            what = {"endpoint": "an endpoint pipe", "materialized": f"a materialized pipe (it fills `{pipe.target}`)",
                    "copy": f"a copy pipe (it fills `{pipe.target}`; run it with `pipeframe copy run {name}`)"}
            raise PipeframeError("PF802", f"`{name}` is {what.get(pipe.type or '', 'a pipe without a TYPE')}, "
                                 f"not {what[kind].split(' (')[0]}.",
                                 f"Set `TYPE {kind}` on its last node in {pipe.definition.location.path}, or "
                                 f"query its tables with `pipeframe query`.", http_status=404)
        deployed = self.deployed.get(f"pipe:{name}")
        if deployed is None:
            raise PipeframeError("PF803", f"The pipe `{name}` is not deployed.",
                                 "Run `pipeframe deploy` (or `pipeframe dev`) first.", http_status=404)
        if deployed.state.sql != pipe.sql:
            raise PipeframeError("PF804", f"{pipe.definition.location.path} changed since the last deploy.",
                                 "Run `pipeframe deploy` to serve the new version (`pipeframe dev` does it on "
                                 "every save).", http_status=409)
        return pipe

    def frame(self, name: str, params: Mapping[str, Any], kind: str = "endpoint") -> DataFrame:
        """The pipe's rows as a DataFrame (not yet run)."""
        pipe = self.pipe(name, kind)
        values = {k: v for k, v in params.items() if k not in RESERVED_PARAMS}
        sql = pipe.render(values)
        with query_errors(pipe):
            return self.spark.sql(sql)

    def run(self, name: str, params: Mapping[str, Any]) -> EndpointResult:
        start = time.perf_counter()
        frame = self.frame(name, params)
        with query_errors(self.compiled.pipes[name]):
            rows = frame.collect()
        meta = tuple((f.name, f.dataType.simpleString()) for f in frame.schema.fields)
        data = [{n: jsonable(v) for n, v in zip(frame.columns, row, strict=True)} for row in rows]
        rows_read, bytes_read = scan_statistics(frame)
        return EndpointResult(name, meta, data, time.perf_counter() - start, rows_read, bytes_read)


@contextmanager
def query_errors(pipe: CompiledPipe) -> Iterator[None]:
    """A Spark error while planning or running a pipe's query (say, a division by zero under ANSI mode for
    some parameter values) becomes a PF807 naming the pipe, never a traceback."""
    try:
        yield
    except Exception as exc:
        # pyspark may fail while converting a JVM error (a logging TypeError): the JVM error is its context
        error = exc if _from_spark(exc) else exc.__context__
        if error is None or not _from_spark(error):
            raise
        lines = [line.strip() for line in str(error).splitlines() if line.strip()]
        first = next((line for line in lines if ERROR_CLASS.search(line)), lines[0] if lines else type(error).__name__)
        first = first[first.index("["):] if ERROR_CLASS.search(first) else first
        raise PipeframeError("PF807", f"The query of `{pipe.name}` failed in Spark: {first}",
                             f"Check the SQL of {pipe.definition.location.path} for these parameter values "
                             f"(`pipeframe sql {pipe.name}` prints it).", http_status=500) from None


ERROR_CLASS = re.compile(r"\[[A-Z][A-Z0-9_.]+\]")  # Spark's error classes, e.g. [DIVIDE_BY_ZERO]


def _from_spark(exc: BaseException) -> bool:
    return type(exc).__module__.startswith(("pyspark", "py4j"))


def scan_statistics(frame: DataFrame) -> tuple[int, int]:
    """(rows, bytes) read by the file scans of an executed DataFrame, from Spark's SQL metrics.

    (0, 0) when the plan is not reachable (Spark Connect)."""
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
