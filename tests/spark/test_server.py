"""The HTTP API on a real uvicorn server over real Spark + Delta: endpoint formats, typed-parameter validation,
tokens, SQL-injection payloads in every parameter type, OpenAPI, the Events API and the views API.

One deployed project (fixtures loaded) and one server (`server`, `http`: tests/spark/conftest.py) serve the whole
module; the tests run in file order and the later ones (events, pause/resume, delete) change its rows, so each
asserts relative to what it read first.
"""

from __future__ import annotations

import csv
import io
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from pipeframe.project import Project
from tests.conftest import write_project
from tests.spark.conftest import deployed, until

EVENTS = """\
DESCRIPTION >
    Shop events, one per order line
TOKEN "ingest" APPEND
SCHEMA >
    `ts` TIMESTAMP `json:$.ts`,
    `user_id` STRING `json:$.user`,
    `product` STRING `json:$.product`,
    `amount` DOUBLE `json:$.amount` DEFAULT 0,
    `quantity` INT `json:$.quantity`,
    `paid` BOOLEAN `json:$.paid`
"""
HOURLY = """\
NODE hourly
SQL >
    SELECT date_trunc('hour', ts) AS hour, product, count(*) AS orders, sum(amount) AS revenue
    FROM events
    GROUP BY 1, 2
TYPE materialized
DATASOURCE hourly
"""
DAILY = """\
NODE daily
SQL >
    SELECT date_trunc('day', hour) AS day, product, sum(orders) AS orders, sum(revenue) AS revenue
    FROM hourly
    GROUP BY 1, 2
TYPE materialized
DATASOURCE daily
"""
SEARCH = """\
TOKEN "reader" READ
DESCRIPTION >
    Raw events filtered by a parameter of every type
NODE endpoint
SQL >
    %
    SELECT user_id, product, amount, quantity, paid, ts
    FROM events
    WHERE amount >= {{ Float(min_amount, 0.0, description="Smallest amount") }}
      AND quantity <= {{ Int(max_quantity, 1000, description="Largest quantity") }}
      AND to_date(ts) >= {{ Date(since, '2024-01-01', description="First day") }}
      AND ts < {{ DateTime(before, '2030-01-01 00:00:00', description="Only events before this time") }}
    {% if defined(paid) %}
      AND paid = {{ Boolean(paid, description="Paid or not") }}
    {% end %}
    {% if defined(user) %}
      AND user_id = {{ String(user, description="Only this user") }}
    {% end %}
    {% if defined(products) %}
      AND product IN {{ Array(products, 'String', description="Only these products") }}
    {% end %}
    {% if defined(quantities) %}
      AND quantity IN {{ Array(quantities, 'Int', description="Only these quantities") }}
    {% end %}
    ORDER BY ts, user_id
    LIMIT {{ Int(limit, 100, description="Maximum number of rows") }}
TYPE endpoint
"""
TOP = """\
TOKEN "reader" READ
TOKEN "dashboard" READ
DESCRIPTION >
    Products by revenue, read from the hourly view
NODE endpoint
SQL >
    %
    SELECT product, sum(orders) AS orders, round(sum(revenue), 2) AS revenue,
           {{ String(currency, 'EUR', enum=['EUR', 'USD'], description="Currency label") }} AS currency
    FROM hourly
    GROUP BY product
    ORDER BY {{ column(sort, 'revenue') }} DESC, product
    LIMIT {{ Int(limit, 10, description="Maximum number of products") }}
TYPE endpoint
"""
PRODUCT_DAYS = """\
TOKEN "dashboard" READ
DESCRIPTION >
    Daily orders and revenue of one product, read from the daily view
NODE endpoint
SQL >
    %
    SELECT day, orders, revenue FROM daily
    WHERE product = {{ String(product, required=True, description="The product") }}
    ORDER BY day
TYPE endpoint
"""
BOOM = """\
DESCRIPTION >
    Fails at run time when d is 0 (ANSI division by zero)
NODE endpoint
SQL >
    %
    SELECT 1 / {{ Int(d, 1) }} AS x
TYPE endpoint
"""
NON_FINITE = """\
DESCRIPTION >
    Doubles that are not finite numbers
NODE endpoint
SQL >
    SELECT CAST('NaN' AS DOUBLE) AS nan, CAST('Infinity' AS DOUBLE) AS inf, CAST('-Infinity' AS DOUBLE) AS ninf,
           1.5 AS x
TYPE endpoint
"""
ORDERS = """\
DESCRIPTION >
    Orders of several customers (organizations)
SCHEMA >
    `org_id` INT `json:$.org_id`,
    `item` STRING `json:$.item`,
    `amount` DOUBLE `json:$.amount`
"""
ORG_ORDERS = """\
DESCRIPTION >
    One organization's orders: the endpoint a tenant token pins `org_id` on
NODE endpoint
SQL >
    %
    SELECT org_id, item, amount FROM orders
    WHERE org_id = {{ Int(org_id, required=True, description="The organization") }}
    ORDER BY item
TYPE endpoint
"""
ORDERS_FIXTURE = [{"org_id": 42, "item": "mug", "amount": 12.5}, {"org_id": 42, "item": "tea", "amount": 4.0},
                  {"org_id": 7, "item": "pot", "amount": 30.0}, {"org_id": 7, "item": "cup", "amount": 3.0}]
SIGNING_KEY = "test-signing-key-of-32-bytes-or-more"
FIXTURE = [
    {"ts": "2024-05-01 10:00:00", "user": "u1", "product": "mug", "amount": 12.5, "quantity": 1, "paid": True},
    {"ts": "2024-05-01 10:20:00", "user": "u2", "product": "tea", "amount": 4.0, "quantity": 3, "paid": False},
    {"ts": "2024-05-01 11:05:00", "user": "u1", "product": "pot", "amount": 30.0, "quantity": 1, "paid": True},
    {"ts": "2024-05-02 09:00:00", "user": "u3", "product": "mug", "amount": 12.5, "quantity": 2, "paid": True},
    {"ts": "2024-05-02 09:30:00", "user": "u4", "product": "tea", "amount": 8.0, "quantity": 6, "paid": True},
    {"ts": "2024-05-02 15:45:00", "user": "u2", "product": "pot", "amount": 28.0, "quantity": 1, "paid": False},
]
SECRETS = {"reader": "r-secret-1", "ingest": "i-secret-2", "dashboard": "d-secret-3", "admin": "a-secret-4"}


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {SECRETS[token]}"}


READER, INGEST, DASHBOARD, ADMIN = (bearer(t) for t in ("reader", "ingest", "dashboard", "admin"))


@pytest.fixture(scope="module")
def project(spark, spark_config) -> Project:
    tokens = "tokens:\n" + "".join(f"  {name}: {secret}\n" for name, secret in SECRETS.items())
    return deployed(spark, spark_config, "server", {
        "datasources/events.datasource": EVENTS, "pipes/hourly.pipe": HOURLY, "pipes/daily.pipe": DAILY,
        "pipes/search.pipe": SEARCH, "pipes/top.pipe": TOP, "pipes/product_days.pipe": PRODUCT_DAYS,
        "pipes/boom.pipe": BOOM, "pipes/non_finite.pipe": NON_FINITE,
        "datasources/orders.datasource": ORDERS, "pipes/org_orders.pipe": ORG_ORDERS,
        "fixtures/events.ndjson": "".join(json.dumps(row) + "\n" for row in FIXTURE),
        "fixtures/orders.ndjson": "".join(json.dumps(row) + "\n" for row in ORDERS_FIXTURE),
    }, tokens + f"signing_key: {SIGNING_KEY}\n")


def count(project: Project, table: str) -> int:
    return project.query(f"SELECT count(*) FROM {table}").first()[0]


def tables(project: Project) -> dict[str, tuple[int, int]]:
    """Every deployed table's row count and latest Delta version."""
    found = {}
    for resource in project.warehouse.snapshot(fresh=True).values():
        if resource.path:
            history = project.spark.sql(f"DESCRIBE HISTORY delta.`{resource.path}` LIMIT 1").first()
            rows = project.spark.read.format("delta").load(resource.path).count()
            found[resource.state.name] = (rows, history["version"])
    return found


def revenue_by_product(http: httpx.Client) -> dict[str, float]:
    answer = http.get("/v0/pipes/top.json", headers=READER)
    assert answer.status_code == 200, answer.text
    return {row["product"]: row["revenue"] for row in answer.json()["data"]}


def post_events(http: httpx.Client, rows: list, headers: dict = INGEST, name: str = "events") -> httpx.Response:
    body = "\n".join(row if isinstance(row, str) else json.dumps(row) for row in rows) + "\n"
    return http.post("/v0/events", params={"name": name, "wait": "true"}, content=body.encode(), headers=headers)


def assert_error(answer: httpx.Response, status: int, code: str, parameter: str | None = None) -> dict:
    assert answer.status_code == status, answer.text
    assert "file:/" not in answer.text and "/tmp/" not in answer.text and "Traceback" not in answer.text, answer.text
    body = answer.json()
    assert body["code"] == code and body["error"] and "Traceback" not in answer.text
    if parameter is not None:
        assert body["parameter"] == parameter, body
    return body


# ------------------------------------------------------------------------------------------ endpoints
def test_json_csv_and_ndjson_answer_the_same_rows_as_project_endpoint(http, project):
    params = {"limit": "2", "currency": "USD"}
    answer = http.get("/v0/pipes/top.json", params=params, headers=READER)
    assert answer.status_code == 200, answer.text
    body = answer.json()
    expected = project.endpoint("top", **params)
    assert set(body) == {"meta", "data", "rows", "statistics"}
    assert body["data"] == expected.data and body["meta"] == expected.to_json()["meta"] and body["rows"] == 2
    assert [m["name"] for m in body["meta"]] == ["product", "orders", "revenue", "currency"]
    assert body["data"][0] == {"product": "pot", "orders": 2, "revenue": 58.0, "currency": "USD"}
    assert set(body["statistics"]) == {"elapsed", "rows_read", "bytes_read", "engine"}
    assert body["statistics"]["engine"] == "duckdb" and body["statistics"]["rows_read"] > 0  # no Spark job answered

    as_csv = http.get("/v0/pipes/top.csv", params=params, headers=READER)
    assert as_csv.status_code == 200 and as_csv.headers["content-type"].startswith("text/csv")
    header, *rows = list(csv.reader(io.StringIO(as_csv.text)))
    assert header == expected.columns
    assert rows == [[str(row[c]) for c in expected.columns] for row in expected.data]

    as_ndjson = http.get("/v0/pipes/top.ndjson", params=params, headers=READER)
    assert as_ndjson.headers["content-type"].startswith("application/x-ndjson")
    assert [json.loads(line) for line in as_ndjson.text.splitlines()] == expected.data

    assert_error(http.get("/v0/pipes/top", headers=READER), 404, "PF814")
    assert_error(http.get("/v0/pipes/nope.json", headers=ADMIN), 404, "PF801")
    assert_error(http.post("/v0/pipes/top.json", headers=READER), 405, "PF814")


def test_a_query_failing_in_spark_is_a_json_500_naming_the_pipe(http):
    assert http.get("/v0/pipes/boom.json", headers=ADMIN).json()["data"] == [{"x": 1.0}]
    failed = http.get("/v0/pipes/boom.json", params={"d": "0"}, headers=ADMIN)
    body = assert_error(failed, 500, "PF807")
    assert "`boom`" in body["error"] and "DIVIDE_BY_ZERO" in body["error"]
    assert "py4j" not in failed.text.lower() and "Traceback" not in failed.text
    assert http.get("/v0/pipes/boom.json", headers=ADMIN).status_code == 200  # the server keeps serving
    assert "pipes/boom.pipe" in body["hint"]


def test_typed_parameters_are_validated_and_defaulted(http, project):
    def search(headers: dict = READER, **params) -> httpx.Response:
        return http.get("/v0/pipes/search.json", params=params, headers=headers)

    for name, value, expected_type in [("limit", "ten", "Int"), ("max_quantity", "2.5", "Int"),
                                       ("min_amount", "cheap", "Float"), ("paid", "maybe", "Boolean"),
                                       ("since", "yesterday", "Date"), ("before", "2024-13-45", "DateTime"),
                                       ("quantities", "1,two", "Int")]:
        body = assert_error(search(**{name: value}), 400, "PF202", name)
        assert f"`{name}`" in body["error"] and expected_type in body["error"], body

    # Defaults: every event, up to 100 rows; the view-backed endpoint in EUR, at most 10 products.
    assert search().json()["rows"] == count(project, "events")
    top = http.get("/v0/pipes/top.json", headers=READER).json()["data"]
    assert {row["currency"] for row in top} == {"EUR"} and len(top) == 3
    assert [r["product"] for r in search(products="mug,tea", paid="true").json()["data"]] == ["mug", "mug", "tea"]
    repeated = http.get("/v0/pipes/search.json?quantities=1&quantities=2", headers=READER).json()["data"]
    assert sorted({r["quantity"] for r in repeated}) == [1, 2]

    body = assert_error(http.get("/v0/pipes/top.json", params={"currency": "GBP"}, headers=READER), 400,
                        "PF202", "currency")
    assert "EUR" in body["error"] and "USD" in body["error"]
    body = assert_error(http.get("/v0/pipes/product_days.json", headers=DASHBOARD), 400, "PF202", "product")
    assert "required" in body["error"]
    days = http.get("/v0/pipes/product_days.json", params={"product": "mug"}, headers=DASHBOARD).json()
    assert [(r["day"], r["orders"]) for r in days["data"]] == [("2024-05-01 00:00:00", 1), ("2024-05-02 00:00:00", 1)]


def test_tokens_are_enforced_per_pipe_and_scope(http, caplog):
    assert_error(http.get("/v0/pipes/search.json"), 401, "PF811")
    assert_error(http.get("/v0/pipes/search.json", headers={"Authorization": "Bearer guess"}), 401, "PF812")
    assert_error(http.get("/v0/pipes/search.json", params={"token": "guess"}), 401, "PF812")
    body = assert_error(http.get("/v0/pipes/search.json", headers=DASHBOARD), 403, "PF813")
    assert "dashboard" in body["error"] and "search" in body["error"] and SECRETS["dashboard"] not in body["error"]
    assert http.get("/v0/pipes/search.json", headers=READER).status_code == 200
    assert http.get("/v0/pipes/search.json", params={"token": SECRETS["reader"]}).status_code == 200
    assert access_log_line(caplog, "/v0/pipes/search.json?token=") == "/v0/pipes/search.json?token=***"
    assert http.get("/v0/pipes/search.json", headers=ADMIN).status_code == 200
    assert http.get("/v0/pipes/top.json", headers=DASHBOARD).status_code == 200

    assert_error(post_events(http, [FIXTURE[0]], headers={}), 401, "PF811")
    assert_error(post_events(http, [FIXTURE[0]], headers=READER), 403, "PF813")
    assert_error(http.get("/v0/views"), 401, "PF811")
    assert_error(http.get("/v0/views", headers=INGEST), 403, "PF813")
    assert_error(http.delete("/v0/views/hourly", params={"force": "true"}, headers=READER), 403, "PF813")
    assert http.get("/v0/views", headers=ADMIN).status_code == 200

    listed = http.get("/v0/pipes", headers=DASHBOARD).json()["pipes"]
    assert sorted(p["name"] for p in listed) == ["product_days", "top"]
    assert_error(http.get("/v0/pipes"), 401, "PF811")


# ------------------------------------------------------------------------------------------ signed tenant tokens
def org_rows(http: httpx.Client, token: str, **params) -> httpx.Response:
    return http.get("/v0/pipes/org_orders.json", params=params, headers={"Authorization": f"Bearer {token}"})


def test_a_signed_token_reads_only_its_pipes_and_its_own_rows(http, project, server):
    org42 = project.create_token(["org_orders"], {"org_id": 42}, expires_in=3600, name="org42")
    both = http.get("/v0/pipes/org_orders.json", params={"org_id": "7"}, headers=ADMIN).json()["data"]
    assert [r["item"] for r in both] == ["cup", "pot"]  # the admin token reads org 7's rows

    mine = [("mug", 42), ("tea", 42)]
    for params in ({}, {"org_id": "7"}, {"org_id": ["7", "42"]}, {"ORG_ID": "7", "org_id ": "7"}):
        answer = org_rows(http, org42, **params)
        assert answer.status_code == 200, (params, answer.text)
        assert [(r["item"], r["org_id"]) for r in answer.json()["data"]] == mine, params
    by_query = http.get("/v0/pipes/org_orders.json", params={"org_id": "7", "token": org42})
    assert [(r["item"], r["org_id"]) for r in by_query.json()["data"]] == mine

    # Only its pipes, and nothing of the views API, events, ingest figures or metrics.
    assert [p["name"] for p in http.get("/v0/pipes", headers={"Authorization": f"Bearer {org42}"}).json()["pipes"]
            ] == ["org_orders"]
    documented = http.get("/v0/openapi.json", params={"token": org42}).json()["paths"]
    assert {p for p in documented if p.startswith("/v0/pipes/")} == {
        f"/v0/pipes/org_orders.{fmt}" for fmt in ("json", "csv", "ndjson")}
    # The pinned parameter is not offered to the tenant (the admin's document has it).
    assert documented["/v0/pipes/org_orders.json"]["get"]["parameters"] == []
    assert [p["name"] for p in http.get("/v0/pipes", params={"token": org42}).json()["pipes"][0]["parameters"]] == []
    admin_doc = http.get("/v0/openapi.json", headers=ADMIN).json()["paths"]["/v0/pipes/org_orders.json"]["get"]
    assert [p["name"] for p in admin_doc["parameters"]] == ["org_id"]
    signed = {"Authorization": f"Bearer {org42}"}
    refused = http.get("/v0/pipes/top.json", headers=signed)
    assert "org42" in assert_error(refused, 403, "PF813")["error"] and org42 not in refused.text
    assert_error(http.get("/v0/views", headers=signed), 403, "PF813")
    assert_error(http.get("/metrics", headers=signed), 403, "PF813")
    assert_error(post_events(http, [FIXTURE[0]], headers=signed), 403, "PF813")

    # Static tokens keep working beside them.
    assert http.get("/v0/pipes/top.json", headers=READER).status_code == 200


def test_expired_forged_and_foreign_signed_tokens_are_refused(http, project):
    from pipeframe.tokens import PipeScope, mint

    scope = [PipeScope("org_orders", {"org_id": 42})]
    expired = mint(SIGNING_KEY, project.config.name, "old", scope, 60, now=time.time() - 3600)
    body = assert_error(org_rows(http, expired), 403, "PF832")
    assert "expired" in body["error"]
    forged = mint("another-key-of-32-bytes-or-more-000", project.config.name, "forged", scope, 3600)
    assert "signature" in assert_error(org_rows(http, forged), 403, "PF831")["error"].lower()
    header, _payload, signature = project.create_token(["org_orders"], {"org_id": 42}, 3600).split(".")
    widened = mint(SIGNING_KEY, project.config.name, "x", [PipeScope("org_orders", {"org_id": 7})], 3600)
    tampered = ".".join((header, widened.split(".")[1], signature))  # org 7's claims under org 42's signature
    assert_error(org_rows(http, tampered), 403, "PF831")
    other = mint(SIGNING_KEY, "another_project", "x", scope, 3600)
    assert "another project" in assert_error(org_rows(http, other), 403, "PF831")["error"]


def test_a_signed_token_over_its_rate_limit_gets_429_and_others_do_not(http, project, server):
    limiter = server.service.limiter
    now = [1000.25]
    limiter.clock = lambda: now[0]  # a frozen clock: every request below falls in the same second
    try:
        burst = project.create_token(["org_orders"], {"org_id": 42}, 3600, rps=2, name="burst")
        calm = project.create_token(["org_orders"], {"org_id": 7}, 3600, rps=1, name="calm")
        assert [org_rows(http, burst).status_code for _ in range(2)] == [200, 200]
        refused = org_rows(http, burst)
        assert_error(refused, 429, "PF833")
        assert refused.headers["Retry-After"] == "1"
        assert [r["org_id"] for r in org_rows(http, calm).json()["data"]] == [7, 7]  # another name: unaffected
        now[0] = 1001.0  # the next second
        assert org_rows(http, burst).status_code == 200
    finally:
        limiter.clock = time.monotonic


def test_random_tenants_and_parameter_spellings_never_reach_another_tenants_rows(http, project):
    """Property: whatever a tenant's token pins and whatever the request sends (any spelling of the parameter,
    repeated, other values), every row answered is the tenant's own; a token expired or signed with another key is
    refused (403) whatever its shape."""
    from hypothesis import given, settings
    from hypothesis import strategies as st

    from pipeframe.tokens import PipeScope, mint

    orgs = {row["org_id"] for row in ORDERS_FIXTURE}
    values = st.one_of(st.integers(-5, 100).map(str), st.sampled_from(["7", "42", "", "7,42", "' OR 1=1 --"]))
    spellings = st.sampled_from(["org_id", "ORG_ID", "Org_Id", "org_id ", " org_id", "org_id[]", "org-id"])
    sent = st.dictionaries(spellings, st.one_of(values, st.lists(values, min_size=2, max_size=3)), max_size=4)

    @given(tenant=st.sampled_from(sorted(orgs) + [99]), params=sent, rps=st.none() | st.just(1000),
           fate=st.sampled_from(["valid", "valid", "expired", "forged"]))
    @settings(max_examples=40, deadline=None, database=None, derandomize=True)
    def check(tenant: int, params: dict, rps: int | None, fate: str) -> None:
        key = SIGNING_KEY if fate != "forged" else "a-forger-s-signing-key-of-32-bytes-x"
        issued = time.time() - (7200 if fate == "expired" else 0)
        token = mint(key, project.config.name, f"tenant{tenant}", [PipeScope("org_orders", {"org_id": tenant})],
                     3600, rps, now=issued)
        answer = org_rows(http, token, **params)
        if fate != "valid":
            assert_error(answer, 403, "PF832" if fate == "expired" else "PF831")
            return
        assert answer.status_code == 200, answer.text
        rows = answer.json()["data"]
        assert {row["org_id"] for row in rows} <= {tenant}
        assert len(rows) == sum(row["org_id"] == tenant for row in ORDERS_FIXTURE)

    check()


# ------------------------------------------------------------------------------------------ metrics
def scrape(http: httpx.Client) -> dict[tuple[str, tuple], float]:
    """Every sample of GET /metrics, by name and sorted labels."""
    from prometheus_client.parser import text_string_to_metric_families

    answer = http.get("/metrics", headers=ADMIN)
    assert answer.status_code == 200 and answer.headers["content-type"].startswith("text/plain"), answer.text
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(answer.text) for s in family.samples}


def moved(before: dict, after: dict) -> dict[tuple[str, tuple], float]:
    return {key: value - before.get(key, 0) for key, value in after.items() if value != before.get(key, 0)}


def test_metrics_count_requests_errors_ingest_and_view_lag(http, project):
    assert_error(http.get("/metrics"), 401, "PF811")
    assert_error(http.get("/metrics", headers=READER), 403, "PF813")
    before = scrape(http)
    engines = {http.get("/v0/pipes/top.json", headers=READER).json()["statistics"]["engine"] for _ in range(3)}
    assert len(engines) == 1
    [engine] = engines
    assert_error(http.get("/v0/pipes/search.json", headers=DASHBOARD), 403, "PF813")
    assert_error(http.get("/v0/pipes/search.json", params={"max_quantity": "many"}, headers=READER), 400, "PF202")
    assert_error(http.get("/v0/pipes/no_such_pipe_42.json", headers=ADMIN), 404, "PF801")
    landed = post_events(http, [FIXTURE[0], FIXTURE[1], "not json"], headers=INGEST)
    assert landed.status_code == 200 and landed.json()["successful_rows"] == 2, landed.text
    after = scrape(http)

    def endpoint(pipe: str, status: str, engine: str) -> tuple:
        return (("engine", engine), ("pipe", pipe), ("status", status))

    changed = moved(before, after)
    events = (("datasource", "events"),)
    assert {k: v for k, v in changed.items() if k[0] in (
        "pipeframe_endpoint_requests_total", "pipeframe_endpoint_request_duration_seconds_count",
        "pipeframe_http_errors_total", "pipeframe_ingest_requests_total", "pipeframe_ingest_rows_total",
        "pipeframe_ingest_commits_total", "pipeframe_ingest_quarantined_rows_total")} == {
        ("pipeframe_endpoint_requests_total", endpoint("top", "2xx", engine)): 3,
        ("pipeframe_endpoint_request_duration_seconds_count", endpoint("top", "2xx", engine)): 3,
        ("pipeframe_endpoint_requests_total", endpoint("search", "4xx", "none")): 2,
        ("pipeframe_endpoint_request_duration_seconds_count", endpoint("search", "4xx", "none")): 2,
        ("pipeframe_endpoint_requests_total", endpoint("_other", "4xx", "none")): 1,
        ("pipeframe_endpoint_request_duration_seconds_count", endpoint("_other", "4xx", "none")): 1,
        ("pipeframe_http_errors_total", (("code", "PF813"), ("status", "403"))): 1,
        ("pipeframe_http_errors_total", (("code", "PF202"), ("status", "400"))): 1,
        ("pipeframe_http_errors_total", (("code", "PF801"), ("status", "404"))): 1,
        ("pipeframe_ingest_requests_total", events): 1,
        ("pipeframe_ingest_rows_total", events): 2,
        ("pipeframe_ingest_commits_total", events): 1,
        ("pipeframe_ingest_quarantined_rows_total", events): 1,
    }
    assert after[("pipeframe_ingest_buffered_requests", events)] == 0
    assert after[("pipeframe_view_lag_versions", (("view", "hourly"),))] == 0  # wait=true: applied
    assert after[("pipeframe_view_visible_ms", (("view", "hourly"),))] >= 0
    assert changed[("pipeframe_view_refresh_round_duration_seconds_count", ())] >= 1
    assert not any("no_such_pipe" in str(key) or "many" in str(key) for key in after)  # no raw URLs or values


def access_log_line(caplog, start: str) -> str:
    """The path of the first access-log line whose path starts with `start` (written just after the answer)."""
    for _ in range(100):
        paths = [r.args[2] for r in caplog.records if r.name == "uvicorn.access" and str(r.args[2]).startswith(start)]
        if paths:
            return paths[0]
        time.sleep(0.05)
    raise AssertionError(f"no access-log line for {start}")


def test_sql_injection_payloads_are_rejected_or_inert(http, project):
    before = tables(project)
    rejected = [
        ("max_quantity", "1 OR 1=1"), ("max_quantity", "1; DROP TABLE events"), ("limit", "1 UNION SELECT 1"),
        ("min_amount", "0 OR 1=1"), ("min_amount", "0) OR (1=1"), ("paid", "true OR 1=1"),
        ("paid", "false' OR '1'='1"), ("since", "2024-01-01' OR '1'='1"), ("since", "2024-01-01) OR (1=1"),
        ("before", "2030-01-01 00:00:00' OR '1'='1"), ("before", "2030-01-01 00:00:00; DELETE FROM events"),
        ("quantities", "1) OR (1=1"), ("quantities", "1,2); DROP TABLE events; --"),
    ]
    for name, payload in rejected:
        assert_error(http.get("/v0/pipes/search.json", params={name: payload}, headers=READER), 400, "PF202", name)
    assert_error(http.get("/v0/pipes/top.json", params={"sort": "revenue; DROP TABLE events"}, headers=READER),
                 400, "PF203", "sort")
    assert_error(http.get("/v0/pipes/top.json", params={"currency": "EUR' OR '1'='1"}, headers=READER),
                 400, "PF202", "currency")

    inert = [
        ("user", "u1' OR '1'='1"), ("user", "'; DROP TABLE events; --"), ("user", "u1\\' OR 1=1 --"),
        ("user", "u1\" OR \"1\"=\"1"), ("user", "u1` OR 1=1 --"), ("user", "u1'/**/OR/**/'1'='1"),
        ("products", "mug') OR ('1'='1"), ("products", "x' OR 'a'='a"), ("products", "tea'; DELETE FROM events; --"),
    ]
    for name, payload in inert:
        answer = http.get("/v0/pipes/search.json", params={name: payload}, headers=READER)
        assert answer.status_code == 200, (name, payload, answer.text)
        assert answer.json()["rows"] == 0, (name, payload, answer.json()["data"])
    assert tables(project) == before


def test_openapi_lists_every_endpoint_with_its_typed_parameters(http):
    doc = http.get("/v0/openapi.json", headers=ADMIN).json()
    for name in ("search", "top", "product_days"):
        assert {f"/v0/pipes/{name}.{fmt}" for fmt in ("json", "csv", "ndjson")} <= set(doc["paths"])
    assert {"/v0/events", "/v0/views", "/v0/views/{name}", "/v0/views/{name}/backfill"} <= set(doc["paths"])
    search = doc["paths"]["/v0/pipes/search.json"]["get"]
    assert search["description"] == "Raw events filtered by a parameter of every type"
    params = {p["name"]: p for p in search["parameters"]}
    assert {name: p["x-pipeframe-type"] for name, p in params.items()} == {
        "min_amount": "Float", "max_quantity": "Int", "since": "Date", "before": "DateTime", "paid": "Boolean",
        "user": "String", "products": "Array(String)", "quantities": "Array(Int)", "limit": "Int"}
    assert params["min_amount"]["schema"] == {"type": "number", "default": 0.0}
    assert params["max_quantity"]["schema"]["type"] == "integer" and params["max_quantity"]["schema"]["default"] == 1000
    assert params["since"]["schema"]["format"] == "date" and params["paid"]["schema"]["type"] == "boolean"
    assert params["quantities"]["schema"]["items"]["type"] == "integer" and params["quantities"]["explode"] is False
    assert params["user"]["description"] == "Only this user" and params["user"]["required"] is False
    top = {p["name"]: p for p in doc["paths"]["/v0/pipes/top.json"]["get"]["parameters"]}
    assert top["currency"]["schema"] == {"type": "string", "enum": ["EUR", "USD"], "default": "EUR"}
    product = doc["paths"]["/v0/pipes/product_days.csv"]["get"]["parameters"][0]
    assert (product["name"], product["required"]) == ("product", True)
    assert doc["components"]["securitySchemes"]["token"] == {"type": "apiKey", "in": "query", "name": "token"}

    # A token sees the endpoints it may read; the docs UI loads the document.
    mine = http.get("/v0/openapi.json", params={"token": SECRETS["reader"]}).json()["paths"]
    assert "/v0/pipes/search.json" in mine and "/v0/pipes/product_days.json" not in mine
    assert_error(http.get("/v0/openapi.json"), 401, "PF811")
    assert "swagger" in http.get("/docs").text.lower()


def test_openapi_follows_a_deploy_made_elsewhere(http, project):
    write_project(project.root, {"pipes/recent.pipe": SEARCH.replace("Raw events filtered", "Recent events filtered")})
    Project(project.root, spark=project.spark, environ={}).deploy()  # another Project: the server is not told

    def described() -> str:  # a look that finds the state store mid-write serves the previous snapshot once more
        paths = http.get("/v0/openapi.json", headers=ADMIN).json()["paths"]
        return paths.get("/v0/pipes/recent.json", {}).get("get", {}).get("description", "")[:22]

    assert until(described, "Recent events filtered", deadline_s=30) == "Recent events filtered"
    assert http.get("/v0/pipes/recent.json", headers=READER).json()["rows"] == count(project, "events")


def test_docs_load_swagger_ui_from_this_server(http):
    page = http.get("/docs")
    assert page.status_code == 200 and "SwaggerUIBundle" in page.text
    assert "://" not in page.text  # no CDN: the UI works without internet
    assets = re.findall(r'(?:src|href)="([^"]+)"', page.text)
    kinds = {}
    for url in assets:
        assert url.startswith("/"), url
        asset = http.get(url)
        assert asset.status_code == 200 and asset.content, url
        kinds[url.rsplit(".", 1)[-1]] = asset.headers["content-type"]
    assert "javascript" in kinds["js"] and kinds["css"].startswith("text/css")
    assert "SwaggerUIBundle" in http.get(next(u for u in assets if u.endswith(".js"))).text
    assert_error(http.get("/redoc"), 404, "PF814")


# ------------------------------------------------------------------------------------- the web console
def test_graph_lists_every_resource_and_what_triggers_what(http, project):
    graph = http.get("/v0/graph", headers=ADMIN)
    assert graph.status_code == 200, graph.text
    nodes = {n["id"]: n["kind"] for n in graph.json()["nodes"]}
    files = Project(project.root, spark=project.spark, environ={}).compiled  # with `recent`, deployed elsewhere
    assert list(nodes) == [str(key) for key in files.order]  # dependencies first
    assert {k: nodes[k] for k in ("datasource:events", "pipe:hourly", "datasource:hourly", "pipe:daily",
                                  "datasource:daily", "pipe:top", "pipe:recent")} == {
        "datasource:events": "datasource", "pipe:hourly": "materialized", "datasource:hourly": "view target",
        "pipe:daily": "materialized", "datasource:daily": "view target", "pipe:top": "endpoint",
        "pipe:recent": "endpoint"}
    edges = {(e["from"], e["to"]): e["relation"] for e in graph.json()["edges"]}
    assert len(edges) == len(files.edges)
    assert {pair: edges[pair] for pair in [("datasource:events", "pipe:hourly"), ("pipe:hourly", "datasource:hourly"),
                                           ("datasource:hourly", "pipe:daily"), ("datasource:hourly", "pipe:top"),
                                           ("datasource:orders", "pipe:org_orders")]} == {
        ("datasource:events", "pipe:hourly"): "triggers", ("pipe:hourly", "datasource:hourly"): "writes",
        ("datasource:hourly", "pipe:daily"): "triggers", ("datasource:hourly", "pipe:top"): "reads",
        ("datasource:orders", "pipe:org_orders"): "reads"}
    assert_error(http.get("/v0/graph", headers=READER), 403, "PF813")
    assert_error(http.get("/v0/graph"), 401, "PF811")


def test_the_console_is_served_from_the_package_without_a_token(http):
    moved = http.get("/ui", follow_redirects=False)
    assert moved.status_code in (307, 308) and moved.headers["location"].endswith("/ui/")
    page = http.get("/ui/")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert '<script type="module" src="app.js">' in page.text and "http" not in page.text.split("<body>")[1]
    scripts, seen = ["app.js"], set()
    while scripts:  # every module the console imports is shipped, and none comes from elsewhere
        name = scripts.pop()
        seen.add(name)
        script = http.get(f"/ui/{name}")
        assert script.status_code == 200 and "javascript" in script.headers["content-type"], name
        assert "//cdn" not in script.text and "https://" not in script.text, name
        scripts += [m for m in re.findall(r'from "\./([a-z]+\.js)"', script.text) if m not in seen]
    assert {"app.js", "api.js", "graph.js", "views.js", "playground.js", "quarantine.js"} <= seen
    assert http.get("/ui/app.css").status_code == 200
    assert_error(http.get("/ui/nope.js"), 404, "PF814")
    assert_error(http.get("/v0/dev/diagnostics", headers=ADMIN), 404, "PF814")  # `pipeframe dev` only


def test_nan_and_infinity_answer_as_null(http):
    answer = http.get("/v0/pipes/non_finite.json", headers=ADMIN)
    assert answer.status_code == 200, answer.text
    strict = {"parse_constant": lambda name: pytest.fail(f"{name} is not JSON")}
    expected = [{"nan": None, "inf": None, "ninf": None, "x": 1.5}]
    assert json.loads(answer.text, **strict)["data"] == expected
    lines = http.get("/v0/pipes/non_finite.ndjson", headers=ADMIN).text.splitlines()
    assert [json.loads(line, **strict) for line in lines] == expected
    as_csv = http.get("/v0/pipes/non_finite.csv", headers=ADMIN).text.splitlines()
    assert as_csv == ["nan,inf,ninf,x", "nan,inf,-inf,1.5"]  # as ClickHouse writes them in CSV


# --------------------------------------------------------------------------------------------- events
def test_events_land_through_the_views_and_bad_lines_are_quarantined(http, project):
    revenue = revenue_by_product(http)
    before = quarantined(project)
    good = [{"ts": "2024-05-03 08:00:00", "user": "u9", "product": "mug", "amount": 10.0, "quantity": 1},
            {"ts": "2024-05-03 08:30:00", "user": "u9", "product": "kettle", "amount": 45.0, "quantity": 1}]
    bad = ["{not json", json.dumps({"ts": "not a time", "user": "u9", "product": "mug", "amount": 1})]
    answer = post_events(http, [good[0], bad[0], good[1], bad[1]])
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert (body["successful_rows"], body["quarantined_rows"]) == (2, 2)
    assert "line is not valid JSON" in body["quarantine_reasons"]
    assert {v["view"]: v["outcome"] for v in body["views"]} == {"hourly": "applied", "daily": "applied"}
    after = revenue_by_product(http)
    assert after == {**revenue, "mug": revenue["mug"] + 10.0, "kettle": 45.0}
    assert quarantined(project) == before + 2

    assert_error(post_events(http, good, headers=ADMIN, name="nope"), 404, "PF702")
    assert_error(post_events(http, good, headers=ADMIN, name="hourly"), 400, "PF716")
    assert_error(http.post("/v0/events", content=b"{}", headers=INGEST), 400, "PF815", "name")
    assert_error(http.post("/v0/events", params={"name": "events"}, content=b"\n \n", headers=INGEST), 400, "PF815")
    assert revenue_by_product(http) == after


def test_quarantined_rows_are_read_newest_first_through_the_read_path(http, project):
    answer = http.get("/v0/datasources/events/quarantine", headers=ADMIN)
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert [m["name"] for m in body["meta"]] == ["raw", "reason", "source", "ingested_at"]
    assert body["rows"] == quarantined(project) >= 2 and body["statistics"]["engine"] == "duckdb"
    newest = body["data"][:2]  # the previous test's two bad lines, landed together
    assert {r["raw"] for r in newest} == {"{not json", json.dumps({"ts": "not a time", "user": "u9",
                                                                   "product": "mug", "amount": 1})}
    assert all(r["reason"] for r in newest)
    assert body["data"] == sorted(body["data"], key=lambda r: r["ingested_at"], reverse=True)
    one = http.get("/v0/datasources/events/quarantine", params={"limit": "1"}, headers=ADMIN).json()
    assert one["rows"] == 1 and one["data"][0]["raw"] in {r["raw"] for r in newest}

    clean = http.get("/v0/datasources/orders/quarantine", headers=ADMIN).json()  # nothing ever quarantined
    assert (clean["rows"], clean["data"]) == (0, [])
    assert_error(http.get("/v0/datasources/nope/quarantine", headers=ADMIN), 404, "PF702")
    assert_error(http.get("/v0/datasources/hourly/quarantine", headers=ADMIN), 400, "PF716")
    assert_error(http.get("/v0/datasources/events/quarantine", params={"limit": "0"}, headers=ADMIN), 400, "PF815",
                 "limit")
    assert_error(http.get("/v0/datasources/events/quarantine", headers=INGEST), 403, "PF813")


def test_every_acknowledged_commit_and_a_rebuilds_swap_are_in_the_very_next_answer(http, project):
    """The read path reads each table at its newest committed version: rows a `wait=true` request landed, and a view
    rebuilt into a new version and swapped in, are in the answer of the request that follows."""
    for i in range(4):
        product = f"fresh-{i}"
        landed = post_events(http, [{"ts": "2024-05-04 12:00:00", "user": "u7", "product": product,
                                     "amount": 1.25 + i, "quantity": 1}])
        assert landed.status_code == 200, landed.text
        answer = http.get("/v0/pipes/top.json", params={"limit": "100"}, headers=READER)
        assert answer.status_code == 200 and answer.json()["statistics"]["engine"] == "duckdb", answer.text
        assert {r["product"]: r["revenue"] for r in answer.json()["data"]}[product] == 1.25 + i

    for amount in (1.0, 2.0):  # two state rows of one key: the rebuild below folds them into one
        assert post_events(http, [{"ts": "2024-05-04 12:30:00", "user": "u7", "product": "fresh-0", "amount": amount,
                                   "quantity": 1}]).status_code == 200
    before = http.get("/v0/pipes/top.json", params={"limit": "100"}, headers=READER).json()
    old = project.warehouse.snapshot(fresh=True).table("hourly")
    [rebuilt, *_] = project.refresh("hourly", full=True)
    new = project.warehouse.snapshot(fresh=True).table("hourly")
    assert rebuilt.outcome == "rebuilt" and new.path != old.path
    after = http.get("/v0/pipes/top.json", params={"limit": "100"}, headers=READER).json()
    assert after["data"] == before["data"]
    rows = project.spark.read.format("delta").load(new.path).count()  # one row per key after the rebuild
    assert after["statistics"]["rows_read"] == rows < before["statistics"]["rows_read"]


def test_endpoint_requests_are_answered_in_parallel_while_events_land(http, server):
    """Readers on many threads and a writer at once: every read answers 200 on the read path, with an answer from
    before or after the write, never a half-applied one."""
    import concurrent.futures

    def read(_: int) -> tuple[int, str, float]:
        with httpx.Client(base_url=server.url, timeout=120) as client:
            answer = client.get("/v0/pipes/top.json", params={"limit": "100"}, headers=READER)
            body = answer.json()
            revenue = {r["product"]: r["revenue"] for r in body.get("data", [])}.get("mug", 0.0)
            return answer.status_code, body.get("statistics", {}).get("engine", ""), revenue

    before = revenue_by_product(http)["mug"]
    with concurrent.futures.ThreadPoolExecutor(16) as pool:
        reads = [pool.submit(read, i) for i in range(48)]
        landed = post_events(http, [{"ts": "2024-05-04 13:00:00", "user": "u8", "product": "mug", "amount": 5.0,
                                     "quantity": 1}])
        results = [r.result() for r in reads]
    assert landed.status_code == 200, landed.text
    assert {(status, engine) for status, engine, _ in results} == {(200, "duckdb")}
    assert {revenue for *_, revenue in results} <= {before, before + 5.0}
    assert revenue_by_product(http)["mug"] == before + 5.0


def quarantined(project: Project) -> int:
    path = project.warehouse.quarantine_path("events")
    return project.spark.read.format("delta").load(path).count() if Path(path).exists() else 0


# ----------------------------------------------------------------------------------------------- views
def test_views_api_lists_pauses_and_resumes(http, project):
    listed = http.get("/v0/views", headers=ADMIN).json()["views"]
    assert {v["name"]: v["status"] for v in listed} == {"hourly": "active", "daily": "active"}
    detail = http.get("/v0/views/hourly", headers=ADMIN).json()
    assert (detail["name"], detail["pipe"], detail["source"], detail["lag_versions"]) == ("hourly", "hourly",
                                                                                          "events", 0)
    assert http.get("/v0/views/daily/backfill", headers=ADMIN).json() == {"view": "daily", "status": "active",
                                                                            "backfill": None}
    assert_error(http.get("/v0/views/nope", headers=ADMIN), 404, "PF701")
    assert_error(http.patch("/v0/views/hourly", json={"paused": "maybe"}, headers=ADMIN), 400, "PF815", "paused")
    for change in ({"paused": "yes"}, {"paused": "true"}, {"paused": 1}, {"paused": True, "permanent": "yes"},
                   {"paused": False, "permanent": 0}):
        field = "permanent" if "permanent" in change else "paused"
        assert_error(http.patch("/v0/views/hourly", json=change, headers=ADMIN), 400, "PF815", field)
    assert http.get("/v0/views/hourly", headers=ADMIN).json()["status"] == "active"  # nothing was taken as true

    paused = http.patch("/v0/views/hourly", json={"paused": True}, headers=ADMIN)
    assert paused.status_code == 200 and paused.json()["view"]["status"] == "paused"
    revenue = revenue_by_product(http)
    landed = post_events(http, [{"ts": "2024-05-04 12:00:00", "user": "u5", "product": "pot", "amount": 5.0}])
    assert {v["view"]: v["outcome"] for v in landed.json()["views"]}["hourly"] == "paused"
    assert revenue_by_product(http) == revenue  # the new row waits
    status = http.get("/v0/views/hourly", headers=ADMIN).json()
    assert (status["status"], status["lag_versions"]) == ("paused", 1)

    resumed = http.patch("/v0/views/hourly", json={"paused": False}, headers=ADMIN)
    assert resumed.status_code == 200, resumed.text
    assert {r["view"]: r["outcome"] for r in resumed.json()["refresh"]} == {"hourly": "applied", "daily": "applied"}
    assert resumed.json()["view"]["status"] == "active"
    assert revenue_by_product(http) == {**revenue, "pot": revenue["pot"] + 5.0}


def test_delete_a_view_with_dependents_then_deploy_brings_it_back(http, project, server):
    revenue = revenue_by_product(http)
    refused = http.delete("/v0/views/hourly", headers=ADMIN)
    body = assert_error(refused, 409, "PF707")
    assert sorted((d["name"], d["kind"]) for d in body["dependents"]) == [
        ("daily", "view"), ("product_days", "endpoint"), ("top", "endpoint")]
    assert http.get("/v0/views/hourly", headers=ADMIN).status_code == 200  # nothing was dropped

    forced = http.delete("/v0/views/hourly", params={"force": "true"}, headers=ADMIN)
    assert forced.status_code == 200, forced.text
    assert sorted(d["name"] for d in forced.json()["deleted"]) == ["daily", "hourly", "product_days", "top"]
    assert "pipeframe deploy" in forced.json()["note"]
    assert_error(http.get("/v0/views/hourly", headers=ADMIN), 404, "PF701")
    assert_error(http.get("/v0/pipes/top.json", headers=ADMIN), 404, "PF803")
    assert_error(http.get("/v0/pipes/top.json", headers=READER), 403, "PF813")  # a token learns nothing more
    assert http.get("/v0/pipes/search.json", headers=READER).status_code == 200  # reads only `events`
    assert "/v0/pipes/top.json" not in http.get("/v0/openapi.json", headers=ADMIN).json()["paths"]
    last = project.history()[-1]
    assert last.result == "succeeded" and {c["action"] for c in last.plan["changes"]} == {"drop"}

    redeployed = Project(project.root, spark=project.spark, environ={})
    created = {c.name for c in redeployed.deploy().plan.pending if c.action == "create"}
    assert created == {"hourly", "daily", "top", "product_days"}
    server.service.reload(redeployed)
    assert revenue_by_product(http) == revenue


def assert_no_paths(answer: httpx.Response, project: Project) -> None:
    """No filesystem path of the warehouse or the project reaches a client."""
    for where in (project.warehouse.uri, str(project.root), "file:/", "Traceback"):
        assert where not in answer.text, (where, answer.text)


def test_a_view_in_error_is_reported_by_events_and_recovered_over_http(http, project):
    revenue = revenue_by_product(http)
    shutil.rmtree(project.warehouse.snapshot(fresh=True).table("hourly").path)  # someone deleted the view's files

    gone = http.get("/v0/pipes/top.json", headers=READER)  # a clear, retryable answer, not a 500 with a path
    assert_error(gone, 503, "PF807")
    assert int(gone.headers["retry-after"]) >= 1 and "hourly" in gone.json()["error"]
    assert_no_paths(gone, project)

    landed = post_events(http, [{"ts": "2024-05-05 09:00:00", "user": "u6", "product": "tea", "amount": 2.0}])
    assert landed.status_code == 200, landed.text
    assert {v["view"]: v["outcome"] for v in landed.json()["views"]}["hourly"] == "error"
    [problem] = [p for p in landed.json()["problems"] if p["view"] == "hourly"]
    assert problem["status"] == "error" and problem["message"]
    assert problem["fix"] == "POST /v0/views/hourly/recover"
    assert_no_paths(landed, project)
    status = http.get("/v0/views/hourly", headers=ADMIN)
    assert status.json()["status"] == "error" and status.json()["reason"]
    assert_no_paths(status, project)

    assert_error(http.post("/v0/views/hourly/recover", headers=READER), 403, "PF813")
    assert_error(http.post("/v0/views/nope/recover", headers=ADMIN), 404, "PF701")
    recovered = http.post("/v0/views/hourly/recover", headers=ADMIN)
    assert recovered.status_code == 200, recovered.text
    assert recovered.json()["refresh"][0] == {**recovered.json()["refresh"][0], "view": "hourly", "outcome": "rebuilt"}
    assert recovered.json()["view"]["status"] == "active"
    assert revenue_by_product(http) == {**revenue, "tea": revenue["tea"] + 2.0}
    again = post_events(http, [{"ts": "2024-05-05 10:00:00", "user": "u6", "product": "tea", "amount": 1.0}])
    assert again.status_code == 200 and "problems" not in again.json(), again.text


FOLLOWER = """\
import sys
from pipeframe.project import Project

print("ready", flush=True)
for line in sys.stdin:
    command, _, view = line.strip().partition(" ")
    project = Project(sys.argv[1])
    if command == "deploy":
        print("done", project.deploy().changes, flush=True)
    else:
        print("done", len(project.delete_view(view, force=True).plan.pending), flush=True)
"""


def test_the_server_follows_deploys_made_by_another_process(http, project, tmp_path):
    """Another process (its own JVM) rebuilds a view, drops it and deploys it again: the server's answers follow,
    and none of them shows a path of the warehouse."""
    answers: list[httpx.Response] = []

    def top() -> httpx.Response:
        answers.append(http.get("/v0/pipes/top.json", headers=READER))
        return answers[-1]

    revenue = revenue_by_product(http)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIPEFRAME_")}
    with (tmp_path / "worker.log").open("w") as log:
        worker = subprocess.Popen([sys.executable, "-c", FOLLOWER, str(project.root)], stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, stderr=log, text=True, env=env)

    def tell(command: str) -> None:
        worker.stdin.write(command + "\n")
        worker.stdin.flush()
        line = worker.stdout.readline()
        assert line.startswith("done"), (command, line, (tmp_path / "worker.log").read_text()[-3000:])

    try:
        assert worker.stdout.readline().strip() == "ready"
        # A rebuild: revenue in cents, so the view's tables move to new versions (the old ones are removed).
        write_project(project.root, {"pipes/hourly.pipe": HOURLY.replace("sum(amount)", "sum(amount * 100)")})
        tell("deploy")
        assert top().status_code == 200, answers[-1].text
        cents = {row["product"]: row["revenue"] for row in answers[-1].json()["data"]}
        assert cents == {name: pytest.approx(value * 100) for name, value in revenue.items()}

        tell("drop hourly")
        answers.append(http.get("/v0/pipes/top.json", headers=ADMIN))  # a reader's token learns nothing (403)
        assert_error(answers[-1], 404, "PF803")
        assert "hourly" not in [v["name"] for v in http.get("/v0/views", headers=ADMIN).json()["views"]]

        tell("deploy")
        assert top().status_code == 200, answers[-1].text
        assert {row["product"]: row["revenue"] for row in answers[-1].json()["data"]} == cents

        # Spark's own messages may hold a path: the server never passes one on.
        write_project(project.root, {"pipes/leak.pipe": f"NODE endpoint\nSQL >\n    SELECT raise_error('cannot read "
                                     f"{project.warehouse.uri}/tables/x/v9') AS x\nTYPE endpoint\n"})
        tell("deploy")
        answers.append(http.get("/v0/pipes/leak.json", headers=ADMIN))
        assert_error(answers[-1], 500, "PF807")
        assert "cannot read" in answers[-1].json()["error"]
    finally:
        worker.stdin.close()
        try:
            worker.wait(60)
        except subprocess.TimeoutExpired:
            worker.kill()
            worker.wait()
    for answer in answers:
        assert_no_paths(answer, project)
