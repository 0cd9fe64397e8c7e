"""Service datasources through a real server on real Spark + Delta: every endpoint request a client makes lands in
`pipeframe.pipe_stats` (its pipe, status, PF code, parameters without the token, rows answered, engine), every group
commit, refresh, populate and deploy in `pipeframe.ops_log`; pipes read them (the example project's
`endpoint_health` among them), by the read path and by Spark alike."""

from __future__ import annotations

import json
import random
from collections import Counter
from pathlib import Path

import httpx
import pytest

from pipeframe.project import Project
from pipeframe.server import RunningServer, Service, start_server
from tests.spark.conftest import deployed, until

ROOT = Path(__file__).resolve().parents[2]
ADMIN = "svc-admin-secret"
SIGNING_KEY = "service-datasources-key-of-32-bytes-x"
READER = "svc-reader-secret"
ORDERS = """\
SCHEMA >
    `ts` DateTime `json:$.ts`,
    `org_id` Int32 `json:$.org_id`,
    `amount` Float64 `json:$.amount`
"""
BY_ORG = """\
TOKEN "reader" READ
NODE endpoint
SQL >
    %
    SELECT org_id, count() AS orders, sum(amount) AS amount FROM orders
    WHERE org_id = {{ Int32(org_id, description="The organization") }}
    GROUP BY org_id
TYPE endpoint
"""
DAILY = """\
NODE daily
SQL >
    SELECT toStartOfDay(ts) AS day, org_id, count() AS orders FROM orders GROUP BY day, org_id
TYPE materialized
DATASOURCE daily
"""
ERRORS = """\
NODE endpoint
SQL >
    SELECT pipe_name, status_code, error_code, count() AS requests, sum(result_rows) AS rows_answered,
           countIf(token_name = 'reader') AS by_reader, max(parameters['org_id']) AS some_org
    FROM pipeframe.pipe_stats
    WHERE pipe_name IN ('by_org', 'nope')
    GROUP BY pipe_name, status_code, error_code
    ORDER BY pipe_name, status_code, error_code
TYPE endpoint
"""
OPS = """\
NODE endpoint
SQL >
    SELECT event_type, datasource_name, pipe_name, result, sum(rows) AS rows, sum(rows_quarantine) AS quarantined,
           count() AS operations, max(strategy) AS strategy
    FROM tinybird.datasources_ops_log
    WHERE datasource_name = 'orders' OR pipe_name = 'daily' OR event_type = 'deploy'
    GROUP BY 1, 2, 3, 4
TYPE endpoint
"""


@pytest.fixture(scope="module")
def project(spark, spark_config) -> Project:
    health = (ROOT / "example_project" / "pipes" / "endpoint_health.pipe").read_text(encoding="utf-8")
    return deployed(spark, spark_config, "service_datasources", {
        "datasources/orders.datasource": ORDERS, "pipes/by_org.pipe": BY_ORG, "pipes/daily.pipe": DAILY,
        "pipes/request_errors.pipe": ERRORS, "pipes/ops.pipe": OPS, "pipes/endpoint_health.pipe": health,
    }, f"tokens:\n  admin: {ADMIN}\n  reader: {READER}\nsigning_key: {SIGNING_KEY}\n"
       "service_log: {flush_ms: 3600000}\n")  # written when the test flushes, and when the server stops


def get(http: httpx.Client, path: str, secret: str = ADMIN, **params) -> httpx.Response:
    return http.get(path, params=params, headers={"Authorization": f"Bearer {secret}"})


def test_every_request_and_operation_is_recorded_and_readable_by_pipes(project: Project) -> None:
    service = Service(project)
    running: RunningServer = start_server(service, port=0)
    try:
        answered_while_stopping = requests_and_operations(project, service, running.url)
    finally:
        running.stop()
    # What the server answered after its last flush was written when it stopped.
    late = project.query("SELECT count(*) FROM pipeframe.pipe_stats WHERE parameters['org_id'] = '77'").first()[0]
    assert late == answered_while_stopping == 3


def requests_and_operations(project: Project, service: Service, url: str) -> int:
    rng = random.Random(3701)
    rows = [{"ts": f"2026-11-{rng.randint(1, 3):02d} 10:00:00", "org_id": rng.randint(1, 4),
             "amount": rng.randint(1, 100)} for _ in range(60)]
    log = service.runtime.service_log
    with httpx.Client(base_url=url, timeout=300) as http:
        body = "".join(json.dumps(r) + "\n" for r in rows) + '{"ts": "not a time", "org_id": 1}\n'
        sent = http.post("/v0/events", params={"name": "orders", "wait": "true"}, content=body,
                         headers={"Authorization": f"Bearer {ADMIN}"})
        assert sent.status_code in (200, 202), sent.text
        seen: Counter = Counter()  # (pipe, status, code) → requests, as the client saw them
        answered: Counter = Counter()  # pipe → rows answered
        for _ in range(40):
            pick = rng.random()
            if pick < 0.6:  # a good request, by the reader's token in the query string or the admin's header
                org = rng.randint(1, 5)
                secret = rng.choice([ADMIN, READER])
                response = http.get("/v0/pipes/by_org.json", params={"org_id": org, "token": secret}) \
                    if secret == READER else get(http, "/v0/pipes/by_org.json", org_id=org)
            elif pick < 0.8:
                response = get(http, "/v0/pipes/by_org.json", org_id="not-a-number")
            else:
                response = get(http, "/v0/pipes/nope.json")
            data = response.json()
            seen[(response.url.path.split("/")[-1].removesuffix(".json"), response.status_code,
                  data.get("code", ""))] += 1
            answered[response.url.path] += len(data.get("data", []))
        assert {status for _, status, _ in seen} == {200, 400, 404}
        log.flush()  # written every `service_log.flush_ms` in the background; now, for the test

        recorded = get(http, "/v0/pipes/request_errors.json").json()
        assert recorded["statistics"]["engine"] == "duckdb"
        by_key = {(r["pipe_name"], r["status_code"], r["error_code"]): r for r in recorded["data"]}
        assert {k: r["requests"] for k, r in by_key.items()} == dict(seen)
        assert sum(r["rows_answered"] for r in recorded["data"]) == sum(answered.values())
        assert by_key[("by_org", 200, "")]["by_reader"] > 0
        # The read path and Spark answer the same from the same table.
        assert [tuple(r.values()) for r in recorded["data"]] == \
            [tuple(r) for r in project.query("request_errors").collect()]

        # The token never reaches the table: not in the URL kept, not among the parameters (a map, as Tinybird's).
        kept = project.query("SELECT url, parameters, parameters['org_id'] AS org FROM pipeframe.pipe_stats "
                             "WHERE token_name = 'reader'").collect()
        assert kept and all(READER not in r["url"] and "token=***" in r["url"] and set(r["parameters"]) == {"org_id"}
                            and f"org_id={r['org']}" in r["url"] for r in kept)

        # The example project's monitoring endpoint over the same rows.
        answer = get(http, "/v0/pipes/endpoint_health.json", hours=48).json()
        assert answer["statistics"]["engine"] == "duckdb", answer["statistics"]
        assert project.read_path("endpoint_health")[0] == "duckdb"  # as `check --json` says before it is called
        health = {r["pipe_name"]: r for r in answer["data"]}
        assert health["by_org"]["requests"] == sum(n for (pipe, *_), n in seen.items() if pipe == "by_org")
        assert health["by_org"]["errors"] == sum(n for (pipe, status, _), n in seen.items()
                                                 if pipe == "by_org" and status >= 400)

        # Operations: the deploy, the group commit (its rows and the misfit quarantined), the view's refresh.
        def ops() -> dict:
            log.flush()
            answer = get(http, "/v0/pipes/ops.json").json()["data"]
            return {(r["event_type"], r["datasource_name"] or r["pipe_name"]): r for r in answer}

        found = until(lambda: ("refresh", "daily") in ops(), True)
        assert found, ops()
        done = ops()
        assert done[("append", "orders")]["rows"] == len(rows) and done[("append", "orders")]["quarantined"] == 1
        assert done[("append", "orders")]["result"] == "ok"
        assert done[("refresh", "daily")]["rows"] == len(rows) and done[("refresh", "daily")]["strategy"]
        assert ("deploy", "") in done

        minutes = get(http, "/v0/service/requests", minutes=60).json()["data"]
        assert sum(m["requests"] for m in minutes if m["pipe_name"] == "by_org") == \
            health["by_org"]["requests"]
        assert all(m["p50_ms"] <= m["p95_ms"] for m in minutes)
        assert get(http, "/v0/service/requests", READER).status_code == 403

        # A tenant's row holds the value its token fixed, not the one it sent; the token, however its name is
        # spelled in the query, is not kept.
        tenant = project.create_token(["by_org"], {"org_id": 2}, expires_in=3600, name="tenant2")
        org2 = get(http, "/v0/pipes/by_org.json", org_id=2).json()["data"]
        for spelled in ("token", "%74oken", "tok%65n"):
            sent = http.get(f"/v0/pipes/by_org.json?org_id=3&{spelled}={tenant}")
            assert sent.status_code == 200 and sent.json()["data"] == org2, sent.text
        log.flush()
        kept = project.query("SELECT url, parameters['org_id'] AS org FROM pipeframe.pipe_stats "
                             "WHERE token_name = 'tenant2'").collect()
        assert len(kept) == 3 and all(r["org"] == "2" and tenant not in r["url"] for r in kept), kept

        for _ in range(3):  # answered, not written until the server stops
            assert get(http, "/v0/pipes/by_org.json", org_id=77).status_code == 200
    return 3


def test_a_populate_is_recorded_with_its_rows(project: Project) -> None:
    project.append("orders", [{"ts": "2026-11-04 10:00:00", "org_id": 9, "amount": 1.0}])  # rows of its own
    before = project.query("SELECT count(*) FROM pipeframe.ops_log WHERE event_type = 'populate'").first()[0]
    results = project.populate("daily", truncate=True)
    project.runtime.service_log.flush()  # the server's runtime writes every `flush_ms`: now, for the test
    populated = project.query("SELECT rows, result, elapsed_time FROM pipeframe.ops_log "
                              "WHERE event_type = 'populate' AND pipe_name = 'daily' ORDER BY timestamp").collect()
    assert len(populated) == before + 1
    assert populated[-1]["result"] == "ok" and populated[-1]["rows"] == sum(r.rows or 0 for r in results) > 0


def test_rows_older_than_the_retention_are_deleted(project: Project) -> None:
    from datetime import UTC, datetime, timedelta

    from pipeframe.config import ServiceLogSettings
    from pipeframe.engine.servicelog import ServiceLog

    now = datetime.now(UTC)
    clock = [now - timedelta(days=3, minutes=1)]
    log = ServiceLog(lambda: project.warehouse, ServiceLogSettings(retention_days=3), clock=lambda: clock[0])
    log.operation("optimize", datasource="retention_old")
    clock[0] = now - timedelta(days=2, hours=23)
    log.operation("optimize", datasource="retention_kept")
    log.flush()
    names = "SELECT datasource_name FROM pipeframe.ops_log WHERE datasource_name LIKE 'retention_%' ORDER BY 1"
    assert [r[0] for r in project.query(names).collect()] == ["retention_kept", "retention_old"]
    clock[0] = now
    log.expire()
    assert [r[0] for r in project.query(names).collect()] == ["retention_kept"]
    # An hour later nothing is older than the cutoff, nothing was added since the OPTIMIZE and the table is younger
    # than VACUUM's 7 days: the table's log shows it, and no step runs (no commit; Delta's VACUUM START/END included).
    from pipeframe.compiler.service import OPS_LOG
    from pipeframe.engine import deltalog
    from pipeframe.engine.conflicts import local_folder

    folder = local_folder(OPS_LOG.path(project.warehouse.uri))
    operations = [c.operation for c in deltalog.history(folder, limit=3)]
    assert operations[0] == "OPTIMIZE" and "DELETE" in operations and "VACUUM END" not in operations, operations
    version = deltalog.latest_version(folder)
    clock[0] = now + timedelta(hours=1)
    log.expire()
    assert deltalog.latest_version(folder) == version
    assert [r[0] for r in project.query(names).collect()] == ["retention_kept"]


def test_spark_writes_what_a_local_append_would(project: Project) -> None:
    """On object storage or Spark Connect the service log is written by Spark's writer (the MAP column included)."""
    from pipeframe.config import ServiceLogSettings
    from pipeframe.engine.servicelog import ServiceLog
    from pipeframe.engine.warehouse import Warehouse

    class Elsewhere(Warehouse):  # a warehouse this process does not share a disk with: Spark writes
        shares_disk = False

    log = ServiceLog(lambda: Elsewhere(project.spark, project.config.warehouse_uri), ServiceLogSettings())
    log.request(0.004, lambda: {"pipe": "by_spark", "status": 200, "engine": "duckdb", "token_name": "admin",
                                "method": "GET", "url": "/v0/pipes/by_spark.json?org_id=9",
                                "parameters": {"org_id": "9"}, "result_rows": 1})
    assert log.flush() == 1
    row = project.query("SELECT parameters, duration, status_code FROM pipeframe.pipe_stats "
                        "WHERE pipe_name = 'by_spark'").collect()
    assert [(r["parameters"], r["duration"], r["status_code"]) for r in row] == [({"org_id": "9"}, 0.004, 200)]
