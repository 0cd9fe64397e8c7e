"""The read path of two checkouts side by side: bench/serve_bench.py's measures, on one project, in turn.

Usage: python bench/serve_side_by_side.py --project DIR --before CHECKOUT [--rounds 2] [--requests 400]
       [--seconds 20] [--clients 16] [--ingest-rate 50] [--cli-repeats 5] [--json F] [--write]
       python bench/serve_side_by_side.py --render F [--write]

DIR is a deployed and filled benchmark project (`python bench/serve_bench.py --keep` leaves one: the `events` source,
its three views and the endpoints `traffic`, `traffic_raw`, `daily_users`, `latencies`; --rows says how many source
rows it was filled with, for the `start` hours). For each round, `pipeframe serve --engine auto` runs from CHECKOUT
(before) and from this checkout (after), one after the other, and each is measured as serve_bench measures the read
path: sequential calls (answers kept), a new statement each call, view vs raw rows, --clients concurrent clients while
--ingest-rate event requests/s land; then `pipeframe endpoint` and `pipeframe status` in fresh processes. On a shared
machine rounds alternate, so both sides meet the same load; every figure is printed per round and side.

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
TARGET = 1.10  # after / before at p50: the request log and metrics cost at most 10%


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


def measure(root: Path, code: Path, work: Path, rows: int, requests: int, seconds: float, clients: int,
            ingest_rate: float) -> dict:
    chosen = calls(rows)
    server = Server(root, work / f"serve-{code.name}.log", ["--engine", "auto"], code=code)
    try:
        fresh = [("traffic", {"start": hour}) for hour in hours(rows, requests // 4 + 1)]
        return {"sequential": sequential(server.url, chosen, requests)["all"],
                "new_statements": sequential(server.url, fresh, len(fresh) - 1, warm=False)["all"],
                "view_over_raw": view_over_raw(server.url, hours(rows, 7)[1:]),
                "concurrent": concurrent(server.url, chosen, clients, seconds, ingest_rate)}
    finally:
        server.stop()


def fresh_processes(root: Path, code: Path, start: str, repeats: int) -> dict:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (str(code), os.environ.get("PYTHONPATH", "")) if p))
    commands = {"endpoint": ["endpoint", "traffic", "--param", f"start={start}", "--format", "json"],
                "status": ["status", "--json"]}
    found = {}
    for name, args in commands.items():
        times = []
        for _ in range(repeats):
            started = time.perf_counter()
            subprocess.run([sys.executable, "-m", "pipeframe", *args, "-p", str(root.resolve()), "--engine", "auto"],
                           check=True, capture_output=True, env=env, cwd=code)  # `-m` puts the cwd first on sys.path
            times.append(time.perf_counter() - started)
        found[f"{name}_s"] = summary(times)
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog="\n".join(__doc__.splitlines()[2:]))
    parser.add_argument("--project", type=Path, default=None, help="a deployed, filled benchmark project")
    parser.add_argument("--before", type=Path, default=None, help="the checkout measured as `before`")
    parser.add_argument("--rows", type=int, default=10_000_000, help="source rows the project was filled with")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--requests", type=int, default=400)
    parser.add_argument("--seconds", type=float, default=20)
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--ingest-rate", type=float, default=50)
    parser.add_argument("--cli-repeats", type=int, default=5)
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
    if args.project is None or args.before is None:
        parser.error("--project and --before are required (unless --render)")
    sides = {"before": args.before.resolve(), "after": BENCH.parent}
    for side, code in sides.items():
        if not imported_from(code).is_relative_to(code.resolve()):
            raise SystemExit(f"{side}: pipeframe is imported from {imported_from(code)}, not from {code}")
    work = args.project.parent
    results: dict = {"command": " ".join(["python", "bench/serve_side_by_side.py", *sys.argv[1:]]),
                     "date": datetime.now(UTC).strftime("%Y-%m-%d"), "cpus": os.cpu_count(), "rows": args.rows,
                     "load": [round(x, 2) for x in os.getloadavg()],
                     "commits": {side: commit_of(code) for side, code in sides.items()}, "rounds": []}
    for number in range(args.rounds):
        figures = {}
        for side, code in sides.items():
            load = os.getloadavg()[0]
            log(f"round {number + 1}: {side} ({code}), load average {load:.2f}")
            logged = logged_rows(args.project)
            figures[side] = {"load": round(load, 2), **measure(args.project, code, work, args.rows, args.requests,
                                                                 args.seconds, args.clients, args.ingest_rate)}
            figures[side]["request_log"] = {"rows_written": logged_rows(args.project) - logged,
                                            "requests_made": requests_made(figures[side], len(calls(args.rows)))}
            figures[side]["cli"] = fresh_processes(args.project, code, starts(args.rows)[0], args.cli_repeats)
            print(json.dumps({"round": number + 1, "side": side, **figures[side]}), flush=True)
        results["rounds"].append(figures)
    results["load_at_end"] = [round(x, 2) for x in os.getloadavg()]
    print("\n".join(section(results)))
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n")
    if args.write:
        write_docs(results, DOCS / "benchmarks.md")
    return 0


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


def ratios(results: dict, pick) -> list[float]:
    return [pick(r["after"]) / pick(r["before"]) for r in results["rounds"]]


def section(results: dict) -> list[str]:
    rounds = results["rounds"]
    commits = results.get("commits", {})
    p50 = ratios(results, lambda f: f["sequential"]["p50_ms"])
    fresh = ratios(results, lambda f: f["new_statements"]["p50_ms"])
    answers = ratios(results, lambda f: f["concurrent"]["answers_per_s"])
    median = statistics.median(p50)
    met = median <= TARGET
    lines = [
        SECTION, "",
        (f"Measured {results.get('date', '?')} by `{results['command']}` on {results['cpus']} cores (load average "
         f"{results.get('load', ['?'])[0]} at the start, {results.get('load_at_end', ['?'])[0]} at the end), on a "
         f"project left by `python bench/serve_bench.py --keep --rows {results.get('rows', 0)}` "
         f"({results.get('rows', 0):,} source rows). `before` is {commits.get('before', 'the checkout before')} (no "
         f"`/metrics`, no request log), `after` is {commits.get('after', 'this checkout')} (Prometheus metrics and a "
         "row per endpoint request into `pipeframe.pipe_stats`, written every `service_log.flush_ms` = 2000 ms, both "
         "on by default). Each round runs a fresh `pipeframe serve --engine auto` from each side in turn on the same "
         "warehouse; sequential: one client, answers the server keeps (ms); answers/s: 16 clients while 50 event "
         "requests/s land; view vs raw: raw / view, median of the pairs; CLI: `pipeframe endpoint` in a fresh "
         "process, median (s)."),
        "",
        ("| round | side | load | p50 | p95 | new statement p50 | answers/s | view vs raw | CLI endpoint | "
         "request log rows / requests |"),
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for number, figures in enumerate(rounds, 1):
        for side in ("before", "after"):
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
        (f"After / before at p50, per round: answers the server keeps **{shown(p50)}** (median "
         f"**{median:.3f}**); a new statement each call {shown(fresh)}; answers/s with 16 clients {shown(answers)} "
         f"(above 1: after answered more). Target (issue 37): the request log and metrics cost ≤ 10% at p50 "
         f"(ratio ≤ {TARGET:.2f}): **{'met' if met else 'not met'}**."),
    ]
    if all("request_log" in figures[side] for figures in rounds for side in ("before", "after")):
        written = {side: sum(f[side]["request_log"]["rows_written"] for f in rounds) for side in ("before", "after")}
        made = {side: sum(f[side]["request_log"]["requests_made"] for f in rounds) for side in ("before", "after")}
        lines += ["", (f"The request log (`_pipeframe/service/pipe_stats`, counted with delta-rs before and after each "
                       f"server): the `after` servers wrote **{written['after']:,} rows for {made['after']:,} endpoint "
                       f"requests**, the `before` servers {written['before']:,} for {made['before']:,}.")]
    for note in results.get("notes", []):  # what the run's author added, kept with the figures
        lines += ["", note]
    return lines


def write_docs(results: dict, page: Path) -> None:
    report.save_section(page, "serve_side_by_side", results, SECTION, section(results), BEFORE)


if __name__ == "__main__":
    sys.exit(main())
