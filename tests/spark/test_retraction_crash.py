"""Crash tests of retractions: a refresh that retracts rows deleted or updated in place is SIGKILLed between two
views' commits, or at a random moment (inside a group recompute's MERGE, most likely); afterwards every view is
either as it was or fully retracted (one atomic commit each), and the next refresh brings each one to exactly the
full recomputation over the source, counting nothing twice.

The project: `events` → `hourly` (count, sum; read by `daily`: takes the `fold` path) → `daily` (sum of hourly
counts: `recompute`, from hourly's rows), and over `events` directly `users` (count, sum: `negate`) and `peaks`
(max, min, uniqExact: `absorb-recompute`, the users that lost rows and gained none recomputed). A worker process
(tests/spark/retraction_worker.py, its own JVM) appends, updates and deletes source rows and runs the retraction
refresh; this process kills it, refreshes and checks.
A second project (`orders` joined with `customers`) kills a refresh once it has kept the partial states of `orders`
for a change to `customers` (engine/partials.py), before the view's commit.
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Self

import pytest

from pipeframe.engine import partials, tables
from pipeframe.plan import records
from pipeframe.project import Project
from tests.conftest import DAILY, EVENTS, HOURLY, write_project
from tests.spark.test_crash import events, ndjson

ROOT = Path(__file__).resolve().parents[2]
WORKER = Path(__file__).with_name("retraction_worker.py")
WORKER_TIMEOUT = 600  # a worker starts its own JVM; generous, never asserted

USERS = """\
NODE users
SQL >
    SELECT user_id, count(*) AS n, sum(amount) AS total
    FROM events
    GROUP BY user_id
TYPE materialized
DATASOURCE users
"""
PEAKS = """\
NODE peaks
SQL >
    SELECT user_id, max(amount) AS top, min(ts) AS first_seen, uniqExact(amount) AS amounts
    FROM events
    GROUP BY user_id
TYPE materialized
DATASOURCE peaks
"""
# `amount` never NULL (DEFAULT 0): its sums can be subtracted (a sum of a column that may be NULL recomputes)
FILES = {"datasources/events.datasource": EVENTS.replace("`amount` INT", "`amount` INT DEFAULT 0"),
         "pipes/hourly.pipe": HOURLY, "pipes/daily.pipe": DAILY,
         "pipes/users.pipe": USERS, "pipes/peaks.pipe": PEAKS}

# Each view as read by name, and the same values computed from the raw rows ({events}: the source relation).
VIEWS = {
    "hourly": ("SELECT hour, n, total FROM hourly ORDER BY 1",
               "SELECT date_trunc('hour', ts), count(*), sum(amount) FROM {events} GROUP BY 1 ORDER BY 1"),
    "daily": ("SELECT day, n FROM daily ORDER BY 1",
              "SELECT date_trunc('day', ts), count(*) FROM {events} GROUP BY 1 ORDER BY 1"),
    "users": ("SELECT user_id, n, total FROM users ORDER BY 1",
              "SELECT user_id, count(*), sum(amount) FROM {events} GROUP BY 1 ORDER BY 1"),
    "peaks": ("SELECT user_id, top, first_seen, amounts FROM peaks ORDER BY 1",
              "SELECT user_id, max(amount), min(ts), count(DISTINCT amount) FROM {events} GROUP BY 1 ORDER BY 1"),
}
# How each view follows rows deleted or updated in place.
RETRACTION_PATHS = {"hourly": "fold", "daily": "recompute", "users": "negate", "peaks": "absorb-recompute"}


@pytest.fixture
def project_root(spark_config, request) -> Path:
    """The project under the shared session's root, with its pipeframe.yaml (so a worker process starts Spark
    with the same settings)."""
    name = "".join(c if c.isalnum() else "_" for c in request.node.name)
    root = Path(spark_config.root) / "retraction_crash" / name
    shutil.rmtree(root, ignore_errors=True)
    write_project(root, FILES)
    shutil.copy(Path(spark_config.root) / "pipeframe.yaml", root / "pipeframe.yaml")
    return root


def project(root: Path, spark) -> Project:
    return Project(root, spark=spark, environ={})


def events_path(p: Project) -> str:
    return p.warehouse.snapshot(fresh=True).table("events").path or ""


def view_rows(p: Project) -> dict[str, list[tuple]]:
    """Every view's values, read by name."""
    return {view: [tuple(r) for r in p.query(sql).collect()] for view, (sql, _) in VIEWS.items()}


def truths(p: Project, version: int) -> dict[str, list[tuple]]:
    """Every view's values recomputed from the raw rows of `events` as of `version`."""
    relation = f"delta.`{events_path(p)}` VERSION AS OF {int(version)}"
    return {view: [tuple(r) for r in p.spark.sql(sql.format(events=relation)).collect()]
            for view, (_, sql) in VIEWS.items()}


def source_version(p: Project) -> int:
    return tables.latest_commit(p.spark, events_path(p)).version


def deployed_with_rows(root: Path, spark) -> tuple[Project, int]:
    """The project deployed, with rows the views hold before the worker runs; the source version they are at."""
    p = project(root, spark)
    p.deploy()
    p.append("events", events(seed=0, count=30))
    version = source_version(p)
    assert view_rows(p) == truths(p, version), "before the worker"
    return p, version


class Worker:
    """retraction_worker.py in its own process group (with its JVM); its stdout lines collected as they come."""

    def __init__(self, root: Path, log: Path, *args: str) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith("PIPEFRAME_") or k == "PIPEFRAME_SPARK_JARS"}
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
        self.log = log
        self.lines: list[str] = []
        self.at: dict[str, float] = {}  # when each step was read (time.monotonic())
        self.news = threading.Condition()  # notified at each line and at the end of the output
        self.ended = False
        with log.open("w") as err:
            self.process = subprocess.Popen([sys.executable, str(WORKER), str(root), *args], cwd=ROOT, env=env,
                                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=err, text=True,
                                            start_new_session=True)
        self.started = time.monotonic()
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.append(line.rstrip("\n"))
            with self.news:
                self.at.setdefault(line.strip().removeprefix("step "), time.monotonic())
                self.news.notify_all()
        with self.news:
            self.ended = True
            self.news.notify_all()

    def reached(self, step: str) -> bool:
        """Wait until the worker reports `step` (True) or ends without it (False)."""
        with self.news:
            self.news.wait_for(lambda: step in self.at or self.ended, WORKER_TIMEOUT)
            return step in self.at

    @property
    def steps(self) -> list[str]:
        return [line.removeprefix("step ") for line in self.lines if line.startswith("step ")]

    def timeline(self) -> str:
        """The steps reported, each with its time since the worker started."""
        return ", ".join(f"{s} +{self.at.get(s, self.started) - self.started:.1f}s" for s in self.steps)

    @property
    def committed(self) -> set[str]:
        """The views whose retraction commit the worker reported."""
        return {s.removeprefix("view committed ") for s in self.steps if s.startswith("view committed ")}

    def kill(self) -> None:
        """SIGKILL the worker and its JVM (its process group), if still running."""
        if self.process.poll() is None:
            try:
                os.killpg(self.process.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    def wait(self) -> int:
        try:
            code = self.process.wait(timeout=WORKER_TIMEOUT)
        except subprocess.TimeoutExpired:
            self.kill()
            self.process.wait()
            pytest.fail(f"worker did not finish in {WORKER_TIMEOUT} s:\n{self.output}")
        self.reader.join(timeout=30)
        return code

    @property
    def output(self) -> str:
        err = self.log.read_text(errors="replace") if self.log.exists() else ""
        return "stdout:\n" + "\n".join(self.lines) + f"\nstderr (end):\n{err[-3000:]}"

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.kill()  # and its JVM, whatever happened in the test
        self.process.wait()
        self.reader.join(timeout=30)


def assert_each_view_whole(now: dict, before: dict, after: dict, committed: set[str], when: str) -> None:
    """Right after the crash: each view holds either none or all of the retraction (it is one commit); the views
    whose commit was reported, all of it. (The refresh started after the last source change: no version between.)"""
    for view, values in now.items():
        assert values in (before[view], after[view]), f"{view} {when}: neither before nor after the changes"
        if view in committed:
            assert values == after[view], f"{view} {when}: its commit was reported, but it lacks the changes"


def assert_recovered(p: Project, results: list, after: dict, committed: set[str], when: str) -> None:
    """The refresh after the crash applied each view not yet retracted the way it retracts (the others were up
    to date), every view equals the recomputation, and refreshing again changes nothing."""
    outcomes = {v.view: (v.outcome, v.path) for v in results}
    assert set(outcomes) == set(VIEWS), outcomes
    for view, outcome in outcomes.items():
        allowed = {("up to date", None)} if view in committed else {("up to date", None),
                                                                     ("applied", RETRACTION_PATHS[view])}
        assert outcome in allowed, f"{view} {when}: {outcome}"
    assert view_rows(p) == after, when
    again = {v.view: v.outcome for v in p.refresh()}
    assert again == dict.fromkeys(VIEWS, "up to date"), f"{when}: {again}"
    assert view_rows(p) == after, f"{when}, after a second refresh"
    for status in p.status():
        assert (status.status, status.lag_versions, status.backfill) == ("active", 0, None), status


def test_retraction_killed_between_two_views_commits_is_finished_by_the_next_refresh(spark, project_root, tmp_path):
    p, start = deployed_with_rows(project_root, spark)
    batch = ndjson(tmp_path / "batch.ndjson", events(seed=1, count=12))
    with Worker(project_root, tmp_path / "worker.log", "refresh", str(batch), "view committed hourly") as worker:
        code = worker.wait()
    assert code == -signal.SIGKILL, worker.output
    assert worker.steps[0] == "changes committed" and worker.steps[-1] == "view committed hourly", worker.output

    p = project(project_root, spark)
    end = source_version(p)
    assert end == start + 3, worker.output  # the append, the UPDATE and the DELETE
    before, after = truths(p, start), truths(p, end)
    assert all(before[v] != after[v] for v in VIEWS)  # the changes reach every view
    now = view_rows(p)
    when = f"after a kill at 'view committed hourly' (steps: {worker.timeline()})"
    print(when)
    assert_each_view_whole(now, before, after, worker.committed, when)
    # hourly folded its touched hours in; daily, which reads hourly, had not started: it is one fold behind.
    assert now["hourly"] == after["hourly"] and now["daily"] == before["daily"], when
    lags = {s.name: s.lag_versions for s in p.status()}
    assert lags["hourly"] == 0 and lags["daily"] == 1, lags

    results = p.refresh()
    assert {v.view: (v.outcome, v.path) for v in results}["daily"] == ("applied", "recompute"), when
    assert_recovered(p, results, after, worker.committed, when)


def test_retraction_killed_at_a_random_moment_leaves_views_whole_and_the_next_refresh_completes_it(
        spark, project_root, tmp_path):
    p, start = deployed_with_rows(project_root, spark)
    batch = ndjson(tmp_path / "batch.ndjson", events(seed=1, count=12))
    seed = int(os.environ.get("PIPEFRAME_CRASH_SEED") or time.time_ns() % 1_000_000)
    rng = random.Random(seed)
    with Worker(project_root, tmp_path / "worker.log", "delete", str(batch)) as worker:
        assert worker.reached("changes committed"), worker.output  # the append and the UPDATE
        # The refresh of the four views after the DELETE takes about 0.8 times as long as the worker took to get
        # here (its JVM's start, the append and the UPDATE), on a fast or a loaded machine alike: a moment in that
        # span, after the DELETE, lands in the retraction, most likely in the middle of a group recompute (peaks
        # and hourly, with users, are retracted at once from the start; daily after hourly).
        delay = rng.uniform(0.0, 0.8) * (worker.at["changes committed"] - worker.started)
        assert worker.reached("source committed"), worker.output
        time.sleep(delay)
        worker.kill()
        code = worker.wait()
    when = f"after a kill {delay:.1f} s into the retraction (seed {seed}, exit {code}, steps: {worker.timeline()})"
    print(when)
    assert code in (-signal.SIGKILL, 0), worker.output

    p = project(project_root, spark)
    end = source_version(p)
    assert end == start + 3, when  # the append, the UPDATE and the DELETE
    before, after = truths(p, start), truths(p, end)
    assert_each_view_whole(view_rows(p), before, after, worker.committed, when)
    assert_recovered(p, p.refresh(), after, worker.committed, when)


JOIN_FILES = {
    "datasources/orders.datasource": "SCHEMA >\n    `oid` INT,\n    `cid` STRING,\n    `amount` INT DEFAULT 0\n",
    "datasources/customers.datasource": "SCHEMA >\n    `cid` STRING,\n    `country` STRING\n",
    "pipes/by_country.pipe": ("NODE n\nSQL >\n    SELECT c.country, count() AS n, sum(o.amount) AS total FROM orders o "
                              "JOIN customers c ON o.cid = c.cid GROUP BY c.country\nTYPE materialized\n"
                              "DATASOURCE by_country\n"),
}
BY_COUNTRY = "SELECT country, n, total FROM by_country ORDER BY 1"
BY_COUNTRY_TRUTH = ("SELECT c.country, count(*), sum(o.amount) FROM delta.`{orders}` VERSION AS OF {o} o "
                    "JOIN delta.`{customers}` VERSION AS OF {c} c ON o.cid = c.cid GROUP BY 1 ORDER BY 1")


def test_a_refresh_killed_after_keeping_a_join_views_partial_states_is_finished_by_the_next(spark, spark_config,
                                                                                            tmp_path):
    """Killed once it has built the partial states of `orders` for a change to `customers`, before the view's
    commit: the view is as it was, and the next refresh uses the partial states the killed process left (not built
    again) and brings the view to the recomputation."""
    root = Path(spark_config.root) / "retraction_crash" / "partials"
    shutil.rmtree(root, ignore_errors=True)
    write_project(root, JOIN_FILES)
    shutil.copy(Path(spark_config.root) / "pipeframe.yaml", root / "pipeframe.yaml")
    p = project(root, spark)
    p.deploy()
    p.append("orders", [{"oid": i, "cid": f"c{i % 4}", "amount": i} for i in range(40)])
    p.append("customers", [{"cid": f"c{i}", "country": ("FR", "US")[i % 2]} for i in range(4)])
    paths = {n: p.warehouse.snapshot(fresh=True).table(n).path for n in ("orders", "customers")}

    def truth() -> list[tuple]:
        o, c = (tables.latest_commit(spark, paths[n]).version for n in ("orders", "customers"))
        return [tuple(r) for r in spark.sql(BY_COUNTRY_TRUTH.format(**paths, o=o, c=c)).collect()]

    before = truth()
    assert [tuple(r) for r in p.query(BY_COUNTRY).collect()] == before
    batch = ndjson(tmp_path / "orders.ndjson", [{"oid": 100 + i, "cid": "c1", "amount": 1000} for i in range(3)])
    step = "partials kept by_country:customers"
    with Worker(root, tmp_path / "worker.log", "join", str(batch), step) as worker:
        code = worker.wait()
    assert code == -signal.SIGKILL and worker.steps[-1] == step, worker.output

    p = project(root, spark)
    assert [tuple(r) for r in p.query(BY_COUNTRY).collect()] == before, "the view moved without its commit"
    (kept,) = partials.kept(paths["orders"])
    assert len(tables.history(spark, kept)) == 1, worker.output  # built once, by the killed worker
    results = p.refresh()
    assert [(r.view, r.outcome) for r in results] == [("by_country", "applied")], results
    assert [tuple(r) for r in p.query(BY_COUNTRY).collect()] == truth() != before
    assert len(tables.history(spark, kept)) == 1, "the partial states were built again"
    view = p.warehouse.snapshot(fresh=True).table("by_country")
    assert any(isinstance(c.metadata, records.ViewCommit) and c.metadata.partials
               for c in tables.history(spark, view.path))
