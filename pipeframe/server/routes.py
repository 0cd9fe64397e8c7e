"""The routes of the HTTP API: endpoint pipes (`/v0/pipes`), the Events API (`/v0/events`) and the views API
(`/v0/views`), each a thin call into the Service; endpoint answers written as json, csv or ndjson."""

from __future__ import annotations

import asyncio
import csv
import io
import json
import math
import time
from collections.abc import Iterable
from dataclasses import asdict
from typing import TYPE_CHECKING, Any

import orjson
from fastapi import FastAPI, Header, Query, Request
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST
from pydantic import BaseModel, ConfigDict, StrictBool
from starlette.concurrency import run_in_threadpool

from pipeframe.compiler.graph import ResourceKey
from pipeframe.errors import PipeframeError
from pipeframe.server import auth
from pipeframe.server.errors import error_body, hide_paths, status_of

if TYPE_CHECKING:
    from pipeframe.endpoints import EndpointResult
    from pipeframe.engine.materialize import ViewRefresh
    from pipeframe.server.service import Service

FORMATS = {"json": "application/json", "csv": "text/csv; charset=utf-8", "ndjson": "application/x-ndjson"}

MAX_EVENTS_BYTES = 10 * 1024 * 1024  # per POST /v0/events request, as Tinybird's Events API


def add_pipe_routes(app: FastAPI, service: Service) -> None:
    """`GET /v0/pipes` (the readable endpoint pipes) and `GET /v0/pipes/NAME.json|.csv|.ndjson`."""

    @app.get("/v0/pipes", summary="List the endpoint pipes", tags=["pipes"])
    def list_pipes(request: Request) -> dict:
        """Every endpoint pipe the token may read, with its description, URL and typed parameters."""
        caller = service.authenticate(auth.token_of(request))
        return {"pipes": [{"name": pipe.name, "description": pipe.definition.description,
                           "url": f"/v0/pipes/{pipe.name}.json",
                           "parameters": [p.to_json() for p in service.settable(pipe, caller)]}
                          for pipe in service.readable_pipes(caller)]}

    @app.get("/v0/pipes/{pipe_file}", include_in_schema=False)  # documented per pipe by `openapi_document`
    def call_pipe(pipe_file: str, request: Request) -> Response:
        started = time.perf_counter()
        name, dot, fmt = pipe_file.rpartition(".")
        engine, status, code, caller, result = None, 500, "PF999", None, None
        try:
            if not dot or fmt not in FORMATS:
                raise PipeframeError("PF814", f"`/v0/pipes/{pipe_file}` names no format.",
                                     f"Call /v0/pipes/{name or pipe_file}.json (or .csv, .ndjson).", http_status=404)
            caller = service.authenticate(auth.token_of(request))
            params = {}
            for key in request.query_params:
                values = request.query_params.getlist(key)
                params[key] = values[0] if len(values) == 1 else values  # repeated: an Array parameter's items
            result = service.call(name, params, caller)
            engine, status, code = result.engine, 200, ""
            return render(result, fmt)
        except PipeframeError as err:
            status, code = status_of(err), err.code
            raise
        finally:
            seconds = time.perf_counter() - started
            service.metrics.endpoint(name, status, engine, seconds)
            service.log_request(request, name, caller, status, code, seconds, result)


def add_event_routes(app: FastAPI, service: Service) -> None:
    """`POST /v0/events?name=DATASOURCE`: NDJSON lines group-committed (Tinybird's Events API); `GET /v0/ingest`."""

    @app.post("/v0/events", summary="Append NDJSON events to a datasource", tags=["events"], status_code=202,
              responses={200: {"description": "With wait=true: committed, and applied by every dependent view"},
                         202: {"description": "Committed to the datasource; the views apply them in the background"},
                         429: {"description": "The datasource's commit buffer is full: retry after Retry-After"}},
              openapi_extra={"requestBody": {"required": True, "description": "One JSON object per line.",
                                             "content": {"application/x-ndjson": {"schema": {"type": "string"}}}}})
    async def events(request: Request, name: str = Query(description="The landing datasource"),
                     wait: bool = Query(False, description="Answer once every dependent view applied the rows"),
                     idempotency_key: str | None = Header(None, max_length=200, description=(
                         "Send a retried request with the same key: it lands once (also after a restart)"))
                     ) -> Response:
        """Lands the events like `pipeframe append`: lines that do not fit the schema go to `<name>_quarantine`
        with the reason, the others are committed to the datasource together with the other requests of the
        moment (one Delta commit). Answers 202 once committed; with `wait=true`, 200 once every view downstream
        (through cascades) has applied them."""
        caller = service.authenticate(auth.token_of(request))
        service.authorize(caller, ResourceKey.datasource(name), "APPEND")
        lines = (await read_body(request)).splitlines()
        if not any(line.strip() for line in lines):
            raise PipeframeError("PF815", "The request body has no events.",
                                 "Send one JSON object per line (curl --data-binary @events.ndjson).")
        # The commit is awaited, not waited for in a thread: every request waiting may join one group commit. Queueing
        # the lines takes no I/O (a lock held only for in-memory work) and runs here, unless the datasource's
        # committed keys must be read first.
        if service.submit_reads(name, idempotency_key):
            future = await run_in_threadpool(service.submit, name, lines, idempotency_key)
        else:
            future = service.submit(name, lines, idempotency_key)
        result = await asyncio.wrap_future(future)
        # None without wait=true, and when the server stopped before the views applied the rows: answered as
        # committed (202), without the views.
        applied = await run_in_threadpool(service.applied, name, result) if wait else None
        result = applied or result
        answer = {"successful_rows": result.accepted, "quarantined_rows": result.quarantined,
                  "quarantine_reasons": list(result.reasons), "version": result.version}
        if applied is not None:
            answer["views"] = [asdict(v) for v in result.views]
            if problems := view_problems(result.views):
                answer["problems"] = problems
        headers = {"Idempotent-Replayed": "true"} if result.replayed else None
        return JSONResponse(hide_paths(answer, service.project), status_code=202 if applied is None else 200,
                            headers=headers)

    @app.get("/v0/ingest", summary="Ingestion figures per datasource", tags=["events"])
    def ingest_stats(request: Request) -> dict:
        """Per datasource since the server started: commits, requests, rows, rows/s over the last minute, requests
        waiting (buffer depth) and bytes, rejected (429), failed and replayed requests, the last commit."""
        auth.require_admin(service.authenticate(auth.token_of(request)))
        return service.ingest_stats()


def add_metrics_route(app: FastAPI, service: Service) -> None:
    """`GET /metrics`: the server's Prometheus metrics (the admin token, when tokens are enforced)."""

    @app.get("/metrics", summary="Prometheus metrics", tags=["operations"],
             responses={200: {"content": {CONTENT_TYPE_LATEST: {}}, "description": "Prometheus' text format"}})
    def metrics(request: Request) -> Response:
        """Endpoint requests and latency, events and rows ingested per datasource, buffer depth, rejections and
        errors by PF code, views' lag and refresh rounds (docs/operations.md). Read from memory: no Spark job."""
        auth.require_admin(service.authenticate(auth.token_of(request)), "/metrics")
        return Response(service.metrics.exposition(), media_type=CONTENT_TYPE_LATEST)


def add_project_routes(app: FastAPI, service: Service) -> None:
    """What the web console reads besides the other routes (the admin token): the project's graph, a datasource's
    quarantined rows and, under `pipeframe dev`, the last compile's diagnostics."""
    from pipeframe.compiler.diagram import diagram

    @app.get("/v0/graph", summary="The project's graph", tags=["operations"])
    def graph(request: Request) -> dict:
        """Every datasource, view target and pipe (`kind`: datasource, view target, materialized, endpoint, copy or
        pipe), dependencies first, and every edge in the direction data flows, with what it means (`relation`):
        `triggers` (new rows of the source are applied by the materialized pipe), `lookup` (a dimension it joins),
        `writes` (a materialized pipe into its target), `copies` (a copy pipe into its target) or `reads`."""
        auth.require_admin(service.authenticate(auth.token_of(request)))
        return diagram(service.project.compiled).to_json()

    @app.get("/v0/datasources/{name}/quarantine", summary="A datasource's quarantined rows", tags=["events"])
    def quarantine(name: str, request: Request,
                   limit: int = Query(100, ge=1, le=10_000, description="At most this many rows, newest first")
                   ) -> Response:
        """The rows that did not fit the datasource's schema (`<name>_quarantine`): the raw row, the reason, where it
        came from and when, newest first; answered as an endpoint is (`meta`, `data`, `rows`, `statistics`)."""
        auth.require_admin(service.authenticate(auth.token_of(request)))
        project = service.project
        answer = finite(project.quarantine(name, limit).to_json())
        for row in answer["data"]:  # the raw lines as they were refused; only where they came from is hidden
            if isinstance(row.get("source"), str):
                row["source"] = hide_paths(row["source"], project)
        return JSONResponse(answer)

    if service.last_compile is not None:
        last_compile = service.last_compile

        @app.get("/v0/dev/diagnostics", summary="The last compile's diagnostics (pipeframe dev)", tags=["operations"])
        def diagnostics(request: Request) -> dict:
            """When the files were last compiled and every error and warning it reported, each with its file, line,
            column, code, message and fix. Only `pipeframe dev` serves this route."""
            auth.require_admin(service.authenticate(auth.token_of(request)))
            report = last_compile()
            if report is None:
                return {"compiled_at": None, "ok": True, "errors": 0, "warnings": 0, "diagnostics": []}
            return hide_paths(report.to_json(), service.project)


def view_problems(refreshed: Iterable[ViewRefresh]) -> list[dict]:
    """The views a write left behind (in error, or stale), each with its message and the route that fixes it."""
    return [{"view": r.view, "status": r.outcome, "message": r.message, "fix": f"POST /v0/views/{r.view}/recover"}
            for r in refreshed if r.outcome in ("error", "stale")]


class ViewChange(BaseModel):
    """The body of `PATCH /v0/views/{name}`: JSON booleans only ("yes", "true" or 1 is a 400 naming the field)."""

    model_config = ConfigDict(extra="forbid")
    paused: StrictBool
    permanent: StrictBool = False


def add_service_routes(app: FastAPI, service: Service) -> None:
    """`/v0/service/requests`: endpoint latency per minute from `pipeframe.pipe_stats` (the admin token only)."""

    @app.get("/v0/service/requests", summary="Endpoint requests and latency per minute", tags=["operations"])
    def service_requests(request: Request, minutes: int = Query(60, ge=1, le=7 * 24 * 60,
                                                                description="How far back")) -> dict:
        """Per minute and endpoint pipe: requests, errors, p50_ms and p95_ms (to within 5%), from the service
        datasource `pipeframe.pipe_stats` (written every `service_log.flush_ms`)."""
        auth.require_admin(service.authenticate(auth.token_of(request)), "the service datasources")
        return {"data": service.request_minutes(minutes)}


def add_view_routes(app: FastAPI, service: Service) -> None:
    """`/v0/views`: each view's status and backfill, pause/resume, delete (the admin token only)."""

    def view_status(name: str) -> dict:
        [status] = service.project.status(name)
        return hide_paths({**status.to_json(), **service.materializer.view_json(status.name)}, service.project)

    def refreshes(refreshed: Iterable[ViewRefresh]) -> list[dict]:
        return hide_paths([asdict(r) for r in refreshed], service.project)

    @app.get("/v0/views", summary="List the materialized views and their status", tags=["views"])
    def list_views(request: Request) -> dict:
        auth.require_admin(service.authenticate(auth.token_of(request)))
        return {"views": hide_paths([s.to_json() for s in service.project.status()], service.project)}

    @app.get("/v0/views/{name}", summary="One view's status", tags=["views"])
    def get_view(name: str, request: Request) -> dict:
        """Status, rows, files, bytes, source vs applied version, lag, last refresh, backfill and last error."""
        auth.require_admin(service.authenticate(auth.token_of(request)))
        return view_status(name)

    @app.get("/v0/views/{name}/backfill", summary="A view's backfill progress", tags=["views"])
    def get_backfill(name: str, request: Request) -> dict:
        """`backfill` is null when no populate or rebuild is running or interrupted."""
        auth.require_admin(service.authenticate(auth.token_of(request)))
        status = view_status(name)
        return {"view": status["name"], "status": status["status"], "backfill": status["backfill"]}

    @app.patch("/v0/views/{name}", summary="Pause or resume a view", tags=["views"])
    def patch_view(name: str, change: ViewChange, request: Request) -> dict:
        """`{"paused": true}` stops applying new source rows (the watermark is kept); `{"paused": false}`
        applies everything missed and answers each refreshed view's outcome."""
        auth.require_admin(service.authenticate(auth.token_of(request)))
        refreshed = []
        if change.paused:
            service.pause(name, change.permanent)
        else:
            refreshed = refreshes(service.resume(name))
        return {"view": view_status(name), "refresh": refreshed}

    @app.post("/v0/views/{name}/recover", summary="Recover a view in error or stale", tags=["views"])
    def recover_view(name: str, request: Request) -> dict:
        """Retries applying the source rows a failed view missed and, when that cannot work (its table is damaged,
        or it is stale), rebuilds it from its source; answers its status and each refreshed view's outcome, as
        `pipeframe recover` does."""
        auth.require_admin(service.authenticate(auth.token_of(request)))
        refreshed = refreshes(service.recover(name))
        return {"view": view_status(name), "refresh": refreshed}

    @app.delete("/v0/views/{name}", summary="Delete a view", tags=["views"],
                responses={409: {"description": "Other views or pipes read it (listed in `dependents`)"}})
    def delete_view(name: str, request: Request, force: bool = Query(False, description="Drop the dependents too")
                    ) -> Response:
        """Drops the view's table, as a recorded deploy. Refused (409) while views or endpoints read it, unless
        `force=true` drops them too. The files still declare them: the next `pipeframe deploy` creates them again."""
        from pipeframe.plan.diff import ViewInUse

        auth.require_admin(service.authenticate(auth.token_of(request)))
        try:
            dropped = service.delete_view(name, force)
        except ViewInUse as err:
            body = {**error_body(err, service.project), "dependents": [{"name": n, "kind": k} for n, k in err.dependents]}
            service.metrics.error(err.code, err.http_status)
            return JSONResponse(body, status_code=err.http_status)
        return JSONResponse({"deleted": [{"name": r.state.name, "kind": r.state.kind} for r in dropped],
                             "note": "The project files still declare these resources: the next `pipeframe "
                                     "deploy` creates them again (and backfills the views)."})


async def read_body(request: Request) -> str:
    """The request body as text, refused past MAX_EVENTS_BYTES without reading the rest."""
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > MAX_EVENTS_BYTES:
            raise PipeframeError("PF816", f"The request body is larger than {MAX_EVENTS_BYTES // 2**20} MiB.",
                                 "Split the events into several requests.", http_status=413)
        chunks.append(chunk)
    try:
        return b"".join(chunks).decode("utf-8")
    except UnicodeDecodeError:
        raise PipeframeError("PF815", "The request body is not UTF-8 text.",
                             "Send NDJSON encoded as UTF-8.") from None


def render(result: EndpointResult, fmt: str) -> Response:
    """An endpoint answer as Tinybird formats it: json (meta, data, rows, statistics), csv with a header row,
    or ndjson (one object per line)."""
    if fmt == "json":
        body = result.to_json()
        try:  # orjson writes NaN and infinities as null, as `finite` does
            return Response(orjson.dumps(body), media_type=FORMATS[fmt])
        except orjson.JSONEncodeError:  # an integer past 64 bits (a DECIMAL(38, 0)): the standard library writes it
            return JSONResponse(finite(body))
    if fmt == "ndjson":
        return Response("".join(json.dumps(finite(row)) + "\n" for row in result.data), media_type=FORMATS[fmt])
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(result.columns)
    writer.writerows([csv_cell(row[c]) for c in result.columns] for row in result.data)
    return Response(out.getvalue(), media_type=FORMATS[fmt])


def finite(value: Any) -> Any:
    """NaN and ±Infinity as null, as ClickHouse's JSON formats write them: JSON has no such numbers."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [finite(v) for v in value]
    return value


def csv_cell(value: Any) -> str:
    """A JSON value as one CSV cell: null is empty, booleans and nested values are spelled as in JSON."""
    if value is None:
        return ""
    if isinstance(value, bool | list | dict):
        return json.dumps(value)
    return str(value)
