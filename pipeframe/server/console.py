"""The web console at `/ui`: static files shipped in the package (`console/`: HTML, CSS and plain JavaScript, no
CDN), which call the JSON API with the token the user types in. The files are public; the data is not."""

from __future__ import annotations

from importlib.resources import files

from fastapi import FastAPI
from fastapi.responses import RedirectResponse
from fastapi.staticfiles import StaticFiles

CONSOLE = "/ui"


def add_console(app: FastAPI) -> None:
    """`GET /ui/` (index.html) and its assets under /ui/."""

    @app.get(CONSOLE, include_in_schema=False)
    def console() -> RedirectResponse:
        return RedirectResponse(f"{CONSOLE}/")

    app.mount(CONSOLE, StaticFiles(directory=str(files("pipeframe.server") / "console"), html=True), name="console")
