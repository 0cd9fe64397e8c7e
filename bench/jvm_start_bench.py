"""An embedded Spark start with the driver's class archive (pipeframe/engine/classarchive.py) and without it.

Usage: python bench/jvm_start_bench.py [--repeats 5] [--write]

Each repeat starts, as fresh subprocesses one after the other, `Project(root).spark.range(7).count()` on a project
whose pipeframe.yaml lets pipeframe map the archive, and on one whose `spark.driver.extraJavaOptions` says
`-Xshare:auto` (the JDK's default, which opts out of pipeframe's archive). The archive is written by one start
before the first repeat (not timed). Measured: the subprocess's wall time and the CPU seconds of it and its JVM
(polled from /proc until the JVM has exited). Ratios are without / with of the same repeat. With --write, the
figures go into docs/benchmarks.json (`jvm_start`) and their section of docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

from common import emit, ratio, summary
from report import save_section

REPO = Path(__file__).resolve().parents[1]
SECTION = "## Starting Spark: the driver's class archive"
START = "from pipeframe.project import Project; import sys; print(Project(sys.argv[1]).spark.range(7).count())"


def timed_start(root: Path) -> tuple[float, float]:
    """Wall seconds of one start, and CPU seconds of the process and every process under it (its JVM keeps
    running for a moment after Python exits: it writes the archive or stops its threads then)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIPEFRAME_")}
    started = time.perf_counter()
    process = subprocess.Popen([sys.executable, "-c", START, str(root)], cwd=REPO, env=env,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    seen: dict[int, float] = {}
    while process.poll() is None:
        for pid in _tree(process.pid):
            seen[pid] = _cpu(pid) or seen.get(pid, 0.0)
        time.sleep(0.1)
    wall = time.perf_counter() - started
    out, err = process.communicate()
    if process.returncode != 0 or out.strip() != "7":
        raise SystemExit(f"start failed ({process.returncode}): {out}\n{err[-2000:]}")
    while any(Path(f"/proc/{pid}").exists() for pid in seen):  # the orphaned JVM, until it exits
        seen = {pid: _cpu(pid) or cpu for pid, cpu in seen.items()}
        time.sleep(0.1)
    return wall, sum(seen.values())


def _tree(root: int) -> list[int]:
    found, stack = [], [root]
    while stack:
        pid = stack.pop()
        found.append(pid)
        try:
            for task in Path(f"/proc/{pid}/task").iterdir():
                stack += [int(c) for c in (task / "children").read_text().split()]
        except OSError:
            continue
    return found


def _cpu(pid: int) -> float | None:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def project(folder: Path, java_options: str) -> Path:
    folder.mkdir(parents=True)
    conf = f"\n  conf:\n    spark.driver.extraJavaOptions: \"{java_options}\"" if java_options else ""
    (folder / "pipeframe.yaml").write_text(f"name: start\nspark:\n  master: local[2]{conf}\n", encoding="utf-8")
    return folder


def measure(repeats: int) -> dict:
    with tempfile.TemporaryDirectory(prefix="pf-jvm-start-") as tmp:
        archived = project(Path(tmp) / "archived", "")
        plain = project(Path(tmp) / "plain", "-Xshare:auto")
        timed_start(archived)  # writes the archive at its exit (if the machine has none yet)
        timed_start(archived)  # adopts it
        runs: dict[str, dict[str, list[float]]] = {"archive": {"wall": [], "cpu": []},
                                                   "no archive": {"wall": [], "cpu": []}}
        for _ in range(repeats):
            for arm, root in (("no archive", plain), ("archive", archived)):
                wall, cpu = timed_start(root)
                runs[arm]["wall"].append(wall)
                runs[arm]["cpu"].append(cpu)
    return {"when": datetime.now(UTC).isoformat(timespec="seconds"), "repeats": repeats,
            **{arm: {"wall_s": summary(r["wall"]), "cpu_s": summary(r["cpu"])} for arm, r in runs.items()},
            "wall_ratio": ratio(runs["no archive"]["wall"], runs["archive"]["wall"]),
            "cpu_ratio": ratio(runs["no archive"]["cpu"], runs["archive"]["cpu"])}


def section(results: dict) -> list[str]:
    a, b = results["no archive"], results["archive"]
    return [SECTION, "",
            (f"`python bench/jvm_start_bench.py --repeats {results['repeats']}` ({results['when']}): a fresh process "
            "starts embedded Spark and runs one job (`spark.range(7).count()`), with pipeframe's class archive for "
            "the driver JVM (~/.cache/pipeframe/classes-*.jsa, docs/operations.md) and opted out of it "
            "(`-Xshare:auto`), alternating. CPU is the process's and its JVM's, until the JVM has exited."), "",
            "| | no archive | archive | ratio (median, min–max) |", "|---|---|---|---|",
            (f"| wall | {a['wall_s']['median']} s | {b['wall_s']['median']} s | {results['wall_ratio']['median']}x "
            f"({results['wall_ratio']['min']}–{results['wall_ratio']['max']}) |"),
            (f"| CPU | {a['cpu_s']['median']} s | {b['cpu_s']['median']} s | {results['cpu_ratio']['median']}x "
            f"({results['cpu_ratio']['min']}–{results['cpu_ratio']['max']}) |"), "",
            ("Every embedded start but the first on a machine (JDK, Spark and Delta versions) maps the archive; the "
            "first writes it as its JVM exits (a few CPU-seconds more, once). The test suite's CLI subprocesses, "
            "servers and workers start this way too.")]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--write", action="store_true")
    args = parser.parse_args()
    results = measure(args.repeats)
    emit(results, None)
    if args.write:
        save_section(REPO / "docs" / "benchmarks.md", "jvm_start", results, SECTION, section(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
