"""The control plane: what a deploy with nothing to change costs, next to what starting Spark alone costs.

Usage: python bench/control_bench.py [--repeats 5] [--json F]

On a copy of example_project, deployed once and with its fixtures loaded, side by side in one run:
  spark     a fresh process that only starts pipeframe's Spark session and runs `SELECT 1` (the floor);
  no-op     `pipeframe deploy --yes` as a fresh process when the files match what is deployed.
Target (issue 12): the no-op deploy spends its time starting the JVM, not in the state store: it reads the
deployed state once and writes nothing. Inside one process the same no-op deploy is timed again with the
state-store reads and Delta commits it made counted (the state table's version must not move).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import emit, options, ratio, summary

ROOT = Path(__file__).resolve().parents[1]
SPARK_ONLY = ("import sys; from pipeframe.project import Project; "
              "Project(sys.argv[1]).spark.sql('SELECT 1').collect()")


def fresh_process(*args: str) -> float:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIPEFRAME_")}
    start = time.perf_counter()
    done = subprocess.run([sys.executable, *args], env=env, capture_output=True, text=True, check=False,
                          stdin=subprocess.DEVNULL)
    elapsed = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(args)} failed:\n{done.stdout}\n{done.stderr}")
    return elapsed


def in_process(project: Path) -> dict:
    """One no-op deploy in this process after Spark is up: its time, state reads and state-store commits."""
    from pipeframe.engine.warehouse import IO
    from pipeframe.project import Project

    warm = Project(project)
    warm.spark.sql("SELECT 1").collect()
    state = f"delta.`{warm.warehouse.state_path}`"
    before = warm.spark.sql(f"DESCRIBE HISTORY {state} LIMIT 1").first()["version"]
    IO.clear()
    start = time.perf_counter()
    result = Project(project, spark=warm.spark).deploy()
    elapsed = time.perf_counter() - start
    after = warm.spark.sql(f"DESCRIBE HISTORY {state} LIMIT 1").first()["version"]
    return {"noop_deploy_in_process_s": round(elapsed, 3), "changes": result.changes, "state_reads": IO["state"],
            "history_reads": IO["history"], "state_commits": int(after) - int(before)}


def main() -> int:
    args = options(__doc__)
    work = Path(tempfile.mkdtemp(prefix="pipeframe-controlbench-"))
    try:
        project = work / "shop"
        shutil.copytree(ROOT / "example_project", project, ignore=shutil.ignore_patterns(".pipeframe"))
        cli = ("-m", "pipeframe")
        fresh_process(*cli, "deploy", "--yes", "-p", str(project))
        fresh_process(*cli, "append", "--fixtures", "-p", str(project))
        spark_only, noop = [], []
        for _ in range(args.repeats):  # alternated, so both sides see the same machine
            spark_only.append(fresh_process("-c", SPARK_ONLY, str(project)))
            noop.append(fresh_process(*cli, "deploy", "--yes", "-p", str(project)))
        results = {"spark_start_s": summary(spark_only), "noop_deploy_s": summary(noop),
                   "noop_over_spark_start": ratio(noop, spark_only), **in_process(project),
                   "cpus": os.cpu_count(), "load": [round(x, 2) for x in os.getloadavg()]}
        emit(results, args.json)
        return 0
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
