"""The HTTP API of `pipeframe serve` and `pipeframe dev`: Tinybird-compatible endpoints, the Events API, the views
API and an OpenAPI document generated from the endpoints' typed parameters, on FastAPI + uvicorn over one Project.

Every answer that is not data is JSON; every error is `{"error", "code", "hint", "parameter"}` with the status
the PipeframeError carries, and an unexpected exception is a PF999 500 (its traceback goes to the log only).
"""

from __future__ import annotations

import csv
import hmac
import io
import json
import logging
import re
import signal
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass
from importlib.metadata import PackageNotFoundError, version
from typing import TYPE_CHECKING, Any, Protocol
from urllib.parse import quote

import uvicorn
from fastapi import FastAPI, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.openapi.utils import get_openapi
from fastapi.responses import HTMLResponse, JSONResponse, Response
from pydantic import BaseModel, ConfigDict
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from pipeframe.datafiles.model import TokenScope
from pipeframe.errors import PipeframeError
from pipeframe.templating.values import FLOAT_TYPES, INT_RANGES

if TYPE_CHECKING:
    from pipeframe.compiler.compile import CompiledPipe
    from pipeframe.endpoints import EndpointResult, Endpoints
    from pipeframe.engine.ingest import IngestResult
    from pipeframe.engine.materialize import ViewRefresh
    from pipeframe.engine.warehouse import DeployedResource
    from pipeframe.project import Project
    from pipeframe.templating.parameters import Parameter

log = logging.getLogger("pipeframe.server")

ADMIN_TOKEN = "admin"  # the token of this name in pipeframe.yaml may do everything, views API included
FORMATS = {"json": "application/json", "csv": "text/csv; charset=utf-8", "ndjson": "application/x-ndjson"}
MAX_EVENTS_BYTES = 10 * 1024 * 1024  # per POST /v0/events request, as Tinybird's Events API
NOT_FOUND = frozenset({"PF701", "PF702"})  # engine errors that mean "no such resource": 404 over HTTP
TOKEN_IN_QUERY = re.compile(r"([?&]token=)[^&\s]*")


class BackgroundJob(Protocol):
    """Work that runs beside the server (e.g. COPY_SCHEDULE crons): started once it listens, stopped before it
    stops."""

    def start(self, service: Service) -> None: ...

    def stop(self) -> None: ...


@dataclass(frozen=True)
class Snapshot:
    """One compiled + deployed project and its endpoints; a request uses one snapshot from start to end."""

    project: Project
    endpoints: Endpoints


class Service:
    """What the server serves: the current Project (swapped by `reload` after each deploy of the dev loop), its
    Endpoints, the token rules, and a lock that serializes writes (events, pause/resume, delete) and reloads."""

    def __init__(self, project: Project, jobs: Iterable[BackgroundJob] = ()) -> None:
        self.lock = threading.RLock()
        self.jobs: list[BackgroundJob] = list(jobs)
        self.current: Snapshot
        self.reload(project)

    def reload(self, project: Project, deployed: Mapping[str, DeployedResource] | None = None) -> None:
        """Serve `project` (compiled and deployed) from now on; requests already running finish on the old one.
        `deployed`: the deployed state when the caller knows it (the dev loop), instead of reading it."""
        with self.lock:
            self.current = Snapshot(project, project.endpoints(deployed))

    @property
    def project(self) -> Project:
        return self.current.project

    # -------------------------------------------------------------------------------------- tokens
    @property
    def tokens_enforced(self) -> bool:
        return bool(self.project.config.tokens)

    def authenticate(self, secret: str | None) -> str | None:
        """The name of the token whose secret this is; None when no tokens are configured (everything is open)."""
        tokens = self.project.config.tokens
        if not tokens:
            return None
        if not secret:
            raise PipeframeError("PF811", "This server needs a token.",
                                 "Send `Authorization: Bearer <token>` or `?token=<token>` with a secret from "
                                 "pipeframe.yaml `tokens:`.", http_status=401)
        found = None
        for name, known in tokens.items():  # every secret is compared, in constant time
            if hmac.compare_digest(known.encode(), secret.encode()):
                found = name
        if found is None:
            raise PipeframeError("PF812", "The token is not valid.",
                                 "Use a secret listed in pipeframe.yaml `tokens:`.", http_status=401)
        return found

    def may(self, caller: str | None, resource: DeployedResource | None, scope: TokenScope) -> bool:
        """Whether the token may READ a pipe or APPEND to a datasource: it is declared there with that scope."""
        if caller is None or caller == ADMIN_TOKEN:
            return True
        return resource is not None and (caller, scope) in resource.state.tokens

    def authorize(self, caller: str | None, key: str, scope: TokenScope) -> None:
        kind, _, name = key.partition(":")
        if self.may(caller, self.current.endpoints.deployed.get(key), scope):
            return
        verb, file = ("read", f"pipes/{name}.pipe") if scope == "READ" else ("append to", f"{name}.datasource")
        raise PipeframeError("PF813", f"Token `{caller}` may not {verb} {kind} `{name}`.",
                             f'Declare `TOKEN "{caller}" {scope}` in {file} and deploy, or use a token declared '
                             "there.", http_status=403)

    def require_admin(self, caller: str | None) -> None:
        if caller is not None and caller != ADMIN_TOKEN:
            raise PipeframeError("PF813", f"Token `{caller}` may not use the views API.",
                                 f"Use the `{ADMIN_TOKEN}` token of pipeframe.yaml `tokens:`.", http_status=403)

    # ------------------------------------------------------------------------------------ reading
    def readable_pipes(self, caller: str | None) -> list[CompiledPipe]:
        """The deployed endpoint pipes the token may read."""
        endpoints = self.current.endpoints
        deployed = {name: endpoints.deployed.get(f"pipe:{name}") for name in endpoints.names}
        return [endpoints.compiled.pipes[name] for name, resource in deployed.items()
                if resource is not None and self.may(caller, resource, "READ")]

    def call(self, pipe: str, params: dict[str, Any], caller: str | None) -> EndpointResult:
        self.authorize(caller, f"pipe:{pipe}", "READ")
        return self.current.endpoints.run(pipe, params)

    # ------------------------------------------------------------------------------------ writing
    def ingest(self, datasource: str, lines: list[str]) -> IngestResult:
        """NDJSON lines through `Project.append`, as `pipeframe append` does: quarantine, then the views."""
        with self.lock:
            return self.project.append(datasource, lines)

    def pause(self, view: str, permanent: bool) -> None:
        with self.lock:
            self.project.pause(view, permanent)

    def resume(self, view: str) -> list[ViewRefresh]:
        with self.lock:
            return self.project.resume(view)

    def delete_view(self, view: str, force: bool) -> list[DeployedResource]:
        """Drop a view (and with `force` what reads it); returns what was dropped."""
        with self.lock:
            before = self.current.endpoints.deployed
            result = self.project.delete_view(view, force)
            self.current.endpoints.refresh()  # dropped endpoints now answer "not deployed"
            return [before[c.key] for c in result.plan.pending if c.key in before]


# -------------------------------------------------------------------------------------------- the app
class ViewChange(BaseModel):
    """The body of `PATCH /v0/views/{name}`."""

    model_config = ConfigDict(extra="forbid")
    paused: bool
    permanent: bool = False


def token_of(request: Request) -> str | None:
    """The secret sent as `Authorization: Bearer <secret>`, else as `?token=<secret>`."""
    scheme, _, value = request.headers.get("authorization", "").partition(" ")
    if scheme.lower() == "bearer" and value.strip():
        return value.strip()
    return request.query_params.get("token") or None


def error_body(err: PipeframeError, parameter: str | None = None) -> dict[str, Any]:
    """`parameter`: the request parameter at fault (template errors carry their own)."""
    first = err.diagnostics[0]
    body = {"error": first.message, "code": first.code, "hint": first.hint or None,
            "parameter": parameter or getattr(err, "parameter", None)}
    if len(err.diagnostics) > 1:
        body["errors"] = [d.to_json() for d in err.diagnostics]
    return body


def error_response(err: PipeframeError, parameter: str | None = None) -> JSONResponse:
    status = 404 if err.code in NOT_FOUND else err.http_status
    return JSONResponse(error_body(err, parameter), status_code=status)


def create_app(service: Service) -> FastAPI:
    """The FastAPI app over `service`: routes, error shapes and the OpenAPI document."""
    app = FastAPI(title="pipeframe", version=_version(), openapi_url=None, docs_url=None, redoc_url=None)

    @app.exception_handler(PipeframeError)
    async def pipeframe_error(_request: Request, err: PipeframeError) -> JSONResponse:
        return error_response(err)

    @app.exception_handler(RequestValidationError)
    async def invalid_request(_request: Request, err: RequestValidationError) -> JSONResponse:
        problem = err.errors()[0]
        where = [str(part) for part in problem.get("loc", ()) if part not in ("query", "body", "path")]
        error = PipeframeError("PF815", f"Invalid request: {'`' + '.'.join(where) + '`: ' if where else ''}"
                               f"{problem.get('msg', 'invalid value')}.", "See /v0/openapi.json for the request "
                               "each route takes.")
        return error_response(error, where[-1] if where else None)

    @app.exception_handler(HTTPException)
    async def no_route(request: Request, err: HTTPException) -> JSONResponse:
        error = PipeframeError("PF814", f"No route {request.method} {request.url.path} ({err.detail}).",
                               "The routes are listed at /v0/openapi.json and /docs.", http_status=err.status_code)
        return error_response(error)

    app.add_middleware(InternalErrors)

    # ------------------------------------------------------------------------------------ pipes
    @app.get("/v0/pipes", summary="List the endpoint pipes", tags=["pipes"])
    def list_pipes(request: Request) -> dict:
        """Every endpoint pipe the token may read, with its description, URL and typed parameters."""
        caller = service.authenticate(token_of(request))
        return {"pipes": [{"name": pipe.name, "description": pipe.definition.description,
                           "url": f"/v0/pipes/{pipe.name}.json", "parameters": [p.to_json() for p in pipe.parameters]}
                          for pipe in service.readable_pipes(caller)]}

    @app.get("/v0/pipes/{pipe_file}", include_in_schema=False)  # documented per pipe by `openapi_document`
    def call_pipe(pipe_file: str, request: Request) -> Response:
        name, dot, fmt = pipe_file.rpartition(".")
        if not dot or fmt not in FORMATS:
            raise PipeframeError("PF814", f"`/v0/pipes/{pipe_file}` names no format.",
                                 f"Call /v0/pipes/{name or pipe_file}.json (or .csv, .ndjson).", http_status=404)
        caller = service.authenticate(token_of(request))
        params = {}
        for key in request.query_params:
            values = request.query_params.getlist(key)
            params[key] = values[0] if len(values) == 1 else values  # repeated: an Array parameter's items
        return render(service.call(name, params, caller), fmt)

    # ----------------------------------------------------------------------------------- events
    @app.post("/v0/events", summary="Append NDJSON events to a datasource", tags=["events"],
              openapi_extra={"requestBody": {"required": True, "description": "One JSON object per line.",
                                             "content": {"application/x-ndjson": {"schema": {"type": "string"}}}}})
    async def events(request: Request, name: str = Query(description="The landing datasource")) -> dict:
        """Lands the events like `pipeframe append`: lines that do not fit the schema go to
        `<name>_quarantine` with the reason, then every view of the datasource applies the new rows."""
        caller = service.authenticate(token_of(request))
        service.authorize(caller, f"datasource:{name}", "APPEND")
        lines = (await read_body(request)).splitlines()
        if not any(line.strip() for line in lines):
            raise PipeframeError("PF815", "The request body has no events.",
                                 "Send one JSON object per line (curl --data-binary @events.ndjson).")
        result = await run_in_threadpool(service.ingest, name, lines)
        return {"successful_rows": result.accepted, "quarantined_rows": result.quarantined,
                "quarantine_reasons": list(result.reasons), "views": [asdict(v) for v in result.views]}

    # ------------------------------------------------------------------------------------ views
    def view_status(name: str) -> dict:
        [status] = service.project.status(name)
        return status.to_json()

    @app.get("/v0/views", summary="List the materialized views and their status", tags=["views"])
    def list_views(request: Request) -> dict:
        service.require_admin(service.authenticate(token_of(request)))
        return {"views": [s.to_json() for s in service.project.status()]}

    @app.get("/v0/views/{name}", summary="One view's status", tags=["views"])
    def get_view(name: str, request: Request) -> dict:
        """Status, rows, files, bytes, source vs applied version, lag, last refresh, backfill and last error."""
        service.require_admin(service.authenticate(token_of(request)))
        return view_status(name)

    @app.get("/v0/views/{name}/backfill", summary="A view's backfill progress", tags=["views"])
    def get_backfill(name: str, request: Request) -> dict:
        """`backfill` is null when no populate or rebuild is running or interrupted."""
        service.require_admin(service.authenticate(token_of(request)))
        status = view_status(name)
        return {"view": status["name"], "status": status["status"], "backfill": status["backfill"]}

    @app.patch("/v0/views/{name}", summary="Pause or resume a view", tags=["views"])
    def patch_view(name: str, change: ViewChange, request: Request) -> dict:
        """`{"paused": true}` stops applying new source rows (the watermark is kept); `{"paused": false}`
        applies everything missed and answers each refreshed view's outcome."""
        service.require_admin(service.authenticate(token_of(request)))
        refreshed = []
        if change.paused:
            service.pause(name, change.permanent)
        else:
            refreshed = [asdict(r) for r in service.resume(name)]
        return {"view": view_status(name), "refresh": refreshed}

    @app.delete("/v0/views/{name}", summary="Delete a view", tags=["views"],
                responses={409: {"description": "Other views or pipes read it (listed in `dependents`)"}})
    def delete_view(name: str, request: Request, force: bool = Query(False, description="Drop the dependents too")
                    ) -> Response:
        """Drops the view's table, as a recorded deploy. Refused (409) while views or endpoints read it, unless
        `force=true` drops them too. The files still declare them: the next `pipeframe deploy` creates them again."""
        from pipeframe.engine.lifecycle import ViewInUse

        service.require_admin(service.authenticate(token_of(request)))
        try:
            dropped = service.delete_view(name, force)
        except ViewInUse as err:
            body = {**error_body(err), "dependents": [{"name": n, "kind": k} for n, k in err.dependents]}
            return JSONResponse(body, status_code=err.http_status)
        return JSONResponse({"deleted": [{"name": r.state.name, "kind": r.state.kind} for r in dropped],
                             "note": "The project files still declare these resources: the next `pipeframe "
                                     "deploy` creates them again (and backfills the views)."})

    # ------------------------------------------------------------------------------------- docs
    @app.get("/v0/openapi.json", include_in_schema=False)
    def openapi(request: Request) -> dict:
        caller = service.authenticate(token_of(request))
        return openapi_document(app, service, service.readable_pipes(caller))

    @app.get("/docs", include_in_schema=False)
    def docs(request: Request) -> HTMLResponse:
        token = request.query_params.get("token")
        url = "/v0/openapi.json" + (f"?token={quote(token, safe='')}" if token else "")
        return get_swagger_ui_html(openapi_url=url, title=f"{service.project.config.name} · pipeframe API")

    return app


class InternalErrors:
    """An exception no route turned into an answer: a PF999 500 for the client, the traceback for the log.

    (Starlette's own 500 handler re-raises, and uvicorn then drops the keep-alive connection.)"""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def tracked(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, receive, tracked)
        except Exception:
            log.exception("PF999 internal error answering %s %s", scope["method"], scope["path"])
            if started:
                raise
            answer = JSONResponse({"error": "Internal error.", "code": "PF999", "parameter": None,
                                   "hint": "This is a pipeframe bug: the server log has the traceback; please "
                                           "report it."}, status_code=500)
            await answer(scope, receive, send)


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
        return JSONResponse(result.to_json())
    if fmt == "ndjson":
        return Response("".join(json.dumps(row) + "\n" for row in result.data), media_type=FORMATS[fmt])
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(result.columns)
    writer.writerows([csv_cell(row[c]) for c in result.columns] for row in result.data)
    return Response(out.getvalue(), media_type=FORMATS[fmt])


def csv_cell(value: Any) -> str:
    """A JSON value as one CSV cell: null is empty, booleans and nested values are spelled as in JSON."""
    if value is None:
        return ""
    if isinstance(value, bool | list | dict):
        return json.dumps(value)
    return str(value)


# ----------------------------------------------------------------------------------------- OpenAPI
def openapi_document(app: FastAPI, service: Service, pipes: list[CompiledPipe]) -> dict:
    """The routes of `app` plus one path per endpoint pipe and format, from the pipes' declared parameters.

    Built per request from the service's current project, so it follows every reload."""
    project = service.project
    doc = get_openapi(title=f"{project.config.name} (pipeframe)", version=app.version, routes=app.routes,
                      description="Endpoints, events and views of a pipeframe project.")
    components = doc.setdefault("components", {})
    components.setdefault("schemas", {})["PipeframeError"] = ERROR_SCHEMA
    if service.tokens_enforced:
        components["securitySchemes"] = {"bearer": {"type": "http", "scheme": "bearer"},
                                         "token": {"type": "apiKey", "in": "query", "name": "token"}}
        doc["security"] = [{"bearer": []}, {"token": []}]
    paths = doc.setdefault("paths", {})
    for pipe in pipes:
        for fmt in FORMATS:
            paths[f"/v0/pipes/{pipe.name}.{fmt}"] = {"get": pipe_operation(pipe, fmt)}
    return doc


ERROR_SCHEMA = {"type": "object", "properties": {
    "error": {"type": "string"}, "code": {"type": "string", "example": "PF202"},
    "hint": {"type": "string", "nullable": True}, "parameter": {"type": "string", "nullable": True}}}
ANSWER_SCHEMA = {"type": "object", "properties": {
    "meta": {"type": "array", "items": {"type": "object", "properties": {"name": {"type": "string"},
                                                                           "type": {"type": "string"}}}},
    "data": {"type": "array", "items": {"type": "object"}},
    "rows": {"type": "integer"},
    "statistics": {"type": "object", "properties": {"elapsed": {"type": "number"}, "rows_read": {"type": "integer"},
                                                    "bytes_read": {"type": "integer"}}}}}


def pipe_operation(pipe: CompiledPipe, fmt: str) -> dict:
    description = pipe.definition.description
    answer = {"json": ANSWER_SCHEMA, "csv": {"type": "string"}, "ndjson": {"type": "string"}}[fmt]
    error = {"description": "", "content": {"application/json": {"schema": {"$ref":
                                                                             "#/components/schemas/PipeframeError"}}}}
    return {
        "operationId": f"{pipe.name}_{fmt}",
        "summary": (description.splitlines() or [f"Call {pipe.name}"])[0],
        "description": description,
        "tags": ["endpoints"],
        "parameters": [parameter_spec(p) for p in pipe.parameters],
        "responses": {
            "200": {"description": f"The rows as {fmt}", "content": {FORMATS[fmt].split(";")[0]: {"schema": answer}}},
            "400": {**error, "description": "A bad or missing parameter (named in `parameter`)"},
            "401": {**error, "description": "No token, or an unknown one"},
            "403": {**error, "description": "The token may not read this pipe"},
            "404": {**error, "description": "No such endpoint, or not deployed"},
            "409": {**error, "description": "The pipe changed since the last deploy"},
        },
    }


def parameter_spec(parameter: Parameter) -> dict:
    """One declared template parameter as an OpenAPI query parameter (`x-pipeframe-type`: the declared type)."""
    declared = parameter.to_json()
    if parameter.type == "Array":
        items = value_schema(parameter.item_type or "String")
        if declared["enum"]:
            items["enum"] = declared["enum"]
        schema: dict[str, Any] = {"type": "array", "items": items}
        default = declared["default"]
        if isinstance(default, str):
            default = default.split(",")
    else:
        schema = value_schema(parameter.type)
        default = declared["default"]
        if declared["enum"]:
            schema["enum"] = declared["enum"]
    if default is not None:
        schema["default"] = default
    spec = {"name": parameter.name, "in": "query", "required": parameter.required, "schema": schema,
            "description": parameter.description, "x-pipeframe-type": parameter.type
            + (f"({parameter.item_type})" if parameter.item_type else "")}
    if parameter.type == "Array":
        spec.update(style="form", explode=False)  # comma-separated items, as Tinybird takes them
    return spec


def value_schema(kind: str) -> dict[str, Any]:
    if kind in INT_RANGES:
        low, high = INT_RANGES[kind]
        return {"type": "integer", "minimum": low, "maximum": high}
    if kind in FLOAT_TYPES:
        return {"type": "number"}
    if kind == "Boolean":
        return {"type": "boolean"}
    if kind == "Date":
        return {"type": "string", "format": "date", "example": "2024-01-01"}
    if kind.startswith("DateTime"):
        return {"type": "string", "example": "2024-01-01 00:00:00"}
    return {"type": "string"}


def _version() -> str:
    try:
        return version("pipeframe")
    except PackageNotFoundError:
        return "dev"


# ------------------------------------------------------------------------------------------ running it
@dataclass
class RunningServer:
    """A server listening in a background thread; `port` is the bound one (useful with port 0)."""

    service: Service
    server: uvicorn.Server
    thread: threading.Thread
    host: str
    port: int

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def wait(self) -> None:
        """Block until the server stops (timed joins, so Ctrl-C reaches the caller)."""
        while self.thread.is_alive():
            self.thread.join(0.5)

    def stop(self) -> None:
        for job in reversed(self.service.jobs):
            job.stop()
        self.server.should_exit = True
        self.thread.join(30)


class HideTokens(logging.Filter):
    """Access-log lines must not carry `?token=<secret>`."""

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.args, tuple):
            record.args = tuple(TOKEN_IN_QUERY.sub(r"\1***", a) if isinstance(a, str) else a for a in record.args)
        return True


def start_server(service: Service, host: str = "127.0.0.1", port: int = 7181) -> RunningServer:
    """Listen on host:port (0 picks a free port) in a background thread, then start the service's jobs."""
    config = uvicorn.Config(create_app(service), host=host, port=port, log_level="info", lifespan="off",
                            timeout_graceful_shutdown=10)
    logging.getLogger("uvicorn.error").setLevel(logging.WARNING)  # the caller prints where it listens
    access = logging.getLogger("uvicorn.access")
    if not any(isinstance(f, HideTokens) for f in access.filters):
        access.addFilter(HideTokens())
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, name=f"pipeframe-http-{port}", daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            server.should_exit = True
            raise PipeframeError("PF817", f"Cannot listen on {host}:{port}.",
                                 "Another process may use that port: pass --port with a free one (0 picks any).")
        time.sleep(0.02)
    bound = server.servers[0].sockets[0].getsockname()[1]
    running = RunningServer(service, server, thread, host, bound)
    for job in service.jobs:
        job.start(service)
    return running


def serve_forever(service: Service, host: str = "127.0.0.1", port: int = 7181,
                  on_ready: Callable[[RunningServer], None] | None = None) -> None:
    """Serve until Ctrl-C or SIGTERM, then stop cleanly."""
    running = start_server(service, host, port)
    main_thread = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, _interrupt) if main_thread else None
    try:
        if on_ready is not None:
            on_ready(running)
        running.wait()
    except KeyboardInterrupt:
        pass
    finally:
        running.stop()
        if main_thread:
            signal.signal(signal.SIGTERM, previous)


def _interrupt(_signum: int, _frame: object) -> None:
    raise KeyboardInterrupt
