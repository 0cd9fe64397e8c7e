"""pipeframe's own tables of a local warehouse written by pyarrow (`deltaappend.create`/`rewrite`) against Spark's
SQL (`UPDATE`, `MERGE INTO`, a DataFrame write), side by side in one process with Spark up.

Usage: python bench/own_tables_bench.py [--rounds 5] [--json F]

Each round, on a fresh copy of example_project, first with the Spark path (the rewrite made to answer "leave it to
Spark", as on object storage), then with the pyarrow path, timed per operation:

  deploy    `Project.deploy()` of the 15 resources (creates the state store and the lock, takes and frees the lock,
            records the deploy's start and its one-commit swap; each view's first commit over its empty source)
  pause     `pause` then `resume` of one view (two upserts of the view records)
  noop      a second `deploy()` (nothing to change: lock, no commit)

The two paths alternate within each round (Spark first, then pyarrow), so both see the same machine load. Printed as
medians with the ratio Spark / pyarrow per operation.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

from common import ratio, summary

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


@contextlib.contextmanager
def spark_path(enabled: bool):
    """With `enabled`, every write of pipeframe's own tables goes to Spark (create/rewrite answer None), and so does
    the first commit of a view deployed over a source without rows (no_rows answers None)."""
    from pipeframe.engine import deltaappend

    create, rewrite, no_rows = deltaappend.create, deltaappend.rewrite, deltaappend.no_rows
    if enabled:
        deltaappend.create = lambda *a, **k: None
        deltaappend.rewrite = lambda *a, **k: None
        deltaappend.no_rows = lambda *a, **k: None
    try:
        yield
    finally:
        deltaappend.create, deltaappend.rewrite, deltaappend.no_rows = create, rewrite, no_rows


def one(spark, root: Path, spark_only: bool) -> dict[str, float]:
    from pipeframe.project import Project

    shutil.copytree(REPO / "example_project", root, ignore=shutil.ignore_patterns(".pipeframe"))
    (root / "pipeframe.yaml").write_text((root / "pipeframe.yaml").read_text() + "\nspark:\n  conf:\n"
                                         "    spark.sql.shuffle.partitions: 2\n")
    times = {}
    with spark_path(spark_only):
        project = Project(root, spark=spark, environ={})
        start = time.perf_counter()
        project.deploy()
        times["deploy"] = time.perf_counter() - start
        start = time.perf_counter()
        project.pause("sales_by_hour")
        project.resume("sales_by_hour")
        times["pause"] = time.perf_counter() - start
        start = time.perf_counter()
        project.deploy()
        times["noop"] = time.perf_counter() - start
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    from pipeframe.config import load_config
    from pipeframe.engine.session import get_session

    work = Path(tempfile.mkdtemp(prefix="own_tables_"))
    (work / "pipeframe.yaml").write_text("name: bench\nspark:\n  conf:\n    spark.sql.shuffle.partitions: 2\n")
    spark = get_session(load_config(work, environ={}))
    one(spark, work / "warmup", False)  # the JVM's first jobs are not either path's cost
    runs: dict[str, dict[str, list[float]]] = {"spark": {}, "pyarrow": {}}
    for n in range(args.rounds):
        for label in ("spark", "pyarrow"):
            for op, seconds in one(spark, work / f"{label}{n}", label == "spark").items():
                runs[label].setdefault(op, []).append(seconds)
    results = {op: {"spark": summary(runs["spark"][op]), "pyarrow": summary(runs["pyarrow"][op]),
                    "ratio": ratio(runs["spark"][op], runs["pyarrow"][op])} for op in runs["spark"]}
    for op, r in results.items():
        print(f"{op:8s} spark {r['spark']['median']:.3f} s  pyarrow {r['pyarrow']['median']:.3f} s  "
              f"x{r['ratio']['median']:.2f}")
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
