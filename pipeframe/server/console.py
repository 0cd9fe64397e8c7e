"""The web console at `/ui`: static files shipped in the package (`console/`: HTML, CSS and plain JavaScript, no
CDN), which call the JSON API with the token the user types in. The files are public; the data is not."""

from __future__ import annotations

from importlib.resources import files

from fastapi import FastAPI
from fastapi.responses import RedirectResponse
from fastapi.staticfiles import StaticFiles
from starlette.responses import Response
from starlette.types import Scope

CONSOLE = "/ui"
# The console runs only its own files: no inline script or style, no other origin (a row's value shown in a page
# cannot become code), and no page may frame it.
HEADERS = {"Content-Security-Policy": "default-src 'self'; img-src 'self' data:; object-src 'none'; base-uri 'none'; "
                                      "form-action 'self'; frame-ancestors 'none'",
           "X-Content-Type-Options": "nosniff", "Referrer-Policy": "no-referrer"}


class ConsoleFiles(StaticFiles):
    """The console's files, each answered with `HEADERS`."""

    async def get_response(self, path: str, scope: Scope) -> Response:
        response = await super().get_response(path, scope)
        response.headers.update(HEADERS)
        return response


def add_console(app: FastAPI) -> None:
    """`GET /ui/` (index.html) and its assets under /ui/."""

    @app.get(CONSOLE, include_in_schema=False)
    def console() -> RedirectResponse:
        return RedirectResponse(f"{CONSOLE}/")

    app.mount(CONSOLE, ConsoleFiles(directory=str(files("pipeframe.server") / "console"), html=True), name="console")
