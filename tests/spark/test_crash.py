"""Crash tests: incremental views stay exactly-once when the process writing them is SIGKILLed at any commit.

A worker process (tests/spark/materialize_worker.py, its own JVM) appends a batch or rebuilds a view and kills
itself right after one engine step; this process then refreshes (or resumes the rebuild) and checks every view
against a full recomputation over the raw rows, and that a second refresh changes nothing.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from pipeframe.project import Project
from tests.conftest import DAILY, EVENTS, HOURLY, answered_tuples, write_project

ROOT = Path(__file__).resolve().parents[2]
WORKER = Path(__file__).with_name("materialize_worker.py")
WORKER_TIMEOUT = 600  # a worker starts its own JVM; generous, never asserted

HOURLY_TRUTH = ("SELECT date_trunc('hour', ts) AS hour, count(*) AS n, sum(amount) AS total FROM events "
                "GROUP BY 1 ORDER BY 1")
DAILY_TRUTH = "SELECT date_trunc('day', ts) AS day, count(*) AS n FROM events GROUP BY 1 ORDER BY 1"


@pytest.fixture(scope="module")
def settled_roots() -> dict[str, Path]:
    """Projects left settled by a test that passed (see `settled`), by test function, for its next kill point."""
    return {}


@pytest.fixture
def project_root(spark, spark_config, settled_roots, request) -> Path:
    """The events → hourly → daily project under the shared session's root, with its pipeframe.yaml (so a
    worker process starts Spark with the same settings), deployed, its views settled: exact, active, nothing to
    apply. The kill points of one test function take turns on one project (a deploy costs about as much as a
    worker's run): each passing one leaves it settled, which is all the next one needs; after a failure, or
    when run alone, a kill point gets a new project."""
    name = request.node.originalname
    root = settled_roots.pop(name, None)
    if root is None:
        root = Path(spark_config.root) / "crash" / name
        shutil.rmtree(root, ignore_errors=True)
        write_project(root, {"datasources/events.datasource": EVENTS, "pipes/hourly.pipe": HOURLY,
                             "pipes/daily.pipe": DAILY})
        shutil.copy(Path(spark_config.root) / "pipeframe.yaml", root / "pipeframe.yaml")
        project(root, spark).deploy()
    return root


def settled(settled_roots: dict[str, Path], request, root: Path) -> None:
    """The test passed up to here and left its project settled: the next kill point may start from it."""
    settled_roots[request.node.originalname] = root


def project(root: Path, spark) -> Project:
    return Project(root, spark=spark, environ={})


def events(seed: int, count: int, days: int = 3) -> list[dict]:
    """`count` events spread over `days` days from 2024-05-01, several per hour, different for each seed."""
    start = datetime(2024, 5, 1)
    rows = []
    for i in range(count):
        ts = start + timedelta(hours=(seed * 29 + i * 7) % (days * 24), minutes=(seed * 11 + i * 13) % 60)
        rows.append({"ts": ts.strftime("%Y-%m-%d %H:%M:%S"), "user_id": f"u{(seed + i) % 5}",
                     "amount": (seed * 13 + i * 7) % 50 + 1})
    return rows


def ndjson(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def rows(p: Project, sql: str) -> list[tuple]:
    return answered_tuples(p, sql)


def assert_views_match_raw(p: Project, when: str) -> None:
    assert rows(p, "SELECT hour, n, total FROM hourly ORDER BY 1") == rows(p, HOURLY_TRUTH), f"hourly {when}"
    assert rows(p, "SELECT day, n FROM daily ORDER BY 1") == rows(p, DAILY_TRUTH), f"daily {when}"


def assert_refresh_settled(p: Project, when: str) -> None:
    """Every view matches the raw rows, and refreshing again finds nothing to apply (nothing counted twice)."""
    assert_views_match_raw(p, when)
    again = {v.view: v.outcome for v in p.refresh()}
    assert again == {"hourly": "up to date", "daily": "up to date"}, when
    assert_views_match_raw(p, f"{when}, after a second refresh")
    for status in p.status():
        assert (status.status, status.lag_versions, status.backfill) == ("active", 0, None), status


def run_worker(root: Path, *args: str) -> tuple[int, list[str], str]:
    """Run materialize_worker.py in its own process (and JVM); its exit code, the steps it reported, its output."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIPEFRAME_") or k == "PIPEFRAME_SPARK_JARS"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    worker = subprocess.Popen([sys.executable, str(WORKER), str(root), *args], cwd=ROOT, env=env,
                              stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        out, err = worker.communicate(timeout=WORKER_TIMEOUT)
    except subprocess.TimeoutExpired:
        worker.kill()
        out, err = worker.communicate()
        pytest.fail(f"worker {args} did not finish in {WORKER_TIMEOUT} s:\n{out}\n{err[-3000:]}")
    steps = [line.removeprefix("step ") for line in out.splitlines() if line.startswith("step ")]
    return worker.returncode, steps, f"stdout:\n{out}\nstderr (end):\n{err[-3000:]}"


@pytest.mark.parametrize("kill_at", ["source committed", "view committed hourly", "view committed daily"])
def test_append_killed_at_a_commit_is_applied_exactly_once_by_the_next_refresh(spark, project_root, tmp_path,
                                                                               kill_at, settled_roots, request):
    p = project(project_root, spark)  # deployed, settled (rows of other kill points' runs may be there)
    p.append("events", events(seed=0, count=8))  # the views hold states before the crash
    before_count = rows(p, "SELECT count(*) FROM events")[0][0]
    before_hourly = rows(p, "SELECT hour, n, total FROM hourly ORDER BY 1")
    before_daily = rows(p, "SELECT day, n FROM daily ORDER BY 1")

    code, steps, output = run_worker(project_root, "append", str(ndjson(tmp_path / "batch.ndjson",
                                                                         events(seed=1, count=12))), kill_at)
    assert code == -9, output
    all_steps = ["source committed", "view committed hourly", "view committed daily"]
    assert steps == all_steps[:all_steps.index(kill_at) + 1], output

    p = project(project_root, spark)
    assert rows(p, "SELECT count(*) FROM events") == [(before_count + 12,)]  # landed before any step was reported
    # Right after the crash: the views committed before the kill have the batch, the others do not yet.
    hourly_done = kill_at != "source committed"
    daily_done = kill_at == "view committed daily"
    hourly_now = rows(p, "SELECT hour, n, total FROM hourly ORDER BY 1")
    daily_now = rows(p, "SELECT day, n FROM daily ORDER BY 1")
    assert hourly_now == (rows(p, HOURLY_TRUTH) if hourly_done else before_hourly)
    assert daily_now == (rows(p, DAILY_TRUTH) if daily_done else before_daily)
    lags = {s.name: s.lag_versions for s in p.status()}
    assert lags == {"hourly": int(not hourly_done), "daily": int(hourly_done and not daily_done)}

    outcomes = {v.view: v.outcome for v in p.refresh()}
    assert outcomes == {"hourly": "up to date" if hourly_done else "applied",
                        "daily": "up to date" if daily_done else "applied"}
    assert_refresh_settled(p, f"after a kill at {kill_at!r}")

    # The views go on incrementally after the recovery.
    p.append("events", events(seed=2, count=5))
    assert_views_match_raw(p, f"after the next append (killed at {kill_at!r} before)")
    settled(settled_roots, request, project_root)


@pytest.mark.parametrize("kill_at", ["chunk committed 2", "watermark committed", "swapped hourly"])
def test_chunked_rebuild_killed_midway_resumes_and_counts_every_row_once(spark, project_root, kill_at,
                                                                        settled_roots, request):
    p = project(project_root, spark)  # deployed, settled (rows of other kill points' runs may be there)
    p.append("events", events(seed=3, count=30, days=4))
    old_hourly_path = p.warehouse.snapshot(fresh=True).table("hourly").path
    total = rows(p, "SELECT count(*) FROM events")[0][0]

    # A third of the rows a chunk: 3 chunks, so a kill at chunk 2 leaves one never started (each chunk is a commit
    # of the worker's cold JVM: more chunks only cost time).
    code, steps, output = run_worker(project_root, "populate", kill_at, str(math.ceil(total / 3)))
    assert code == -9, output
    assert steps[-1] == kill_at, output

    # While it is dead: the view shows an interrupted rebuild, with how far it got.
    p = project(project_root, spark)
    [status] = p.status("hourly")
    assert status.status == "rebuilding", status
    progress = status.backfill
    assert progress is not None and progress.mode == "rebuilding" and not progress.running, progress
    assert progress.chunks >= 3, progress
    chunk_steps = [f"chunk committed {i}" for i in range(1, progress.chunks + 1)]
    if kill_at == "chunk committed 2":
        assert steps == chunk_steps[:2], output
        assert progress.done_chunks == 1 < progress.chunks  # chunk 2 committed, its progress not yet recorded
        assert 0 < progress.processed_rows < progress.total_rows == total
    else:
        assert steps[:progress.chunks + 1] == [*chunk_steps, "watermark committed"], output
        assert progress.done_chunks == progress.chunks and progress.processed_rows == progress.total_rows == total
    swapped = kill_at == "swapped hourly"
    assert (p.warehouse.snapshot(fresh=True).table("hourly").path != old_hourly_path) == swapped

    # Ingestion goes on during the interrupted rebuild: the live table follows the new rows.
    result = p.append("events", events(seed=4, count=9, days=5))
    outcomes = {v.view: v.outcome for v in result.views}
    # After the swap, daily's source is a new physical table: daily is stale until the rebuild finishes.
    assert outcomes == {"hourly": "applied", "daily": "stale" if swapped else "applied"}
    assert rows(p, "SELECT hour, n, total FROM hourly ORDER BY 1") == rows(p, HOURLY_TRUTH)
    assert p.status("hourly")[0].status == "rebuilding"

    # Resume: the interrupted run continues from the view's record (then rebuilds daily after it).
    resumed = p.populate("hourly")
    assert [(v.view, v.outcome) for v in resumed] == [("hourly", "rebuilt"), ("daily", "rebuilt")]
    p = project(project_root, spark)
    # The views match the raw rows, the next refresh finds nothing to apply, they still match after it, and every
    # view is active with no backfill left (hourly's interrupted rebuild is over).
    assert_refresh_settled(p, f"after resuming a rebuild killed at {kill_at!r}")
    live = p.warehouse.snapshot(fresh=True).table("hourly").path
    assert live != old_hourly_path
    assert sorted(d.name for d in Path(live).parent.iterdir()) == [Path(live).name]  # no version left behind

    p.append("events", events(seed=5, count=6))
    assert_views_match_raw(p, f"after the next append (rebuild killed at {kill_at!r} before)")
    settled(settled_roots, request, project_root)
