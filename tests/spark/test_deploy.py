"""Deploy on real Spark + Delta: each change class of PRODUCT.md section 6, faults and concurrency."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pipeframe.engine.deploy import ConflictingPlan
from pipeframe.errors import PipeframeError, RefusedError
from pipeframe.plan import records
from pipeframe.project import Project
from pipeframe.sqltext import quote_string
from tests.conftest import DAILY, EVENTS, HOURLY, answered_tuples

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "example_project"
WORKER = Path(__file__).with_name("deploy_worker.py")

@pytest.fixture
def project_dir(spark_config, request):
    root = Path(spark_config.root) / "deploy" / request.node.name
    shutil.rmtree(root, ignore_errors=True)
    for rel, text in {"datasources/events.datasource": EVENTS, "pipes/hourly.pipe": HOURLY,
                      "pipes/daily.pipe": DAILY}.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    (root / "pipeframe.yaml").write_text("name: deploytest\n")
    return root


def project(root: Path, spark) -> Project:
    return Project(root, spark=spark, environ={})


def insert_events(p: Project, rows: list[tuple[str, str, int]]) -> None:
    path = p.warehouse.snapshot(fresh=True).table("events").path
    frame = p.spark.createDataFrame(rows, "ts STRING, user_id STRING, amount INT")
    frame.selectExpr("CAST(ts AS TIMESTAMP) AS ts", "user_id", "amount").write.format("delta").mode("append").save(path)


def deployed_with_one_event(root: Path, spark) -> tuple[Project, dict]:
    """Deploy the project, land one event, and return the project and its deployed state at that point."""
    p = project(root, spark)
    p.deploy()
    insert_events(p, [("2024-05-01 10:00:00", "a", 5)])
    return p, p.warehouse.snapshot(fresh=True)


def rows(p: Project, sql: str) -> list[tuple]:
    return answered_tuples(p, sql)


def table_files(p: Project, name: str) -> set[str]:
    path = p.warehouse.snapshot(fresh=True).table(name).path
    return {r[0] for r in p.spark.read.format("delta").load(path).selectExpr("input_file_name()").distinct().collect()}


def test_example_project_deploys_and_a_second_deploy_changes_nothing(spark, spark_config):
    root = Path(spark_config.root) / "example_copy"
    shutil.rmtree(root, ignore_errors=True)
    shutil.copytree(EXAMPLE, root, ignore=shutil.ignore_patterns(".pipeframe"))
    p = project(root, spark)
    first = p.deploy()
    assert first.changes == len(first.plan.changes) > 10
    second = project(root, spark).plan()
    assert not second.has_changes and second.exit_code() == 0
    assert project(root, spark).deploy().changes == 0
    assert rows(p, "SELECT count(*) FROM sales_by_day") == [(0,)]
    [record] = project(root, spark).history()
    assert record.result == "succeeded" and record.plan["changes"]


def test_description_edit_rewrites_no_data_files(spark, project_dir):
    p = project(project_dir, spark)
    p.deploy()
    insert_events(p, [("2024-05-01 10:00:00", "a", 5), ("2024-05-01 11:00:00", "b", 7)])
    before = table_files(p, "events")
    (project_dir / "datasources/events.datasource").write_text(EVENTS.replace("Raw events", "Raw click events"))
    p = project(project_dir, spark)
    plan = p.plan()
    [change] = plan.pending
    assert (str(change.key), change.action, change.summary) == ("datasource:events", "alter", "no data moved")
    p.deploy()
    assert table_files(p, "events") == before
    path = p.warehouse.snapshot(fresh=True).table("events").path
    assert spark.sql(f"DESCRIBE DETAIL delta.`{path}`").first()["description"] == "Raw click events"
    assert not project(project_dir, spark).plan().has_changes


def test_a_view_deployed_without_a_maintenance_plan_is_refused_until_deploy_records_it(spark, project_dir):
    """A warehouse deployed by the previous release: its view's state record (format 2) holds no maintenance plan.
    Refresh refuses the view (PF612) instead of deriving one; deploy records it as an alter that moves no data;
    the view then applies the rows that arrived meanwhile."""
    p, before = deployed_with_one_event(project_dir, spark)
    p.refresh()
    old = json.loads(records.encode_state(before.table("hourly").state))
    del old["maintenance"]
    old["format"] = 2
    spark.sql(f"UPDATE delta.`{p.warehouse.state_path}` SET state = {quote_string(json.dumps(old))} "
              "WHERE record = 'resource' AND key = 'datasource:hourly'")
    insert_events(p, [("2024-05-01 11:00:00", "b", 7)])
    p = project(project_dir, spark)
    assert p.warehouse.snapshot(fresh=True).table("hourly").state.maintenance is None
    with pytest.raises(PipeframeError) as err:
        p.refresh()
    assert err.value.code == "PF612" and "`hourly`" in str(err.value) and "pipeframe deploy" in str(err.value)
    files = table_files(p, "hourly")
    [change] = p.plan().pending
    assert (str(change.key), change.action, change.summary) == ("datasource:hourly", "alter", "no data moved")
    assert change.details == ("maintenance plan recorded (deployed by an older pipeframe)",)
    p.deploy()
    after = p.warehouse.snapshot(fresh=True).table("hourly")
    assert after.state.maintenance is not None and after.path == before.table("hourly").path
    assert table_files(p, "hourly") == files
    assert {r.view: r.outcome for r in p.refresh()} == {"hourly": "applied", "daily": "applied"}
    assert rows(p, "SELECT hour, n, total FROM hourly ORDER BY 1") == rows(
        p, "SELECT date_trunc('hour', ts), count(*), sum(amount) FROM events GROUP BY 1 ORDER BY 1")
    assert not project(project_dir, spark).plan().has_changes


def test_added_column_keeps_rows(spark, project_dir):
    p = project(project_dir, spark)
    p.deploy()
    insert_events(p, [("2024-05-01 10:00:00", "a", 5)])
    (project_dir / "datasources/events.datasource").write_text(
        EVENTS.replace("`amount` INT", "`amount` INT,\n    `country` STRING"))
    p = project(project_dir, spark)
    [change] = p.plan().pending
    assert change.action == "alter" and "country" in change.summary
    p.deploy()
    assert rows(p, "SELECT user_id, amount, country FROM events") == [("a", 5, None)]


def test_view_query_change_rebuilds_beside_the_live_version_and_swaps(spark, project_dir):
    p = project(project_dir, spark)
    p.deploy()
    insert_events(p, [("2024-05-01 10:00:00", "a", 5), ("2024-05-01 10:30:00", "b", 7),
                      ("2024-05-01 11:00:00", "a", 1)])
    p.deploy()  # no changes: hourly stays as it was built (empty at the first deploy)
    (project_dir / "pipes/hourly.pipe").write_text(HOURLY.replace("FROM events", "FROM events WHERE amount > 1"))
    p = project(project_dir, spark)
    plan = p.plan()
    actions = {str(c.key): c.action for c in plan.pending}
    assert actions == {"datasource:hourly": "rebuild", "datasource:daily": "rebuild"}  # downstream too
    old_path = p.warehouse.snapshot(fresh=True).table("hourly").path
    seen_during_backfill: list = []

    def on_step(step, change):
        if step == "backfill":
            seen_during_backfill.append(rows(project(project_dir, spark), "SELECT sum(n) FROM hourly"))

    p.deploy(on_step=on_step)
    assert seen_during_backfill[0] == [(None,)]  # the old version (built before any rows) still answered
    p = project(project_dir, spark)
    assert rows(p, "SELECT n, total FROM hourly ORDER BY hour") == [(2, 12)]  # 11:00 had only amount 1
    assert rows(p, "SELECT n FROM daily") == [(2,)]
    assert p.warehouse.snapshot(fresh=True).table("hourly").path != old_path
    assert not Path(old_path).exists()  # the old version is removed after the swap


def test_type_change_without_forward_query_is_refused(spark, project_dir):
    project(project_dir, spark).deploy()
    (project_dir / "datasources/events.datasource").write_text(EVENTS.replace("`amount` INT", "`amount` STRING"))
    p = project(project_dir, spark)
    plan = p.plan()
    assert plan.exit_code() == 3
    [refused] = plan.refused
    assert "amount" in refused.refused and "FORWARD_QUERY" in (refused.hint or "")
    with pytest.raises(PipeframeError):
        p.deploy(allow_destructive=True)


def test_type_change_with_forward_query_converts_rows(spark, project_dir):
    p = project(project_dir, spark)
    p.deploy()
    insert_events(p, [("2024-05-01 10:00:00", "a", 5)])
    (project_dir / "datasources/events.datasource").write_text(
        EVENTS.replace("`amount` INT", "`amount` DOUBLE")
        + "FORWARD_QUERY >\n    ts, user_id, CAST(amount AS DOUBLE) * 1.5 AS amount\n")
    p = project(project_dir, spark)
    assert {str(c.key): c.action for c in p.plan().pending}["datasource:events"] == "rebuild"
    p.deploy()
    assert rows(p, "SELECT user_id, amount FROM events") == [("a", 7.5)]
    assert rows(p, "SELECT n, total FROM hourly") == [(1, 7.5)]  # downstream views rebuilt from the new rows


def test_removed_file_is_refused_then_dropped_with_allow_destructive(spark, project_dir):
    p = project(project_dir, spark)
    p.deploy()
    daily_path = p.warehouse.snapshot(fresh=True).table("daily").path
    (project_dir / "pipes/daily.pipe").unlink()
    p = project(project_dir, spark)
    assert p.plan().exit_code() == 3
    with pytest.raises(PipeframeError):
        p.deploy()
    assert p.warehouse.snapshot(fresh=True).table("daily") is not None
    p.deploy(allow_destructive=True)
    assert project(project_dir, spark).warehouse.snapshot(fresh=True).table("daily") is None
    assert not Path(daily_path).exists()


def test_dropping_a_datasource_a_view_reads_is_refused_with_dependents(spark, project_dir):
    project(project_dir, spark).deploy()
    (project_dir / "datasources/events.datasource").unlink()
    p = project(project_dir, spark)
    for allow in (False, True):
        with pytest.raises(RefusedError) as err:
            p.plan(allow_destructive=allow)
        [diagnostic] = err.value.diagnostics
        assert diagnostic.code == "PF607" and err.value.exit_code == 3
        assert diagnostic.message == "Cannot drop `events`: it is read by hourly."
    assert p.warehouse.snapshot(fresh=True).table("events") is not None


def test_failing_backfill_leaves_live_tables_and_state_unchanged(spark, project_dir):
    p, before = deployed_with_one_event(project_dir, spark)
    # A cast that fails at run time (ANSI mode): the backfill query errors after the new version was created.
    (project_dir / "pipes/hourly.pipe").write_text(HOURLY.replace("sum(amount)", "sum(CAST(user_id AS INT))"))
    p = project(project_dir, spark)
    with pytest.raises(PipeframeError) as err:
        p.deploy()
    assert err.value.code == "PF603" and "previous version is still live" in err.value.diagnostics[0].hint
    assert p.warehouse.snapshot(fresh=True) == before
    assert rows(p, "SELECT count(*) FROM hourly") == [(0,)]
    assert p.history()[-1].result == "failed"
    (project_dir / "pipes/hourly.pipe").write_text(HOURLY.replace("count(*)", "count(ts)"))
    p = project(project_dir, spark)
    p.deploy()
    assert rows(p, "SELECT n, total FROM hourly") == [(1, 5)]


def run_worker(root: Path, mode: str, *extra: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, str(WORKER), str(root), mode, *extra], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def test_deploy_killed_during_backfill_changes_nothing_and_the_next_deploy_completes(spark, project_dir):
    p, before = deployed_with_one_event(project_dir, spark)
    (project_dir / "pipes/hourly.pipe").write_text(HOURLY.replace("count(*) AS n", "count(user_id) AS n"))
    worker = run_worker(project_dir, "kill-at-backfill")
    worker.wait(timeout=300)
    assert worker.returncode == -9, worker.stderr.read()
    p = project(project_dir, spark)
    assert p.warehouse.snapshot(fresh=True) == before
    assert rows(p, "SELECT count(*) FROM hourly") == [(0,)]
    p.deploy()  # takes over the dead process's lock
    assert rows(project(project_dir, spark), "SELECT n, total FROM hourly") == [(1, 5)]
    assert [d.result for d in p.history()][-2:] == ["running", "succeeded"]


def test_concurrent_deploys_one_wins_the_other_fails_clearly(spark, project_dir, tmp_path):
    # No sleep decides this race: the deploy that takes the lock writes `held` and keeps the lock until the test
    # writes `release`, and the test releases it only after the other deploy has exited. So the loser always
    # meets a held lock, whichever of the two started first.
    workers = [run_worker(project_dir, "held", str(tmp_path)) for _ in range(2)]
    for worker in workers:
        assert worker.stdout.readline().strip() == "ready", worker.stderr.read()
    (tmp_path / "go").touch()
    held = tmp_path / "held"
    deadline = time.monotonic() + 300
    while not held.exists():
        assert time.monotonic() < deadline and all(w.poll() is None or w.returncode == 1 for w in workers), \
            [(w.poll(), w.stderr.read() if w.poll() is not None else "") for w in workers]
        time.sleep(0.05)
    winner = next(w for w in workers if w.pid == int(held.read_text()))
    loser = next(w for w in workers if w is not winner)
    out, err = loser.communicate(timeout=300)
    assert loser.returncode == 1, out + err
    assert "PF602" in out and "Another deploy" in out and "is running" in out, out + err
    assert winner.poll() is None  # still holding the lock the loser met
    (tmp_path / "release").touch()
    out, err = winner.communicate(timeout=300)
    assert winner.returncode == 0 and out.strip() == "deployed 3", out + err
    p = project(project_dir, spark)
    assert not p.plan().has_changes
    [deployment] = p.history()
    assert deployment.result == "succeeded"
    # The state store's resource rows are exactly the project's three tables, each written by the winning deploy.
    state = p.spark.read.format("delta").load(p.warehouse.state_path).where("record = 'resource'")
    assert sorted((r["key"], r["deployment"]) for r in state.collect()) == sorted(
        (key, deployment.id) for key in ("datasource:events", "datasource:hourly", "datasource:daily"))
    assert {str(key) for key in p.warehouse.snapshot(fresh=True)} == \
        {"datasource:events", "datasource:hourly", "datasource:daily"}


def test_a_plan_made_before_another_deploy_landed_is_refused_and_changes_nothing(spark, project_dir):
    project(project_dir, spark).deploy()
    (project_dir / "pipes/hourly.pipe").write_text(HOURLY.replace("count(*) AS n", "count(user_id) AS n"))
    planner = project(project_dir, spark)
    stale = planner.plan()
    assert [str(c.key) for c in stale.pending] == ["datasource:hourly", "datasource:daily"]
    # Meanwhile another deploy (another CI job, another process) lands a different version of the files.
    (project_dir / "datasources/events.datasource").write_text(EVENTS.replace("Raw events", "Raw events, v2"))
    project(project_dir, spark).deploy()
    landed = project(project_dir, spark).warehouse.snapshot()
    with pytest.raises(ConflictingPlan) as err:
        planner.deploy(plan=stale)
    assert (err.value.code, err.value.exit_code) == ("PF608", 4)
    assert "changed since this plan was made" in err.value.diagnostics[0].message
    assert "Run the command again" in err.value.diagnostics[0].hint
    assert project(project_dir, spark).warehouse.snapshot() == landed  # nothing of the stale plan applied
    assert [d.result for d in planner.history()] == ["succeeded", "succeeded"]
    assert not project(project_dir, spark).plan().has_changes  # planned anew, it is the files as deployed


def test_layout_partitioning_clustering_ttl_and_backfill_skip(spark, project_dir):
    (project_dir / "datasources/events.datasource").write_text(
        EVENTS + "ENGINE_PARTITION_KEY to_date(ts)\nENGINE_TTL ts + INTERVAL 30 DAYS\n")
    (project_dir / "datasources/daily.datasource").write_text(
        "SCHEMA >\n    `day` TIMESTAMP,\n    `n` BIGINT\nENGINE_SORTING_KEY day\nBACKFILL skip\n")
    p = project(project_dir, spark)
    p.deploy()
    deployed = p.warehouse.snapshot(fresh=True)
    events = spark.sql(f"DESCRIBE DETAIL delta.`{deployed.table('events').path}`").first()
    assert events["partitionColumns"] == ["__pf_partition"]
    assert events["properties"]["pipeframe.zorder"] == "user_id"  # partitioned: clustered by Z-order on OPTIMIZE
    daily = spark.sql(f"DESCRIBE DETAIL delta.`{deployed.table('daily').path}`").first()
    assert daily["clusteringColumns"] == ["day"]  # liquid clustering

    insert_events(p, [("2000-01-01 00:00:00", "old", 1), ("2999-01-01 00:00:00", "new", 2)])
    (project_dir / "datasources/events.datasource").write_text(
        EVENTS.replace("Raw events", "Raw events, TTL applied")
        + "ENGINE_PARTITION_KEY to_date(ts)\nENGINE_TTL ts + INTERVAL 30 DAYS\n")
    (project_dir / "pipes/hourly.pipe").write_text(HOURLY.replace("count(*)", "count(ts)"))
    p = project(project_dir, spark)
    assert {str(c.key): c.action for c in p.plan().pending} == {
        "datasource:events": "alter", "datasource:hourly": "rebuild", "datasource:daily": "rebuild"}
    p.deploy()
    assert rows(p, "SELECT user_id FROM events") == [("new",)]  # the expired row was deleted by deploy
    assert rows(p, "SELECT sum(n) FROM hourly") == [(2,)]  # rebuilt and backfilled (before the TTL delete)
    assert rows(p, "SELECT count(*) FROM daily") == [(0,)]  # BACKFILL skip: rebuilt without a backfill
