"""The server's metrics without a JVM: each server has its own registry (two in one process do not mix), pipe labels
are bounded by the endpoints served now (anything else is `_other`, and a deploy changes the set), and the runtime's
figures (group-commit counts, view lag) are read at scrape time. Served for real: tests/spark/test_server.py."""

from __future__ import annotations

from types import SimpleNamespace

from prometheus_client.parser import text_string_to_metric_families

from pipeframe.config import IngestSettings, ServiceLogSettings
from pipeframe.engine.continuous import ContinuousMaterializer, ViewFigures
from pipeframe.engine.groupcommit import GroupCommitter
from pipeframe.engine.servicelog import ServiceLog
from pipeframe.server.metrics import Metrics


def runtime() -> SimpleNamespace:
    """A runtime's committer (nothing submitted: no table is read) and materializer (never started)."""
    committer = GroupCommitter(None, None, lambda name: (None, None), IngestSettings())
    return SimpleNamespace(committer=committer, materializer=ContinuousMaterializer(lambda: None),
                           service_log=ServiceLog(lambda: None, ServiceLogSettings()))


def samples(metrics: Metrics) -> dict[tuple[str, tuple], float]:
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for f in text_string_to_metric_families(metrics.exposition().decode()) for s in f.samples
            if not s.name.endswith("_created")}


def test_two_servers_count_apart_and_pipe_labels_stay_bounded() -> None:
    served = [SimpleNamespace(names=["top", "search"])]
    first, second = Metrics(runtime(), lambda: served[0]), Metrics(runtime(), lambda: served[0])
    first.endpoint("top", 200, "duckdb", 0.004)
    first.endpoint("top", 200, "duckdb", 0.002)
    first.endpoint("../../etc/passwd", 404, None, 0.001)
    first.endpoint("recent", 404, None, 0.001)  # not served (yet)
    first.error("PF801", 404)
    served[0] = SimpleNamespace(names=["top", "search", "recent"])  # a deploy added `recent`
    first.endpoint("recent", 200, "spark", 0.5)

    got = samples(first)
    top = (("engine", "duckdb"), ("pipe", "top"), ("status", "2xx"))
    other = (("engine", "none"), ("pipe", "_other"), ("status", "4xx"))
    recent = (("engine", "spark"), ("pipe", "recent"), ("status", "2xx"))
    assert {k: v for k, v in got.items() if k[0] == "pipeframe_endpoint_requests_total"} == {
        ("pipeframe_endpoint_requests_total", top): 2, ("pipeframe_endpoint_requests_total", other): 2,
        ("pipeframe_endpoint_requests_total", recent): 1}
    assert got[("pipeframe_endpoint_request_duration_seconds_bucket", (top[0], ("le", "0.005"), *top[1:]))] == 2
    assert got[("pipeframe_endpoint_request_duration_seconds_bucket", (top[0], ("le", "0.0025"), *top[1:]))] == 1
    assert got[("pipeframe_http_errors_total", (("code", "PF801"), ("status", "404")))] == 1
    assert not any(k[0].startswith("pipeframe_endpoint") for k in samples(second))  # the other server saw nothing


def test_view_lag_and_rounds_come_from_the_materializer() -> None:
    parts = runtime()
    metrics = Metrics(parts, lambda: SimpleNamespace(names=[]))
    figures = parts.materializer.figures
    figures["hourly"] = ViewFigures(visible_ms=250.0, lag_versions=3)
    figures["daily"] = ViewFigures()  # refreshed, nothing known yet: no sample rather than a made-up 0
    [told] = parts.materializer.on_round
    told(0.2, [SimpleNamespace(view="hourly")])
    told(0.1, [])  # a round that refreshed nothing is not a refresh
    got = samples(metrics)
    assert got[("pipeframe_view_lag_versions", (("view", "hourly"),))] == 3
    assert got[("pipeframe_view_visible_ms", (("view", "hourly"),))] == 250.0
    assert ("pipeframe_view_lag_versions", (("view", "daily"),)) not in got
    assert got[("pipeframe_view_refresh_round_duration_seconds_count", ())] == 1


def test_the_service_logs_waiting_and_dropped_rows_are_counted() -> None:
    parts = runtime()
    metrics = Metrics(parts, lambda: SimpleNamespace(names=[]))
    log = parts.service_log
    log.operation("deploy", seconds=0.5)  # no writer thread, Spark not started: kept for the next write
    log.request(0.01, lambda: 1 / 0)  # a row that cannot be made
    assert samples(metrics)[("pipeframe_service_log_buffered_rows", ())] == 2
    assert log.flush() == 0  # no warehouse to write to: the operation's row kept; the broken one dropped
    got = samples(metrics)
    assert got[("pipeframe_service_log_dropped_rows_total", ())] == 1
    assert got[("pipeframe_service_log_buffered_rows", ())] == 1
