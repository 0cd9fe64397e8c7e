"""What the HTTP server serves: the current compiled + deployed Project and its Endpoints, swapped whole by `reload`
after a deploy (its own, or one another process made: `follow`), and the lock that serializes writes. No HTTP here:
routes call it."""

from __future__ import annotations

import logging
import math
import re
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import Future
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, Protocol

from pipeframe.compiler.graph import ResourceKey
from pipeframe.compiler.service import PIPE_STATS
from pipeframe.engine.conflicts import local_folder
from pipeframe.errors import PipeframeError
from pipeframe.runtime import Job as BackgroundJob
from pipeframe.server import auth
from pipeframe.server.metrics import Metrics
from pipeframe.tokens import RateLimiter, TenantToken

if TYPE_CHECKING:
    from pipeframe.compiler.compile import CompiledPipe
    from pipeframe.datafiles.model import TokenScope
    from pipeframe.endpoints import EndpointResult, Endpoints
    from pipeframe.engine.ingest import IngestResult
    from pipeframe.engine.materialize import ViewRefresh
    from pipeframe.plan.snapshot import DeployedResource, DeployedSnapshot
    from pipeframe.project import Project
    from pipeframe.templating.parameters import Parameter

log = logging.getLogger("pipeframe.server")

WAIT_SECONDS = 120.0  # how long `POST /v0/events?wait=true` waits for the views
# How often a server asks whether another process deployed: over a remote warehouse Delta is asked for the state
# table's version; over a local one its log is listed (a directory listing, in a worker thread: at the events API's
# rate, doing it for every request cost more than the request itself).
FOLLOW_SECONDS = 1.0
FOLLOW_LOCAL_SECONDS = 0.1
# Spark's words for a table or file that is gone: another process dropped or rebuilt it while a query read it.
VANISHED = ("DELTA_TABLE_NOT_FOUND", "DELTA_PATH_DOES_NOT_EXIST", "PATH_NOT_FOUND", "FILE_NOT_EXIST",
            "DELTA_FILE_NOT_FOUND", "FileNotFoundException", "is not a Delta table", "DELTA_MISSING_DELTA_TABLE")
TABLE_PATH = re.compile(r"/tables/([^/\s]+)/v\d+")  # Warehouse.table_path: which resource a path belongs to


class CompileReport(Protocol):
    """The dev loop's last compile (`pipeframe.dev.LastCompile`), as `GET /v0/dev/diagnostics` answers it."""

    def to_json(self) -> dict: ...


@dataclass(frozen=True)
class Snapshot:
    """One compiled + deployed project and its endpoints; a request uses one snapshot from start to end."""

    project: Project
    endpoints: Endpoints


class Service:
    """What the server serves: the current Project (swapped by `reload` after each deploy of the dev loop), its
    Endpoints, the token rules, and a lock that serializes writes (events, pause/resume, delete) and reloads."""

    def __init__(self, project: Project, jobs: Iterable[BackgroundJob] = (),
                 last_compile: Callable[[], CompileReport | None] | None = None) -> None:
        self.lock = threading.RLock()
        self.stopping = threading.Event()  # set on SIGINT/SIGTERM: new API requests are refused (503 PF819)
        # The process's runtime (pipeframe/runtime.py) works for the project served: views follow their sources in
        # the background; events are group-committed and wake it.
        self.runtime = project.runtime
        self.runtime.serve(lambda: self.project, jobs)
        self.materializer, self.committer = self.runtime.materializer, self.runtime.committer
        self.current: Snapshot
        self._following = threading.Lock()
        self._seen = -1  # the state store's version the current snapshot was read at
        self._checked = 0.0
        self._local = local_folder(project.config.warehouse_uri) is not None
        # Under `pipeframe dev`: the last compile of the files and its diagnostics (None: not a dev server).
        self.last_compile = last_compile
        self.limiter = RateLimiter()  # signed tokens' `limits.rps`, per token name, for the server's lifetime
        self.reload(project)
        self.metrics = Metrics(self.runtime, lambda: self.current.endpoints)  # GET /metrics: this server's registry

    def reload(self, project: Project, deployed: DeployedSnapshot | None = None) -> None:
        """Serve `project` (compiled and deployed) from now on; requests already running finish on the old one.
        `deployed`: the deployed state when the caller knows it (the dev loop), instead of reading it."""
        version = project.deployed_version()  # before the snapshot is read: a commit in between is seen next time
        with self.lock:
            self.current = Snapshot(project, project.endpoints(deployed))
            self._seen = version

    def stop(self) -> None:
        """Refuse what arrives from now on (503 PF819), then stop the runtime by its one shutdown path (see
        `Runtime.stop`): `serve`, `dev` and `run` end here."""
        self.stopping.set()
        self.runtime.stop()

    def follow_due(self) -> bool:
        """Whether it is time to look for a deploy made elsewhere (`follow`): at most every FOLLOW_LOCAL_SECONDS
        over a local warehouse, every FOLLOW_SECONDS over any other. Answered without I/O, so a request that need
        not look pays nothing."""
        return time.monotonic() - self._checked >= (FOLLOW_LOCAL_SECONDS if self._local else FOLLOW_SECONDS)

    def follow(self, now: bool = False) -> None:
        """Serve what is deployed now when another process (a `pipeframe deploy`, a views API call on another
        server, a rebuild) changed it since this snapshot was read: the folder is compiled again and the deployed
        state read fresh. Called before a request when `follow_due`; `now`: whether or not it is due (a query found
        a table gone)."""
        if not now and not self.follow_due():
            return
        self._checked = time.monotonic()
        project = self.project
        if project.deployed_version() == self._seen:
            return
        with self._following:  # one reload at a time; requests arriving meanwhile wait for its outcome
            if project is not self.project or project.deployed_version() == self._seen:
                return
            try:
                fresh = project.reload()
                if fresh.compiled.errors:  # a save half-written: keep the files served, take the new state
                    fresh = project
                fresh.warehouse.snapshot(fresh=True)  # for the writers and for Spark's answers
                self.reload(fresh)  # the read path reads what is deployed at each request
            except Exception:  # e.g. the state store read while being written: the next request tries again
                log.warning("Cannot read the deployed state yet; serving the previous one.", exc_info=True)

    @property
    def project(self) -> Project:
        return self.current.project

    # -------------------------------------------------------------------------------------- tokens
    @property
    def tokens_enforced(self) -> bool:
        return auth.enforced(self.project.config.tokens, self.project.config.signing_key)

    def authenticate(self, secret: str | None) -> auth.Caller:
        """The name of the token whose secret this is, or the signed token it is (within its rate limit); None when
        no tokens are configured (everything is open)."""
        config = self.project.config
        return auth.authenticate(config.tokens, secret, auth.Signed(config.signing_key, config.name, self.limiter))

    def authorize(self, caller: auth.Caller, key: ResourceKey, scope: TokenScope) -> None:
        auth.authorize(caller, key, self.current.endpoints.deployed.get(key), scope)

    # ------------------------------------------------------------------------------------ reading
    def readable_pipes(self, caller: auth.Caller) -> list[CompiledPipe]:
        """The deployed endpoint pipes the token may read."""
        endpoints = self.current.endpoints
        deployed = {name: endpoints.deployed.get(ResourceKey.pipe(name)) for name in endpoints.names}
        return [endpoints.compiled.pipes[name] for name, resource in deployed.items()
                if resource is not None and auth.may(caller, resource, "READ")]

    def settable(self, pipe: CompiledPipe, caller: auth.Caller) -> list[Parameter]:
        """The parameters of `pipe` a request by `caller` may set: a signed token's fixed ones are not (documented
        neither in `GET /v0/pipes` nor in the OpenAPI document it reads)."""
        fixed = caller.fixed_params(pipe.name) if isinstance(caller, TenantToken) else {}
        return [p for p in pipe.parameters if p.name not in fixed]

    def call(self, pipe: str, params: dict[str, Any], caller: auth.Caller) -> EndpointResult:
        """Run an endpoint; a table that vanished under the query (a deploy or drop elsewhere) is retried once on
        the state deployed now, then answered as a retryable 503. A signed token's fixed parameters replace what
        the request sent under those names."""
        if isinstance(caller, TenantToken):
            fixed = caller.fixed_params(pipe)
            declared = self.current.endpoints.compiled.pipes.get(pipe)
            unknown = sorted(set(fixed) - {p.name for p in declared.parameters}) if declared is not None else []
            if unknown:  # it would pin nothing, and the request's own value would be read
                raise PipeframeError("PF831", f"The signed token fixes {', '.join(map(repr, unknown))}, which "
                                     f"pipe `{pipe}` does not take.", "Mint a new token with the pipe's parameter "
                                     "names (`pipeframe token create --fixed-param NAME=VALUE`).", http_status=403)
            params = {**params, **{name: query_value(v) for name, v in fixed.items()}}
        missing = ""
        for _attempt in range(2):
            current = self.current
            try:
                with current.endpoints.pinned():  # the token and the pipe checked against one deployed state
                    self.authorize(caller, ResourceKey.pipe(pipe), "READ")
                    return current.endpoints.run(pipe, params)
            except PipeframeError as err:
                message = err.diagnostics[0].message
                if err.code != "PF807" or not any(word in message for word in VANISHED):
                    raise
                table = TABLE_PATH.search(message)
                missing = f"The table of `{table.group(1)}`" if table else "A table"
            self.follow(now=True)
            if self.current is current:
                break
        raise PipeframeError("PF807", f"{missing} that `{pipe}` reads is missing or changed while the query ran (a "
                             "deploy, a rebuild or a drop elsewhere).",
                             "Retry in a moment; if it persists, `pipeframe status` shows the views in error and "
                             "`pipeframe recover VIEW` (POST /v0/views/VIEW/recover) rebuilds one.",
                             http_status=503)

    def log_request(self, request: Any, pipe: str, caller: auth.Caller, status: int, code: str, seconds: float,
                    result: EndpointResult | None) -> None:
        """An endpoint request answered, into `pipeframe.pipe_stats` (recorded in memory, written in the background).
        The request's thread takes only what the row needs from the request; the row is made by the writer."""
        scope = request.scope
        path, query, method, headers = scope["path"], scope["query_string"], scope["method"], scope["headers"]
        engine, read_rows, read_bytes, result_rows = ((result.engine, result.rows_read, result.bytes_read,
                                                       len(result.data)) if result is not None else (None, 0, 0, 0))
        self.runtime.service_log.request(seconds, lambda: request_fields(
            pipe, caller, status, code, path, query, method, headers, engine=engine, read_rows=read_rows,
            read_bytes=read_bytes, result_rows=result_rows))

    def request_minutes(self, minutes: int) -> list[dict]:
        """Per minute and endpoint over the last `minutes` (from `pipeframe.pipe_stats`, by the read path): requests,
        errors, and the median and 95th percentile of their durations in ms, to within 5% (counted in buckets a
        tenth of a natural log wide, so the answer's size does not grow with the requests)."""
        project = self.project
        if project.reader.snapshots.version(PIPE_STATS.path(project.config.warehouse_uri)) < 0:
            return []  # no request written yet (or a warehouse from before the service log)
        since = (datetime.now(UTC) - timedelta(minutes=minutes)).strftime("%Y-%m-%d %H:%M:%S")
        answer = project.read(
            "SELECT date_trunc('minute', start_datetime) AS minute, pipe_name, "
            f"CAST(round(ln(greatest(duration * 1000, 0.001)) * {LATENCY_BUCKETS}) AS INT) AS bucket, "
            "count(*) AS requests, sum(error) AS errors FROM pipeframe.pipe_stats "
            f"WHERE start_datetime >= TIMESTAMP '{since}' GROUP BY 1, 2, 3", limit=1_000_000)
        groups: dict[tuple[str, str], list[dict]] = {}
        for row in answer.data:
            groups.setdefault((row["minute"], row["pipe_name"]), []).append(row)
        return [{"minute": minute, "pipe_name": pipe, **latency_summary(rows)}
                for (minute, pipe), rows in sorted(groups.items())]

    # ------------------------------------------------------------------------------------ writing
    def ingest(self, datasource: str, lines: list[str], key: str | None = None,
               wait: bool = False) -> IngestResult:
        """NDJSON lines, group-committed with the other requests of the moment (quarantine, then one commit of the
        datasource). With `wait`, also until every view downstream has applied them (through cascades). The HTTP
        route does the same without holding a thread while the commit is written (`submit`, then `applied`)."""
        result = self.submit(datasource, lines, key).result()
        return self.applied(datasource, result) if wait else result

    def submit(self, datasource: str, lines: list[str], key: str | None = None) -> Future:
        """Queue the lines for the datasource's next commit; the future gives the IngestResult once committed."""
        return self.committer.submit(datasource, lines, key)

    def submit_reads(self, datasource: str, key: str | None) -> bool:
        """Whether `submit` reads the table first (its committed idempotency keys, once per datasource): then it
        must not run on the event loop."""
        return self.committer.reads_keys(datasource, key)

    def applied(self, datasource: str, result: IngestResult) -> IngestResult | None:
        """`result` once every view downstream of `datasource` has applied it (a materializer round that started
        after the commit), with each view's refresh; None when the server stopped first (the rows are committed,
        the views apply them when it runs again)."""
        if self.stopping.is_set():
            return None
        views = [v.state.name for v in self.project.materializer().downstream([datasource])]
        after = result.mark if isinstance(result.mark, int) else None
        refreshed = self.materializer.wait(views, WAIT_SECONDS, after)
        if refreshed is None and self.stopping.is_set():
            return None
        if refreshed is None:
            raise PipeframeError("PF820", f"The rows landed in `{datasource}` (version {result.version}) but its views "
                                 f"did not apply them within {WAIT_SECONDS:.0f} s.",
                                 "They will: GET /v0/views shows each view's lag. Do not send the rows again.",
                                 http_status=504)
        return replace(result, views=tuple(refreshed))

    def ingest_stats(self) -> dict:
        """Per datasource: commits, rows, rows/s, buffer depth and rejected requests (`GET /v0/ingest`)."""
        return {"datasources": self.committer.stats(), "materializer": {
            "running": self.materializer.running, "rounds": self.materializer.done}, "kafka": self.runtime.kafka.lag(),
            "s3": self.runtime.s3.state()}

    def pause(self, view: str, permanent: bool) -> None:
        with self.lock:
            self.project.pause(view, permanent)

    def resume(self, view: str) -> list[ViewRefresh]:
        with self.lock:
            return self.project.resume(view)

    def recover(self, view: str) -> list[ViewRefresh]:
        """Bring a view in error (or stale) back, as `pipeframe recover` does: retry, else rebuild it."""
        with self.lock:
            return self.project.recover(view)

    def delete_view(self, view: str, force: bool) -> list[DeployedResource]:
        """Drop a view (and with `force` what reads it); returns what was dropped."""
        with self.lock:
            before = self.current.endpoints.deployed
            result = self.project.delete_view(view, force)
            self.current.endpoints.refresh()  # dropped endpoints answer "not deployed"
            return [before[c.key] for c in result.plan.pending if c.key in before]


LATENCY_BUCKETS = 10  # buckets per unit of ln(ms): each ~10.5% wide


def latency_summary(buckets: list[dict]) -> dict:
    """Requests, errors, p50_ms and p95_ms of one minute of one endpoint from its rows per duration bucket."""
    total = sum(b["requests"] for b in buckets)
    ordered = sorted(buckets, key=lambda b: b["bucket"])

    def percentile(p: float) -> float:
        seen = 0
        for b in ordered:
            seen += b["requests"]
            if seen >= p * total:
                return round(math.exp(b["bucket"] / LATENCY_BUCKETS), 3)
        return round(math.exp(ordered[-1]["bucket"] / LATENCY_BUCKETS), 3)

    return {"requests": total, "errors": sum(b["errors"] or 0 for b in buckets), "p50_ms": percentile(0.5),
            "p95_ms": percentile(0.95)}


def request_fields(pipe: str, caller: auth.Caller, status: int, code: str, path: str, query: bytes, method: str,
                   headers: list[tuple[bytes, bytes]], **result: Any) -> dict:
    """A request's columns of `pipeframe.pipe_stats` (engine/servicelog.py `request_row`): the parameters the pipe ran
    with (a signed token's fixed ones, not what the request sent under their names) without the token, and its URL
    with the token hidden."""
    from starlette.datastructures import Headers, QueryParams

    text = query.decode("latin-1")
    sent = QueryParams(text)
    parameters = {k: ",".join(sent.getlist(k)) for k in sent if k != "token"}
    if isinstance(caller, TenantToken):
        for name, value in caller.fixed_params(pipe).items():
            fixed = query_value(value)
            parameters[name] = fixed if isinstance(fixed, str) else ",".join(fixed)
    told = Headers(raw=headers)
    return {"pipe": pipe, "status": status, "token_name": auth.caller_name(caller), "method": method,
            "url": auth.hidden(path + (f"?{text}" if text else "")), "parameters": parameters, "error_code": code,
            "user_agent": told.get("user-agent", ""), "request_id": told.get("x-request-id", ""), **result}


def query_value(value: Any) -> str | list[str]:
    """A fixed parameter of a signed token (a JSON value) as a query string carries it, so it is validated and
    rendered by the pipe's typed parameter like any value sent: `true`/`false`, a list's items, numbers as text."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        return [str(query_value(item)) for item in value]
    return "" if value is None else str(value)
