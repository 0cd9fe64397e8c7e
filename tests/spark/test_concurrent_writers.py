"""Several writers at once on one datasource: two `pipeframe append` processes (each its own JVM) and a server
taking events, all appending to `events` and refreshing its views at the same time. Every row lands once, and
at the end every view equals the recomputation over the raw rows and is `active`."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
from datetime import datetime, timedelta
from pathlib import Path

import httpx

from pipeframe.project import Project
from pipeframe.server.app import start_server
from pipeframe.server.service import Service
from tests.conftest import DAILY, EVENTS, HOURLY, write_project

ROOT = Path(__file__).resolve().parents[2]
ROUNDS = 1  # appends per CLI process, one after another (each starts a JVM)
ROWS_PER_FILE = 300
MISFITS_PER_FILE = 3
EVENTS_PER_POST = 5

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


def cli_appends(root: Path, files: list[Path], outputs: list[subprocess.CompletedProcess]) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIPEFRAME_")}
    for file in files:
        command = [sys.executable, "-m", "pipeframe", "append", "events", str(file), "-p", str(root)]
        outputs.append(subprocess.run(command, check=False, cwd=ROOT, env=env, capture_output=True, text=True,
                                      timeout=900))


def test_two_cli_appends_and_a_server_taking_events_at_once(spark, spark_config) -> None:
    root = Path(spark_config.root) / "writers"
    shutil.rmtree(root, ignore_errors=True)
    write_project(root, {"datasources/events.datasource": EVENTS, "pipes/hourly.pipe": HOURLY,
                         "pipes/daily.pipe": DAILY})
    shutil.copy(Path(spark_config.root) / "pipeframe.yaml", root / "pipeframe.yaml")
    project = Project(root, spark=spark, environ={})
    project.deploy()

    sent: list[str] = []
    plan: dict[str, list[Path]] = {}
    for writer in ("a", "b"):
        plan[writer] = []
        for round_ in range(ROUNDS):
            file = root / f"{writer}{round_}.ndjson"
            sent += write_file(file, writer, round_)
            plan[writer].append(file)

    running = start_server(Service(project), port=0)
    answers: list[dict] = []
    failures: list[str] = []
    done = threading.Event()

    def post_events(client_id: int) -> None:
        with httpx.Client(base_url=running.url, timeout=600) as http:
            n = 0
            while not done.is_set():
                keys = [f"http{client_id}-{n}-{i}" for i in range(EVENTS_PER_POST)]
                body = "".join(json.dumps(row(k, n + i)) + "\n" for i, k in enumerate(keys))
                answer = http.post("/v0/events", params={"name": "events"}, content=body.encode())
                if answer.status_code != 200:
                    failures.append(answer.text)
                    return
                answers.append(answer.json())
                sent.extend(keys)
                n += 1

    outputs: list[subprocess.CompletedProcess] = []
    try:
        posters = [threading.Thread(target=post_events, args=(i,)) for i in range(2)]
        writers = [threading.Thread(target=cli_appends, args=(root, files, outputs)) for files in plan.values()]
        for thread in posters + writers:
            thread.start()
        for thread in writers:
            thread.join()
        done.set()
        for thread in posters:
            thread.join()
    finally:
        done.set()
        running.stop()

    assert not failures, failures[0]
    assert len(outputs) == 2 * ROUNDS
    for out in outputs:
        assert out.returncode == 0, out.stdout + out.stderr
        assert "error" not in out.stdout.lower() and "Traceback" not in out.stderr, out.stdout + out.stderr
    assert answers, "the server took no events while the CLI appends ran"
    outcomes = {v["outcome"] for answer in answers for v in answer["views"]}
    assert outcomes <= {"applied", "up to date"}, outcomes

    # Every acknowledged row once, every misfit in quarantine.
    after = Project(root, spark=spark, environ={})
    landed = [r[0] for r in after.query("SELECT user_id FROM events").collect()]
    assert len(landed) == len(sent) and set(landed) == set(sent)
    quarantined = after.query("SELECT count(*) FROM events_quarantine").first()[0]
    assert quarantined == 2 * ROUNDS * MISFITS_PER_FILE

    # Every view applied everything exactly once and is active.
    assert {v.view: v.outcome for v in after.refresh()} == {"hourly": "up to date", "daily": "up to date"}
    assert {s.name: s.status for s in after.status()} == {"hourly": "active", "daily": "active"}

    def query(sql: str) -> list[tuple]:
        return [tuple(r) for r in after.query(sql).collect()]

    assert query("SELECT hour, n, total FROM hourly ORDER BY 1") == query(HOURLY_TRUTH)
    assert query("SELECT day, n FROM daily ORDER BY 1") == query(DAILY_TRUTH)
    print(f"writers: {len(outputs)} CLI appends, {len(answers)} event requests, {len(landed)} rows landed once, "
          f"{quarantined} quarantined")
