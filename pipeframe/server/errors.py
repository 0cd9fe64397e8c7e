"""The error shapes of the HTTP API: every error is `{"error", "code", "hint", "parameter"}` with the status its
PipeframeError carries; request-validation and routing errors are PipeframeErrors too; an unexpected exception is a
PF999 500 (its traceback goes to the log only). No answer shows where the server keeps its files (`hide_paths`)."""

from __future__ import annotations

import logging
import os
import re
from typing import TYPE_CHECKING, Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from pipeframe.errors import PipeframeError

if TYPE_CHECKING:
    from pipeframe.project import Project
    from pipeframe.server.service import Service

log = logging.getLogger("pipeframe.server")

NOT_FOUND = frozenset({"PF701", "PF702"})  # engine errors that mean "no such resource": 404 over HTTP
RETRY_SECONDS = 1  # the Retry-After of a 503 (tables changed under a query elsewhere) or a 429 (buffer full)
# A location with a scheme (Spark writes local paths as file:/...); a closing quote, bracket or space ends it.
LOCATION = re.compile(r"\b(?:file|hdfs|s3a?|s3n|abfss?|wasbs?|gs|dbfs):/[^\s'\"`\])]*")


def hide_paths(value: Any, project: Project) -> Any:
    """`value` (a message, or an answer's JSON) with the paths of the warehouse and of the project folder, and any
    other file location, replaced: `<warehouse>/tables/x/v1`, `pipes/x.pipe`, `<path>`. Spark's messages name the
    files they failed on; a client must not learn where the server keeps them."""
    if isinstance(value, str):
        warehouse = project.config.warehouse_uri.rstrip("/")
        local = warehouse.removeprefix("file://").removeprefix("file:")
        real = os.path.realpath(local) if "://" not in local else local
        for place, name in ((warehouse, "<warehouse>"), (local, "<warehouse>"), (real, "<warehouse>"),
                            (f"{project.root}/", ""), (str(project.root), "<project>")):
            if place.strip("/"):
                value = re.sub(r"(?:file:/*)?" + re.escape(place), name, value)
        return LOCATION.sub("<path>", value)
    if isinstance(value, dict):
        return {k: hide_paths(v, project) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [hide_paths(v, project) for v in value]
    return value


def error_body(err: PipeframeError, project: Project, parameter: str | None = None) -> dict[str, Any]:
    """`parameter`: the request parameter at fault (template errors carry their own)."""
    first = err.diagnostics[0]
    body = {"error": first.message, "code": first.code, "hint": first.hint or None,
            "parameter": parameter or getattr(err, "parameter", None)}
    if len(err.diagnostics) > 1:
        body["errors"] = [d.to_json() for d in err.diagnostics]
    return hide_paths(body, project)


def status_of(err: PipeframeError) -> int:
    """The HTTP status `err` is answered with."""
    return 404 if err.code in NOT_FOUND else err.http_status


def error_response(err: PipeframeError, project: Project, parameter: str | None = None) -> JSONResponse:
    status = status_of(err)
    headers = {"Retry-After": str(RETRY_SECONDS)} if status in (429, 503) else None
    return JSONResponse(error_body(err, project, parameter), status_code=status, headers=headers)


def add_error_handlers(app: FastAPI, service: Service) -> None:
    """Answer PipeframeErrors, invalid requests, unknown routes and unexpected exceptions in the error shape."""

    def answer(err: PipeframeError, parameter: str | None = None) -> JSONResponse:
        response = error_response(err, service.project, parameter)
        service.metrics.error(err.code, response.status_code)
        return response

    @app.exception_handler(PipeframeError)
    async def pipeframe_error(_request: Request, err: PipeframeError) -> JSONResponse:
        return answer(err)

    @app.exception_handler(RequestValidationError)
    async def invalid_request(_request: Request, err: RequestValidationError) -> JSONResponse:
        problem = err.errors()[0]
        where = [str(part) for part in problem.get("loc", ()) if part not in ("query", "body", "path")]
        error = PipeframeError("PF815", f"Invalid request: {'`' + '.'.join(where) + '`: ' if where else ''}"
                               f"{problem.get('msg', 'invalid value')}.", "See /v0/openapi.json for the request "
                               "each route takes.")
        return answer(error, where[-1] if where else None)

    @app.exception_handler(HTTPException)
    async def no_route(request: Request, err: HTTPException) -> JSONResponse:
        error = PipeframeError("PF814", f"No route {request.method} {request.url.path} ({err.detail}).",
                               "The routes are listed at /v0/openapi.json and /docs.", http_status=err.status_code)
        return answer(error)

    app.add_middleware(InternalErrors, service=service)


class InternalErrors:
    """An exception no route turned into an answer: a PF999 500 for the client, the traceback for the log.

    (Starlette's own 500 handler re-raises, and uvicorn then drops the keep-alive connection.)"""

    def __init__(self, app: ASGIApp, service: Service) -> None:
        self.app = app
        self.service = service

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
            self.service.metrics.error("PF999", 500)
            answer = JSONResponse({"error": "Internal error.", "code": "PF999", "parameter": None,
                                   "hint": "This is a pipeframe bug: the server log has the traceback; please "
                                           "report it."}, status_code=500)
            await answer(scope, receive, send)
