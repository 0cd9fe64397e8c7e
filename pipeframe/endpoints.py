"""Endpoints: an endpoint pipe run with request parameters over the deployed resources.

One code path for `pipeframe endpoint`, `Project.endpoint()`/`Project.query(pipe, ...)`, the HTTP server and
`pipeframe test`: parameters are validated and rendered as SQL literals by the template sandbox (a bad one is a
PF202 naming the parameter and the expected type, HTTP 400), the statement runs on Spark over the deployed tables
by name (`pipeframe.engine.query`), and the answer has Tinybird's shape: `meta`, `data`, `rows`, `statistics`.
"""

from __future__ import annotations

import base64
import datetime as dt
import decimal
import difflib
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pipeframe.compiler.graph import ResourceKey
from pipeframe.engine import query
from pipeframe.errors import PipeframeError
from pipeframe.plan.snapshot import DeployedSnapshot

if TYPE_CHECKING:
    from pipeframe.compiler.compile import CompiledPipe, CompiledProject
    from pipeframe.engine.query import DataFrame
    from pipeframe.engine.session import SparkSession
    from pipeframe.engine.warehouse import Warehouse

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
                 deployed: DeployedSnapshot | None = None) -> None:
        self.compiled = compiled
        self.spark = spark
        self.warehouse = warehouse
        self.deployed = DeployedSnapshot()
        self.refresh(deployed)

    def refresh(self, deployed: DeployedSnapshot | None = None) -> None:
        """Read the deployed state again (or take `deployed`, known to the caller) and register every table by
        name in the session."""
        self.deployed = self.warehouse.snapshot(fresh=True) if deployed is None else deployed
        self.warehouse.register(self.deployed.values())

    @property
    def names(self) -> list[str]:
        return sorted(name for name, pipe in self.compiled.pipes.items() if pipe.type == "endpoint")

    def pipe(self, name: str, kind: str = "endpoint") -> CompiledPipe:
        """The `kind` pipe `name` (endpoint or copy), deployed as it is in the files; a PipeframeError
        (PF801–804) otherwise."""
        pipe = declared_pipe(self.compiled, name, kind)
        deployed = self.deployed.get(ResourceKey.pipe(name))
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
        return query.plan(self.spark, pipe.render(values), pipe)

    def run(self, name: str, params: Mapping[str, Any]) -> EndpointResult:
        start = time.perf_counter()
        answer = query.collect(self.frame(name, params), self.compiled.pipes[name])
        columns = [column for column, _ in answer.meta]
        data = [{n: jsonable(v) for n, v in zip(columns, row, strict=True)} for row in answer.rows]
        return EndpointResult(name, answer.meta, data, time.perf_counter() - start, answer.rows_read,
                              answer.bytes_read)


def declared_pipe(compiled: CompiledProject, name: str, kind: str = "endpoint") -> CompiledPipe:
    """The pipe `name` of the files if it is a `kind` pipe (endpoint, copy, materialized); PF801/PF802 otherwise."""
    pipe = compiled.pipes.get(name)
    if pipe is None:
        names = sorted(n for n, p in compiled.pipes.items() if p.type == kind)
        close = difflib.get_close_matches(name, names, n=1)
        hint = f"Did you mean `{close[0]}`?" if close else (
            f"{kind.capitalize()} pipes: {', '.join(names)}." if names else f"The project has no {kind} pipes.")
        if name in compiled.datasources:
            hint = f"`{name}` is a datasource; query it with `pipeframe query`. " + hint
        raise PipeframeError("PF801", f"There is no pipe `{name}`.", hint, http_status=404)
    if pipe.type != kind:
        what = {"endpoint": "an endpoint pipe", "materialized": f"a materialized pipe (it fills `{pipe.target}`)",
                "copy": f"a copy pipe (it fills `{pipe.target}`; run it with `pipeframe copy run {name}`)"}
        raise PipeframeError("PF802", f"`{name}` is {what.get(pipe.type or '', 'a pipe without a TYPE')}, "
                             f"not {what[kind].split(' (')[0]}.",
                             f"Set `TYPE {kind}` on its last node in {pipe.definition.location.path}, or "
                             f"query its tables with `pipeframe query`.", http_status=404)
    return pipe
