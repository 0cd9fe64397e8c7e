"""Several writers and refreshers at once on one datasource, each its own process where it matters: a server taking
events (group-committed, its continuous materializer refreshing), two `pipeframe refresh --follow` processes
refreshing the same views, a `pipeframe append` process and appends from this process. Every row lands once, and
after every round every view equals the recomputation over the raw rows and is `active`: no range is applied
twice, whoever wins each race."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from datetime import datetime, timedelta
from pathlib import Path

import httpx

from pipeframe.project import Project
from pipeframe.server.app import start_server
from pipeframe.server.service import Service
from tests.conftest import DAILY, EVENTS, HOURLY, answered_tuples, write_project

ROOT = Path(__file__).resolve().parents[2]
ROUNDS = 3
POSTS_PER_ROUND = 10  # per HTTP client (two of them)
DIRECT_APPENDS = 4  # per round, from this process, views left to the refreshers
ROWS_PER_FILE = 300
MISFITS_PER_FILE = 3
EVENTS_PER_POST = 5
ENV = {k: v for k, v in os.environ.items() if not k.startswith("PIPEFRAME_")}

HOURLY_TRUTH = ("SELECT date_trunc('hour', ts) AS hour, count(*) AS n, sum(amount) AS total FROM events "
                "GROUP BY 1 ORDER BY 1")
DAILY_TRUTH = "SELECT date_trunc('day', ts) AS day, count(*) AS n FROM events GROUP BY 1 ORDER BY 1"


def row(key: str, i: int) -> dict:
    ts = datetime(2024, 5, 1) + timedelta(hours=(i * 7) % 72, minutes=i % 60)
    return {"ts": ts.strftime("%Y-%m-%d %H:%M:%S"), "user_id": key, "amount": i % 50 + 1}


def write_file(path: Path, writer: str, round_: int) -> list[str]:
    """An NDJSON file of unique rows (their keys returned) and a few that do not fit."""
    keys = [f"{writer}{round_}-{i}" for i in range(ROWS_PER_FILE)]
    lines = [json.dumps(row(k, i)) for i, k in enumerate(keys)]
    lines += [json.dumps({"ts": "2024-05-01 00:00:00", "user_id": f"bad-{writer}{round_}-{i}", "amount": "many"})
              for i in range(MISFITS_PER_FILE)]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return keys


def cli_append(root: Path, file: Path, outputs: list[subprocess.CompletedProcess]) -> None:
    command = [sys.executable, "-m", "pipeframe", "append", "events", str(file), "-p", str(root)]
    outputs.append(subprocess.run(command, check=False, cwd=ROOT, env=ENV, capture_output=True, text=True,
                                  timeout=900))


def caught_up(project: Project) -> bool:
    return all(s.status == "active" and s.lag_versions == 0 for s in project.status())


def test_followers_a_server_and_cli_appends_keep_every_view_exact(spark, spark_config) -> None:
    """Two `pipeframe refresh --follow` processes and the server's continuous materializer refresh the same views
    all the time, while the server takes events, this process appends (leaving the views to them) and a CLI append
    runs. After every round the views equal the recomputation."""
    root = Path(spark_config.root) / "writers"
    shutil.rmtree(root, ignore_errors=True)
    write_project(root, {"datasources/events.datasource": EVENTS, "pipes/hourly.pipe": HOURLY,
                         "pipes/daily.pipe": DAILY})
    config = (Path(spark_config.root) / "pipeframe.yaml").read_text() + "ingest:\n  poll_ms: 200\n"
    (root / "pipeframe.yaml").write_text(config)
    project = Project(root, spark=spark, environ={})
    project.deploy()

    sent: list[str] = []
    followers = [subprocess.Popen([sys.executable, "-m", "pipeframe", "refresh", "--follow", "-p", str(root)],
                                  cwd=ROOT, env=ENV, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True) for _ in range(2)]
    running = start_server(Service(project), port=0)
    failures: list[str] = []
    outputs: list[subprocess.CompletedProcess] = []

    def post_events(client: int, round_: int) -> None:
        with httpx.Client(base_url=running.url, timeout=600) as http:
            for n in range(POSTS_PER_ROUND):
                keys = [f"http{client}-{round_}-{n}-{i}" for i in range(EVENTS_PER_POST)]
                body = "".join(json.dumps(row(k, n + i)) + "\n" for i, k in enumerate(keys))
                answer = http.post("/v0/events", params={"name": "events"}, content=body.encode())
                if answer.status_code != 202:
                    failures.append(answer.text)
                    return
                sent.extend(keys)

    try:
        for round_ in range(ROUNDS):
            threads = [threading.Thread(target=post_events, args=(i, round_)) for i in range(2)]
            if round_ == 0:
                file = root / "cli.ndjson"
                sent.extend(write_file(file, "cli", round_))
                threads.append(threading.Thread(target=cli_append, args=(root, file, outputs)))
            for thread in threads:
                thread.start()
            for batch in range(DIRECT_APPENDS):  # the views are left to the three refreshers
                keys = [f"direct-{round_}-{batch}-{i}" for i in range(20)]
                project.append("events", [row(k, i) for i, k in enumerate(keys)], views=False)
                sent.extend(keys)
            for thread in threads:
                thread.join()
            assert not failures, failures[0]
            deadline = time.monotonic() + 300
            while not caught_up(project):
                assert time.monotonic() < deadline, [s.to_json() for s in project.status()]
                time.sleep(0.5)
            assert_views_exact(project, sent)
    finally:
        running.stop()
        logs = []
        for follower in followers:
            follower.send_signal(signal.SIGINT)
            logs.append(follower.communicate(timeout=120))

    for (out, err), follower in zip(logs, followers, strict=True):
        assert follower.returncode == 0 and "Traceback" not in out + err and "error" not in out, out + err
        assert out.startswith("Following") and out.rstrip().endswith("stopped"), out
    [out] = outputs
    assert out.returncode == 0 and "Traceback" not in out.stderr, out.stdout + out.stderr
    quarantined = project.query("SELECT count(*) FROM events_quarantine").first()[0]
    assert quarantined == MISFITS_PER_FILE
    applied = [sum(" applied" in line for line in out.splitlines()) for out, _ in logs]
    print(f"writers: {len(sent)} rows landed once; refreshes applied by the followers: {applied}")


def assert_views_exact(project: Project, sent: list[str]) -> None:
    landed = [r[0] for r in project.query("SELECT user_id FROM events").collect()]
    assert len(landed) == len(sent) and set(landed) == set(sent)

    def query(sql: str) -> list[tuple]:
        return answered_tuples(project, sql)

    assert query("SELECT hour, n, total FROM hourly ORDER BY 1") == query(HOURLY_TRUTH)
    assert query("SELECT day, n FROM daily ORDER BY 1") == query(DAILY_TRUTH)


def test_two_refreshers_that_read_one_watermark_apply_it_once_without_the_lock(spark, spark_config, monkeypatch):
    """What keeps a view exact where there is no file lock (object storage, simulated: `guarded_by_lock` answers
    False): both refreshers read the same watermark and build the same increment, then both commit it. The view's
    commit is then an idempotent Delta write on its transaction id (txnAppId = the view, txnVersion = the source
    version): the second is skipped or refused as a concurrent transaction and, retried from the new watermark,
    finds the view up to date."""
    from pipeframe.engine import tables
    from pipeframe.engine.conflicts import retrying
    from tests.spark.conftest import deployed

    monkeypatch.setattr(tables, "guarded_by_lock", lambda path: False)

    project = deployed(spark, spark_config, "unlocked", {"datasources/events.datasource": EVENTS,
                                                         "pipes/hourly.pipe": HOURLY, "pipes/daily.pipe": DAILY})
    project.append("events", [row(f"u{i}", i) for i in range(40)], views=False)
    write_states, gate, calls = tables.write_states, threading.Barrier(2, timeout=300), []

    def gated(*args, **kwargs):
        calls.append(1)
        if len(calls) <= 2:
            gate.wait()  # both have read the watermark and built their batch: now both commit
        return write_states(*args, **kwargs)

    monkeypatch.setattr(tables, "write_states", gated)
    outcomes: list[str] = []

    def refresh() -> None:
        materializer = Project(project.root, spark=spark, environ={}).materializer()
        view = materializer.resolve("hourly")
        outcomes.append(retrying(lambda: materializer._apply_increment(view)).outcome)  # no refresh lock

    threads = [threading.Thread(target=refresh) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(outcomes) == 2 and "applied" in outcomes, outcomes
    monkeypatch.undo()
    path = project.warehouse.snapshot(fresh=True).table("hourly").path
    latest = tables.latest_commit(spark, project.warehouse.snapshot().table("events").path).version
    recorded = [c for c in tables.history(spark, path) if getattr(c.metadata, "source_version", None) == latest]
    assert len(recorded) == 1, recorded  # one commit applied the range; the other was skipped or refused
    after = Project(project.root, spark=spark, environ={})
    assert answered_tuples(after, "SELECT hour, n, total FROM hourly ORDER BY 1") == answered_tuples(after, HOURLY_TRUTH)
