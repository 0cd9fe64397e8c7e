"""Endpoints: an endpoint pipe run with request parameters over the deployed resources.

One code path for `pipeframe endpoint`, `Project.endpoint()`/`Project.query(pipe, ...)`, the HTTP server and
`pipeframe test`: parameters are validated and rendered as SQL literals by the template sandbox (a bad one is a
PF202 naming the parameter and the expected type, HTTP 400), the statement runs on DuckDB over the tables' current
snapshots (`pipeframe.serving`, no JVM) or, where that cannot answer as Spark would, on Spark over the deployed tables
by name (`pipeframe.engine.query`), and the answer has Tinybird's shape: `meta`, `data`, `rows`, `statistics`.
"""

from __future__ import annotations

import base64
import datetime as dt
import decimal
import difflib
import threading
import time
from collections import OrderedDict
from collections.abc import Iterable, Mapping
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from pipeframe.compiler.graph import ResourceKey
from pipeframe.engine import query
from pipeframe.errors import PipeframeError
from pipeframe.plan.snapshot import DeployedSnapshot

if TYPE_CHECKING:
    from pipeframe.compiler.compile import CompiledPipe, CompiledProject
    from pipeframe.engine.query import DataFrame
    from pipeframe.engine.session import SparkSession
    from pipeframe.engine.warehouse import Warehouse
    from pipeframe.serving.reader import Answer, Reader

# Query-string names that are never template parameters.
RESERVED_PARAMS = frozenset({"token", "q"})
RENDERED = 1024  # statements kept per Endpoints, by pipe and parameters
# Which engine answers reads: the read path with Spark where it cannot (auto), the read path alone, or Spark alone.
ENGINES = ("auto", "duckdb", "spark")


@dataclass(frozen=True)
class EndpointResult:
    """One endpoint answer. `meta` holds (column, Spark type) pairs; `data` JSON-ready rows; `engine` what answered
    (`duckdb`, the read path without a JVM, or `spark`) and, for Spark, why (`engine_reason`; None when asked to)."""

    pipe: str
    meta: tuple[tuple[str, str], ...]
    data: list[dict[str, Any]]
    elapsed: float
    rows_read: int
    bytes_read: int
    engine: str = "spark"
    engine_reason: str | None = None

    @property
    def columns(self) -> list[str]:
        return [name for name, _ in self.meta]

    def to_json(self) -> dict[str, Any]:
        statistics = {"elapsed": round(self.elapsed, 6), "rows_read": self.rows_read, "bytes_read": self.bytes_read,
                      "engine": self.engine}
        if self.engine_reason:
            statistics["engine_reason"] = self.engine_reason
        return {"meta": [{"name": n, "type": t} for n, t in self.meta], "data": self.data, "rows": len(self.data),
                "statistics": statistics}


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


class SparkSide(Protocol):
    """What answers when the read path cannot: the project's Spark session and warehouse (started on first use)."""

    @property
    def spark(self) -> SparkSession: ...

    @property
    def warehouse(self) -> Warehouse: ...


class Endpoints:
    """The endpoint pipes of a compiled project, served over the warehouse's deployed tables.

    Each call renders the pipe with its parameters and runs it: on DuckDB over the tables' current snapshots
    (`pipeframe.serving`, engine "auto" or "duckdb"), or on Spark (engine "spark", and "auto" for what the read path
    cannot answer with Spark's meaning). `deployed` is what the pipes are checked against (PF803/PF804): what the
    warehouse records, or a snapshot the caller knows (the dev loop serves a saved pipe before its deploy)."""

    def __init__(self, compiled: CompiledProject, reader: Reader | None, spark: SparkSide | None,
                 deployed: DeployedSnapshot | None = None, engine: str = "auto") -> None:
        if engine not in ENGINES:
            raise PipeframeError("PF809", f"Unknown engine `{engine}`.", f"Use one of {', '.join(ENGINES)}.")
        self.compiled = compiled
        self.reader = reader if engine != "spark" else None
        self._spark = spark
        self.engine = engine
        self._given = deployed
        self._registered: DeployedSnapshot | None = None
        # (pipe, parameters) → the statement they render to: a pipe and its templates never change in one Endpoints
        self._rendered: OrderedDict[tuple, str] = OrderedDict()
        self._data: OrderedDict[int, tuple[Answer, list[dict[str, Any]]]] = OrderedDict()  # JSON rows per answer
        self._lock = threading.Lock()

    @property
    def deployed(self) -> DeployedSnapshot:
        """What is deployed (as given, or as the warehouse records it now)."""
        if self._given is not None:
            return self._given
        if self.reader is not None:
            return self.reader.deployed().snapshot
        return self.spark_side().warehouse.snapshot()

    def pinned(self) -> AbstractContextManager[object]:
        """Within: what is deployed is read once (`Reader.pinned`), so one call checks its pipe, token and tables
        against one state."""
        return self.reader.pinned() if self.reader is not None and self._given is None else nullcontext()

    def refresh(self, deployed: DeployedSnapshot | None = None) -> None:
        """Check pipes against `deployed` from now on (None: against what the warehouse records, read again)."""
        self._given = deployed
        if deployed is None and self.reader is None:
            self.spark_side().warehouse.snapshot(fresh=True)
        self._registered = None

    def spark_side(self) -> SparkSide:
        if self._spark is None:
            raise PipeframeError("PF809", "This answer needs Spark, and the read path was asked to answer alone "
                                 "(--engine duckdb).", "Run it with --engine auto (or spark).")
        return self._spark

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
        """The pipe's rows as a Spark DataFrame (not yet run)."""
        pipe = self.pipe(name, kind)
        return query.plan(self._session(), self.render(pipe, params), pipe)

    def render(self, pipe: CompiledPipe, params: Mapping[str, Any]) -> str:
        """The pipe's statement for these parameters (validated and rendered once, then kept: a dashboard asks the
        same few questions again and again)."""
        values = _values(params)
        key = (pipe.name, tuple(sorted((k, tuple(v) if isinstance(v, list) else v) for k, v in values.items())))
        sql = self._rendered.get(key)
        if sql is None:
            sql = pipe.render(values)
            with self._lock:  # request threads share the caches
                self._rendered[key] = sql
                while len(self._rendered) > RENDERED:
                    self._rendered.popitem(last=False)
        return sql

    def run(self, name: str, params: Mapping[str, Any]) -> EndpointResult:
        with self.pinned():
            return self._run(name, params)

    def _run(self, name: str, params: Mapping[str, Any]) -> EndpointResult:
        start = time.perf_counter()
        pipe = self.pipe(name)
        sql = self.render(pipe, params)
        reason = None
        if self.reader is not None:
            try:
                answer = read_answer(self.reader, sql, pipe)
            except ReadPathRefused as refused:
                if self.engine == "duckdb":
                    raise PipeframeError("PF809", f"The read path cannot answer `{name}` as Spark would: "
                                         f"{refused.reason}.", "Run it with --engine auto (or spark).") from None
                reason = refused.reason
            else:
                return answer_result(name, answer, time.perf_counter() - start, None, self._json_rows(answer))
        answer = query.collect(query.plan(self._session(), sql, pipe), pipe)
        return answer_result(name, answer, time.perf_counter() - start, reason)

    def _json_rows(self, answer: Answer) -> list[dict[str, Any]]:
        """The answer's rows as JSON-ready dicts, made once per answer the read path keeps (and hands out again)."""
        found = self._data.get(id(answer))
        if found is not None and found[0] is answer:
            return found[1]
        rows = _rows(answer)
        with self._lock:
            self._data[id(answer)] = (answer, rows)
            while len(self._data) > RENDERED:
                self._data.popitem(last=False)
        return rows

    def _session(self) -> SparkSession:
        """The Spark session, with every deployed table registered by name (once per deployed snapshot)."""
        side = self.spark_side()
        deployed = side.warehouse.snapshot() if self._given is None else self._given
        if self._registered is not deployed:
            side.warehouse.register(deployed.values())
            self._registered = deployed
        return side.spark


class ReadPathRefused(Exception):
    """The read path will not answer this statement (Spark answers instead); `reason` says why."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def read_answer(reader: Reader, sql: str, pipe: CompiledPipe | None = None,
                readable: Iterable[str] | None = None) -> Answer:
    """`sql` answered by the read path: its rows as Spark would give them. ReadPathRefused when it will not (a
    construct without Spark's meaning in DuckDB, a table it cannot read, a DuckDB error Spark may not raise);
    a PF807 (a pipe) or PF808 (ad-hoc SQL) for an error Spark raises too."""
    from pipeframe.serving import reader as serving
    from pipeframe.serving.snapshots import Unreadable
    from pipeframe.serving.translate import Untranslatable

    try:
        found = reader.query(sql, readable)
    except Untranslatable as exc:
        raise ReadPathRefused(f"{exc.construct} is {exc.reason}" if exc.construct.startswith("`")
                              else f"{exc.construct}: {exc.reason}") from None
    except (serving.ReadFailed, Unreadable) as exc:  # answers show no paths of the warehouse
        raise ReadPathRefused(str(exc).replace(reader.uri, "the warehouse")) from None
    except serving.UnknownTable as exc:
        message = f"[TABLE_OR_VIEW_NOT_FOUND] The table or view `{exc.name}` cannot be found."
        raise _query_error(pipe, message, exc.known) from None
    except serving.SparkError as exc:
        raise _query_error(pipe, str(exc), None) from None
    return found


def _query_error(pipe: CompiledPipe | None, first: str, known: list[str] | None) -> PipeframeError:
    if pipe is not None:
        return PipeframeError("PF807", f"The query of `{pipe.name}` failed: {first}",
                              f"Check the SQL of {pipe.definition.location.path} for these parameter values "
                              f"(`pipeframe sql {pipe.name}` prints it).", http_status=500)
    return query.sql_error(first, known or ())


def _values(params: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in params.items() if k not in RESERVED_PARAMS}


def answer_result(name: str, answer: query.Answer | Answer, elapsed: float, reason: str | None,
                  data: list[dict[str, Any]] | None = None) -> EndpointResult:
    """The result of the endpoint or query `name` from an engine's answer (its rows as JSON values unless `data`
    gives them), with the time it took and why Spark answered instead of DuckDB (`reason`)."""
    return EndpointResult(name, answer.meta, _rows(answer) if data is None else data, elapsed, answer.rows_read,
                          answer.bytes_read, answer.engine, reason)


def _rows(answer: query.Answer | Answer) -> list[dict[str, Any]]:
    columns = [column for column, _ in answer.meta]
    return [{n: jsonable(v) for n, v in zip(columns, row, strict=True)} for row in answer.rows]


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
                "copy": f"a copy pipe (it fills `{pipe.target}`; run it with `pipeframe copy run {name}`)",
                "sink": f"a sink pipe (it exports its rows; run it with `pipeframe sink run {name}`)"}
        raise PipeframeError("PF802", f"`{name}` is {what.get(pipe.type or '', 'a pipe without a TYPE')}, "
                             f"not {what[kind].split(' (')[0]}.",
                             f"Set `TYPE {kind}` on its last node in {pipe.definition.location.path}, or "
                             f"query its tables with `pipeframe query`.", http_status=404)
    return pipe
