"""The cost of the request log and metrics on the read path: bench/serve_bench.py's measures, side by side.

Usage: python bench/serve_side_by_side.py --project DIR [--before CHECKOUT] [--pure-python-http] [--rounds 3]
       [--requests 400] [--seconds 20] [--clients 16] [--ingest-rate 50] [--cli-repeats 5] [--json F] [--write]
       python bench/serve_side_by_side.py --render F [--write]

DIR is a deployed and filled benchmark project (`python bench/serve_bench.py --keep` leaves one: the `events` source,
its three views and the endpoints `traffic`, `traffic_raw`, `daily_users`, `latencies`; --rows says how many source
rows it was filled with, for the `start` hours). Each round runs `pipeframe serve --engine auto` from this checkout
twice: `log off` with the request log disabled (the environment `bench_log_off` the script adds to DIR's
pipeframe.yaml: `service_log: {enabled: false}`) and `log on` as shipped (a row per endpoint request into
`pipeframe.pipe_stats`, Prometheus metrics); with --before, also from CHECKOUT (an older pipeframe) first; with
--pure-python-http, also `h11`: as shipped, with httptools and uvloop hidden from the server (uvicorn then parses
HTTP with h11 and runs asyncio's own loop). Each is
measured as serve_bench measures the read path: sequential calls (answers kept), a new statement each call, view vs
raw rows, --clients concurrent clients while --ingest-rate event requests/s land; then `pipeframe endpoint` in fresh
processes. On a shared machine sides alternate in each round, in the reverse order every other round (a side that
always came second would meet the previous server's leftovers), so they meet the same load; every figure is printed
per round and side. The metrics are on in every side of this checkout (they have no switch): their cost per request
is timed in-process (`request_path_us`), with the request log's share of the request's thread.

Each side also reports the rows its server wrote into the request log (`_pipeframe/service/pipe_stats`, read with
delta-rs after the server stopped) next to the endpoint requests it was sent. `--write` puts the results into
docs/benchmarks.json (`serve_side_by_side`) and the section "Endpoints with the request log and metrics on" of
docs/benchmarks.md; `--render F` renders that section from a results file written by `--json` instead of measuring.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

import report
from common import summary
from ingest_bench import Server, log
from serve_bench import calls, concurrent, hours, sequential, starts, view_over_raw

BENCH = Path(__file__).resolve().parent
DOCS = BENCH.parent / "docs"
SECTION = "## Endpoints with the request log and metrics on (issue 37)"
BEFORE = "## Real-time ingestion"
TARGET = 1.10  # log on / log off at p50: the request log and metrics cost at most 10%
LOG_OFF = "bench_log_off"  # the environment of the project's pipeframe.yaml with the request log disabled
OFF, ON, H11 = "log off", "log on", "h11"
FAST_HTTP = ("httptools", "uvloop")  # uvicorn's C HTTP parser and libuv event loop, hidden in the `h11` side


def logged_rows(root: Path) -> int:
    """Rows in the project's request log (`pipeframe.pipe_stats`), 0 while it has none."""
    from deltalake import DeltaTable

    path = root / ".pipeframe/warehouse/_pipeframe/service/pipe_stats"
    return DeltaTable(str(path)).to_pyarrow_table(columns=["request_id"]).num_rows if path.exists() else 0


def requests_made(figures: dict, chosen: int) -> int:
    """The endpoint requests `measure` sent: each sequential measure's warm-up and calls, the view vs raw pairs (the
    first one untimed), the concurrent clients' answers and failures."""
    concurrent_ = figures["concurrent"]
    pairs = len(figures["view_over_raw"]["view_s"]["runs"]) + 1
    return (chosen + figures["sequential"]["n"] + 1 + figures["new_statements"]["n"] + 2 * pairs
            + concurrent_["answers"] + concurrent_["failed"])


def measure(root: Path, code: Path, options: list[str], hidden: list[str], work: Path, rows: int, requests: int,
            seconds: float, clients: int, ingest_rate: float) -> dict:
    chosen = calls(rows)
    server = Server(root, work / f"serve-{code.name}.log", ["--engine", "auto", *options], code=code,
                    first_on_path=[hide(hidden, work)] if hidden else [])
    try:
        fresh = [("traffic", {"start": hour}) for hour in hours(rows, requests // 4 + 1)]
        return {"sequential": sequential(server.url, chosen, requests)["all"],
                "new_statements": sequential(server.url, fresh, len(fresh) - 1, warm=False)["all"],
                "view_over_raw": view_over_raw(server.url, hours(rows, 7)[1:]),
                "concurrent": concurrent(server.url, chosen, clients, seconds, ingest_rate)}
    finally:
        server.stop()


def hide(modules: list[str], work: Path) -> str:
    """A folder that, first on a server's PYTHONPATH, makes `modules` look not installed (importing one raises
    ImportError, as uvicorn's choice of its HTTP parser and event loop expects of a missing package)."""
    folder = work / "hidden-modules"
    folder.mkdir(exist_ok=True)
    for module in modules:
        (folder / f"{module}.py").write_text(f'raise ImportError("{module} is hidden for the benchmark")\n')
    return str(folder)


def fresh_processes(root: Path, code: Path, options: list[str], start: str, repeats: int) -> dict:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (str(code), os.environ.get("PYTHONPATH", "")) if p))
    commands = {"endpoint": ["endpoint", "traffic", "--param", f"start={start}", "--format", "json"],
                "status": ["status", "--json"]}
    found = {}
    for name, args in commands.items():
        times = []
        for _ in range(repeats):
            started = time.perf_counter()
            subprocess.run([sys.executable, "-m", "pipeframe", *args, "-p", str(root.resolve()), "--engine", "auto",
                            *options],
                           check=True, capture_output=True, env=env, cwd=code)  # `-m` puts the cwd first on sys.path
            times.append(time.perf_counter() - started)
        found[f"{name}_s"] = summary(times)
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog="\n".join(__doc__.splitlines()[2:]))
    parser.add_argument("--project", type=Path, default=None, help="a deployed, filled benchmark project")
    parser.add_argument("--before", type=Path, default=None, help="also measure this (older) checkout")
    parser.add_argument("--rows", type=int, default=10_000_000, help="source rows the project was filled with")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--requests", type=int, default=400)
    parser.add_argument("--seconds", type=float, default=20)
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--ingest-rate", type=float, default=50)
    parser.add_argument("--cli-repeats", type=int, default=5)
    parser.add_argument("--pure-python-http", action="store_true",
                        help="also measure `log on` with httptools and uvloop hidden (uvicorn on h11 and asyncio)")
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--write", action="store_true", help="put the results into docs/benchmarks.json and .md")
    parser.add_argument("--render", type=Path, default=None, help="render the section from this results file")
    args = parser.parse_args()
    if args.render:
        results = json.loads(args.render.read_text())
        print("\n".join(section(results)))
        if args.write:
            write_docs(results, DOCS / "benchmarks.md")
        return 0
    if args.project is None:
        parser.error("--project is required (unless --render)")
    with_log_off(args.project)
    sides = {OFF: (BENCH.parent, ["--env", LOG_OFF], []), ON: (BENCH.parent, [], [])}
    if args.pure_python_http:
        sides[H11] = (BENCH.parent, [], list(FAST_HTTP))
    if args.before:
        sides = {"before": (args.before.resolve(), [], []), **sides}
    for side, (code, _, _) in sides.items():
        if not imported_from(code).is_relative_to(code.resolve()):
            raise SystemExit(f"{side}: pipeframe is imported from {imported_from(code)}, not from {code}")
    work = args.project.parent
    results: dict = {"command": " ".join(["python", "bench/serve_side_by_side.py", *sys.argv[1:]]),
                     "date": datetime.now(UTC).strftime("%Y-%m-%d"), "cpus": os.cpu_count(), "rows": args.rows,
                     "load": [round(x, 2) for x in os.getloadavg()], "request_path_us": request_path_us(),
                     "commits": {side: commit_of(code) for side, (code, _, _) in sides.items()}, "rounds": []}
    for number in range(args.rounds):
        figures = {}
        order = list(sides.items()) if number % 2 == 0 else list(sides.items())[::-1]  # ABBA: no side always second
        for side, (code, options, hidden) in order:
            load = os.getloadavg()[0]
            log(f"round {number + 1}: {side} ({code} {' '.join(options)}), load average {load:.2f}")
            logged = logged_rows(args.project)
            figures[side] = {"load": round(load, 2), **measure(args.project, code, options, hidden, work, args.rows,
                                                                 args.requests, args.seconds, args.clients,
                                                                 args.ingest_rate)}
            figures[side]["request_log"] = {"rows_written": logged_rows(args.project) - logged,
                                            "requests_made": requests_made(figures[side], len(calls(args.rows)))}
            figures[side]["cli"] = fresh_processes(args.project, code, options, starts(args.rows)[0],
                                                   args.cli_repeats)
            print(json.dumps({"round": number + 1, "side": side, **figures[side]}), flush=True)
        results["rounds"].append(figures)
    results["load_at_end"] = [round(x, 2) for x in os.getloadavg()]
    print("\n".join(section(results)))
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n")
    if args.write:
        write_docs(results, DOCS / "benchmarks.md")
    return 0


def with_log_off(root: Path) -> None:
    """Add the environment `bench_log_off` (the request log disabled, the same warehouse) to the project's
    pipeframe.yaml, once."""
    import yaml

    path = root / "pipeframe.yaml"
    config = yaml.safe_load(path.read_text()) if path.exists() else {}
    environments = config.setdefault("environments", {})
    off = {"warehouse": config.get("warehouse", ".pipeframe/warehouse"), "service_log": {"enabled": False}}
    if environments.get(LOG_OFF) != off:  # the same warehouse (an environment's own is `.pipeframe/<name>`)
        environments[LOG_OFF] = off
        path.write_text(yaml.safe_dump(config, sort_keys=False))


def request_path_us(calls: int = 20_000) -> dict:
    """Microseconds per endpoint request that the metrics and the request log add to the request's own thread, timed
    in this process on a request of the benchmark's shape (the writer thread's work is not in them)."""
    import timeit
    from types import SimpleNamespace

    from prometheus_client import CollectorRegistry, Counter, Histogram

    from pipeframe.config import ServiceLogSettings
    from pipeframe.engine.servicelog import ServiceLog
    from pipeframe.server.service import Service

    registry = CollectorRegistry()
    labels = ["pipe", "status", "engine"]
    requests = Counter("requests", "", labels, registry=registry)
    latency = Histogram("latency", "", labels, registry=registry)

    def metrics() -> None:  # what Metrics.endpoint does per request
        requests.labels("traffic", "2xx", "duckdb").inc()
        latency.labels("traffic", "2xx", "duckdb").observe(0.0006)

    recorder = SimpleNamespace(runtime=SimpleNamespace(service_log=ServiceLog(lambda: None, ServiceLogSettings())))
    request = SimpleNamespace(scope={"path": "/v0/pipes/traffic.json", "query_string": b"start=2026-01-01+10%3A00%3A00",
                                     "method": "GET", "headers": [(b"user-agent", b"Python-urllib/3.11")]})
    result = SimpleNamespace(engine="duckdb", rows_read=60, bytes_read=4096, data=[{}] * 10)

    def request_log() -> None:
        Service.log_request(recorder, request, "traffic", None, 200, "", 0.0006, result)

    return {name: round(min(timeit.repeat(work, number=calls, repeat=3)) / calls * 1e6, 2)
            for name, work in (("metrics", metrics), ("request_log", request_log))}


def imported_from(code: Path) -> Path:
    """Where a process started as the servers are (in `code`, `code` first on PYTHONPATH) imports pipeframe from."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (str(code), os.environ.get("PYTHONPATH", "")) if p))
    found = subprocess.run([sys.executable, "-c", "import pipeframe; print(pipeframe.__file__)"], check=True,
                           capture_output=True, text=True, env=env, cwd=code)
    return Path(found.stdout.strip()).resolve()


def commit_of(code: Path) -> str:
    found = subprocess.run(["git", "-C", str(code), "rev-parse", "--short", "HEAD"], check=False, capture_output=True,
                           text=True)
    return found.stdout.strip() or "?"


def ratios(results: dict, pick, over: str = OFF) -> list[float]:
    return [pick(r[ON]) / pick(r[over]) for r in results["rounds"]]


def section(results: dict) -> list[str]:
    rounds = results["rounds"]
    commits = results.get("commits", {})
    sides = list(rounds[0])
    p50 = ratios(results, lambda f: f["sequential"]["p50_ms"])
    fresh = ratios(results, lambda f: f["new_statements"]["p50_ms"])
    answers = ratios(results, lambda f: f["concurrent"]["answers_per_s"])
    median = statistics.median(p50)
    met = median <= TARGET
    cost = results.get("request_path_us", {})
    lines = [
        SECTION, "",
        (f"Measured {results.get('date', '?')} by `{results['command']}` on {results['cpus']} cores (load average "
         f"{results.get('load', ['?'])[0]} at the start, {results.get('load_at_end', ['?'])[0]} at the end), on a "
         f"project left by `python bench/serve_bench.py --keep --rows {results.get('rows', 0)}` "
         f"({results.get('rows', 0):,} source rows). Each round runs a fresh `pipeframe serve --engine auto` of each "
         f"side in turn (the order reversed every other round) on the same warehouse: `{OFF}` and `{ON}` are {commits.get(ON, 'this checkout')}, with "
         "`service_log: {enabled: false}` and as shipped (a row per endpoint request into `pipeframe.pipe_stats`, "
         "written every `service_log.flush_ms` = 2000 ms; Prometheus metrics on in both)"
         + (f"; `before` is {commits['before']}, an older pipeframe" if "before" in commits else "")
         + (f"; `{H11}` is `{ON}` with httptools and uvloop hidden (uvicorn on h11 and asyncio)" if H11 in commits
            else "") +
         ". Sequential: one client, answers the server keeps (ms); answers/s: 16 clients while 50 event requests/s "
         "land; view vs raw: raw / view, median of the pairs; CLI: `pipeframe endpoint` in a fresh process, median "
         "(s)."),
        "",
        ("| round | side | load | p50 | p95 | new statement p50 | answers/s | view vs raw | CLI endpoint | "
         "request log rows / requests |"),
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for number, figures in enumerate(rounds, 1):
        for side in sides:
            f = figures[side]
            logged = f.get("request_log")
            lines.append(
                f"| {number} | {side} | {f['load']} | {f['sequential']['p50_ms']} | {f['sequential']['p95_ms']} | "
                f"{f['new_statements']['p50_ms']} | {f['concurrent']['answers_per_s']} | "
                f"{f['view_over_raw']['raw_over_view']['median']}x | {f['cli']['endpoint_s']['median']} | "
                + (f"{logged['rows_written']:,} / {logged['requests_made']:,} |" if logged else "– |"))
    shown = lambda values: ", ".join(f"{v:.2f}" for v in values)
    lines += [
        "",
        (f"{ON} / {OFF} at p50, per round: answers the server keeps **{shown(p50)}** (median **{median:.3f}**); a new "
         f"statement each call {shown(fresh)}; answers/s with 16 clients {shown(answers)} (above 1: `{ON}` answered "
         f"more). Target (issue 37): the request log and metrics cost ≤ 10% at p50 (ratio ≤ {TARGET:.2f}): "
         f"**{'met' if met else 'not met'}**."),
    ]
    if H11 in sides:
        h11 = lambda pick: ratios(results, pick, H11)
        lines += ["", (f"{ON} (httptools, uvloop) / {H11} (the same, with uvicorn on h11 and asyncio): p50 "
                       f"{shown(h11(lambda f: f['sequential']['p50_ms']))}; answers/s with 16 clients "
                       f"**{shown(h11(lambda f: f['concurrent']['answers_per_s']))}**.")]
    if "before" in sides:
        lines += ["", f"{ON} / before at p50, per round: {shown(ratios(results, lambda f: f['sequential']['p50_ms'], 'before'))}."]
    if cost:
        lines += ["", (f"On the request's own thread (timed in-process, `request_path_us`): the metrics "
                       f"{cost['metrics']} µs and the request log {cost['request_log']} µs per request (its row is "
                       "made by the writer thread).")]
    written = {side: sum(f[side]["request_log"]["rows_written"] for f in rounds) for side in sides}
    made = {side: sum(f[side]["request_log"]["requests_made"] for f in rounds) for side in sides}
    lines += ["", ("The request log (`_pipeframe/service/pipe_stats`, counted with delta-rs before and after each "
                   "server): " + "; ".join(f"`{side}` wrote **{written[side]:,} rows for {made[side]:,} endpoint "
                                          "requests**" for side in sides) + ".")]
    for note in results.get("notes", []):  # what the run's author added, kept with the figures
        lines += ["", note]
    return lines


def write_docs(results: dict, page: Path) -> None:
    report.save_section(page, "serve_side_by_side", results, SECTION, section(results), BEFORE)


if __name__ == "__main__":
    sys.exit(main())
