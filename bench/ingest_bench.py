"""Real-time ingestion: `POST /v0/events` against a real `pipeframe serve`, next to a plain Delta append loop.

Usage: python bench/ingest_bench.py [--seconds 20] [--clients 64] [--scenarios A,B,RA,RB,RC]
       [--paced A=200,B=50,RA=200,RB=50] [--profile-rows 100000] [--json F] [--write]

Just the real-shaped datasource (issue 33) and the flat one beside it, with their plain Delta append floors, no
Spark-writer comparison and no append profile (about 10 minutes on 2 cores):
    python bench/ingest_bench.py --seconds 20 --warmup 5 --no-compare-writer --profile-rows 0 --json /tmp/ingest.json
(add --write to put the figures into docs/benchmarks.md; --scenarios RA,RB,RC --paced RA=200,RB=50 for the
real-shaped one alone).

The benchmark's project (bench/scenario.py: the `events` datasource and its three views) is deployed into a temp
warehouse and served by `python -m pipeframe serve` in its own process (so the HTTP clients and the server do not
share a GIL). K client threads post NDJSON batches for a fixed time each scenario (A: 10-row batches, B: 1,000-row
batches); each request is answered 202 once its rows are committed (group commit). Then the same server is sent
requests at fixed rates (`--paced`, open loop: the latency at the targets' load). Measured: sustained requests/s
and rows/s, request latency p50/p95/p99, and, after the run, commit → visible-in-view from the Delta logs (for each
source commit, the first commit of each view whose recorded source version covers it; through the upstream view's
commits for a cascading view). Side by side: the same batches appended one after another with
`.write.format("delta").mode("append")` from this process (the floor on this machine). Then a profile of one
`Project.append` of --profile-rows rows with the three views, next to a plain Delta append (PRODUCT.md section 8).
`--write` puts the results into docs/benchmarks.json (`ingest`) and the section "Real-time ingestion" of
docs/benchmarks.md. Targets are printed next to the figures, never asserted.
"""

from __future__ import annotations

import argparse
import bisect
import itertools
import json
import math
import os
import random
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Self

import report
from common import ratio, rounded, summary
from scenario import ENDPOINT_COUNT, SECONDS_PER_ROW, START_EPOCH, write_pipeframe_project

from pipeframe.plan import records

BENCH = Path(__file__).resolve().parent
DOCS = BENCH.parent / "docs"
SCENARIOS = {"A": 10, "B": 1000}  # rows per request
PACED = {"A": 200.0, "B": 50.0}  # requests/s sent open loop: issue 14's 200 requests/s and 50,000 rows/s
# The real-shaped datasource (issue 33): its scenarios, rows per request, sent like A and B; RC by 8 clients that each
# open a new connection per request and wait for its answer (curl, urllib, most trackers).
REAL = {"RA": 10, "RB": 1000, "RC": 10}
REAL_PACED = {"RA": 200.0, "RB": 50.0}
FRESH, FRESH_CLIENTS = "RC", 8
REAL_TARGETS = {
    "requests_per_s": ("≥ 200 requests/s of 10-row batches (RA)", 200.0),
    "rows_per_s": ("≥ 50,000 rows/s in 1,000-row batches (RB)", 50_000.0),
    "latency_p95_s": ("p95 request latency ≤ 0.5 s at those rates", 0.5),
    "visible_p95_s": ("p95 commit → visible in every view ≤ 3 s", 3.0),
    "fresh_per_s": ("≥ 100 requests/s, 8 closed-loop clients, a new connection per request (RC)", 100.0),
}
WEBLOGS_DATASOURCE = """\
DESCRIPTION >
    Web tracker events as real Tinybird projects declare them
SCHEMA >
    `ts` DateTime64(3, 'UTC') `json:$.ts`,
    `host` LowCardinality(String) `json:$.host`,
    `path` String `json:$.req.path`,
    `method` LowCardinality(String) `json:$.req.method`,
    `status` UInt16 `json:$.status`,
    `latency_ms` Float32 `json:$.latency_ms`,
    `bytes` UInt32 `json:$.bytes`,
    `tags` Array(String) `json:$.tags[:]`,
    `attrs` Map(String, String) `json:$.attrs`,
    `user_id` Nullable(String) `json:$.user.id`,
    `country` LowCardinality(Nullable(String)) `json:$['geo info'].country`,
    `price` Decimal(10, 2) `json:$.price`,
    `retries` UInt8 `json:$.retries` DEFAULT 0,
    `session_id` UUID `json:$.session`
ENGINE "MergeTree"
ENGINE_PARTITION_KEY toYYYYMM(ts)
ENGINE_SORTING_KEY host, ts
ENGINE_TTL ts + INTERVAL 3650 DAYS
"""
WEBLOGS_VIEWS = {
    "weblogs_by_minute": "SELECT date_trunc('minute', ts) AS minute, host, status, count(*) AS requests, "
                         "sum(bytes) AS bytes FROM weblogs GROUP BY 1, 2, 3",
    "weblogs_by_path": "SELECT path, method, count(*) AS hits, avg(latency_ms) AS latency FROM weblogs GROUP BY 1, 2",
    "weblogs_by_country": "SELECT country, approx_count_distinct(user_id) AS users, sum(price) AS revenue "
                          "FROM weblogs GROUP BY 1",
}
# A plain Delta append of the same lines: Spark's from_json of them, flattened (the floor).
WEBLOGS_JSON = ("ts TIMESTAMP, host STRING, req STRUCT<path: STRING, method: STRING>, status INT, latency_ms FLOAT, "
                "bytes BIGINT, tags ARRAY<STRING>, attrs MAP<STRING,STRING>, user STRUCT<id: STRING>, "
                "price DECIMAL(10,2), retries SMALLINT, session STRING")
WEBLOGS_FLAT = ("r.ts, r.host, r.req.path AS path, r.req.method AS method, r.status, r.latency_ms, r.bytes, r.tags, "
                "r.attrs, r.user.id AS user_id, r.price, r.retries, r.session AS session_id")
MISFIT_EVERY = 500  # one line in this many does not fit (a negative UInt16, a time that is none, not JSON)
SECTION = "## Real-time ingestion"
BEFORE = "## Sections kept"  # where the section goes on a page that has none yet
# Issue 14's targets: (key, text, comparison)
TARGETS = {
    "requests_per_s": ("≥ 200 requests/s of 10-row batches", 200.0),
    "rows_per_s": ("≥ 50,000 rows/s in 1,000-row batches", 50_000.0),
    "latency_p95_s": ("p95 request latency ≤ 0.5 s", 0.5),
    "visible_p95_s": ("p95 commit → visible in every view ≤ 3 s", 3.0),
}
DELTA_SCHEMA = "ts TIMESTAMP, user_id STRING, endpoint STRING, status INT, latency DOUBLE, bytes BIGINT"


def log(message: str) -> None:
    print(f"[{datetime.now():%H:%M:%S}] {message}", file=sys.stderr, flush=True)


# ------------------------------------------------------------------------------------------- pure logic
def percentile(values: Sequence[float], q: float) -> float | None:
    """The q-th percentile (0..100) by linear interpolation between closest ranks (numpy's default); None when
    there are no values."""
    if not values:
        return None
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100
    low, high = math.floor(rank), math.ceil(rank)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


@dataclass(frozen=True)
class ViewCommit:
    """A commit of a view's table that recorded a watermark: its version, when, and the source version it covers."""

    version: int
    epoch: float
    source_version: int


def first_covering(commits: Sequence[ViewCommit], version: int) -> ViewCommit | None:
    """The first commit (by version) whose recorded source version is at least `version`: when a source commit
    became visible in the view. `commits` sorted by version; a watermark never goes back, but a later commit
    recording a lower one (e.g. a rebuild that started over) is skipped by comparing with the running maximum."""
    highest, marks = -1, []
    for commit in commits:
        highest = max(highest, commit.source_version)
        marks.append(highest)
    index = bisect.bisect_left(marks, version)
    return commits[index] if index < len(commits) else None


def visible_delays(source: Iterable[tuple[int, float]], chain: Sequence[Sequence[ViewCommit]]) -> list[float | None]:
    """Per source commit (version, epoch), seconds until the last view of `chain` had applied it (None: not by
    the end of its log). `chain` is the view's commits for a view over the source, or for a cascading view the
    commits of each view from the source down: [upstream view, ..., the view], each recording the version of
    the one before it."""
    delays: list[float | None] = []
    for version, epoch in source:
        covering, wanted = None, version
        for level in chain:
            covering = first_covering(level, wanted)
            if covering is None:
                break
            wanted = covering.version
        delays.append(None if covering is None else max(0.0, covering.epoch - epoch))
    return delays


def request_figures(records: Sequence[tuple[float, float, int]], window: tuple[float, float], rows: int) -> dict:
    """What the clients saw: records are (start, end, HTTP status; 0 = no answer), counted when they ended inside
    `window` (start, end) on the same clock. Latencies are of the successful (2xx) requests."""
    start, end = window
    seconds = end - start
    inside = [r for r in records if start <= r[1] <= end]
    ok = [r for r in inside if 200 <= r[2] < 300]
    latencies = [r[1] - r[0] for r in ok]
    statuses: dict[str, int] = {}
    for record in inside:
        statuses[str(record[2])] = statuses.get(str(record[2]), 0) + 1
    return {"seconds": round(seconds, 2), "requests": len(ok), "rows": len(ok) * rows,
            "requests_per_s": round(len(ok) / seconds, 1) if seconds > 0 else 0.0,
            "rows_per_s": round(len(ok) * rows / seconds, 1) if seconds > 0 else 0.0,
            "statuses": statuses, **latency_figures(latencies)}


def latency_figures(latencies: Sequence[float]) -> dict:
    def at(q: float) -> float | None:
        return rounded(percentile(latencies, q))

    return {"latency_p50_s": at(50), "latency_p95_s": at(95), "latency_p99_s": at(99),
            "latency_max_s": round(max(latencies), 3) if latencies else None}


def verdicts(results: dict) -> list[tuple[str, str, bool | None]]:
    """Each target with what was measured and whether it is met (None: not measured). Throughput is the closed-loop
    scenarios' (the most the server sustains); latency and visibility are taken at the targets' load, from the
    open-loop scenarios sent at it, when the run has them (at saturation, K closed-loop clients wait about K /
    throughput whatever the server does: queueing, not service)."""
    scenarios = results.get("scenarios", {})
    a, b = scenarios.get("A", {}), scenarios.get("B", {})
    paced = results.get("paced") or {}
    at_load = {name: paced.get(name) or scenarios.get(name, {}) for name in SCENARIOS}

    def how(name: str) -> str:
        s = paced.get(name)
        return (f" sent at {s['offered_per_s']:g} requests/s ({s['offered_per_s'] * s['rows_per_request']:,.0f} rows/s):"
                if s else "")

    out: list[tuple[str, str, bool | None]] = []

    def add(key: str, measured: float | None, text: str, met: Callable[[float, float], bool]) -> None:
        label, goal = TARGETS[key]
        out.append((label, text if measured is not None else "not measured",
                    None if measured is None else met(measured, goal)))

    add("requests_per_s", a.get("requests_per_s"), f"{a.get('requests_per_s', 0):,.0f} requests/s (scenario A)",
        lambda m, g: m >= g)
    add("rows_per_s", b.get("rows_per_s"), f"{b.get('rows_per_s', 0):,.0f} rows/s (scenario B)",
        lambda m, g: m >= g)
    worst = max((s.get("latency_p95_s") or 0 for s in at_load.values() if s), default=None) if any(
        at_load.values()) else None
    add("latency_p95_s", worst, "A{} {} s, B{} {} s".format(how("A"), at_load["A"].get("latency_p95_s"), how("B"),
                                                           at_load["B"].get("latency_p95_s")), lambda m, g: m <= g)
    visible = [s.get("visible", {}).get("p95_slowest_view_s") for s in at_load.values()]
    known = [v for v in visible if v is not None]
    add("visible_p95_s", max(known) if known else None, f"A{how('A')} {visible[0]} s, B{how('B')} {visible[1]} s",
        lambda m, g: m <= g)
    return out


# ------------------------------------------------------------------------------------------------ rows
def ndjson_lines(first_id: int, count: int, seed: int = 14) -> list[str]:
    """Rows of the scenario's request log as NDJSON (time-ordered like scenario.generate; ISO timestamps)."""
    rng = random.Random(seed * 1_000_003 + first_id)
    lines = []
    for row in range(first_id, first_id + count):
        ts = START_EPOCH + int(row * SECONDS_PER_ROW + rng.random() * 60)
        lines.append(json.dumps({
            "ts": datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "user_id": f"u{rng.randrange(100_000)}", "endpoint": f"/api/{rng.randrange(ENDPOINT_COUNT)}",
            "status": rng.choice((200, 200, 200, 201, 304, 404, 500)),
            "latency": round(rng.random() * rng.random() * 2000, 2), "bytes": rng.randrange(100_000)},
            separators=(",", ":")))
    return lines


def weblog_lines(first_id: int, count: int, seed: int = 33) -> list[str]:
    """Web tracker events of the real-shaped datasource: nested objects, a key with a space, an array, a map, a
    missing optional field now and then, times with milliseconds, prices; one line in MISFIT_EVERY a misfit."""
    rng = random.Random(seed * 1_000_003 + first_id)
    lines = []
    for row in range(first_id, first_id + count):
        ts = START_EPOCH + row * SECONDS_PER_ROW + rng.random() * 60
        event = {"ts": datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3],
                 "host": f"site{rng.randrange(8)}.example.com",
                 "req": {"path": f"/p/{rng.randrange(ENDPOINT_COUNT)}", "method": rng.choice(("GET", "GET", "POST"))},
                 "status": rng.choice((200, 200, 200, 201, 304, 404, 500)), "latency_ms": round(rng.random() * 900, 2),
                 "bytes": rng.randrange(100_000), "tags": rng.sample(("a", "b", "mobile", "beta", "ads"), 2),
                 "attrs": {"ua": "Mozilla/5.0", "ref": f"r{rng.randrange(20)}"},
                 "user": {"id": f"u{rng.randrange(100_000)}"} if rng.random() < 0.9 else {},
                 "geo info": {"country": rng.choice(("ES", "FR", "DE", "US"))}, "price": round(rng.random() * 100, 2),
                 "session": f"{rng.getrandbits(128):032x}"}
        event["session"] = "-".join((event["session"][:8], event["session"][8:12], event["session"][12:16],
                                     event["session"][16:20], event["session"][20:]))
        if rng.random() < 0.5:
            event["retries"] = rng.randrange(3)
        if row % MISFIT_EVERY == MISFIT_EVERY - 1:
            misfit = row // MISFIT_EVERY % 3
            if misfit == 0:
                event["status"] = -5
            elif misfit == 1:
                event["ts"] = "yesterday"
        lines.append("{not json" if row % MISFIT_EVERY == MISFIT_EVERY - 1 and row // MISFIT_EVERY % 3 == 2
                     else json.dumps(event, separators=(",", ":")))
    return lines


def bodies(rows: int, count: int, landing: str = "events") -> list[bytes]:
    make = weblog_lines if landing == "weblogs" else ndjson_lines
    return [("\n".join(make(i * rows, rows)) + "\n").encode() for i in range(count)]


# ------------------------------------------------------------------------------------------- the server
def cpu_seconds(pid: int, descendants: bool = True) -> float:
    """User + system CPU seconds of a process, and of all its descendants unless told not to (the server's JVM is
    its child)."""
    tick = os.sysconf("SC_CLK_TCK")
    total, stack = 0.0, [pid]
    while stack:
        current = stack.pop()
        try:
            fields = Path(f"/proc/{current}/stat").read_text().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / tick
            if descendants:
                for task in Path(f"/proc/{current}/task").iterdir():
                    stack += [int(c) for c in (task / "children").read_text().split()]
        except (OSError, ValueError, IndexError):
            continue
    return total


class Server:
    """`python -m pipeframe serve` in its own process, output to a log file; stopped with Ctrl-C (SIGINT)."""

    def __init__(self, root: Path, log_path: Path, options: Sequence[str] = (), code: Path = BENCH.parent,
                 first_on_path: Sequence[str] = ()) -> None:
        self.log_path = log_path
        # The server runs this checkout's pipeframe, as this process does (or the one at `code`): started in `code`,
        # as `python -m` puts the working directory first on sys.path, before PYTHONPATH (`first_on_path`: folders
        # put before it all, e.g. modules that hide installed ones).
        path = os.pathsep.join(p for p in (*first_on_path, str(code), os.environ.get("PYTHONPATH", "")) if p)
        env = dict(os.environ, PYTHONUNBUFFERED="1", PYTHONPATH=path)
        self.out = log_path.open("w")
        self.process = subprocess.Popen([sys.executable, "-m", "pipeframe", "serve", "-p", str(Path(root).resolve()),
                                         "--port", "0", *options], stdout=self.out, stderr=subprocess.STDOUT, env=env,
                                        cwd=code)
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline:
            found = re.search(r"on (http://[\d.]+:\d+)", log_path.read_text())
            if found:
                self.url = found.group(1)
                return
            if self.process.poll() is not None:
                raise SystemExit(f"pipeframe serve exited:\n{log_path.read_text()[-3000:]}")
            time.sleep(0.2)
        self.stop()
        raise SystemExit("pipeframe serve did not start within 10 minutes")

    def cpu(self) -> tuple[float, float]:
        """CPU seconds so far of the server's Python process, and of it with its JVM."""
        return cpu_seconds(self.process.pid, descendants=False), cpu_seconds(self.process.pid)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)
            try:
                self.process.wait(90)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.out.close()


def drive(url: str, payloads: list[bytes], clients: int, warmup: float, seconds: float, landing: str = "events",
          fresh: bool = False) -> tuple[list, tuple]:
    """K client threads posting payloads in turn for warmup + seconds (`fresh`: each request on a new connection,
    closed after its answer, as curl and urllib do). Returns the records (start, end, status) and the measured
    window, on time.time()."""
    import http.client
    from urllib.parse import urlsplit

    import httpx

    host, port = urlsplit(url).hostname, urlsplit(url).port

    records: list[tuple[float, float, int]] = []
    guard = threading.Lock()
    begin = time.time()
    window = (begin + warmup, begin + warmup + seconds)

    def client(number: int) -> None:
        mine = []
        def fresh_post(body: bytes) -> int:
            connection = http.client.HTTPConnection(host, port, timeout=180)
            try:
                connection.request("POST", f"/v0/events?name={landing}", body,
                                   {"Content-Type": "application/x-ndjson", "Connection": "close"})
                answer = connection.getresponse()
                answer.read()
                return answer.status
            finally:
                connection.close()

        with httpx.Client(base_url=url, timeout=180, headers={"Content-Type": "application/x-ndjson"}) as http_:
            turn = number
            while time.time() < window[1]:
                body = payloads[turn % len(payloads)]
                turn += clients
                started = time.time()
                try:
                    status = fresh_post(body) if fresh else \
                        http_.post("/v0/events", params={"name": landing}, content=body).status_code
                except (httpx.HTTPError, OSError, http.client.HTTPException):
                    status = 0
                mine.append((started, time.time(), status))
                if status in (0, 429, 503):
                    time.sleep(1.0)  # Retry-After
        with guard:
            records.extend(mine)

    threads = [threading.Thread(target=client, args=(n,), daemon=True) for n in range(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return records, window


def drive_paced(url: str, payloads: list[bytes], rate: float, warmup: float, seconds: float,
                connections: int = 256, landing: str = "events", key_prefix: str | None = None) -> tuple[list, tuple]:
    """Open loop: request i is due at begin + i / rate whatever the answers before it, for warmup + seconds, sent on
    the first free one of up to `connections` keep-alive connections. Returns the records (due, end, status) and the
    measured window, on time.time(): a request's latency counts from when it was due, so a server answering slower
    than the rate cannot hide it by slowing the sender down (as a closed loop does). One asyncio loop writes
    prebuilt HTTP/1.1 requests and reads the answers (status line, headers, Content-Length body): a thread per
    request and a full HTTP client cost more CPU than the server's own work per 10-row request, and on two shared
    cores they made the sender, not the server, fall behind. `key_prefix`: request i carries the Idempotency-Key
    `<key_prefix><i>` (bench/kafka_bench.py finds each request's commit by it)."""
    import asyncio
    from urllib.parse import urlsplit

    address = urlsplit(url)
    host, port = address.hostname or "127.0.0.1", address.port or 80
    heads = [(f"POST /v0/events?name={landing} HTTP/1.1\r\nHost: {host}:{port}\r\n"
              f"Content-Type: application/x-ndjson\r\nContent-Length: {len(body)}\r\n").encode() for body in payloads]

    def request(number: int) -> bytes:
        key = f"Idempotency-Key: {key_prefix}{number}\r\n".encode() if key_prefix is not None else b""
        return heads[number % len(heads)] + key + b"\r\n" + payloads[number % len(payloads)]

    records: list[tuple[float, float, int]] = []

    async def answer(reader: asyncio.StreamReader) -> int:
        head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1").split("\r\n")
        length = next((int(line.split(":", 1)[1]) for line in head if line.lower().startswith("content-length:")), 0)
        await reader.readexactly(length)
        return int(head[0].split()[1])

    async def run() -> tuple[float, float]:
        free: asyncio.Queue = asyncio.Queue()
        opened = 0
        loop = asyncio.get_running_loop()

        async def send(when: float, request: bytes) -> None:
            nonlocal opened
            if free.empty() and opened < connections:
                opened += 1
                try:
                    connection = await asyncio.open_connection(host, port)
                except OSError:
                    opened -= 1
                    records.append((when, time.time(), 0))
                    return
            else:
                connection = await free.get()
            reader, writer = connection
            try:
                writer.write(request)
                status = await answer(reader)
            except (OSError, asyncio.IncompleteReadError, ValueError, IndexError):
                writer.close()
                opened -= 1
                records.append((when, time.time(), 0))
                return
            records.append((when, time.time(), status))
            free.put_nowait(connection)

        begin = time.time()
        end = begin + warmup + seconds
        tasks = []
        for number in itertools.count():
            when = begin + number / rate
            if when >= end:
                break
            await asyncio.sleep(max(0.0, when - time.time()))
            tasks.append(loop.create_task(send(when, request(number))))
        await asyncio.gather(*tasks)
        while not free.empty():
            free.get_nowait()[1].close()
        return begin + warmup, end

    window = asyncio.run(run())
    return records, window


# ----------------------------------------------------------------------------------- reading the logs
def table_commits(path: str) -> list:
    """A table's history, oldest first, from its Delta log in pure Python (no Spark job)."""
    from pipeframe.engine import deltalog
    from pipeframe.engine.conflicts import local_folder

    commits = deltalog.history(local_folder(path) or path)
    if commits is None:
        raise SystemExit(f"cannot read the Delta log of {path}")
    return sorted(commits, key=lambda c: c.version)


def view_chains(snapshot, landing: str) -> dict[str, list[str]]:
    """Per view over the landing datasource (directly or through other views), the table paths from the view that
    reads the datasource down to it."""
    views = {v.state.name: v for v in snapshot.views()}
    chains = {}
    for name, view in views.items():
        chain, current = [view.path], view
        while current.state.source in views:
            current = views[current.state.source]
            chain.insert(0, current.path)
        if current.state.source == landing:
            chains[name] = chain
    return chains


def visibility(snapshot, landing: str, window: tuple[float, float]) -> dict:
    """Commit → visible per view for the landing datasource's event commits made inside `window` (epochs)."""
    source = [c for c in table_commits(snapshot.table(landing).path)
              if isinstance(c.metadata, records.GroupCommit) and window[0] <= c.epoch <= window[1]]
    marks: dict[str, list[ViewCommit]] = {}
    per_view: dict[str, list[float | None]] = {}
    for name, chain in view_chains(snapshot, landing).items():
        levels = []
        for path in chain:
            if path not in marks:
                marks[path] = [ViewCommit(c.version, c.epoch, watermark) for c in table_commits(path)
                               if (watermark := recorded_watermark(c)) is not None]
            levels.append(marks[path])
        per_view[name] = visible_delays([(c.version, c.epoch) for c in source], levels)
    out: dict = {"source_commits": len(source), "views": {}}
    for name, delays in per_view.items():
        seen = [d for d in delays if d is not None]
        view_commits = [m for m in marks[chain_path(snapshot, name)] if window[0] <= m.epoch <= window[1] + 60]
        out["views"][name] = {"p50_s": rounded(percentile(seen, 50)), "p95_s": rounded(percentile(seen, 95)),
                              "max_s": rounded(max(seen, default=None)), "not_visible": len(delays) - len(seen),
                              "view_commits": len(view_commits)}
    slowest = max(out["views"].values(), key=lambda v: v["p95_s"] or 0, default=None)
    out["p95_slowest_view_s"] = slowest["p95_s"] if slowest else None
    every = [max(ds) for ds in zip(*per_view.values(), strict=True) if None not in ds]
    out["p95_all_views_s"] = rounded(percentile(every, 95))
    rows = [int(c.metrics.get("numOutputRows") or 0) for c in source]
    requests = [c.metadata.requests for c in source]
    gaps = [b.epoch - a.epoch for a, b in itertools.pairwise(source)]
    out["commits"] = {"count": len(source), "rows_median": rounded(statistics.median(rows)) if rows else None,
                      "requests_median": rounded(statistics.median(requests)) if requests else None,
                      "requests_max": max(requests, default=None), "requests_each": requests,
                      "interval_median_s": rounded(statistics.median(gaps)) if gaps else None,
                      "interval_p95_s": rounded(percentile(gaps, 95))}
    return out


def recorded_watermark(commit) -> int | None:
    """The source version a view's commit records as its watermark (None when it records none)."""
    record = commit.metadata
    return record.source_version if isinstance(record, records.ViewCommit) else None


def chain_path(snapshot, name: str) -> str:
    return next(v.path for v in snapshot.views() if v.state.name == name)


def caught_up(snapshot, landing: str, timeout: float) -> float | None:
    """Wait until every view (through cascades) recorded the source's latest version; the seconds it took."""
    started = time.monotonic()
    chains = view_chains(snapshot, landing)
    while time.monotonic() - started < timeout:
        latest = table_commits(snapshot.table(landing).path)[-1].version
        done = True
        for chain in chains.values():
            wanted = latest
            for path in chain:
                covering = first_covering([ViewCommit(c.version, c.epoch, watermark) for c in table_commits(path)
                                           if (watermark := recorded_watermark(c)) is not None], wanted)
                if covering is None:
                    done = False
                    break
                wanted = covering.version
        if done:
            return round(time.monotonic() - started, 2)
        time.sleep(0.5)
    return None


# -------------------------------------------------------------------------------------------- scenarios
def http_scenario(server: Server, snapshot, name: str, rows: int, clients: int, warmup: float,
                  seconds: float, rate: float | None = None, landing: str = "events", fresh: bool = False) -> dict:
    """One scenario against the server: `clients` closed-loop clients (each posts its next request when the last
    is answered: the most the server sustains), or, with `rate`, requests sent at that rate whatever the answers
    (open loop: the latency at a given load)."""
    import httpx

    payloads = bodies(rows, 64, landing)
    before = httpx.get(f"{server.url}/v0/ingest", timeout=60).json()
    (python, total), clients_cpu = server.cpu(), cpu_seconds(os.getpid(), descendants=False)
    if rate is None:
        records, window = drive(server.url, payloads, clients, warmup, seconds, landing, fresh)
    else:
        records, window = drive_paced(server.url, payloads, rate, warmup, seconds, landing=landing)
    (python_after, total_after) = server.cpu()
    clients_cpu = cpu_seconds(os.getpid(), descendants=False) - clients_cpu
    after = httpx.get(f"{server.url}/v0/ingest", timeout=60).json()
    figures = request_figures(records, window, rows)
    how = f"{clients} clients{', a new connection each request' if fresh else ''}" if rate is None else \
        f"sent at {rate:g} requests/s"
    log(f"scenario {name} ({rows}-row requests, {how}): {figures['requests_per_s']} requests/s, "
        f"{figures['rows_per_s']:,.0f} rows/s, p95 {figures['latency_p95_s']} s; waiting for the views")
    figures["catch_up_s"] = caught_up(snapshot, landing, 300)
    figures["visible"] = visibility(snapshot, landing, window)
    source = after["datasources"].get(landing, {})
    earlier = before["datasources"].get(landing, {})
    figures["server"] = {key: source.get(key, 0) - earlier.get(key, 0)
                         for key in ("commits", "requests", "rows", "quarantined_rows", "rejected_requests",
                                     "failed_requests", "arrow_parsed_commits", "arrow_committed_commits")}
    figures["server"]["materializer_rounds"] = after["materializer"]["rounds"] - before["materializer"]["rounds"]
    elapsed = warmup + seconds
    figures["cpu"] = {"server_cores": round((total_after - total) / elapsed, 2),
                      "server_python_cores": round((python_after - python) / elapsed, 2),
                      "clients_cores": round(clients_cpu / elapsed, 2)}
    figures.update(rows_per_request=rows, clients=clients, fresh_connections=fresh)
    if rate is not None:
        figures.update(offered_per_s=rate, clients=None)
    log(f"scenario {name}: visible p95 (slowest view) {figures['visible']['p95_slowest_view_s']} s, "
        f"{figures['visible']['commits']}; cpu {figures['cpu']}")
    return figures


def plain_floor(spark, folder: Path, rows: int, seconds: float, landing: str = "events") -> dict:
    """The same NDJSON batches appended one after another with a plain Delta write (one commit each)."""
    import pyarrow as pa

    path = str(folder / f"plain-{landing}-{rows}")
    payloads = bodies(rows, 64, landing)
    latencies, turn = [], 0
    schema, columns = (WEBLOGS_JSON, WEBLOGS_FLAT) if landing == "weblogs" else (DELTA_SCHEMA, "r.*")

    def append(body: bytes) -> None:
        frame = spark.createDataFrame(pa.table({"value": pa.array(body.decode().splitlines(), pa.string())}))
        frame.selectExpr(f"from_json(value, '{schema}') AS r").selectExpr(*columns.split(", ")) \
            .write.format("delta").mode("append").save(path)

    append(payloads[0])  # creates the table; not counted
    started = time.time()
    while time.time() - started < seconds:
        begin = time.time()
        append(payloads[turn % len(payloads)])
        latencies.append(time.time() - begin)
        turn += 1
    elapsed = time.time() - started
    out = {"seconds": round(elapsed, 2), "requests": len(latencies), "rows": len(latencies) * rows,
           "requests_per_s": round(len(latencies) / elapsed, 1), "rows_per_s": round(len(latencies) * rows / elapsed, 1),
           **latency_figures(latencies)}
    log(f"plain Delta append of {rows}-row batches: {out['requests_per_s']} appends/s, p95 {out['latency_p95_s']} s")
    return out


def conform_cost(project, repeats: int = 3) -> dict:
    """What a group commit's schema check costs: the lines typed without Spark (`jsonlines.type_lines`, the
    way of lines that all fit as sent), or in one Spark job against a plain JSON parse of the same lines:
    `conform_lines` (the datasource's schema check, quarantine reasons) and the misfit rows the commit collects
    (`Ingestor._misfits`), with the lines parsed by pyarrow (the path plain objects take) and read by Spark column
    by column (the path of every other batch), vs `from_json` of the lines counted. Seconds, median of `repeats`,
    for a tiny and a large group."""
    import pyarrow as pa

    from pipeframe.engine import ingest
    from pipeframe.engine.ingest import REASON, Ingestor, conform_lines
    from pipeframe.engine.jsonlines import type_lines

    spark = project.spark
    _table, definition = project.landing_target("events")
    out = {}
    fast = ingest._parsed

    def conform_count(lines: list[str], parts: list[int], requests: int) -> None:
        Ingestor._misfits(conform_lines(spark, lines, definition, parts).where(f"`{REASON}` IS NOT NULL"), requests)

    def json_count(lines: list[str]) -> None:
        spark.createDataFrame(pa.table({"value": pa.array(lines, pa.string())})) \
            .selectExpr(f"from_json(value, '{DELTA_SCHEMA}') AS r").where("r.ts IS NOT NULL").count()

    for rows, requests in ((10, 1), (40_000, 40)):
        lines = ndjson_lines(0, rows)
        parts = [i * requests // rows for i in range(rows)]
        conformed, by_spark, parsed, typed = [], [], [], []
        for _ in range(repeats + 1):  # the first is a warm-up
            typed.append(timed_s(type_lines, lines, definition, "UTC"))
            conformed.append(timed_s(conform_count, lines, parts, requests))
            ingest._parsed = lambda _lines, _definition: None
            try:
                by_spark.append(timed_s(conform_count, lines, parts, requests))
            finally:
                ingest._parsed = fast
            parsed.append(timed_s(json_count, lines))
        out[str(rows)] = {"typed_by_pyarrow_s": round(statistics.median(typed[1:]), 3),
                          "typed": type_lines(lines, definition, "UTC") is not None,
                          "conform_count_s": round(statistics.median(conformed[1:]), 3),
                          "spark_read_count_s": round(statistics.median(by_spark[1:]), 3),
                          "from_json_count_s": round(statistics.median(parsed[1:]), 3), "requests": requests,
                          "pyarrow": fast(lines, definition) is not None}
    log(f"conform + per-request count (pyarrow / Spark's read) vs from_json: {out}")
    return out


def timed_s(fn: Callable[..., object], *args: object) -> float:
    started = time.perf_counter()
    fn(*args)
    return time.perf_counter() - started


# ------------------------------------------------------------------------------------ Project.append profile
DRIVER_COMMIT = "source: conform, rows to the driver as Arrow (one Spark job), pyarrow Delta commit"


class StepClock:
    """Times the phases of `Project.append` by wrapping engine functions in this process while entered (the engine
    is not changed). Spans are leaves that do not nest; `view` is the view being refreshed."""

    def __init__(self) -> None:
        self.spans: list[tuple[str, str | None, float, float]] = []
        self._local = threading.local()  # views are refreshed on threads of their own, at once
        self._undo: list[tuple[object, str, object]] = []

    @property
    def view(self) -> str | None:
        return getattr(self._local, "view", None)

    @view.setter
    def view(self, name: str | None) -> None:
        self._local.view = name

    def _patch(self, owner: object, attr: str, make: Callable) -> None:
        original = getattr(owner, attr)
        self._undo.append((owner, attr, original))
        setattr(owner, attr, make(original))

    def _timed(self, label: str) -> Callable:
        def make(original):
            def timed(*args, **kwargs):
                started = time.perf_counter()
                try:
                    return original(*args, **kwargs)
                finally:
                    self.spans.append((label, self.view, started, time.perf_counter()))
            return timed
        return make

    def __enter__(self) -> Self:
        from pipeframe.engine import ingest, materialize, tables
        from pipeframe.engine.warehouse import Warehouse
        from pipeframe.project import Project

        self._patch(Project, "landing_target", self._timed("resolve the datasource and its table"))
        self._patch(ingest.Ingestor, "commit", self._timed("source: commit (whole)"))
        self._patch(ingest.Ingestor, "_commit_arrow", self._timed("source: by way of the driver (whole)"))
        self._patch(ingest, "retrying", self._timed("source: write"))
        self._patch(tables, "find_commit", self._timed("source: find the new version in the log"))
        self._patch(Warehouse, "view_records", self._timed("views: read the view records"))
        self._patch(tables, "read_watermark", self._timed("watermark read"))
        self._patch(materialize.Materializer, "_recent_commits", self._timed("source history read"))
        self._patch(materialize.Materializer, "_changes", self._timed("new rows (plan the read)"))
        self._patch(tables, "write_states", self._timed("state write (new rows read, aggregate, Delta commit)"))

        def per_view(original):
            def refresh_one(materializer, view, record):
                self.view = view.state.name
                started = time.perf_counter()
                try:
                    return original(materializer, view, record)
                finally:
                    self.spans.append(("view (whole)", self.view, started, time.perf_counter()))
                    self.view = None
            return refresh_one

        self._patch(materialize.Materializer, "_refresh_one", per_view)

        def lock(original):
            @contextmanager
            def timed_lock(*args, **kwargs):
                started = time.perf_counter()
                with original(*args, **kwargs):
                    self.spans.append(("view lock", self.view, started, time.perf_counter()))
                    yield
            return timed_lock

        self._patch(materialize, "view_lock", lock)
        return self

    def __exit__(self, *_exc) -> None:
        for owner, attr, original in reversed(self._undo):
            setattr(owner, attr, original)

    def steps(self, total: float) -> dict[str, float]:
        """Seconds per step of one append (ordered as they run); `other` is the rest of `total`."""
        out: dict[str, float] = {}

        def add(label: str, seconds: float) -> None:
            out[label] = out.get(label, 0.0) + seconds

        commit = next((s for s in self.spans if s[0] == "source: commit (whole)"), None)
        driver = next((s for s in self.spans if s[0] == "source: by way of the driver (whole)"), None)
        writes = sorted((s for s in self.spans if s[0] == "source: write"), key=lambda s: s[2])
        for label, view, started, ended in self.spans:
            if label in ("source: commit (whole)", "source: by way of the driver (whole)", "source: write",
                         "view (whole)"):
                continue
            add(f"{view}: {label}" if view else label, ended - started)
        if commit is not None and driver is not None:  # no Spark write of the rows; misfits Spark writes first
            for span in writes:
                add("source: quarantine write", span[3] - span[2])
            add(DRIVER_COMMIT, (driver[3] - driver[2]) - sum(span[3] - span[2] for span in writes))
            add("source: the rest of the commit (lock, checks)", (commit[3] - commit[2]) - (driver[3] - driver[2]))
        elif commit is not None:
            add("source: conform + count rows per request", (writes[0][2] if writes else commit[3]) - commit[2])
            for span in writes[:-1]:
                add("source: quarantine write", span[3] - span[2])
            if writes:
                add("source: Delta commit (write the rows)", writes[-1][3] - writes[-1][2])
            inner = sum(v for k, v in out.items() if k.startswith("source:"))
            add("source: the rest of the commit (cache release)", (commit[3] - commit[2]) - inner)
        for label, view, started, ended in self.spans:
            if label == "view (whole)":
                known = sum(e - s for lab, v, s, e in self.spans if v == view and lab != "view (whole)")
                add(f"{view}: other (view record checks, retries)", (ended - started) - known)
        add("other (the rest of Project.append)", total - sum(out.values()))
        source = [DRIVER_COMMIT, "source: the rest of the commit (lock, checks)",
                  "source: conform + count rows per request", "source: quarantine write",
                  "source: Delta commit (write the rows)", "source: find the new version in the log",
                  "source: the rest of the commit (cache release)"]
        views = [v for _, v, _, _ in sorted((s for s in self.spans if s[0] == "view (whole)"), key=lambda s: s[2])]

        def rank(label: str) -> tuple:
            if label in source:
                return (1, source.index(label), label)
            view = next((i for i, v in enumerate(views) if label.startswith(f"{v}: ")), None)
            if view is not None:
                return (3, view, label.endswith("(view record checks, retries)"))
            return (0 if label.startswith("resolve") else 2 if label.startswith("views:") else 4, 0, label)

        return {label: out[label] for label in sorted(out, key=rank)}


def append_profile(project, spark, work: Path, first_id: int, rows: int, repeats: int) -> dict:
    """`Project.append` of a batch (schema check, quarantine split, source commit, three views) vs a plain Delta
    append of the same cached rows to a table of the same schema, paired per repeat; each `Project.append` is
    split into its steps (`StepClock`). Each repeat also times one `Project.append` with the views refreshed one at
    a time (`REFRESH_THREADS` = 1, as before they were refreshed at once), paired with the one above."""
    from scenario import generate

    from pipeframe.engine import materialize

    plain = str(work / "plain-append")
    generate(spark, 0, 1).limit(0).write.format("delta").save(plain)
    plains, appends, one_at_a_time, profiles = [], [], [], []
    threads = materialize.REFRESH_THREADS
    for _ in range(repeats):
        frame = generate(spark, first_id, rows).cache()
        frame.count()
        first_id += rows
        started = time.perf_counter()
        frame.write.format("delta").mode("append").save(plain)
        plains.append(time.perf_counter() - started)
        with StepClock() as clock:
            started = time.perf_counter()
            project.append("events", frame)
            appends.append(time.perf_counter() - started)
        profiles.append(clock.steps(appends[-1]))
        frame.unpersist()
        frame = generate(spark, first_id, rows).cache()
        frame.count()
        first_id += rows
        materialize.REFRESH_THREADS = 1
        try:
            started = time.perf_counter()
            project.append("events", frame)
            one_at_a_time.append(time.perf_counter() - started)
        finally:
            materialize.REFRESH_THREADS = threads
        frame.unpersist()
    middle = sorted(range(repeats), key=lambda i: appends[i])[(repeats - 1) // 2]  # the repeat of median time
    return {"plain_s": summary(plains), "pipeframe_s": summary(appends), "pipeframe_over_plain": ratio(appends, plains),
            "views_one_at_a_time_s": summary(one_at_a_time), "refresh_threads": threads,
            "one_at_a_time_over_at_once": ratio(one_at_a_time, appends),
            "batch_rows": rows, "steps_s": {label: round(seconds, 3) for label, seconds in profiles[middle].items()},
            "steps_total_s": round(appends[middle], 3)}


# ------------------------------------------------------------------------------------------------ report
def limits(results: dict) -> list[str]:
    """What limits throughput, from this run's own figures."""
    scenarios, floor, conform = results.get("scenarios", {}), results.get("plain", {}), results.get("conform")
    if not scenarios:
        return []
    out = ["", "### What limits throughput", ""]
    a = scenarios.get("A") or next(iter(scenarios.values()))
    commits = a["visible"]["commits"]
    out.append(
        f"- **Not the HTTP layer.** The server's Python process used {a['cpu'].get('server_python_cores', '?')} "
        f"cores during scenario A, its JVM the rest of {a['cpu']['server_cores']}; the clients "
        f"{a['cpu']['clients_cores']}. The time goes to Spark jobs and Delta commits.")
    out.append(
        f"- **Groups take every request waiting.** Scenario A's source commits held a median of "
        f"{commits['requests_median']} requests (at most {commits['requests_max']}) with {a['clients']} clients "
        f"sending, a commit every {commits['interval_median_s']} s (median): the route awaits its request's commit "
        "on the event loop (no thread held per request), and a group's `flush_ms` clock starts no earlier than when "
        "the previous group was answered, so the clients it answered are back in time to join the next one (see "
        "the notes below for the run that measured it). With K clients, requests/s is about K / (commit time + "
        "flush_ms): the commit time is what is left to cut.")
    if conform:
        small_c, large_c = conform.get("10", {}), conform.get("40000", {})
        out.append(
            "- **The schema check before the Delta write.** A group's lines are typed without Spark "
            "(`jsonlines.type_lines`: pyarrow's JSON reader where every column is a key of a type it reads, else "
            "orjson, then pyarrow column by column for the lines whose values are plain; line by line for misfits "
            "and rare spellings" + (": as these are" if large_c.get("typed") else "") +
            f") and no Spark job runs: {small_c.get('typed_by_pyarrow_s', '?')} s for 10 lines and "
            f"{large_c.get('typed_by_pyarrow_s', '?')} s for 40,000. A group with a line whose fate in Spark is not "
            "certain is conformed (`conform_lines`: each column cast by Spark, quarantine reasons) in one Spark job "
            "that brings the "
            "rows to the driver as Arrow, where the misfits are split off (the figures below time the same job with "
            "a count instead: Spark's writer's way). Lines that are plain objects "
            "of the declared columns are parsed by pyarrow in one pass"
            + (" (as these are)" if large_c.get("pyarrow") else "") + ": "
            f"{small_c.get('conform_count_s')} s for 10 lines and {large_c.get('conform_count_s')} s for 40,000 lines "
            f"(40 requests), against {small_c.get('spark_read_count_s', '?')} s and "
            f"{large_c.get('spark_read_count_s', '?')} s when Spark reads every column from the line (the path of "
            "any other batch: a JSON path, a number where a string is declared, a line that is not one object...), "
            f"and {small_c.get('from_json_count_s')} s and {large_c.get('from_json_count_s')} s for `from_json` of "
            "the same lines, counted: a group with one misfit line pays a Spark job.")
    if floor:
        plain = floor.get("A") or next(iter(floor.values()))
        out.append(
            f"- **The Delta commit itself.** One plain append of 10 rows took {plain['latency_p50_s']} s median "
            f"(p95 {plain['latency_p95_s']} s) from a warm session on this machine: Spark's write job and Delta's "
            "commit. A group commit does not pay it: pyarrow writes its rows as one parquet file and the commit "
            "file (see the comparison with Spark's writer above). A request waits for `flush_ms`, for the commit "
            "under way when it arrived, then for its own group's: a 0.5 s p95 needs the whole group commit well "
            "under 0.25 s, and with 1,000-row requests from 64 clients a group holds tens of thousands of rows.")
    out.append(
        "- **The views share the two cores with the commits.** Every commit wakes the continuous materializer, whose "
        "round refreshes the three views (at once, on threads of their own; each: a read of the new rows, an "
        "aggregate into states, a Delta commit; see the profile above), in the same JVM as the commits (each in its "
        "own FAIR scheduler pool, so a commit's tasks do not queue behind a view's). The new rows of commits that "
        "only appended are read from the parquet files their commit files list (`deltalog.appended_files`), not "
        "through Delta's change data feed, whose planning replays the log after every commit pyarrow made. "
        "Commit → visible is at least one such round after the commit, often two (the round running when the rows "
        "land does not include them).")
    writes = [v for k, v in (results.get("append") or {}).get("steps_s", {}).items() if "state write" in k]
    if writes:
        out[-1] += (f" In the profile the three state writes took {min(writes):.2f}–{max(writes):.2f} s each, "
                    f"each reading the {results['append']['batch_rows']:,} new rows itself: the per-view fixed "
                    "cost of planning, aggregating "
                    "into states and a Delta commit, not the rows read, sets the round. Run at once on two cores they "
                    "overlap but also slow each other down (see the ratio above); one job for the views of one source "
                    "would cut the fixed cost itself.")
    return out


def real_verdicts(results: dict) -> list[tuple[str, str, bool | None]]:
    """Issue 33's targets for the real-shaped datasource: throughput from the closed-loop scenarios, latency and
    visibility at the targets' load (the open-loop ones)."""
    real = results.get("real") or {}
    scenarios, paced = real.get("scenarios", {}), real.get("paced", {})
    ra, rb, rc = (scenarios.get(name, {}) for name in ("RA", "RB", "RC"))
    at_load = [s for s in (paced.get(name) or scenarios.get(name) for name in ("RA", "RB")) if s]
    out: list[tuple[str, str, bool | None]] = []

    def add(key: str, measured: float | None, text: str, met: Callable[[float, float], bool]) -> None:
        label, goal = REAL_TARGETS[key]
        out.append((label, text if measured is not None else "not measured",
                    None if measured is None else met(measured, goal)))

    def where(name: str, key: str) -> object:
        chosen = paced.get(name) or scenarios.get(name, {})
        return chosen.get("visible", {}).get(key) if key == "p95_slowest_view_s" else chosen.get(key)

    add("requests_per_s", ra.get("requests_per_s"), f"{ra.get('requests_per_s', 0):,.1f} requests/s", lambda m, g: m >= g)
    add("rows_per_s", rb.get("rows_per_s"), f"{rb.get('rows_per_s', 0):,.0f} rows/s", lambda m, g: m >= g)
    latencies = [s.get("latency_p95_s") for s in at_load if s.get("latency_p95_s") is not None]
    add("latency_p95_s", max(latencies) if latencies else None,
        ", ".join(f"{n} {where(n, 'latency_p95_s')} s" for n in ("RA", "RB")), lambda m, g: m <= g)
    visible = [s["visible"].get("p95_slowest_view_s") for s in at_load if s["visible"].get("p95_slowest_view_s")]
    add("visible_p95_s", max(visible) if visible else None,
        ", ".join(f"{n} {where(n, 'p95_slowest_view_s')} s" for n in ("RA", "RB")), lambda m, g: m <= g)
    add("fresh_per_s", rc.get("requests_per_s"), f"{rc.get('requests_per_s', 0):,.1f} requests/s", lambda m, g: m >= g)
    return out


def rates(figures: dict) -> str:
    """A scenario's requests/s, rows/s and latency cells of a table row."""
    return (f"{figures['requests_per_s']:,.1f} | {figures['rows_per_s']:,.0f} | {figures['latency_p50_s']} / "
            f"{figures['latency_p95_s']} / {figures['latency_p99_s']} s")


def floor_row(name: str, rows: int, figures: dict, blanks: int) -> str:
    """The table row of the plain Delta append floor of scenario `name`; `blanks`: the empty cells that end it."""
    return (f"| {name}: plain Delta append, {rows:,}-row batches, sequential | {rates(figures)} | (no views) | "
            f"{figures['requests']} |" + " |" * blanks)


def real_section(results: dict) -> list[str]:
    """The real-shaped datasource's part of the section: its scenarios, floor, targets and the ways its commits took."""
    real = results.get("real") or {}
    scenarios, paced, floor = real.get("scenarios", {}), real.get("paced", {}), real.get("plain", {})
    if not scenarios and not paced:
        return []
    lines = ["", "### The real-shaped datasource (issue 33)", "",
             ("`weblogs` as a real Tinybird project declares it: `ENGINE_SORTING_KEY host, ts`, "
              "`ENGINE_PARTITION_KEY toYYYYMM(ts)` (a generated partition column), a TTL, nested `json:` paths "
              "(`$.req.path`, `$['geo info'].country`), an array, a Map, Nullable and LowCardinality columns, "
              "`DateTime64(3, 'UTC')`, `Decimal(10, 2)`, `Float32`, UInt columns, a `DEFAULT`, a UUID; one line in "
              f"{MISFIT_EVERY} a misfit (a negative UInt16, a time that is none, a line that is not JSON); three "
              "materialized views over it (bench/ingest_bench.py `WEBLOGS_VIEWS`), served by `pipeframe serve` as "
              "the flat one is. `pyarrow parse` and `pyarrow commit`: the share of its group commits whose lines "
              "were typed without Spark (engine/jsonlines.py) and whose rows were committed by pyarrow and a commit "
              "file (engine/deltaappend.py)."), "",
             ("| scenario | requests/s | rows/s | latency p50 / p95 / p99 | commit → visible p95 (slowest view) | "
              "source commits | pyarrow parse / pyarrow commit | quarantined rows | server CPU (cores) |"),
             "|---|---|---|---|---|---|---|---|---|"]
    for name, rows in REAL.items():
        closed = scenarios.get(name)
        how = f"{(closed or {}).get('clients')} clients" + \
            (", a new connection per request" if (closed or {}).get("fresh_connections") else "")
        rate = paced.get(name, {}).get("offered_per_s", 0)
        for s_, label in ((closed, how), (paced.get(name), f"sent at {rate:g} requests/s")):
            if s_:
                v, server = s_["visible"], s_["server"]
                commits = max(server.get("commits") or 0, 1)
                lines.append(f"| {name}: {rows:,}-row requests, {label} | {rates(s_)} | "
                             f"{v['p95_slowest_view_s']} s | {server.get('commits')} | "
                             f"{server.get('arrow_parsed_commits', 0) / commits:.0%} / "
                             f"{server.get('arrow_committed_commits', 0) / commits:.0%} | "
                             f"{server.get('quarantined_rows', 0):,} | {s_['cpu']['server_cores']} |")
        if floor.get(name):
            lines.append(floor_row(name, rows, floor[name], blanks=3))
    lines += ["", "| target (issue 33) | measured | verdict |", "|---|---|---|"]
    for label, measured, met in real_verdicts(results):
        lines.append(f"| {label} | {measured} | {'not measured' if met is None else 'met' if met else '**not met**'} |")
    return lines


def section(results: dict) -> str:
    """The "Real-time ingestion" section of docs/benchmarks.md."""
    scenarios, floor = results.get("scenarios", {}), results.get("plain", {})
    settings = results.get("settings", {})
    lines = [SECTION, "",
             (f"`bench/ingest_bench.py` ({results.get('date')}, `{results.get('command')}`; load average "
              f"{results.get('load', ['?'])[0]} at the start and {results.get('load_at_end', ['?'])[0]} at the end on "
              f"{results.get('cpus', '?')} cores shared with other jobs: absolute rates here are low and noisy). The "
              "benchmark's project (the `events` datasource and its three views) is served by `pipeframe serve` in "
              f"its own process; {scenarios.get('A', {}).get('clients', '?')} client threads in this process post "
              "NDJSON to `POST /v0/events?name=events` for a fixed time (after a warm-up), each answered 202 once its "
              "rows are committed; each client posts its next request when the last is answered (closed loop: the "
              "most the server sustains, where a request's latency is mostly its wait behind the other clients'). "
              "Then, on the same server, requests are sent at a fixed rate whatever the answers (open loop, "
              "`sent at`: the latency at that load, counted from when each request was due, so a server falling "
              "behind cannot hide it by slowing the clients down). Ingest settings: " + ", ".join(f"{k} {v}" for k, v in settings.items()) + ". "
              "Side by side, the same batches are appended one after another by a plain "
              "`.write.format(\"delta\").mode(\"append\")` from a warm SparkSession (one commit each, no views): "
              "the floor of one Delta commit per batch on this machine. Commit → visible comes from the Delta logs "
              "afterwards: for each source commit, the first commit of each view whose recorded source version "
              "covers it."), "",
             ("| scenario | requests/s | rows/s | latency p50 / p95 / p99 | commit → visible p95 (slowest view) | "
             "source commits (median requests, rows each) | server CPU (cores) |"),
             "|---|---|---|---|---|---|---|"]
    paced = results.get("paced") or {}
    for name, rows in SCENARIOS.items():
        for s, how in ((scenarios.get(name), f"{scenarios.get(name, {}).get('clients')} clients"),
                       (paced.get(name), f"sent at {paced.get(name, {}).get('offered_per_s', 0):g} requests/s")):
            if s:
                v = s["visible"]
                lines.append(f"| {name}: `POST /v0/events`, {rows:,}-row requests, {how} | {rates(s)} | "
                             f"{v['p95_slowest_view_s']} s | {v['commits']['count']} "
                             f"({v['commits']['requests_median']}, {v['commits']['rows_median']:,.0f}) | "
                             f"{s['cpu']['server_cores']} (Python {s['cpu'].get('server_python_cores', '?')}) |")
        if floor.get(name):
            lines.append(floor_row(name, rows, floor[name], blanks=1))
    why = {TARGETS["requests_per_s"][0]: "group commits share two cores with the views' rounds (below)",
           TARGETS["rows_per_s"][0]: "parsing, typing and writing each group's rows, sharing two cores with the "
                                     "views (below)",
           TARGETS["latency_p95_s"][0]: "a request waits for the commit under way, then its own; with 1,000-row "
                                        "requests a group holds tens of thousands of rows (below)",
           TARGETS["visible_p95_s"][0]: "one or two materializer rounds of three view refreshes (below, and the "
                                        "profile)"}
    lines += ["", "| target (issue 14) | measured | verdict | why, when missed |", "|---|---|---|---|"]
    for label, measured, met in verdicts(results):
        verdict = "not measured" if met is None else "met" if met else "**not met**"
        lines.append(f"| {label} | {measured} | {verdict} | {why[label] if met is False else ''} |")
    spark_writer = results.get("spark_writer") or {}
    if spark_writer:
        lines += ["", ("The same scenarios in the same run, served with `ingest.direct_commit: false`: every group commit "
                       "through Spark's Delta writer (a write job and Delta's commit) instead of the default, the "
                       "accepted rows brought to the driver as Arrow, written by pyarrow and committed with a commit "
                       "file (engine/deltaappend.py)."), "",
                  ("| scenario | requests/s (Spark's writer → pyarrow) | rows/s | latency p95 | commit → visible p95 | "
                   "source commits | requests/s, pyarrow / Spark's writer |"),
                  "|---|---|---|---|---|---|---|"]
        for name, rows in SCENARIOS.items():
            w, s_ = spark_writer.get(name), scenarios.get(name)
            if w and s_:
                lines.append(f"| {name} ({rows:,}-row requests) | {w['requests_per_s']:,.1f} → {s_['requests_per_s']:,.1f} "
                             f"| {w['rows_per_s']:,.0f} → {s_['rows_per_s']:,.0f} | {w['latency_p95_s']} → "
                             f"{s_['latency_p95_s']} s | {w['visible']['p95_slowest_view_s']} → "
                             f"{s_['visible']['p95_slowest_view_s']} s | {w['visible']['commits']['count']} → "
                             f"{s_['visible']['commits']['count']} | "
                             f"**{s_['requests_per_s'] / max(w['requests_per_s'], 1e-9):.1f}x** |")
    before = results.get("before")
    if before and before.get("scenarios"):
        lines += ["", (f"The run before ({before.get('date')}, {before.get('command')}; load average "
                       f"{before.get('load', ['?'])[0]}): {before.get('changes', '')}"), "",
                  ("| scenario | requests/s before → after | rows/s before → after | latency p95 before → after | "
                   "commit → visible p95 before → after | plain append floor, requests/s before → after |"),
                  "|---|---|---|---|---|---|"]
        for name, rows in SCENARIOS.items():
            b, s_ = before["scenarios"].get(name), scenarios.get(name)
            bp, ap = before.get("plain", {}).get(name, {}), floor.get(name, {})
            if b and s_:
                lines.append(f"| {name} ({rows:,}-row requests) | {b['requests_per_s']:,.1f} → {s_['requests_per_s']:,.1f} "
                             f"| {b['rows_per_s']:,.0f} → {s_['rows_per_s']:,.0f} | {b['latency_p95_s']} → "
                             f"{s_['latency_p95_s']} s | {b['visible']['p95_slowest_view_s']} → "
                             f"{s_['visible']['p95_slowest_view_s']} s | {bp.get('requests_per_s', '?')} → "
                             f"{ap.get('requests_per_s', '?')} |")
    for name, s in [*scenarios.items(), *((f"{k} sent at {v['offered_per_s']:g} requests/s", v)
                                          for k, v in paced.items())]:
        views = ", ".join(f"`{view}` p50 {f['p50_s']} / p95 {f['p95_s']} s ({f['view_commits']} commits)"
                          for view, f in s["visible"]["views"].items())
        lines += ["", (f"Scenario {name}, per view: {views}; all three views: p95 {s['visible']['p95_all_views_s']} s; "
                  f"views caught up {s['catch_up_s']} s after the clients stopped; "
                  f"{s['server']['materializer_rounds']} materializer rounds; answers {s['statuses']}.")]
    profile = results.get("append")
    if profile:
        lines += ["", f"### Where one `Project.append` of {profile['batch_rows']:,} rows goes (three views)", ""]
    if profile and "steps_s" in profile:
        steps, total = profile["steps_s"], profile["steps_total_s"]
        lines += [(f"In-process, a Spark DataFrame of {profile['batch_rows']:,} rows; each step timed by wrapping the "
                   "engine's functions in the benchmark process (the repeat of median total time; steps that took "
                   "under 5 ms are left out). `new rows (plan the read)` only builds the read (of the files the "
                   "source commit added, or of its change data feed): the rows are read inside each view's "
                   "state write (each view reads the appended parquet files itself; rows of the change data feed "
                   "would be read once and cached for the three)."), "",
                  "| step | seconds | share |", "|---|---|---|"]
        for label, seconds in steps.items():
            if seconds >= 0.005:
                lines.append(f"| {label} | {seconds:.3f} | {seconds / total:.0%} |")
        lines += [f"| **`Project.append`, total** | **{total:.3f}** | |", ""]
    if profile:
        r = profile["pipeframe_over_plain"]
        lines.append(f"Against a plain Delta append of the same cached rows (medians): {profile['plain_s']['median']:.2f} "
                     f"s vs {profile['pipeframe_s']['median']:.2f} s, pipeframe / plain {r['min']:.1f} / "
                     f"**{r['median']:.1f}** / {r['max']:.1f}x (PRODUCT.md section 8: ≤ 2x)"
                     + (f"; {profile['from']}" if profile.get("from") else "") + ".")
        if profile.get("one_at_a_time_over_at_once"):
            r = profile["one_at_a_time_over_at_once"]
            lines += ["", (f"The three views are refreshed at once ({profile['refresh_threads']} threads, Spark's FAIR "
                           f"pool): `Project.append` took {profile['pipeframe_s']['median']:.2f} s (median) against "
                           f"{profile['views_one_at_a_time_s']['median']:.2f} s with the views refreshed one at a "
                           f"time in the same repeats; one at a time / at once {r['min']:.1f} / **{r['median']:.1f}** "
                           f"/ {r['max']:.1f}x. In the steps above the views' spans overlap.")]
    lines += real_section(results)
    lines += limits(results)
    notes = results.get("notes")
    if notes:
        lines += ["", *notes]
    return "\n".join(lines) + "\n"


# ------------------------------------------------------------------------------------------------ running
def run(seconds: float, clients: int, warmup: float, profile_rows: int, repeats: int,
        append: dict | None = None, scenarios: Sequence[str] = (*SCENARIOS, *REAL), keep: bool = False,
        flush_ms: int | None = None, compare_writer: bool = True, paced: dict[str, float] | None = None) -> dict:
    """Everything above, in one temp warehouse. `append`: the Project.append figures measured already (run.py's
    views section), reused instead of measured again. `flush_ms`: the project's `ingest.flush_ms` (default: the
    product's). `compare_writer`: the scenarios again, served with `ingest.direct_commit: false` (every group
    commit through Spark's Delta writer instead of pyarrow and a commit file). `paced`: scenario -> requests/s
    sent open loop after the closed-loop scenarios, on the same server (default PACED)."""
    paced = {**PACED, **REAL_PACED} if paced is None else paced
    real = [name for name in scenarios if name in REAL]
    scenarios = [name for name in scenarios if name in SCENARIOS]
    real_paced = {name: rate for name, rate in paced.items() if name in REAL}
    paced = {name: rate for name, rate in paced.items() if name in SCENARIOS}
    from pipeframe.project import Project

    work = Path(tempfile.mkdtemp(prefix="pipeframe-ingest-bench-"))
    results: dict = {"date": datetime.now(UTC).strftime("%Y-%m-%d"), "cpus": os.cpu_count(),
                     "load": [round(x, 2) for x in os.getloadavg()], "seconds": seconds, "warmup_s": warmup,
                     "scenarios": {}, "paced": {}, "plain": {},
                     "real": {"scenarios": {}, "paced": {}, "plain": {}}}
    try:
        root = work / "project"
        write_pipeframe_project(root)
        write_weblogs(root)
        config = (root / "pipeframe.yaml").read_text()
        ingest = {"flush_ms": flush_ms} if flush_ms is not None else {}

        def configure(**settings) -> None:
            chosen = {**ingest, **settings}
            block = "ingest:\n" + "".join(f"  {k}: {str(v).lower()}\n" for k, v in chosen.items()) if chosen else ""
            (root / "pipeframe.yaml").write_text(config + block)

        configure()
        project = Project(root)
        log("deploying the benchmark project (3 views)")
        project.deploy()
        snapshot = project.snapshot
        results["settings"] = {k: getattr(project.config.ingest, k) for k in
                               ("flush_rows", "flush_bytes", "flush_ms", "buffer_bytes", "poll_ms")}
        log("starting pipeframe serve")
        server = Server(root, work / "serve.log")
        try:
            for name in scenarios:
                results["scenarios"][name] = http_scenario(server, snapshot, name, SCENARIOS[name], clients, warmup,
                                                           seconds)
            for name, rate in paced.items():
                results["paced"][name] = http_scenario(server, snapshot, name, SCENARIOS[name], clients, warmup,
                                                       seconds, rate=rate)
            for name in real:
                fresh = name == FRESH
                results["real"]["scenarios"][name] = http_scenario(
                    server, snapshot, name, REAL[name], FRESH_CLIENTS if fresh else clients, warmup, seconds,
                    landing="weblogs", fresh=fresh)
            for name, rate in real_paced.items():
                results["real"]["paced"][name] = http_scenario(server, snapshot, name, REAL[name], clients, warmup,
                                                               seconds, rate=rate, landing="weblogs")
        finally:
            server.stop()
        if compare_writer:
            configure(direct_commit=False)
            log("starting pipeframe serve with ingest.direct_commit: false (Spark's writer)")
            server = Server(root, work / "serve-spark-writer.log")
            try:
                results["spark_writer"] = {name: http_scenario(server, snapshot, name, SCENARIOS[name], clients,
                                                               warmup, seconds) for name in scenarios}
            finally:
                server.stop()
            configure()
        for name in scenarios:
            results["plain"][name] = plain_floor(project.spark, work, SCENARIOS[name], seconds)
        for name in sorted({n for n in real if n != FRESH}):
            results["real"]["plain"][name] = plain_floor(project.spark, work, REAL[name], seconds, "weblogs")
        results["conform"] = conform_cost(project)
        if append is not None:
            results["append"] = dict(append, **{"from": "measured by the views section of the same run"})
        elif profile_rows:
            log(f"profiling Project.append of {profile_rows:,} rows")
            results["append"] = append_profile(project, project.spark, work, 10_000_000, profile_rows, repeats)
        results["load_at_end"] = [round(x, 2) for x in os.getloadavg()]
        return results
    finally:
        import shutil

        if keep:
            log(f"kept the warehouse and the server's log in {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)


def write_weblogs(root: Path) -> None:
    """The real-shaped datasource and its three views, beside the benchmark's project."""
    (root / "datasources/weblogs.datasource").write_text(WEBLOGS_DATASOURCE)
    for name, sql in WEBLOGS_VIEWS.items():
        (root / f"pipes/{name}.pipe").write_text(f"NODE {name}\nSQL >\n    {sql}\nTYPE materialized\nDATASOURCE {name}\n")


def write_docs(results: dict, page: Path) -> None:
    report.save_section(page, "ingest", results, SECTION, section(results).rstrip("\n").splitlines(), BEFORE)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog="\n".join(__doc__.splitlines()[2:]))
    parser.add_argument("--seconds", type=float, default=30, help="measured seconds per scenario (and plain loop)")
    parser.add_argument("--warmup", type=float, default=10, help="seconds of load before each measured window")
    parser.add_argument("--clients", type=int, default=64, help="concurrent HTTP clients (threads)")
    parser.add_argument("--scenarios", default="A,B,RA,RB,RC",
                        help="A (10-row requests), B (1,000-row requests) to the flat `events`; RA, RB the same to the "
                             "real-shaped `weblogs` (three views), RC 10-row requests to it from 8 clients that open a "
                             "new connection per request")
    parser.add_argument("--paced", default=",".join(f"{k}={v:g}" for k, v in {**PACED, **REAL_PACED}.items()),
                        help="scenario=requests/s sent open loop, for the latency at that load ('' to skip)")
    parser.add_argument("--profile-rows", type=int, default=100_000, help="rows of the profiled Project.append (0: skip)")
    parser.add_argument("--repeats", type=int, default=3, help="repeats of the Project.append profile")
    parser.add_argument("--flush-ms", type=int, default=None, help="the project's ingest.flush_ms (default: pipeframe's)")
    parser.add_argument("--no-compare-writer", action="store_true",
                        help="skip the scenarios served with ingest.direct_commit: false (Spark's writer)")
    parser.add_argument("--keep", action="store_true", help="keep the temp project, its tables and serve.log")
    parser.add_argument("--json", type=Path, default=None, help="also write the results to this file")
    parser.add_argument("--write", action="store_true", help="put the results into docs/benchmarks.json and .md")
    parser.add_argument("--render", action="store_true", help="only re-render the section from docs/benchmarks.json")
    args = parser.parse_args()
    page = DOCS / "benchmarks.md"
    if args.render:
        write_docs(json.loads(page.with_suffix(".json").read_text())["ingest"], page)
        return 0
    chosen = [s.strip().upper() for s in args.scenarios.split(",") if s.strip()]
    try:
        paced = {k.strip().upper(): float(v) for k, v in (p.split("=") for p in args.paced.split(",") if p.strip())}
    except ValueError:
        parser.error("--paced takes scenario=requests/s pairs, e.g. A=200,B=50")
    known = set(SCENARIOS) | set(REAL)
    if (set(chosen) | set(paced)) - known:
        parser.error(f"unknown scenario(s): {', '.join(sorted((set(chosen) | set(paced)) - known))}")
    results = run(args.seconds, args.clients, args.warmup, args.profile_rows, args.repeats, scenarios=chosen,
                  keep=args.keep, flush_ms=args.flush_ms, compare_writer=not args.no_compare_writer, paced=paced)
    results["command"] = " ".join(["python", "bench/ingest_bench.py", *sys.argv[1:]])
    text = section(results)
    print(text)
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n")
    if args.write:
        write_docs(results, page)
    return 0


if __name__ == "__main__":
    sys.exit(main())
