"""The read path of two checkouts side by side: bench/serve_bench.py's measures, on one project, in turn.

Usage: python bench/serve_side_by_side.py --project DIR --before CHECKOUT [--rounds 2] [--requests 400]
       [--seconds 20] [--clients 16] [--ingest-rate 50] [--cli-repeats 5] [--json F]

DIR is a deployed and filled benchmark project (`python bench/serve_bench.py --keep` leaves one: the `events` source,
its three views and the endpoints `traffic`, `traffic_raw`, `daily_users`, `latencies`; --rows says how many source
rows it was filled with, for the `start` hours). For each round, `pipeframe serve --engine auto` runs from CHECKOUT
(before) and from this checkout (after), one after the other, and each is measured as serve_bench measures the read
path: sequential calls (answers kept), a new statement each call, view vs raw rows, --clients concurrent clients while
--ingest-rate event requests/s land; then `pipeframe endpoint` and `pipeframe status` in fresh processes. On a shared
machine rounds alternate, so both sides meet the same load; every figure is printed per round and side.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from common import summary
from ingest_bench import Server, log
from serve_bench import calls, concurrent, hours, sequential, starts, view_over_raw

BENCH = Path(__file__).resolve().parent


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
            subprocess.run([sys.executable, "-m", "pipeframe", *args, "-p", str(root), "--engine", "auto"],
                           check=True, capture_output=True, env=env)
            times.append(time.perf_counter() - started)
        found[f"{name}_s"] = summary(times)
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog="\n".join(__doc__.splitlines()[2:]))
    parser.add_argument("--project", type=Path, required=True, help="a deployed, filled benchmark project")
    parser.add_argument("--before", type=Path, required=True, help="the checkout measured as `before`")
    parser.add_argument("--rows", type=int, default=10_000_000, help="source rows the project was filled with")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--requests", type=int, default=400)
    parser.add_argument("--seconds", type=float, default=20)
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--ingest-rate", type=float, default=50)
    parser.add_argument("--cli-repeats", type=int, default=5)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    sides = {"before": args.before.resolve(), "after": BENCH.parent}
    work = args.project.parent
    results: dict = {"command": " ".join(["python", "bench/serve_side_by_side.py", *sys.argv[1:]]),
                     "cpus": os.cpu_count(), "rounds": []}
    for number in range(args.rounds):
        figures = {}
        for side, code in sides.items():
            load = os.getloadavg()[0]
            log(f"round {number + 1}: {side} ({code}), load average {load:.2f}")
            figures[side] = {"load": round(load, 2), **measure(args.project, code, work, args.rows, args.requests,
                                                                 args.seconds, args.clients, args.ingest_rate)}
            figures[side]["cli"] = fresh_processes(args.project, code, starts(args.rows)[0], args.cli_repeats)
            print(json.dumps({"round": number + 1, "side": side, **figures[side]}), flush=True)
        results["rounds"].append(figures)
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
