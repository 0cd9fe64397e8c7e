"""The HTTP app of `pipeframe serve` and `pipeframe dev`: the FastAPI app over a Service (error shapes, routes, the
OpenAPI document) and the uvicorn server that runs it in a background thread."""

from __future__ import annotations

import logging
import signal
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version

import uvicorn
from fastapi import FastAPI
from starlette.concurrency import run_in_threadpool
from starlette.types import ASGIApp, Receive, Scope, Send

from pipeframe.errors import PipeframeError
from pipeframe.server.auth import HideTokens
from pipeframe.server.console import add_console
from pipeframe.server.errors import add_error_handlers, error_response
from pipeframe.server.openapi import add_docs_routes
from pipeframe.server.routes import (
    add_event_routes,
    add_metrics_route,
    add_pipe_routes,
    add_project_routes,
    add_service_routes,
    add_view_routes,
)
from pipeframe.server.service import Service

log = logging.getLogger("pipeframe.server")

# Once stopping, how long the requests in flight may take to be answered before uvicorn cancels them. Idle connections
# close at once, so this costs nothing when none is in flight; a wait=true request may be starting Spark for its view
# refresh (10-30 s on a small machine) and must still be answered, as committed.
GRACEFUL_SECONDS = 60


def create_app(service: Service) -> FastAPI:
    """The FastAPI app over `service`: routes, error shapes and the OpenAPI document."""
    app = FastAPI(title="pipeframe", version=_version(), openapi_url=None, docs_url=None, redoc_url=None)
    app.add_middleware(FollowDeploys, service=service)
    app.add_middleware(RefuseWhileStopping, service=service)  # outside FollowDeploys: a stopping server reads nothing
    add_error_handlers(app, service)  # outermost: what fails while following is answered in the error shape too
    add_pipe_routes(app, service)
    add_event_routes(app, service)
    add_view_routes(app, service)
    add_service_routes(app, service)
    add_metrics_route(app, service)
    add_project_routes(app, service)
    add_docs_routes(app, service)
    add_console(app)
    return app


class FollowDeploys:
    """Before an API request, serve what is deployed now: another process may have deployed, dropped or rebuilt
    since (`Service.follow`, when due: not for every request of a stream of events)."""

    def __init__(self, app: ASGIApp, service: Service) -> None:
        self.app = app
        self.service = service

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["path"].startswith("/v0/") and self.service.follow_due():
            await run_in_threadpool(self.service.follow)
        await self.app(scope, receive, send)


class RefuseWhileStopping:
    """Once the server is stopping (`Service.stopping`), an API request that arrives is answered 503 PF819 with
    Retry-After; the requests already running are answered with their real outcome."""

    def __init__(self, app: ASGIApp, service: Service) -> None:
        self.app = app
        self.service = service

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["path"].startswith("/v0/") and self.service.stopping.is_set():
            refused = PipeframeError("PF819", "The server is stopping: it takes no more requests.",
                                     "Send the request again once the server is back (after Retry-After seconds).",
                                     http_status=503)
            # Answered here: the app's exception handlers sit inside this middleware.
            self.service.metrics.error(refused.code, refused.http_status)
            await error_response(refused, self.service.project)(scope, receive, send)
            return
        await self.app(scope, receive, send)


def _version() -> str:
    try:
        return version("pipeframe")
    except PackageNotFoundError:
        return "dev"


@dataclass
class RunningServer:
    """A server listening in a background thread; `port` is the bound one (useful with port 0)."""

    service: Service
    server: uvicorn.Server
    finished: threading.Event  # set once the server's thread has ended
    host: str
    port: int

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def wait(self) -> None:
        """Block until the server stops; Ctrl-C reaches the caller. Waits on `finished`, never on `thread.join`: in
        CPython before 3.13 a KeyboardInterrupt raised inside `join` releases the thread's state lock as if the thread
        had ended, so every later `join` returns at once and the process would exit with answers still unsent."""
        while not self.finished.wait(0.5):
            pass

    def stop(self) -> None:
        """The one shutdown path of `serve` and `dev`: refuse new requests (503 PF819), commit what the group
        committer holds and answer its waiters, let the refresh under way finish, then close the HTTP server once
        the answers of the requests in flight are sent (uvicorn waits for open connections, up to
        GRACEFUL_SECONDS; the wait for `finished` allows for that)."""
        self.service.stop()
        self.server.should_exit = True
        self.finished.wait(GRACEFUL_SECONDS + 5)
        self.service.runtime.service_log.flush()  # the requests answered while it shut down


def start_server(service: Service, host: str = "127.0.0.1", port: int = 7181) -> RunningServer:
    """Listen on host:port (0 picks a free port) in a background thread, then start the service's jobs."""
    config = uvicorn.Config(create_app(service), host=host, port=port, log_level="info", lifespan="off",
                            timeout_graceful_shutdown=GRACEFUL_SECONDS)
    logging.getLogger("uvicorn.error").setLevel(logging.WARNING)  # the caller prints where it listens
    access = logging.getLogger("uvicorn.access")
    if not any(isinstance(f, HideTokens) for f in access.filters):
        access.addFilter(HideTokens())
    server = uvicorn.Server(config)
    finished = threading.Event()

    def run() -> None:
        try:
            server.run()
        finally:
            finished.set()

    threading.Thread(target=run, name=f"pipeframe-http-{port}", daemon=True).start()
    deadline = time.monotonic() + 30
    while not server.started:
        if finished.is_set() or time.monotonic() > deadline:
            server.should_exit = True
            raise PipeframeError("PF817", f"Cannot listen on {host}:{port}.",
                                 "Another process may use that port: pass --port with a free one (0 picks any).")
        time.sleep(0.02)
    bound = server.servers[0].sockets[0].getsockname()[1]
    running = RunningServer(service, server, finished, host, bound)
    service.runtime.start(service)
    return running


def yield_to_commits(service: Service) -> None:
    """A process that serves (`serve`, `dev`, `run`) runs its embedded Spark JVM's threads nicer than its own
    (`ingest.spark_nice`): view maintenance on both cores held group commits and answers back."""
    from pipeframe.engine.session import yield_cpu

    project = service.project
    yield_cpu(project.spark, project.config.ingest.spark_nice)


def serve_forever(service: Service, host: str = "127.0.0.1", port: int = 7181,
                  on_ready: Callable[[RunningServer], None] | None = None) -> None:
    """Serve until Ctrl-C or SIGTERM, then stop cleanly."""
    running = start_server(service, host, port)
    yield_to_commits(service)
    with interrupted_cleanly():
        try:
            if on_ready is not None:
                on_ready(running)
            running.wait()
        except KeyboardInterrupt:
            pass
        finally:
            running.stop()


RUN_LOOK_S = 0.5  # how often `run` asks the service to look for a deploy made elsewhere (it decides when to read)


def run_forever(service: Service, on_ready: Callable[[], None] | None = None) -> None:
    """`pipeframe run`: the service's runtime without HTTP (views kept up to date, connectors consumed, scheduled
    jobs) until Ctrl-C or SIGTERM. A thread follows deploys made elsewhere, as a server does between requests (a
    failed look is logged and tried again); the main thread only waits, so Ctrl-C never lands inside a reload.
    Then `serve`'s shutdown: what the consumers and the committer hold lands, the refresh under way finishes."""
    service.runtime.start(service)
    yield_to_commits(service)

    def follow() -> None:
        while not service.stopping.wait(RUN_LOOK_S):
            try:
                service.follow()
            except Exception:  # e.g. the state store unreadable for a moment: the next look tries again
                log.warning("Cannot look for a deploy made elsewhere; trying again.", exc_info=True)

    follower = threading.Thread(target=follow, name="pipeframe-run-follow", daemon=True)
    with interrupted_cleanly():
        try:
            follower.start()
            if on_ready is not None:
                on_ready()
            while not service.stopping.wait(RUN_LOOK_S):
                pass
        except KeyboardInterrupt:
            pass
        finally:
            service.stopping.set()
            follower.join()
            service.stop()


@contextmanager
def interrupted_cleanly() -> Iterator[None]:
    """Within: Ctrl-C and SIGTERM raise KeyboardInterrupt in the main thread, and nothing else. Pyspark's own SIGINT
    handler (installed when the session starts) also cancels every Spark job: a view refresh under way would fail
    half-way instead of finishing before the process stops."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {signum: signal.signal(signum, _interrupt) for signum in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def _interrupt(_signum: int, _frame: object) -> None:
    raise KeyboardInterrupt
