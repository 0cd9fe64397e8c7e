"""Real-time ingestion on a real uvicorn server over real Spark + Delta: group commit (concurrent requests share
commits, each lands whole), Tinybird's answers (202 once committed, 200 with wait=true once the views applied
the rows, 429 with Retry-After when the buffer is full), idempotency keys (a retried request lands once, also
after a restart, also from the CLI's Python API), and the figures of `GET /v0/ingest` and the views API."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
from click.testing import CliRunner

from pipeframe.cli import main
from pipeframe.project import INGEST_WINDOW, Project
from pipeframe.server import RunningServer, Service, start_server
from tests.spark.conftest import deployed

EVENTS = """\
SCHEMA >
    `ts` TIMESTAMP `json:$.ts`,
    `user_id` STRING `json:$.user`,
    `amount` DOUBLE `json:$.amount`
"""
BY_USER = """\
NODE by_user
SQL >
    SELECT user_id, count(*) AS orders, sum(amount) AS revenue
    FROM events
    GROUP BY user_id
TYPE materialized
DATASOURCE by_user
"""
TOTAL = """\
NODE total
SQL >
    SELECT sum(orders) AS orders, sum(revenue) AS revenue
    FROM by_user
TYPE materialized
DATASOURCE total
"""
FILES = {"datasources/events.datasource": EVENTS, "pipes/by_user.pipe": BY_USER, "pipes/total.pipe": TOTAL}


@pytest.fixture(scope="module")
def project(spark, spark_config) -> Project:
    return deployed(spark, spark_config, "events_api", FILES)


@pytest.fixture
def server(project: Project) -> Iterator[RunningServer]:
    running = start_server(Service(Project(project.root, spark=project.spark, environ={})), "127.0.0.1", 0)
    try:
        yield running
    finally:
        running.stop()


def post(url: str, rows: list, *, wait: bool = False, key: str | None = None) -> httpx.Response:
    body = "".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows)
    headers = {"Idempotency-Key": key} if key else {}
    params = {"name": "events", **({"wait": "true"} if wait else {})}
    return httpx.post(f"{url}/v0/events", params=params, content=body.encode(), headers=headers, timeout=300)


def rows(user: str, n: int, amount: float = 1.0) -> list[dict]:
    return [{"ts": "2024-06-01 10:00:00", "user": user, "amount": amount} for _ in range(n)]


def source_rows(project: Project, user: str) -> int:
    path = project.warehouse.snapshot(fresh=True).table("events").path
    return project.spark.read.format("delta").load(path).where(f"user_id = '{user}'").count()


def view_orders(project: Project, user: str) -> int:
    answer = project.query(f"SELECT orders FROM by_user WHERE user_id = '{user}'").collect()
    return int(answer[0][0]) if answer else 0


def test_concurrent_requests_share_commits_and_each_lands_whole(server: RunningServer, project: Project):
    users = [f"g{i}" for i in range(24)]
    before = server.service.committer.stats().get("events", {}).get("commits", 0)
    with ThreadPoolExecutor(12) as pool:
        answers = list(pool.map(lambda u: post(server.url, [*rows(u, 5), "{broken"]), users))
    # Read at once: rows_per_second counts the last minute, and the checks below can take longer than that on a
    # loaded machine.
    figures = httpx.get(f"{server.url}/v0/ingest").json()["datasources"]["events"]
    assert [a.status_code for a in answers] == [202] * len(users), [a.text for a in answers]
    assert {(a.json()["successful_rows"], a.json()["quarantined_rows"]) for a in answers} == {(5, 1)}
    versions = {a.json()["version"] for a in answers}
    stats = server.service.committer.stats()["events"]
    assert stats["commits"] - before == len(versions) < len(users)  # requests were grouped into fewer commits
    assert stats["requests"] >= len(users) and stats["buffered_requests"] == 0
    assert all(source_rows(project, u) == 5 for u in users)  # each request landed whole, exactly once

    assert figures["commits"] == stats["commits"] and figures["rows_per_second"] > 0
    # Every group was typed without Spark and committed by pyarrow; a line that gives a key twice takes Spark's
    # parse (its commit still pyarrow's): each way is counted.
    assert figures["arrow_parsed_commits"] == figures["arrow_committed_commits"] == figures["commits"]
    # `pipeframe status` reads the same from the table's log (each commit's record and engineInfo), with no server.
    shown = status_json(project)["ingest"]
    assert shown["datasource"] == "events" and shown["commits_read"] < INGEST_WINDOW  # the whole log was read
    assert shown["typed_without_spark"] == shown["committed_by_pyarrow"] == shown["group_commits"] >= len(versions)
    twice = post(server.url, ['{"ts": "2024-06-01 10:00:00", "user": "g-twice", "user": "g-again", "amount": 1}'])
    assert twice.status_code == 202 and twice.json()["successful_rows"] == 1
    after = httpx.get(f"{server.url}/v0/ingest").json()["datasources"]["events"]
    assert (after["commits"], after["arrow_parsed_commits"], after["arrow_committed_commits"]) == \
        (figures["commits"] + 1, figures["arrow_parsed_commits"], figures["arrow_committed_commits"] + 1)
    later = status_json(project)["ingest"]
    assert (later["group_commits"], later["typed_without_spark"], later["committed_by_pyarrow"]) == \
        (shown["group_commits"] + 1, shown["typed_without_spark"], shown["committed_by_pyarrow"] + 1)
    table = CliRunner().invoke(main, ["status", "by_user", "-p", str(project.root)])
    assert table.exit_code == 0, table.output
    group = later["group_commits"]
    cells = [[cell.strip() for cell in line.split("│")[1:-1]] for line in table.output.splitlines()]
    assert ["events", f"{group:,} of its last {later['commits_read']:,} commits",
            f"{group - 1:,} ({100 * (group - 1) / group:.0f}%)", f"{group:,} (100%)"] in cells, table.output


def status_json(project: Project) -> dict:
    """`pipeframe status by_user --json` in this process (the CLI's own Project: logs read without Spark)."""
    answer = CliRunner().invoke(main, ["status", "by_user", "--json", "-p", str(project.root)])
    assert answer.exit_code == 0, answer.output
    [view] = json.loads(answer.output)
    return view


def test_a_body_starting_with_null_lands_its_objects_and_the_server_goes_on(server, project):
    """pyarrow 26's JSON reader crashes the process on a block whose first value is `null` (engine/jsonlines.py
    keeps such lines from it): the objects land, the other lines are quarantined, the next request is answered."""
    answer = post(server.url, ["null", *rows("n1", 2), " null", "7"])
    assert answer.status_code == 202, answer.text
    assert (answer.json()["successful_rows"], answer.json()["quarantined_rows"]) == (2, 3)
    assert post(server.url, rows("n1", 1)).status_code == 202 and source_rows(project, "n1") == 3


def test_wait_answers_once_every_view_applied_the_rows_and_without_wait_they_follow(server, project):
    waited = post(server.url, rows("w1", 3, 2.0), wait=True)
    assert waited.status_code == 200, waited.text
    assert {v["view"]: v["outcome"] for v in waited.json()["views"]} == {"by_user": "applied", "total": "applied"}
    assert view_orders(project, "w1") == 3  # visible the moment the answer arrives

    accepted = post(server.url, rows("w2", 4))
    assert accepted.status_code == 202 and "views" not in accepted.json()
    deadline = time.monotonic() + 120
    while view_orders(project, "w2") != 4 and time.monotonic() < deadline:  # the background loop applies them
        time.sleep(0.2)
    assert view_orders(project, "w2") == 4
    status = httpx.get(f"{server.url}/v0/views/by_user").json()
    assert status["lag_versions"] == 0 and status["lag_ms"] == 0 and status["rows_per_second"] > 0
    assert status["visible_ms"] is not None and status["visible_ms"] >= 0


def test_a_retried_request_lands_once_also_after_a_restart(project: Project, server: RunningServer):
    first = post(server.url, rows("k1", 2) + ["[1]"], key="order-77")
    again = post(server.url, rows("k1", 2) + ["[1]"], key="order-77")
    assert first.status_code == again.status_code == 202
    assert "idempotent-replayed" not in first.headers and again.headers["idempotent-replayed"] == "true"
    assert (again.json()["successful_rows"], again.json()["quarantined_rows"], again.json()["version"]) == (
        2, 1, first.json()["version"])
    server.stop()

    restarted = start_server(Service(Project(project.root, spark=project.spark, environ={})), "127.0.0.1", 0)
    try:
        third = post(restarted.url, rows("k1", 2), key="order-77", wait=True)
        assert third.status_code == 200 and third.headers["idempotent-replayed"] == "true"
        other = post(restarted.url, rows("k1", 1), key="order-78", wait=True)
        assert other.json()["successful_rows"] == 1 and "idempotent-replayed" not in other.headers
    finally:
        restarted.stop()
    assert source_rows(project, "k1") == 3 and view_orders(project, "k1") == 3


def test_one_runtime_per_process_across_reloads_and_servers(project: Project):
    """A project's appends and the server that serves it share one runtime (one group committer, one continuous
    materializer), kept across the project's reloads; once a server stopped, the process's next appends and its
    next server start afresh instead of finding a stopped committer."""
    fresh = Project(project.root, spark=project.spark, environ={})
    runtime = fresh.runtime
    reloaded = fresh.reload()  # outside a server the runtime works for the project as read last
    assert reloaded.runtime is runtime and runtime.current() is reloaded
    first = start_server(Service(fresh), "127.0.0.1", 0)
    try:
        assert first.service.runtime is fresh.runtime is fresh.reload().runtime
        assert first.service.committer is fresh.committer
        assert post(first.url, rows("r1", 2), wait=True).status_code == 200
    finally:
        first.stop()
    assert fresh.append("events", rows("r1", 1)).accepted == 1  # not "the server is stopping"
    second = start_server(Service(fresh), "127.0.0.1", 0)
    try:
        assert second.service.committer is fresh.committer is not first.service.committer
        waited = post(second.url, rows("r1", 3), wait=True)
        assert waited.status_code == 200 and {v["outcome"] for v in waited.json()["views"]} == {"applied"}
    finally:
        second.stop()
    assert source_rows(project, "r1") == 6 and view_orders(project, "r1") == 6


def test_the_python_api_keys_files_too(project: Project, tmp_path):
    data = tmp_path / "batch.ndjson"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows("f1", 3)))
    fresh = Project(project.root, spark=project.spark, environ={})
    landed = fresh.append("events", str(data), idempotency_key="file-1")
    replayed = fresh.append("events", str(data), idempotency_key="file-1")
    assert (landed.accepted, landed.replayed, replayed.replayed, replayed.version) == (3, False, True, landed.version)
    assert replayed.views == () and source_rows(project, "f1") == 3 and view_orders(project, "f1") == 3

    held = fresh.append("events", rows("f2", 2), views=False)  # committed only: the views wait for a refresh
    assert held.views == () and view_orders(project, "f2") == 0
    assert {r.view for r in fresh.refresh() if r.outcome == "applied"} == {"by_user", "total"}
    assert view_orders(project, "f2") == 2


def test_threads_appending_through_the_python_api_share_commits(project: Project):
    fresh = Project(project.root, spark=project.spark, environ={})
    barrier = threading.Barrier(8)

    def append(i: int):
        barrier.wait()
        return fresh.append("events", rows(f"t{i}", i + 1), views=False)

    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(append, range(8)))
    assert [r.accepted for r in results] == [i + 1 for i in range(8)]
    assert len({r.version for r in results}) < 8
    assert all(source_rows(project, f"t{i}") == i + 1 for i in range(8))


def test_a_full_buffer_answers_429_with_retry_after(spark, spark_config):
    slow = deployed(spark, spark_config, "events_buffer", FILES,
                    "ingest:\n  flush_ms: 4000\n  buffer_bytes: 200\n")
    running = start_server(Service(slow), "127.0.0.1", 0)
    try:
        with ThreadPoolExecutor(1) as pool:
            waiting = pool.submit(post, running.url, rows("b1", 2))  # waits 4 s in the buffer for company
            deadline = time.monotonic() + 60
            while running.service.committer.stats().get("events", {}).get("buffered_requests") != 1:
                assert time.monotonic() < deadline
                time.sleep(0.05)
            refused = post(running.url, rows("b2", 3))
            assert refused.status_code == 429 and refused.json()["code"] == "PF819"
            assert int(refused.headers["retry-after"]) >= 1 and "buffer_bytes" in refused.json()["hint"]
            assert waiting.result().status_code == 202
        assert httpx.get(f"{running.url}/v0/ingest").json()["datasources"]["events"]["rejected_requests"] == 1
    finally:
        running.stop()
    assert source_rows(slow, "b1") == 2 and source_rows(slow, "b2") == 0
