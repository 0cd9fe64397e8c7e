"""`pipeframe serve` killed with SIGKILL at a random moment of a burst of events, twice, then restarted: clients
send every request that was not acknowledged again with the same Idempotency-Key (as a client of Tinybird's
Events API would). No request is ever half landed; at the end every request's rows are in the source exactly
once, and every view equals the recomputation."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx

from pipeframe.engine.localserver import free_port
from pipeframe.project import Project
from tests.conftest import DAILY, EVENTS, HOURLY, answered_tuples
from tests.spark.conftest import deployed

ROOT = Path(__file__).resolve().parents[2]
ENV = {k: v for k, v in os.environ.items() if not k.startswith("PIPEFRAME_")}
REQUESTS = 90
ROWS = 5  # per request
CLIENTS = 4
SEED = int(os.environ.get("PIPEFRAME_CRASH_SEED", random.randrange(1_000_000)))



def body(request: int) -> bytes:
    rows = [{"ts": f"2024-05-0{1 + request % 3} {request % 24:02d}:{i:02d}:00", "user_id": f"r{request}-{i}",
             "amount": request % 7 + i} for i in range(ROWS)]
    return "".join(json.dumps(r) + "\n" for r in rows).encode()


class Server:
    """`pipeframe serve` as its own process; `kill` is a SIGKILL."""

    def __init__(self, root: Path) -> None:
        self.port = free_port()
        self.process = subprocess.Popen([sys.executable, "-m", "pipeframe", "serve", "--port", str(self.port), "-p",
                                         str(root)], cwd=ROOT, env=ENV, stdin=subprocess.DEVNULL,
                                        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        self.url = f"http://127.0.0.1:{self.port}"
        deadline = time.monotonic() + 600
        while True:
            try:
                if httpx.get(f"{self.url}/v0/ingest", timeout=60).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            assert self.process.poll() is None, self.process.communicate()[1]
            assert time.monotonic() < deadline, "the server never answered"
            time.sleep(0.5)

    def kill(self) -> None:
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(60)

    def stop(self) -> str:
        self.process.terminate()
        _, err = self.process.communicate(timeout=120)
        return err


def burst(url: str, todo: list[int], acked: set[int], wait_last: bool = False) -> None:
    """CLIENTS threads send the requests of `todo`; each acknowledged one is added to `acked`. A request cut off by
    the server's death is simply not acknowledged."""
    lock = threading.Lock()
    queue = list(todo)

    def client() -> None:
        with httpx.Client(timeout=300) as http:
            while True:
                with lock:
                    if not queue:
                        return
                    request = queue.pop(0)
                try:
                    answer = http.post(f"{url}/v0/events", params={"name": "events"}, content=body(request),
                                       headers={"Idempotency-Key": f"request-{request}"})
                except httpx.TransportError:
                    return  # the server is gone
                if answer.status_code == 202:
                    assert answer.json()["successful_rows"] == ROWS, answer.text
                    with lock:
                        acked.add(request)

    threads = [threading.Thread(target=client) for _ in range(CLIENTS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if wait_last:  # every view has applied everything committed before this answer
        answer = httpx.post(f"{url}/v0/events", params={"name": "events", "wait": "true"}, content=body(todo[-1]),
                            headers={"Idempotency-Key": f"request-{todo[-1]}"}, timeout=300)
        assert answer.status_code == 200, answer.text


def landed_per_request(project: Project) -> dict[int, int]:
    rows = project.query("SELECT user_id FROM events").collect()
    counts: dict[int, int] = {}
    for (user,) in rows:
        request = int(user[1:].split("-")[0])
        counts[request] = counts.get(request, 0) + 1
    return counts


def test_serve_killed_during_bursts_lands_every_request_once(spark, spark_config) -> None:
    print(f"seed {SEED} (PIPEFRAME_CRASH_SEED={SEED} replays it)")
    chance = random.Random(SEED)
    project = deployed(spark, spark_config, "events_crash", {
        "datasources/events.datasource": EVENTS, "pipes/hourly.pipe": HOURLY, "pipes/daily.pipe": DAILY})
    acked: set[int] = set()
    for life in range(2):
        server = Server(project.root)
        todo = [r for r in range(REQUESTS) if r not in acked]
        sender = threading.Thread(target=burst, args=(server.url, todo, acked))
        sender.start()
        time.sleep(chance.uniform(0.5, 4.0))
        server.kill()
        sender.join()
        counts = landed_per_request(Project(project.root, spark=spark, environ={}))
        assert set(counts.values()) <= {ROWS}, "a request was half landed"
        assert acked <= set(counts), "an acknowledged request is missing"
        print(f"life {life}: killed with {len(acked)} acknowledged, {len(counts)} landed")

    server = Server(project.root)
    try:
        burst(server.url, [r for r in range(REQUESTS) if r not in acked] or [0], acked, wait_last=True)
    finally:
        err = server.stop()
    assert "Traceback" not in err, err
    assert acked == set(range(REQUESTS))

    after = Project(project.root, spark=spark, environ={})
    assert landed_per_request(after) == {r: ROWS for r in range(REQUESTS)}  # every request once, whole
    assert {s.name: (s.status, s.lag_versions) for s in after.status()} == {"hourly": ("active", 0),
                                                                            "daily": ("active", 0)}

    def query(sql: str) -> list[tuple]:
        return answered_tuples(after, sql)

    assert query("SELECT hour, n, total FROM hourly ORDER BY 1") == query(
        "SELECT date_trunc('hour', ts), count(*), sum(amount) FROM events GROUP BY 1 ORDER BY 1")
    assert query("SELECT day, n FROM daily ORDER BY 1") == query(
        "SELECT date_trunc('day', ts), count(*) FROM events GROUP BY 1 ORDER BY 1")
