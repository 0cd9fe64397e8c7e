"""Endpoints on the read path (DuckDB over the tables' snapshots, no JVM) next to the same endpoints on Spark.

Usage: python bench/serve_bench.py [--rows 10000000] [--requests 400] [--seconds 20] [--clients 16]
       [--ingest-rate 50] [--cli-repeats 5] [--json F] [--write]

The benchmark's project (bench/scenario.py: an `events` source of --rows request-log rows, its three views: hourly
counts by endpoint and status, daily distinct users (HLL), p50/p95 latency per endpoint (KLL)) is deployed into a temp
warehouse, filled in ten appends, compacted (`optimize`), and served by `python -m pipeframe serve` in its own
process, once with `--engine auto` (the read path) and once with `--engine spark`, one after the other. Measured on
each, over HTTP:

* sequential: one client calls the endpoints in turn (`traffic` over the hourly view with five `start` values,
  `daily_users` over the HLL view, `latencies` over the KLL view) over and over, answers the server keeps; then
  `traffic` with a new `start` hour each call (a statement never answered before): p50 / p95 / p99 in ms;
* concurrent: --clients client threads call them for --seconds while --ingest-rate event requests/s (10 rows each,
  one writer thread per 10/s) are posted to the same server: answers/s, their p50 / p99, the events that landed;
* view vs raw: `traffic` against `traffic_raw`, the same answer computed from the raw rows (as the views section
  does on Spark), paired repeats, a new `start` hour each pair;
* fresh processes: `pipeframe endpoint traffic` and `pipeframe status` as subprocesses, with --engine auto and with
  --engine spark, alternately.

Every read-path answer is compared with Spark's before anything is timed. `--write` puts the results into
docs/benchmarks.json (`serve`) and the section "Endpoints: the read path" of docs/benchmarks.md. Targets are
printed next to the figures, never asserted.
"""

from __future__ import annotations

import argparse
import http.client
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from urllib.parse import urlencode, urlsplit

import report
from common import ratio, summary
from ingest_bench import Server, bodies, log, percentile
from scenario import SECONDS_PER_ROW, START_EPOCH, generate, write_pipeframe_project

BENCH = Path(__file__).resolve().parent
DOCS = BENCH.parent / "docs"
SECTION = "## Endpoints: the read path without a JVM"
BEFORE = "## Real-time ingestion"
EXTRA_ENDPOINTS = {
    "daily_users": """\
    SELECT day, users FROM users_by_day ORDER BY day""",
    "latencies": """\
    SELECT endpoint, round(p50, 1) AS p50, round(p95, 1) AS p95 FROM latency_by_endpoint
    ORDER BY p95 DESC, endpoint LIMIT 20""",
}
TARGETS = {
    "p50_ms": ("p50 ≤ 10 ms (one client, a view of ≤ 100,000 rows)", 10.0),
    "p99_ms": ("p99 ≤ 50 ms", 50.0),
    "answers_per_s": ("≥ 500 answers/s with 16 clients while events arrive", 500.0),
    "view_over_raw": ("an endpoint over the view ≥ 20x the same answer over raw rows", 20.0),
    "cli_s": ("`pipeframe endpoint` and `status` in a fresh process ≤ 1 s", 1.0),
}


def hours(rows: int, count: int) -> list[str]:
    """`count` distinct `start` hours across the newer half of the source: each a statement not answered before."""
    span = rows * SECONDS_PER_ROW / 2
    found = []
    for i in range(count):
        at = START_EPOCH + int(span + span * i / count)
        found.append(datetime.fromtimestamp(at - at % 3600, UTC).strftime("%Y-%m-%d %H:%M:%S"))
    return list(dict.fromkeys(found))


def starts(rows: int) -> list[str]:
    """Five `start` values of the traffic endpoint across the newer half of the source (each a new statement)."""
    return hours(rows, 5)


def calls(rows: int) -> list[tuple[str, dict]]:
    return [("traffic", {"start": s}) for s in starts(rows)] + [("daily_users", {}), ("latencies", {})]


class Client:
    """One keep-alive HTTP/1.1 connection (http.client: little client-side CPU next to the server's)."""

    def __init__(self, url: str) -> None:
        parts = urlsplit(url)
        self.connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=300)

    def get(self, pipe: str, params: dict) -> tuple[int, bytes]:
        self.connection.request("GET", f"/v0/pipes/{pipe}.json?{urlencode(params)}")
        answer = self.connection.getresponse()
        return answer.status, answer.read()

    def post(self, path: str, body: bytes) -> int:
        self.connection.request("POST", path, body=body, headers={"Content-Type": "application/x-ndjson"})
        answer = self.connection.getresponse()
        answer.read()
        return answer.status

    def close(self) -> None:
        self.connection.close()


def answers_of(url: str, chosen: list[tuple[str, dict]]) -> dict:
    client = Client(url)
    try:
        found = {}
        for pipe, params in chosen:
            status, body = client.get(pipe, params)
            if status != 200:
                raise SystemExit(f"{pipe} {params} answered {status}: {body[:500]!r}")
            found[(pipe, json.dumps(params, sort_keys=True))] = json.loads(body)
        return found
    finally:
        client.close()


def sequential(url: str, chosen: list[tuple[str, dict]], requests: int, warm: bool = True) -> dict:
    """One client, the calls in turn, `requests` of them (after one warm-up round if `warm`: the answers are then
    those the server keeps): latency per endpoint in ms."""
    client = Client(url)
    times: dict[str, list[float]] = {}
    try:
        for pipe, params in chosen if warm else chosen[:1]:  # first statements, first copies of the tables
            client.get(pipe, params)
        for i in range(requests):
            pipe, params = chosen[i % len(chosen)]
            started = time.perf_counter()
            status, _ = client.get(pipe, params)
            elapsed = (time.perf_counter() - started) * 1000
            if status != 200:
                raise SystemExit(f"{pipe} answered {status}")
            times.setdefault(pipe, []).append(elapsed)
    finally:
        client.close()
    every = [t for values in times.values() for t in values]
    return {"all": latency(every), **{pipe: latency(values) for pipe, values in times.items()}}


def latency(values: list[float]) -> dict:
    return {"n": len(values), "p50_ms": round(percentile(values, 50), 2), "p95_ms": round(percentile(values, 95), 2),
            "p99_ms": round(percentile(values, 99), 2), "max_ms": round(max(values), 2)}


def concurrent(url: str, chosen: list[tuple[str, dict]], clients: int, seconds: float, ingest_rate: float) -> dict:
    """`clients` threads calling the endpoints for `seconds` while writer threads post `ingest_rate` event requests/s
    (10 rows each, paced; one writer per 10 requests/s, as each waits for its group commit): answers/s and their
    latency."""
    stop = time.monotonic() + seconds
    done: list[float] = []
    failed = [0]
    posted: list[int] = []
    guard = threading.Lock()
    payloads = bodies(10, 200)

    def reader(number: int) -> None:
        client = Client(url)
        mine = []
        turn = number
        try:
            while time.monotonic() < stop:
                pipe, params = chosen[turn % len(chosen)]
                turn += 1
                started = time.perf_counter()
                status, _ = client.get(pipe, params)
                if status == 200:
                    mine.append((time.perf_counter() - started) * 1000)
                else:
                    failed[0] += 1
        finally:
            client.close()
        with guard:
            done.extend(mine)

    writers = max(1, math.ceil(ingest_rate / 10))

    def writer() -> None:
        client = Client(url)
        begin = time.monotonic()
        sent = 0
        try:
            while time.monotonic() < stop:
                due = begin + sent * writers / ingest_rate
                if due > time.monotonic():
                    time.sleep(due - time.monotonic())
                posted.append(client.post("/v0/events?name=events", payloads[sent % len(payloads)]))
                sent += 1
        finally:
            client.close()

    threads = [threading.Thread(target=reader, args=(n,)) for n in range(clients)]
    if ingest_rate > 0:
        threads += [threading.Thread(target=writer) for _ in range(writers)]
    started = time.monotonic()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    elapsed = time.monotonic() - started
    accepted = sum(1 for s in posted if s == 202)
    return {"clients": clients, "seconds": round(elapsed, 1), "answers": len(done),
            "answers_per_s": round(len(done) / elapsed, 1), "failed": failed[0], **latency(done),
            "events_per_s": round(accepted / elapsed, 1), "events_refused": len(posted) - accepted}


def view_over_raw(url: str, starts_: list[str]) -> dict:
    """`traffic` and `traffic_raw` (the same answer) called alternately, a new `start` for each pair (so no answer is
    one the server kept): seconds each and the paired ratio."""
    client = Client(url)
    view, raw = [], []
    try:
        for i, start in enumerate(starts_):
            for pipe, times in (("traffic", view), ("traffic_raw", raw)):
                started = time.perf_counter()
                status, body = client.get(pipe, {"start": start})
                if status != 200:
                    raise SystemExit(f"{pipe} answered {status}: {body[:300]!r}")
                if i:  # the first pair warms both up
                    times.append(time.perf_counter() - started)
    finally:
        client.close()
    return {"view_s": summary(view), "raw_s": summary(raw), "raw_over_view": ratio(raw, view)}


def fresh_processes(root: Path, start: str, repeats: int, spark_repeats: int) -> dict:
    """`pipeframe endpoint traffic` and `pipeframe status` as new processes: seconds, read path vs Spark.

    pipeframe's modules are compiled to bytecode first, as `pip install` leaves a package (and as Python leaves it
    after the first run, unless PYTHONDONTWRITEBYTECODE is set, as it is on the team's machines)."""
    import compileall

    compileall.compile_dir(str(BENCH.parent / "pipeframe"), quiet=1)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (str(BENCH.parent), os.environ.get("PYTHONPATH",
                                                                                                       "")) if p))
    commands = {"endpoint": ["endpoint", "traffic", "--param", f"start={start}", "--format", "json"],
                "status": ["status", "--json"]}
    found: dict = {}
    for name, args in commands.items():
        for engine, count in (("auto", repeats), ("spark", spark_repeats)):
            times = []
            for _ in range(count):
                started = time.perf_counter()
                subprocess.run([sys.executable, "-m", "pipeframe", *args, "-p", str(root), "--engine", engine],
                               check=True, capture_output=True, env=env)
                times.append(time.perf_counter() - started)
            found[f"{name}_{engine}_s"] = summary(times)
    return found


def same_answers(read_path: dict, spark: dict) -> int:
    """The read path's answers equal Spark's (floats within 1e-9 relative): the rows compared."""
    import math

    compared = 0
    for key, theirs in spark.items():
        ours = read_path[key]
        if ours["meta"] != theirs["meta"] or len(ours["data"]) != len(theirs["data"]):
            raise SystemExit(f"{key}: the read path's answer differs from Spark's")
        for a, b in zip(ours["data"], theirs["data"], strict=True):
            for column, value in b.items():
                other = a[column]
                close = math.isclose(other, value, rel_tol=1e-9) if isinstance(value, float) else other == value
                if not close and column not in ("p50", "p95"):  # KLL merges are randomized in Spark too
                    raise SystemExit(f"{key}: {column} = {other!r} on the read path, {value!r} on Spark")
            compared += 1
        if ours["statistics"].get("engine") != "duckdb":
            raise SystemExit(f"{key} was not answered on the read path: {ours['statistics']}")
    return compared


def run(rows: int, requests: int, seconds: float, clients: int, ingest_rate: float, cli_repeats: int,
        keep: bool = False) -> dict:
    from pipeframe.project import Project

    work = Path(tempfile.mkdtemp(prefix="pipeframe-serve-bench-"))
    results: dict = {"date": datetime.now(UTC).strftime("%Y-%m-%d"), "cpus": os.cpu_count(), "rows": rows,
                     "load": [round(x, 2) for x in os.getloadavg()]}
    try:
        root = work / "project"
        write_pipeframe_project(root)
        for name, sql in EXTRA_ENDPOINTS.items():
            (root / f"pipes/{name}.pipe").write_text(f"NODE {name}\nSQL >\n{sql}\nTYPE endpoint\n")
        project = Project(root)
        log(f"deploying the benchmark project and appending {rows:,} rows in ten appends")
        project.deploy()
        for i in range(10):
            project.append("events", generate(project.spark, i * rows // 10, rows // 10))
        project.optimize()
        views = {name: project.spark.read.format("delta").load(project.snapshot.table(name).path).count()
                 for name in ("requests_by_hour", "users_by_day", "latency_by_endpoint")}
        results["view_rows"] = views
        chosen = calls(rows)
        checked = chosen + [("traffic_raw", {"start": starts(rows)[0]})]
        spark_side = Project(root, spark=project.spark, engine="spark")  # before any event lands: the same rows
        expected = {(pipe, json.dumps(params, sort_keys=True)): spark_side.endpoint(pipe, **params).to_json()
                    for pipe, params in checked}
        project.spark.stop()
        for engine in ("auto", "spark"):  # the read path first: its answers are compared before events land
            log(f"pipeframe serve --engine {engine}")
            server = Server(root, work / f"serve-{engine}.log", ["--engine", engine])
            try:
                if engine == "auto":
                    results["rows_compared"] = same_answers(answers_of(server.url, checked), expected)
                count = requests if engine == "auto" else max(len(chosen) * 3, requests // 20)
                fresh = [("traffic", {"start": hour}) for hour in hours(rows, count // 4 + 1)]
                results[engine] = {"sequential": sequential(server.url, chosen, count),
                                   "new_statements": sequential(server.url, fresh, len(fresh) - 1, warm=False),
                                   "view_over_raw": view_over_raw(server.url, hours(rows, 7 if engine == "auto"
                                                                                    else 4)[1:])}
                results[engine]["concurrent"] = concurrent(server.url, chosen, clients, seconds, ingest_rate)
            finally:
                server.stop()
        log("fresh processes: pipeframe endpoint and pipeframe status, read path vs Spark")
        results["cli"] = fresh_processes(root, starts(rows)[0], cli_repeats, max(1, cli_repeats // 3))
        results["load_at_end"] = [round(x, 2) for x in os.getloadavg()]
        return results
    finally:
        if keep:
            log(f"kept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)


def section(results: dict) -> list[str]:
    auto, spark, cli = results["auto"], results["spark"], results["cli"]
    seq, seq_spark = auto["sequential"], spark["sequential"]
    new, new_spark = auto["new_statements"]["all"], spark["new_statements"]["all"]
    conc, conc_spark = auto["concurrent"], spark["concurrent"]
    rows = results["view_rows"]
    cli_worst = max(cli["endpoint_auto_s"]["median"], cli["status_auto_s"]["median"])

    def met(value: float, target: float, at_most: bool = True) -> str:
        return "met" if (value <= target if at_most else value >= target) else "**not met**"

    lines = [
        SECTION, "",
        (f"Measured {results['date']} by `{results.get('command', 'python bench/serve_bench.py')}` on {results['cpus']} "
        f"cores (load average {results['load'][0]} at the start, {results['load_at_end'][0]} at the end). The source "
        f"holds {results['rows']:,} rows; the views hold {rows['requests_by_hour']:,} (hourly), "
        f"{rows['users_by_day']:,} (daily users, HLL) and {rows['latency_by_endpoint']:,} (latency, KLL) rows after "
        "`optimize`. Two `pipeframe serve` processes in turn on the same warehouse: `--engine auto` (DuckDB over the "
        f"tables' snapshots) and `--engine spark`. Before timing, every answer of the read path equalled Spark's "
        f"({results['rows_compared']} rows compared)."), "",
        "| target | measured (read path) | Spark | verdict |", "|---|---|---|---|",
        (f"| {TARGETS['p50_ms'][0]}: answers the server keeps | {seq['all']['p50_ms']} ms | "
        f"{seq_spark['all']['p50_ms']} ms | {met(seq['all']['p50_ms'], TARGETS['p50_ms'][1])} |"),
        (f"| {TARGETS['p99_ms'][0]}: answers the server keeps | {seq['all']['p99_ms']} ms | {seq_spark['all']['p99_ms']} "
        f"ms | {met(seq['all']['p99_ms'], TARGETS['p99_ms'][1])} |"),
        (f"| {TARGETS['p50_ms'][0]}: a new statement each call (`traffic`, {new['n']} hours) | {new['p50_ms']} ms | "
        f"{new_spark['p50_ms']} ms | {met(new['p50_ms'], TARGETS['p50_ms'][1])} |"),
        (f"| {TARGETS['p99_ms'][0]}: a new statement each call | {new['p99_ms']} ms | {new_spark['p99_ms']} ms | "
        f"{met(new['p99_ms'], TARGETS['p99_ms'][1])} |"),
        (f"| {TARGETS['answers_per_s'][0]} | {conc['answers_per_s']} answers/s | {conc_spark['answers_per_s']} "
        f"answers/s | {met(conc['answers_per_s'], TARGETS['answers_per_s'][1], at_most=False)} |"),
        (f"| {TARGETS['view_over_raw'][0]} | {report.ratio_text(auto['view_over_raw']['raw_over_view'])} | "
        f"{report.ratio_text(spark['view_over_raw']['raw_over_view'])} | "
        f"{met(auto['view_over_raw']['raw_over_view']['median'], TARGETS['view_over_raw'][1], at_most=False)} |"),
        (f"| {TARGETS['cli_s'][0]} | endpoint {cli['endpoint_auto_s']['median']} s, status "
        f"{cli['status_auto_s']['median']} s | endpoint {cli['endpoint_spark_s']['median']} s, status "
        f"{cli['status_spark_s']['median']} s | {met(cli_worst, TARGETS['cli_s'][1])} |"), "",
        ("One client, the endpoints in turn, the same seven calls over and over (ms; a dashboard's reloads: after the "
         "first, each answer is one the server keeps until a table it read moves):"), "",
        "| endpoint | n | p50 | p95 | p99 | max | Spark p50 | Spark p99 |", "|---|---|---|---|---|---|---|---|",
    ]
    for pipe, figures in seq.items():
        theirs = seq_spark.get(pipe, {})
        lines.append(f"| {pipe} | {figures['n']} | {figures['p50_ms']} | {figures['p95_ms']} | {figures['p99_ms']} | "
                     f"{figures['max_ms']} | {theirs.get('p50_ms', '–')} | {theirs.get('p99_ms', '–')} |")
    lines += [
        "", (f"{conc['clients']} clients for {conc['seconds']} s while {conc['events_per_s']} event requests/s landed "
        f"(10 rows each; {conc['events_refused']} refused): read path {conc['answers']:,} answers, p50 "
        f"{conc['p50_ms']} ms, p99 {conc['p99_ms']} ms ({conc['failed']} failed); Spark {conc_spark['answers']:,} "
        f"answers, p50 {conc_spark['p50_ms']} ms, p99 {conc_spark['p99_ms']} ms."), "",
        (f"View vs raw rows (`traffic` vs `traffic_raw`, paired, a new `start` each pair): read path {spread_ms(auto['view_over_raw'])}; Spark "
        f"{spread_ms(spark['view_over_raw'])}."), "",
        (f"Fresh processes (median of the runs): `pipeframe endpoint` {cli['endpoint_auto_s']['median']} s "
        f"({spread_s(cli['endpoint_auto_s'])}) vs {cli['endpoint_spark_s']['median']} s with `--engine spark`; "
        f"`pipeframe status` {cli['status_auto_s']['median']} s ({spread_s(cli['status_auto_s'])}) vs "
        f"{cli['status_spark_s']['median']} s."),
    ]
    for note in results.get("notes", []):  # what the run's author added (`"notes"` in the results), kept with them
        lines += ["", note]
    return lines


def spread_ms(pair: dict) -> str:
    view, raw = pair["view_s"]["median"] * 1000, pair["raw_s"]["median"] * 1000
    return f"view {view:.1f} ms, raw {raw:.1f} ms, raw / view {report.ratio_text(pair['raw_over_view'])}"


def spread_s(figures: dict) -> str:
    return f"{figures['min']}–{figures['max']} s"


def write_docs(results: dict, page: Path) -> None:
    report.save_section(page, "serve", results, SECTION, section(results), BEFORE)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog="\n".join(__doc__.splitlines()[2:]))
    parser.add_argument("--rows", type=int, default=10_000_000, help="source rows")
    parser.add_argument("--requests", type=int, default=400, help="sequential requests on the read path")
    parser.add_argument("--seconds", type=float, default=20, help="seconds of the concurrent measure")
    parser.add_argument("--clients", type=int, default=16, help="concurrent readers")
    parser.add_argument("--ingest-rate", type=float, default=50, help="event requests/s during the concurrent measure")
    parser.add_argument("--cli-repeats", type=int, default=5, help="fresh-process runs with --engine auto")
    parser.add_argument("--keep", action="store_true", help="keep the temp project and the servers' logs")
    parser.add_argument("--json", type=Path, default=None, help="also write the results to this file")
    parser.add_argument("--write", action="store_true", help="put the results into docs/benchmarks.json and .md")
    args = parser.parse_args()
    results = run(args.rows, args.requests, args.seconds, args.clients, args.ingest_rate, args.cli_repeats, args.keep)
    results["command"] = " ".join(["python", "bench/serve_bench.py", *sys.argv[1:]])
    print("\n".join(section(results)))
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n")
    if args.write:
        write_docs(results, DOCS / "benchmarks.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
