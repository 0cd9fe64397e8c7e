"""The benchmark's refresh and append figures on a local Spark standalone cluster next to `local[*]`, in one run.

Usage: python bench/cluster_bench.py [--rows 100000] [--appends 5] [--repeats 3] [--cores N] [--json F]
       python bench/cluster_bench.py --render   (re-render the page's section from docs/benchmarks.json)

Starts a standalone master and one worker from pyspark's own jars on 127.0.0.1 (tests/cluster/standalone.py;
the worker gets --cores, by default every core of the machine, and 1 GiB for its executor) and two drivers, each a
fresh process holding one `Project` of the benchmark's scenario (bench/scenario.py: the `events` source and its
three views) in its own temp folder: one on `local[*]`, one on `spark://127.0.0.1:P`. Both run with the settings
pipeframe gives local masters (`spark.sql.shuffle.partitions` = 4, `spark.databricks.delta.snapshotPartitions` = 2,
set in the project for the cluster side), get --rows source rows and build their views before anything is timed.
Then, alternating between the two (never at the same time), `--appends` times: a plain Delta append of 1% of
--rows to the source (timed) and `Project.refresh()` (timed); and `--repeats` times `Project.append` of the same
number of rows with the three views attached (timed). Ratios are cluster / local of the pairs measured side by side.
`bench/run.py --cluster` runs this as its `cluster` section.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
sys.path.insert(0, str(REPO))  # tests/cluster/standalone.py: the one launcher of the local cluster

from common import ratio, summary
from scenario import generate, write_pipeframe_project

from tests.cluster.standalone import StandaloneCluster

MARK = "@@bench "  # the driver's answers on stdout (Spark's own output goes to the project's spark.log)
SMALL_DATA = {"spark.sql.shuffle.partitions": "4", "spark.databricks.delta.snapshotPartitions": "2"}


def log(message: str) -> None:
    print(f"[{datetime.now():%H:%M:%S}] {message}", file=sys.stderr, flush=True)


# ---------------------------------------------------------------------------------------------- the driver
def driver(root: Path, rows: int, batch: int) -> int:
    """A driver process: build the scenario in `root`, then answer `refresh` / `append` / `quit` from stdin."""
    from pipeframe.project import Project

    def say(**answer) -> None:
        print(MARK + json.dumps(answer), flush=True)

    project = Project(root)
    spark = project.spark
    project.deploy()
    source = project.snapshot.table("events").path
    generate(spark, 0, rows).write.format("delta").mode("append").save(source)
    project.refresh()
    landed = rows
    say(ready=True, master=spark.sparkContext.master, app_id=spark.sparkContext.applicationId)
    for command in sys.stdin:
        command = command.strip()
        if command == "refresh":  # another job appends to the source; pipeframe catches the views up
            started = time.perf_counter()
            generate(spark, landed, batch).write.format("delta").mode("append").save(source)
            plain = time.perf_counter() - started
            started = time.perf_counter()
            project.refresh()
            say(plain_append_s=plain, refresh_s=time.perf_counter() - started)
        elif command == "append":
            frame = generate(spark, landed, batch)
            started = time.perf_counter()
            project.append("events", frame)
            say(append_s=time.perf_counter() - started)
        elif command == "quit":
            break
        landed += batch
    return 0


class Driver:
    """A driver process and its line protocol."""

    def __init__(self, name: str, master: str, folder: Path, rows: int, batch: int, env: dict[str, str]) -> None:
        self.name = name
        root = folder / name
        write_pipeframe_project(root)
        conf = "".join(f"    {key}: \"{value}\"\n" for key, value in SMALL_DATA.items())
        (root / "pipeframe.yaml").write_text(f"name: bench\nspark:\n  master: {master}\n  conf:\n{conf}")
        self.process = subprocess.Popen(
            [sys.executable, __file__, "--driver", str(root), "--rows", str(rows), "--batch", str(batch)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env, start_new_session=True)

    def read(self) -> dict:
        for line in self.process.stdout:
            if line.startswith(MARK):
                return json.loads(line[len(MARK):])
        raise RuntimeError(f"the {self.name} driver exited ({self.process.wait()})")

    def ask(self, command: str) -> dict:
        self.process.stdin.write(command + "\n")
        self.process.stdin.flush()
        return self.read()

    def close(self) -> None:
        if self.process.poll() is None:
            try:
                self.process.stdin.write("quit\n")
                self.process.stdin.close()
                self.process.wait(timeout=120)
            except (OSError, subprocess.TimeoutExpired):
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()


# ------------------------------------------------------------------------------------------------ the run
def run(rows: int, appends: int, repeats: int, cores: int) -> dict:
    batch = max(1, rows // 100)
    work = Path(tempfile.mkdtemp(prefix="pipeframe-cluster-bench-"))
    drivers: list[Driver] = []
    try:
        log(f"starting a standalone master and a worker ({cores} cores, 1g) from pyspark's jars")
        with StandaloneCluster(work / "cluster", cores=cores, memory="1g") as cluster:
            env = {k: v for k, v in os.environ.items() if not k.startswith("PIPEFRAME_")}
            env.update(SPARK_LOCAL_IP="127.0.0.1", PYSPARK_PYTHON=sys.executable)
            drivers = [Driver("local", "local[*]", work, rows, batch, env),
                       Driver("cluster", cluster.master_url, work, rows, batch, env)]
            started = {}
            for d in drivers:  # both start at once: JVM start, deploy and the first build are not measured
                started[d.name] = d.read()
            log(f"both drivers built the views over {rows:,} rows: {started}")
            figures: dict[str, dict[str, list[float]]] = {d.name: {} for d in drivers}
            for number in range(appends):
                for d in drivers:
                    for key, value in d.ask("refresh").items():
                        figures[d.name].setdefault(key, []).append(value)
                log(f"refresh {number + 1}: " + ", ".join(
                    f"{d.name} {figures[d.name]['refresh_s'][-1]:.2f} s" for d in drivers))
            for number in range(repeats):
                for d in drivers:
                    figures[d.name].setdefault("append_s", []).append(d.ask("append")["append_s"])
                log(f"append {number + 1}: " + ", ".join(
                    f"{d.name} {figures[d.name]['append_s'][-1]:.2f} s" for d in drivers))
            apps = [a for a in cluster.apps() if a["id"] == started["cluster"]["app_id"]]
            for d in drivers:
                d.close()
        local, remote = figures["local"], figures["cluster"]
        return {
            "date": datetime.now(UTC).strftime("%Y-%m-%d"), "rows": rows, "batch_rows": batch,
            "appends": appends, "repeats": repeats,
            "cluster": {"workers": 1, "cores": cores, "executor_memory": "1g",
                        "app_cores": apps[0]["cores"] if apps else None},
            "settings": SMALL_DATA,
            "measures": {
                measure: {"local": summary(local[measure]), "cluster": summary(remote[measure]),
                          "cluster_over_local": ratio(remote[measure], local[measure])}
                for measure in ("refresh_s", "append_s", "plain_append_s")},
            "load_at_end": [round(x, 2) for x in os.getloadavg()],
        }
    finally:
        for d in drivers:  # each driver and its JVM are one process group
            if d.process.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(d.process.pid, signal.SIGKILL)
                d.process.wait()
        shutil.rmtree(work, ignore_errors=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog="\n".join(__doc__.splitlines()[2:]))
    parser.add_argument("--rows", type=int, default=100_000, help="source rows; every append is 1%% of them")
    parser.add_argument("--appends", type=int, default=5, help="timed refreshes after a 1%% append, per side")
    parser.add_argument("--repeats", type=int, default=3, help="timed Project.append calls, per side")
    parser.add_argument("--cores", type=int, default=os.cpu_count() or 2, help="cores of the cluster's worker")
    parser.add_argument("--json", type=Path, default=None, help="also write the results to this file")
    parser.add_argument("--render", action="store_true",
                        help="only re-render the page's cluster section from docs/benchmarks.json")
    parser.add_argument("--driver", type=Path, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--batch", type=int, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.driver is not None:
        return driver(args.driver, args.rows, args.batch)
    if args.render:
        import report

        page = REPO / "docs" / "benchmarks.md"
        saved = json.loads(page.with_suffix(".json").read_text())["cluster"]
        page.write_text(report.insert_section(page.read_text(), report.CLUSTER_SECTION, report.cluster_text(saved)))
        return 0
    load = [round(x, 2) for x in os.getloadavg()]
    results = run(args.rows, args.appends, args.repeats, args.cores)
    results["load_at_start"] = load
    results["command"] = " ".join(["python", "bench/cluster_bench.py", *sys.argv[1:]])
    text = json.dumps(results, indent=2)
    print(text)
    if args.json:
        args.json.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
