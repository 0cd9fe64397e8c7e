"""The Prometheus metrics of one server (`GET /metrics`, text exposition format, prometheus_client): endpoint requests
and latency, HTTP errors by PF code and view refresh rounds counted as they happen, in a registry of the server's own
(two servers in one process do not mix); ingest and view lag read from the runtime's in-memory figures at scrape time.

Labels stay bounded: a pipe label is an endpoint pipe of the served project (any other name is `_other`), never a
URL or a parameter value; datasources and views are the deployed ones."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

if TYPE_CHECKING:
    from pipeframe.endpoints import Endpoints
    from pipeframe.engine.refresh import ViewRefresh
    from pipeframe.runtime import Runtime

OTHER_PIPE = "_other"  # the pipe label of a request naming no endpoint pipe of the project
NO_ENGINE = "none"  # the engine label of a request answered before any engine ran (a bad token, parameter...)
LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
ROUND_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0)
ENDPOINT_LABELS = ("pipe", "status", "engine")
INGEST_FIGURES = (
    (CounterMetricFamily, "requests", "Events API and append requests committed"),
    (CounterMetricFamily, "rows", "Rows committed (quarantined lines not counted)"),
    (CounterMetricFamily, "commits", "Group commits written"),
    (CounterMetricFamily, "quarantined_rows", "Lines sent to the datasource's quarantine"),
    (CounterMetricFamily, "rejected_requests", "Requests refused with 429: the commit buffer was full"),
    (CounterMetricFamily, "failed_requests", "Requests whose commit failed"),
    (CounterMetricFamily, "replayed_requests", "Requests answered from their Idempotency-Key"),
    (GaugeMetricFamily, "buffered_requests", "Requests waiting to be committed (the buffer's depth)"),
    (GaugeMetricFamily, "buffered_bytes", "Bytes waiting to be committed"))


class Metrics:
    """One server's metrics: `endpoint` and `error` are called per request (a labelled counter or histogram update,
    a few µs, no I/O), `exposition` renders the registry for a scrape. `served()` gives the endpoints served now (the
    pipe labels), `runtime` the process's committer and materializer."""

    def __init__(self, runtime: Runtime, served: Callable[[], Endpoints]) -> None:
        self.served = served
        self.registry = CollectorRegistry()
        self.requests = Counter("pipeframe_endpoint_requests", "Endpoint requests answered, by pipe, status class "
                                "and the engine that answered (duckdb: the read path, spark, none: refused first)",
                                ENDPOINT_LABELS, registry=self.registry)
        self.latency = Histogram("pipeframe_endpoint_request_duration_seconds", "Time to answer an endpoint request",
                                 ENDPOINT_LABELS, buckets=LATENCY_BUCKETS, registry=self.registry)
        self.errors = Counter("pipeframe_http_errors", "API answers that are errors, by PF code and HTTP status",
                              ("code", "status"), registry=self.registry)
        self.rounds = Histogram("pipeframe_view_refresh_round_duration_seconds", "Time of each round of the "
                                "continuous materializer that refreshed views", buckets=ROUND_BUCKETS,
                                registry=self.registry)
        self.registry.register(RuntimeFigures(runtime))
        self._names: tuple[Endpoints | None, frozenset[str]] = (None, frozenset())
        runtime.materializer.on_round.append(self.round_done)

    def endpoint(self, pipe: str, status: int, engine: str | None, seconds: float) -> None:
        """One endpoint request answered with `status` by `engine` (None: before any engine ran)."""
        labels = (self._pipe_label(pipe), f"{status // 100}xx", engine or NO_ENGINE)
        self.requests.labels(*labels).inc()
        self.latency.labels(*labels).observe(seconds)

    def error(self, code: str, status: int) -> None:
        self.errors.labels(code, str(status)).inc()

    def round_done(self, seconds: float, refreshed: list[ViewRefresh]) -> None:
        if refreshed:
            self.rounds.observe(seconds)

    def exposition(self) -> bytes:
        return generate_latest(self.registry)

    def _pipe_label(self, pipe: str) -> str:
        endpoints = self.served()
        seen, names = self._names
        if seen is not endpoints:  # once per deploy served: the endpoint pipes of what is served now
            names = frozenset(endpoints.names)
            self._names = (endpoints, names)
        return pipe if pipe in names else OTHER_PIPE


class RuntimeFigures(Collector):
    """What the runtime already keeps in memory, read at scrape time (no Spark, no Delta read): per datasource the
    group committer's counts and buffer depth, per view the continuous materializer's last lag figures, the service
    log's rows waiting and dropped."""

    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime

    def collect(self) -> Iterator[Metric]:
        runtime = self.runtime
        ingest = runtime.committer.counts()
        for kind, name, text in INGEST_FIGURES:  # the keys of `GET /v0/ingest`
            family = kind(f"pipeframe_ingest_{name}", text, labels=["datasource"])
            for datasource, figures in ingest.items():
                family.add_metric([datasource], figures[name])
            yield family
        views = runtime.materializer.lag()
        visible = GaugeMetricFamily("pipeframe_view_visible_ms", "How long the newest rows a view applied had waited "
                                    "since their commit (commit to visible), as of its last refresh", labels=["view"])
        behind = GaugeMetricFamily("pipeframe_view_lag_versions", "Source commits a view had not applied when the "
                                   "materializer last looked", labels=["view"])
        for view, lag in views.items():
            if lag.visible_ms is not None:
                visible.add_metric([view], lag.visible_ms)
            if lag.versions is not None:
                behind.add_metric([view], lag.versions)
        yield visible
        yield behind
        log = runtime.service_log
        yield GaugeMetricFamily("pipeframe_service_log_buffered_rows", "Rows of the service datasources recorded, "
                                "not written yet", value=log.buffered())
        yield CounterMetricFamily("pipeframe_service_log_dropped_rows", "Rows of the service datasources dropped: "
                                  "beyond what a table keeps while its writes fail, or that could not be made",
                                  value=log.dropped)
