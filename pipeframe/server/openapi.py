"""The OpenAPI document of the HTTP API, built per request: the app's routes plus one path per endpoint pipe and
format, from the pipes' declared parameters; `/docs` shows it (Swagger UI)."""

from __future__ import annotations

from importlib.resources import files
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from fastapi import FastAPI, Request
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.openapi.utils import get_openapi
from fastapi.responses import HTMLResponse
from fastapi.staticfiles import StaticFiles

from pipeframe.server import auth
from pipeframe.server.routes import FORMATS
from pipeframe.templating.values import FLOAT_TYPES, INT_RANGES

if TYPE_CHECKING:
    from pipeframe.compiler.compile import CompiledPipe
    from pipeframe.server.service import Service
    from pipeframe.templating.parameters import Parameter


def add_docs_routes(app: FastAPI, service: Service) -> None:
    """`GET /v0/openapi.json` (the pipes the token may read) and `GET /docs`."""

    @app.get("/v0/openapi.json", include_in_schema=False)
    def openapi(request: Request) -> dict:
        caller = service.authenticate(auth.token_of(request))
        return openapi_document(app, service, [(pipe, service.settable(pipe, caller))
                                               for pipe in service.readable_pipes(caller)])

    # Swagger UI's files come from the fastapi-offline package, not a CDN: /docs works without internet.
    app.mount(DOCS_ASSETS, StaticFiles(directory=str(files("fastapi_offline") / "static")), name="docs-assets")

    @app.get("/docs", include_in_schema=False)
    def docs(request: Request) -> HTMLResponse:
        token = request.query_params.get("token")
        url = "/v0/openapi.json" + (f"?token={quote(token, safe='')}" if token else "")
        return get_swagger_ui_html(openapi_url=url, title=f"{service.project.config.name} · pipeframe API",
                                   swagger_js_url=f"{DOCS_ASSETS}/swagger-ui-bundle.js",
                                   swagger_css_url=f"{DOCS_ASSETS}/swagger-ui.css",
                                   swagger_favicon_url=f"{DOCS_ASSETS}/favicon.png")


DOCS_ASSETS = "/docs/assets"


def openapi_document(app: FastAPI, service: Service, pipes: list[tuple[CompiledPipe, list[Parameter]]]) -> dict:
    """The routes of `app` plus one path per endpoint pipe and format, with the parameters a request may set.

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
    for pipe, parameters in pipes:
        for fmt in FORMATS:
            paths[f"/v0/pipes/{pipe.name}.{fmt}"] = {"get": pipe_operation(pipe, parameters, fmt)}
    return doc


ERROR_SCHEMA = {"type": "object", "properties": {
    "error": {"type": "string"}, "code": {"type": "string", "example": "PF202"},
    "hint": {"type": ["string", "null"]}, "parameter": {"type": ["string", "null"]}}}

ANSWER_SCHEMA = {"type": "object", "properties": {
    "meta": {"type": "array", "items": {"type": "object", "properties": {"name": {"type": "string"},
                                                                           "type": {"type": "string"}}}},
    "data": {"type": "array", "items": {"type": "object"}},
    "rows": {"type": "integer"},
    "statistics": {"type": "object", "properties": {"elapsed": {"type": "number"}, "rows_read": {"type": "integer"},
                                                    "bytes_read": {"type": "integer"}}}}}


def pipe_operation(pipe: CompiledPipe, parameters: list[Parameter], fmt: str) -> dict:
    description = pipe.definition.description
    answer = {"json": ANSWER_SCHEMA, "csv": {"type": "string"}, "ndjson": {"type": "string"}}[fmt]
    error = {"description": "", "content": {"application/json": {"schema": {"$ref":
                                                                             "#/components/schemas/PipeframeError"}}}}
    return {
        "operationId": f"{pipe.name}_{fmt}",
        "summary": (description.splitlines() or [f"Call {pipe.name}"])[0],
        "description": description,
        "tags": ["endpoints"],
        "parameters": [parameter_spec(p) for p in parameters],
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
