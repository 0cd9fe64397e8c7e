"""The warm local engine: CLI commands with `pipeframe local start` up, next to the same commands starting Spark.

Usage: python bench/local_bench.py [--repeats 3] [--write]

Two copies of the example project, each deployed with its fixtures loaded. Copy A has no local engine: every
command starts its own embedded Spark (a JVM), as without `pipeframe local`. Copy B runs `pipeframe local start`
once (not timed): its commands are Spark Connect clients of that server. Each repeat times, on A then on B, the
commands a user types while working (`status`, `endpoint top_products`), as subprocesses from start to exit.
Ratios are A / B of the same command in the same repeat. With --write, the figures go into docs/benchmarks.json
(`local`) and their section of docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

from common import ratio, summary
from report import insert_section

REPO = Path(__file__).resolve().parents[1]
DOCS = REPO / "docs"
SECTION = "## The warm local engine: CLI commands with `pipeframe local start`"
COMMANDS = {"status": ["status", "sales_by_hour"], "endpoint": ["endpoint", "top_products", "--param", "limit=5"]}


def pipeframe(root: Path, *args: str) -> float:
    """Seconds `pipeframe ARGS -p ROOT` took as a subprocess; fails loudly if the command failed."""
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "pipeframe", *args, "-p", str(root)], capture_output=True, text=True,
                          check=False, env={k: v for k, v in os.environ.items() if not k.startswith("PIPEFRAME_")})
    seconds = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"pipeframe {' '.join(args)} failed:\n{done.stdout}\n{done.stderr}")
    return seconds


def run(repeats: int) -> dict:
    work = Path(tempfile.mkdtemp(prefix="pipeframe-local-bench-"))
    cold, warm = work / "cold", work / "warm"
    load = [round(x, 2) for x in os.getloadavg()]
    try:
        for root in (cold, warm):
            shutil.copytree(REPO / "example_project", root, ignore=shutil.ignore_patterns(".pipeframe"))
            pipeframe(root, "deploy", "--yes")
            pipeframe(root, "append", "--fixtures")
        start = pipeframe(warm, "local", "start")
        times: dict[str, dict[str, list[float]]] = {name: {"cold": [], "warm": []} for name in COMMANDS}
        try:
            pipeframe(warm, *COMMANDS["status"])  # the server's first query plans and caches; not timed
            for _ in range(repeats):
                for name, args in COMMANDS.items():
                    times[name]["cold"].append(pipeframe(cold, *args))
                    times[name]["warm"].append(pipeframe(warm, *args))
        finally:
            pipeframe(warm, "local", "stop")
        return {"date": datetime.now(UTC).strftime("%Y-%m-%d"), "repeats": repeats, "load_at_start": load,
                "load_at_end": [round(x, 2) for x in os.getloadavg()], "local_start_s": round(start, 2),
                "commands": {name: {"cold_s": summary(t["cold"]), "warm_s": summary(t["warm"]),
                                    "cold_over_warm": ratio(t["cold"], t["warm"])} for name, t in times.items()}}
    finally:
        shutil.rmtree(work, ignore_errors=True)


def section(results: dict) -> list[str]:
    lines = [SECTION, "",
             (f"`bench/local_bench.py` ({results['date']}, {results['repeats']} repeats, load average "
             f"{results['load_at_start'][0]} at the start and {results['load_at_end'][0]} at the end). The example "
             "project deployed twice; each command run as a subprocess from start to exit, on the copy without a "
             "local engine (it starts embedded Spark) and on the copy with `pipeframe local start` up (a Spark "
             f"Connect client), alternately. `pipeframe local start` itself took {results['local_start_s']:.1f} s."), "",
             "| command | own Spark, seconds (min / median / max) | local engine up, seconds | own / local engine |",
             "|---|---|---|---|"]
    for name, figures in results["commands"].items():
        cold, warm, r = figures["cold_s"], figures["warm_s"], figures["cold_over_warm"]
        lines.append(f"| `pipeframe {' '.join(COMMANDS[name])}` | {cold['min']:.2f} / {cold['median']:.2f} / "
                     f"{cold['max']:.2f} | {warm['min']:.2f} / {warm['median']:.2f} / {warm['max']:.2f} | "
                     f"{r['min']:.1f} / **{r['median']:.1f}** / {r['max']:.1f}x |")
    lines += ["", ("With the engine up, what is left of a command is Python's start, importing the Spark Connect "
                   "client (pandas, pyarrow, grpc) and the round trips of the command's queries.")]
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--write", action="store_true", help="put the figures into docs/benchmarks.json and .md")
    args = parser.parse_args()
    results = run(args.repeats)
    print("\n".join(section(results)))
    if args.write:
        data_path, page = DOCS / "benchmarks.json", DOCS / "benchmarks.md"
        data = json.loads(data_path.read_text())
        data["local"] = results
        data_path.write_text(json.dumps(data, indent=2) + "\n")
        page.write_text(insert_section(page.read_text(), SECTION, section(results), "## Deletes and updates"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
