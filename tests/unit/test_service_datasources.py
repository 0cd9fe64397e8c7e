"""Service datasources without a JVM: pipes read `pipeframe.pipe_stats` and `pipeframe.ops_log` (and Tinybird's names
for them) with their columns checked at compile time, a materialized view may not read them, their relation names
are reserved; `service_log:` settings; the per-minute latency summary the console draws. (Written and read through
a server: tests/spark/test_service_log_served.py.)"""

from __future__ import annotations

import math
import random
from pathlib import Path

import pytest

from pipeframe.compiler.service import OPS_LOG, PIPE_STATS, SERVICE_TABLES
from pipeframe.config import ServiceLogSettings, load_config
from pipeframe.errors import PipeframeError
from pipeframe.project import Project
from pipeframe.server.service import LATENCY_BUCKETS, latency_summary

ROOT = Path(__file__).resolve().parents[2]


def endpoint(sql: str, kind: str = "TYPE endpoint") -> str:
    return "NODE n\nSQL >\n    " + sql.replace("\n", "\n    ") + "\n" + kind + "\n"


def diagnostics(project: Path) -> list[tuple[str, str, int]]:
    report = Project(project).check()
    return [(d.code, d.message, d.location.line if d.location else 0) for d in report.errors]


def test_pipes_read_the_service_datasources_by_their_names_and_tinybirds(make_project) -> None:
    project = Project(make_project({
        "pipes/health.pipe": endpoint("SELECT pipe_name, count() AS requests, countIf(error = 1) AS errors,\n"
                                      "       max(parameters['org_id']) AS org\nFROM pipeframe.pipe_stats\n"
                                      "WHERE start_datetime > now() - INTERVAL 1 HOUR GROUP BY pipe_name"),
        "pipes/ops.pipe": endpoint("SELECT event_type, sum(rows) AS rows, sum(rows_quarantine) AS quarantined\n"
                                   "FROM tinybird.datasources_ops_log o WHERE o.result = 'error' GROUP BY 1"),
        "pipes/rt.pipe": endpoint("SELECT s.pipe_name FROM tinybird.pipe_stats_rt AS s JOIN sales ON s.pipe_name = "
                                  "sales.product"),
    }))
    compiled = project.require_valid()
    sql = {name: project.sql(name) for name in ("health", "ops", "rt")}
    assert "pipeframe_pipe_stats" in sql["health"] and "pipeframe.pipe_stats" not in sql["health"]
    assert "pipeframe_ops_log AS o" in sql["ops"] and "tinybird" not in sql["ops"]
    assert "pipeframe_pipe_stats AS s" in sql["rt"]
    # Not resources of the graph: nothing to deploy for them, nothing triggers on them.
    assert not {t.relation for t in SERVICE_TABLES} & {key.name for key in compiled.graph.nodes}


def test_a_column_typo_names_the_service_datasource_and_the_column_meant(make_project) -> None:
    found = diagnostics(make_project({"pipes/bad.pipe": endpoint("SELECT pipe_nme, durration FROM pipeframe.pipe_stats")}))
    assert [(code, line) for code, _, line in found] == [("PF310", 3), ("PF310", 3)]
    assert "`pipeframe.pipe_stats` has no such column" in found[0][1]
    report = Project(make_project({"pipes/bad.pipe": endpoint("SELECT pipe_nme FROM pipeframe.pipe_stats")})).check()
    assert "`pipe_name`" in report.errors[0].hint


def test_an_unknown_service_datasource_is_named_with_the_ones_there_are(make_project) -> None:
    project = make_project({"pipes/bi.pipe": endpoint("SELECT * FROM tinybird.bi_stats"),
                            "pipes/typo.pipe": endpoint("SELECT * FROM pipeframe.pipe_stat")})
    report = Project(project).check()
    found = sorted((d.code, d.message, Path(d.location.path).name) for d in report.errors)
    assert found == [("PF301", "Unknown service datasource `pipeframe.pipe_stat`.", "typo.pipe"),
                     ("PF301", "Unknown service datasource `tinybird.bi_stats`.", "bi.pipe")]
    assert all("pipeframe.pipe_stats and pipeframe.ops_log" in d.hint for d in report.errors)


def test_a_materialized_view_may_not_read_a_service_datasource(make_project) -> None:
    found = diagnostics(make_project({"pipes/mv.pipe": endpoint(
        "SELECT pipe_name, count() AS c FROM pipeframe.pipe_stats GROUP BY pipe_name",
        "TYPE materialized\nDATASOURCE mvt")}))
    assert [code for code, *_ in found] == ["PF312"] and "pipeframe.pipe_stats" in found[0][1]


def test_nor_through_a_pipe_that_reads_one(make_project) -> None:
    report = Project(make_project({
        "pipes/stats_src.pipe": endpoint("SELECT pipe_name, duration FROM pipeframe.pipe_stats"),
        "pipes/middle.pipe": endpoint("SELECT pipe_name FROM stats_src"),
        "pipes/mv.pipe": endpoint("SELECT pipe_name, count() AS c FROM middle GROUP BY pipe_name",
                                  "TYPE materialized\nDATASOURCE mvt")})).check()
    assert [(d.code, Path(d.location.path).name) for d in report.errors] == [("PF312", "mv.pipe")]
    assert "through pipe `stats_src`" in report.errors[0].message


def test_a_token_in_a_url_is_hidden_however_its_name_is_spelled() -> None:
    from pipeframe.server.auth import hidden

    for url in ("/v0/pipes/x.json?%74oken=SECRET&org_id=1", "/v0/pipes/x.json?org_id=1&tok%65n=SECRET",
                "/v0/pipes/x.json?token=SECRET", "/v0/pipes/x.json?org_id=1&token=SECRET&token=SECRET HTTP/1.1"):
        shown = hidden(url)
        assert "SECRET" not in shown and "token=***" in shown and "org_id=1" in shown or "org_id" not in url, shown
    assert hidden("/v0/pipes/x.json?org_id=1&tokens=2") == "/v0/pipes/x.json?org_id=1&tokens=2"


def test_a_resource_may_not_take_a_service_relation_name(make_project) -> None:
    found = diagnostics(make_project({"datasources/pipeframe_ops_log.datasource": "SCHEMA >\n    `x` Int32\n"}))
    assert [code for code, *_ in found] == ["PF105"] and "pipeframe.ops_log" in found[0][1]


def test_the_example_project_reads_its_request_log() -> None:
    project = Project(ROOT / "example_project")
    pipe = project.require_valid().pipes["endpoint_health"]
    assert [p.name for p in pipe.parameters] == ["hours", "pipe_name"]
    assert "pipeframe_pipe_stats" in project.sql("endpoint_health")


def test_service_log_settings(tmp_path: Path) -> None:
    (tmp_path / "pipeframe.yaml").write_text("name: x\n")
    assert load_config(tmp_path).service_log == ServiceLogSettings(enabled=True, flush_ms=2000, retention_days=7)
    (tmp_path / "pipeframe.yaml").write_text("name: x\nservice_log: {enabled: false, retention_days: 30}\n")
    assert load_config(tmp_path).service_log == ServiceLogSettings(enabled=False, retention_days=30)
    for bad, said in (("{retention_days: 0}", "service_log.retention_days"), ("{enabled: 1}", "service_log.enabled"),
                      ("{keep: 3}", "must be a mapping of enabled, flush_ms, retention_days"), ("7", "mapping")):
        (tmp_path / "pipeframe.yaml").write_text(f"name: x\nservice_log: {bad}\n")
        with pytest.raises(PipeframeError) as err:
            load_config(tmp_path)
        assert err.value.code == "PF002" and said in err.value.diagnostics[0].message


def test_the_latency_summary_is_within_its_bucket_of_the_exact_percentiles() -> None:
    rng = random.Random(37)
    for _ in range(200):
        durations = [rng.lognormvariate(rng.uniform(-2, 6), rng.uniform(0.1, 2)) for _ in range(rng.randint(1, 300))]
        buckets: dict[int, dict] = {}
        for ms in durations:
            b = round(math.log(max(ms, 0.001)) * LATENCY_BUCKETS)
            buckets.setdefault(b, {"bucket": b, "requests": 0, "errors": 0})["requests"] += 1
        summary = latency_summary(list(buckets.values()))
        ordered = sorted(durations)
        assert summary["requests"] == len(durations)
        for p, key in ((0.5, "p50_ms"), (0.95, "p95_ms")):
            exact = ordered[math.ceil(p * len(ordered)) - 1]  # the smallest duration with p of them at or below it
            assert abs(math.log(summary[key]) - math.log(exact)) <= 0.5 / LATENCY_BUCKETS + 1e-3, (p, summary, exact)


def test_the_service_tables_columns_follow_tinybirds() -> None:
    # The columns a Tinybird monitoring pipe reads most (pipe_stats_rt, datasources_ops_log) are there, same names.
    assert {"start_datetime", "pipe_name", "duration", "error", "read_rows", "read_bytes", "result_rows",
            "status_code", "token_name", "parameters", "url"} <= {c for c, _ in PIPE_STATS.columns}
    assert {"timestamp", "event_type", "datasource_name", "pipe_name", "result", "error", "elapsed_time", "rows",
            "rows_quarantine"} <= {c for c, _ in OPS_LOG.columns}


def test_a_request_row_is_made_by_the_writer_and_a_broken_one_loses_only_itself(tmp_path: Path) -> None:
    """The request's thread records a function; `flush` (the writer thread in a server) makes the rows and appends
    them to the Delta table without Spark in a local warehouse; a row whose making fails is dropped and counted."""
    import threading

    from deltalake import DeltaTable

    from pipeframe.engine.servicelog import ServiceLog
    from pipeframe.engine.warehouse import Warehouse
    from pipeframe.server.service import request_fields

    made_in: list[str] = []

    def fields(pipe: str, query: bytes) -> dict:
        made_in.append(threading.current_thread().name)
        return request_fields(pipe, "reader", 200, "", f"/v0/pipes/{pipe}.json", query, "GET",
                              [(b"user-agent", b"pytest")], engine="duckdb", read_rows=3, read_bytes=30, result_rows=1)

    log = ServiceLog(lambda: Warehouse(None, str(tmp_path / "warehouse")), ServiceLogSettings())
    log.request(0.002, lambda: fields("top", b"limit=5&token=s3cret&tag=a&tag=b"))
    log.request(0.003, lambda: 1 / 0)  # a bug in making a row
    log.request(0.004, lambda: fields("other", b""))
    assert made_in == []  # nothing made on the request's side
    writer = threading.Thread(target=log.flush, name="writer")
    writer.start()
    writer.join()
    assert made_in == ["writer", "writer"] and log.dropped == 1
    rows = DeltaTable(PIPE_STATS.path(str(tmp_path / "warehouse"))).to_pyarrow_table().to_pylist()
    assert sorted((r["pipe_name"], r["url"], dict(r["parameters"]), r["duration"], r["user_agent"]) for r in rows) == [
        ("other", "/v0/pipes/other.json", {}, 0.004, "pytest"),
        ("top", "/v0/pipes/top.json?limit=5&token=***&tag=a&tag=b", {"limit": "5", "tag": "a,b"}, 0.002, "pytest")]
