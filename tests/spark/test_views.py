"""Ingest and the view lifecycle on real Spark + Delta: quarantine, pause/resume with lag, errors and recover,
rows written by other jobs, in-place changes (stale), optimize, populate and replace/delete."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from pipeframe.engine import deltalog
from pipeframe.errors import PipeframeError
from pipeframe.project import Project
from tests.conftest import DAILY, EVENTS, HOURLY, answered_tuples

EVENTS_JSON = EVENTS.replace("`user_id` STRING,", "`user_id` STRING `json:$.user.id`,").replace(
    "`amount` INT", "`amount` INT DEFAULT 1")
HOURLY_TRUTH = ("SELECT date_trunc('hour', ts) AS hour, count(*) AS n, sum(amount) AS total FROM events GROUP BY 1 "
                "ORDER BY 1")
DAILY_TRUTH = "SELECT date_trunc('day', ts) AS day, count(*) AS n FROM events GROUP BY 1 ORDER BY 1"


@pytest.fixture
def project(spark, spark_config, request) -> Project:
    root = Path(spark_config.root) / "views" / request.node.name
    shutil.rmtree(root, ignore_errors=True)
    for rel, text in {"datasources/events.datasource": EVENTS_JSON, "pipes/hourly.pipe": HOURLY,
                      "pipes/daily.pipe": DAILY}.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    (root / "pipeframe.yaml").write_text("name: viewtest\n")
    p = Project(root, spark=spark, environ={})
    p.deploy()
    return p


def events(*rows: tuple[str, str, int | None]) -> list[dict]:
    return [{"ts": ts, "user": {"id": user}, **({} if amount is None else {"amount": amount})}
            for ts, user, amount in rows]


def rows(p: Project, sql: str) -> list[tuple]:
    return answered_tuples(p, sql)


def assert_views_match_raw(p: Project) -> None:
    assert rows(p, "SELECT hour, n, total FROM hourly ORDER BY 1") == rows(p, HOURLY_TRUTH)
    assert rows(p, "SELECT day, n FROM daily ORDER BY 1") == rows(p, DAILY_TRUTH)


def test_a_file_mixing_good_and_bad_rows(project, tmp_path):
    file = tmp_path / "mixed.ndjson"
    file.write_text("\n".join([
        json.dumps({"ts": "2024-05-01 10:00:00", "user": {"id": "a"}, "amount": 5}),
        json.dumps({"ts": "yesterday", "user": {"id": "b"}, "amount": 1}),
        json.dumps({"ts": "2024-05-01 10:30:00", "user": {"id": "c"}}),  # amount missing: DEFAULT 1
        "{not json",
        json.dumps({"ts": "2024-05-01 11:00:00", "user": {"id": "d"}, "amount": "lots"}),
        "",
    ]))
    result = project.append("events", str(file))
    assert (result.accepted, result.quarantined) == (2, 3)
    assert rows(project, "SELECT user_id, amount FROM events ORDER BY 1") == [("a", 5), ("c", 1)]
    quarantine = dict(rows(project, "SELECT raw, reason FROM events_quarantine"))
    assert quarantine[json.dumps({"ts": "yesterday", "user": {"id": "b"}, "amount": 1})] == \
        'column `ts`: cannot read "yesterday" as TIMESTAMP'
    assert quarantine["{not json"] == "line is not valid JSON"
    assert any("column `amount`: cannot read \"lots\" as INT" == reason for reason in quarantine.values())
    assert [v.outcome for v in result.views] == ["applied", "applied"]
    assert rows(project, "SELECT n, total FROM hourly") == [(2, 6)]


def test_csv_and_dataframe_input_use_column_names(project, tmp_path):
    csv = tmp_path / "events.csv"
    csv.write_text("ts,user_id,amount\n2024-05-01 10:00:00,a,2\n2024-05-01 10:05:00,b,x\n2024-05-01 10:06:00,c\n")
    result = project.append("events", str(csv))
    assert (result.accepted, result.quarantined) == (1, 2)
    reasons = sorted(r[0] for r in rows(project, "SELECT reason FROM events_quarantine"))
    assert reasons == ["column `amount`: cannot read \"x\" as INT", "row does not have the header's columns"]
    frame = project.spark.createDataFrame([("2024-05-01 12:00:00", "z", 7)], "ts STRING, user_id STRING, amount INT")
    assert project.append("events", frame).accepted == 1
    assert_views_match_raw(project)


def test_paused_view_shows_lag_and_catches_up_on_resume(project):
    project.append("events", events(("2024-05-01 10:00:00", "a", 1)))
    project.pause("hourly")
    result = project.append("events", events(("2024-05-01 10:10:00", "b", 2), ("2024-05-02 09:00:00", "c", 3)))
    assert {v.view: v.outcome for v in result.views} == {"hourly": "paused", "daily": "up to date"}
    [status] = project.status("hourly")
    assert (status.status, status.lag_versions, status.applied_version) == ("paused", 1, status.source_version - 1)
    assert status.lag_seconds is not None and status.lag_seconds >= 0
    assert rows(project, "SELECT n FROM hourly") == [(1,)]  # paused: still the old answer
    outcomes = {v.view: v.outcome for v in project.resume("hourly")}
    assert outcomes == {"hourly": "applied", "daily": "applied"}
    assert_views_match_raw(project)
    assert project.status("hourly")[0].status == "active" and project.status("hourly")[0].lag_versions == 0


def test_a_failing_view_shows_the_error_and_recover_brings_it_back(project):
    project.append("events", events(("2024-05-01 10:00:00", "a", 1)))
    hourly_path = project.warehouse.snapshot(fresh=True).table("hourly").path
    shutil.rmtree(hourly_path)  # someone deleted the view's files
    result = project.append("events", events(("2024-05-01 11:00:00", "b", 2)))
    assert {v.view: v.outcome for v in result.views}["hourly"] == "error"
    [status] = project.status("hourly")
    assert status.status == "error" and status.reason == project.warehouse.view_record("hourly").error
    assert "hourly/v1" in status.reason
    # An errored view is left alone until recovered, even by the next ingest.
    again = project.append("events", events(("2024-05-01 12:00:00", "c", 3)))
    assert {v.view: v.outcome for v in again.views}["hourly"] == "error"
    outcomes = [v.outcome for v in project.recover("hourly")]
    assert outcomes[0] == "rebuilt"
    assert_views_match_raw(project)
    assert project.status("hourly")[0].status == "active"


def test_refresh_picks_up_rows_from_other_jobs_and_follows_in_place_changes(project):
    project.append("events", events(("2024-05-01 10:00:00", "a", 1)))
    path = project.warehouse.snapshot(fresh=True).table("events").path
    other_job = project.spark.createDataFrame([("2024-05-01 10:30:00", "x", 4)], "ts STRING, user_id STRING, amount INT")
    other_job.selectExpr("CAST(ts AS TIMESTAMP) ts", "user_id", "amount").write.format("delta").mode("append").save(path)
    assert [v.outcome for v in project.refresh()] == ["applied", "applied"]
    assert [v.outcome for v in project.refresh()] == ["up to date", "up to date"]  # nothing counted twice
    assert_views_match_raw(project)

    # An UPDATE by another job: hourly (read by daily) folds its touched hour, daily recomputes its day.
    project.spark.sql(f"UPDATE delta.`{path}` SET amount = 100, ts = ts + INTERVAL 1 DAY WHERE user_id = 'x'")
    results = {v.view: v for v in project.refresh()}
    assert {v: (r.outcome, r.path) for v, r in results.items()} == {"hourly": ("applied", "fold"),
                                                                       "daily": ("applied", "recompute")}
    assert_views_match_raw(project)
    assert rows(project, "SELECT n, total FROM hourly WHERE hour = '2024-05-01 10:00:00'") == [(1, 1)]
    assert [(s.name, s.last_path) for s in project.status()] == [("hourly", "fold"), ("daily", "recompute")]

    # A RESTORE is not described by the change feed: the views are stale until rebuilt.
    project.spark.sql(f"RESTORE TABLE delta.`{path}` TO VERSION AS OF 1")
    results = {v.view: v for v in project.refresh()}
    assert results["hourly"].outcome == "stale" and "RESTORE at version" in (results["hourly"].message or "")
    assert project.status("hourly")[0].status == "stale"
    assert [v.outcome for v in project.refresh("hourly", full=True)] == ["rebuilt", "rebuilt"]
    assert_views_match_raw(project)
    assert project.status("hourly")[0].status == "active"


def test_optimize_compacts_states_to_one_row_per_key_with_identical_results(project):
    for minute in range(3):
        project.append("events", events((f"2024-05-01 10:0{minute}:00", "a", minute), ("2024-05-02 10:00:00", "b", 1)))
    hourly_path = project.warehouse.snapshot(fresh=True).table("hourly").path
    state_rows = project.spark.read.format("delta").load(hourly_path).count()
    assert state_rows == 6
    before = rows(project, "SELECT hour, n, total FROM hourly ORDER BY 1")
    project.optimize()
    assert project.spark.read.format("delta").load(hourly_path).count() == 2
    assert rows(project, "SELECT hour, n, total FROM hourly ORDER BY 1") == before
    # What `optimize` left out as having nothing to do (read from each table's log), Delta finds nothing to do in,
    # and a second `optimize` commits nothing.
    snapshot = project.warehouse.snapshot(fresh=True)
    paths = {name: snapshot.table(name).path for name in ("events", "hourly", "daily")}
    versions = {name: deltalog.latest_version(path) for name, path in paths.items()}
    assert project.optimize() == ["events", "hourly", "daily"]
    assert {name: deltalog.latest_version(path) for name, path in paths.items()} == versions
    for path in paths.values():
        [done] = project.spark.sql(f"OPTIMIZE delta.`{path}`").collect()
        assert (done.metrics.numFilesAdded, done.metrics.numFilesRemoved) == (0, 0), path
        assert project.spark.sql(f"VACUUM delta.`{path}` LITE RETAIN 168 HOURS DRY RUN").count() == 0, path
    # The compaction is invisible downstream: daily neither double counts nor goes stale.
    project.append("events", events(("2024-05-01 23:00:00", "c", 1)))
    assert [v.outcome for v in project.refresh()] == ["up to date", "up to date"]
    assert_views_match_raw(project)
    # With no retention, VACUUM runs and leaves only the files the tables use.
    (project.root / "pipeframe.yaml").write_text("name: viewtest\nretention_hours: 0\n")
    Project(project.root, spark=project.spark, environ={}).optimize()
    for path in paths.values():
        on_disk = {str(f) for f in Path(path).rglob("*.parquet") if "_delta_log" not in f.parts}
        assert on_disk == set(deltalog.live_files(path)[1]), path
    assert_views_match_raw(project)


def test_populate_fills_a_view_deployed_with_backfill_skip(spark, spark_config):
    root = Path(spark_config.root) / "views" / "backfill_skip"
    shutil.rmtree(root, ignore_errors=True)
    (root / "datasources").mkdir(parents=True)
    (root / "pipes").mkdir()
    (root / "datasources/events.datasource").write_text(EVENTS_JSON)
    p = Project(root, spark=spark, environ={})
    p.deploy()
    p.append("events", events(("2024-05-01 10:00:00", "a", 1), ("2024-05-03 10:00:00", "b", 2)))
    (root / "pipes/hourly.pipe").write_text(HOURLY)
    (root / "datasources/hourly.datasource").write_text(
        "SCHEMA >\n    `hour` TIMESTAMP,\n    `n` BIGINT,\n    `total` BIGINT\nBACKFILL skip\n")
    p = Project(root, spark=spark, environ={})
    p.deploy()
    p.append("events", events(("2024-05-01 10:30:00", "c", 3)))
    assert rows(p, "SELECT n FROM hourly") == [(1,)]  # only what arrived after the deploy
    p.populate("hourly", chunk_by="ts", chunk_rows=1)  # the history before the deploy, in chunks
    assert rows(p, "SELECT hour, n, total FROM hourly ORDER BY 1") == rows(p, HOURLY_TRUTH)
    with pytest.raises(PipeframeError, match="PF705"):
        p.populate("hourly", truncate=True, chunk_by="nope", chunk_rows=1)


def test_populate_refuses_to_count_a_fully_backfilled_view_twice(project):
    project.append("events", events(("2024-05-01 10:00:00", "a", 1)))
    with pytest.raises(PipeframeError, match="PF706"):
        project.populate("hourly")
    project.populate("hourly", truncate=True)
    assert_views_match_raw(project)


def test_a_view_with_follow_ttl_forgets_the_rows_its_source_ttl_deletes(spark, spark_config):
    """ENGINE_TTL on a landing datasource deletes raw rows; views keep their aggregates unless they say FOLLOW_TTL
    true, which retracts them like any delete (an invertible view and one whose max is recomputed)."""
    root = Path(spark_config.root) / "views" / "follow_ttl"
    shutil.rmtree(root, ignore_errors=True)
    query = "SELECT user_id, count() AS n, sum(amount) AS total, max(ts) AS last FROM events GROUP BY user_id"
    files = {"datasources/events.datasource": EVENTS_JSON + "ENGINE_TTL ts + INTERVAL 30 DAYS\n",
             "pipes/kept.pipe": f"NODE n\nSQL >\n    {query}\nTYPE materialized\nDATASOURCE kept\n",
             "pipes/followed.pipe": f"NODE n\nSQL >\n    {query}\nTYPE materialized\nDATASOURCE followed\n"
                                    "FOLLOW_TTL true\n",
             "pipes/counted.pipe": "NODE n\nSQL >\n    SELECT count() AS n, sum(amount) AS total FROM events\n"
                                   "TYPE materialized\nDATASOURCE counted\nFOLLOW_TTL true\n"}
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    (root / "pipeframe.yaml").write_text("name: follow_ttl\n")
    p = Project(root, spark=spark, environ={})
    assert p.check().ok
    p.deploy()
    old, new = "2020-01-01 10:00:00", "2999-01-01 10:00:00"  # expired, and not for a long while
    p.append("events", events((old, "a", 1), (old, "b", 2), (new, "b", 3), (new, "c", 4), (old, "c", 50)))
    before = rows(p, "SELECT user_id, count(*), sum(amount), max(ts) FROM events GROUP BY 1 ORDER BY 1")
    p.optimize("events")  # deletes the rows past the TTL
    assert rows(p, "SELECT count(*) FROM events") == [(2,)]
    assert {s.name: s.lag_versions for s in p.status()} == {"kept": 0, "followed": 1, "counted": 1}  # what waits for them
    views = {v.view: v for v in p.refresh()}
    assert {(v.outcome, v.path) for n, v in views.items() if n != "kept"} == {("applied", "recompute"),
                                                                              ("applied", "negate")}
    now = rows(p, "SELECT user_id, count(*), sum(amount), max(ts) FROM events GROUP BY 1 ORDER BY 1")
    assert rows(p, "SELECT user_id, n, total, last FROM followed ORDER BY 1") == now  # `a` is gone, b and c shrank
    assert rows(p, "SELECT n, total FROM counted") == [(2, 7)]
    assert rows(p, "SELECT user_id, n, total, last FROM kept ORDER BY 1") == before


def test_the_rows_of_a_small_change_are_broadcast_where_a_query_joins_them(project, monkeypatch):
    """A view joining a change's rows with a big table must not shuffle the big table (a sort-merge join): the
    change feed's relation has no size Spark can plan with, so rows of a small change carry a broadcast hint."""
    from pipeframe.engine import tables

    project.append("events", events(("2024-05-01 10:00:00", "a", 1), ("2024-05-01 11:00:00", "b", 2)))
    project.delete("events", "user_id = 'a'")
    source = project.snapshot.table("events")
    latest = tables.latest_commit(project.spark, source.path).version
    commits = tables.commits_between(project.spark, source.path, latest - 1, latest)
    assert [c.operation for c in commits] == ["DELETE"] and not tables.adds_rows(commits)

    def plan() -> str:
        _added, removed = tables.read_change_rows(project.spark, source.state, source.path, commits)
        assert [tuple(r) for r in removed.select("user_id", "amount").collect()] == [("a", 1)]
        big = project.spark.range(1000).selectExpr("CAST(id AS STRING) AS user_id")
        return big.join(removed, "user_id")._jdf.queryExecution().executedPlan().toString()

    threshold = project.spark.conf.get("spark.sql.autoBroadcastJoinThreshold")
    project.spark.conf.set("spark.sql.autoBroadcastJoinThreshold", "-1")  # only hints broadcast
    try:
        assert "BroadcastHashJoin" in plan()
        monkeypatch.setattr(tables, "BROADCAST_ROWS", 0)  # a change too big to broadcast
        assert "BroadcastHashJoin" not in plan()
    finally:
        project.spark.conf.set("spark.sql.autoBroadcastJoinThreshold", threshold)


def test_delete_and_replace_where_reach_the_views_and_a_full_replace_rebuilds_them(project):
    project.append("events", events(("2024-05-01 10:00:00", "a", 1), ("2024-05-02 10:00:00", "b", 2),
                                    ("2024-05-02 11:00:00", "a", 5)))
    deleted, views = project.delete("events", "user_id = 'a'")
    assert deleted == 2 and {(v.outcome, v.path) for v in views} == {("applied", "fold"), ("applied", "recompute")}
    assert_views_match_raw(project)
    assert rows(project, "SELECT count(*) FROM hourly") == [(1,)]  # the hours only `a` had are gone
    replaced = project.replace("events", events(("2024-05-02 10:15:00", "b", 7)), where="user_id = 'b'")
    assert replaced.accepted == 1 and {v.outcome for v in replaced.views} == {"applied"}
    assert_views_match_raw(project)
    result = project.replace("events", events(("2024-05-05 10:00:00", "z", 9)))
    assert result.accepted == 1 and {v.outcome for v in result.views} == {"rebuilt"}
    assert rows(project, "SELECT user_id FROM events") == [("z",)]
    assert_views_match_raw(project)
    with pytest.raises(PipeframeError, match="PF713"):
        project.replace("events", events(("2024-05-06 10:00:00", "y", 1)), where="user_id = 'z'")
    assert rows(project, "SELECT user_id FROM events") == [("z",)]  # nothing replaced


def test_a_pause_saved_after_a_refresh_read_the_records_holds_the_view(project, monkeypatch):
    """A refresh round reads the view records once when it begins; a pause acknowledged after that (and rows landing
    after the pause) must still hold the view: the round reads the record again under the view's lock."""
    project.append("events", events(("2024-05-01 10:00:00", "a", 1)))
    materializer = project.materializer()
    read = materializer.warehouse.view_records
    path = project.warehouse.snapshot(fresh=True).table("events").path

    def records_then_a_pause_and_new_rows():
        records = read()
        monkeypatch.setattr(materializer.warehouse, "view_records", read)
        Project(project.root, spark=project.spark, environ={}).pause("hourly")  # another writer
        later = project.spark.createDataFrame([("2024-05-01 11:00:00", "b", 2)], "ts STRING, user_id STRING, amount INT")
        later.selectExpr("CAST(ts AS TIMESTAMP) ts", "user_id", "amount").write.format("delta").mode("append").save(path)
        return records

    monkeypatch.setattr(materializer.warehouse, "view_records", records_then_a_pause_and_new_rows)
    assert {r.view: r.outcome for r in materializer.refresh()}["hourly"] == "paused"
    assert rows(project, "SELECT CAST(hour AS STRING), n FROM hourly") == [("2024-05-01 10:00:00", 1)]
    assert [v.outcome for v in project.resume("hourly")] == ["applied", "applied"]
    assert_views_match_raw(project)


USERS = """\
SCHEMA >
    `user_id` STRING `json:$.user_id`,
    `country` STRING `json:$.country`
"""
BY_COUNTRY = """\
NODE by_country
SQL >
    SELECT u.country AS country, count(*) AS n
    FROM events AS e JOIN users AS u ON e.user_id = u.user_id
    GROUP BY u.country
TYPE materialized
DATASOURCE by_country
"""
TOTALS = """\
NODE totals
SQL >
    SELECT count(*) AS n, sum(amount) AS total
    FROM events
TYPE materialized
DATASOURCE totals
"""


def test_views_deployed_over_a_source_without_rows_start_from_its_version_without_a_spark_job(spark, spark_config):
    """A view deployed over an empty source gets its first commit (the watermark, no rows) from pyarrow where its
    query makes no row from none (a join too); a global aggregate (one row from none) is still computed by Spark.
    All then follow their source's rows from that version on, as recomputations of it."""
    from pipeframe.engine import deltaappend, deltalog
    from pipeframe.engine.conflicts import local_folder
    from pipeframe.plan import records

    root = Path(spark_config.root) / "views" / "empty_source"
    shutil.rmtree(root, ignore_errors=True)
    for rel, text in {"datasources/events.datasource": EVENTS_JSON, "pipes/hourly.pipe": HOURLY,
                      "pipes/daily.pipe": DAILY, "pipes/totals.pipe": TOTALS, "datasources/users.datasource": USERS,
                      "pipes/by_country.pipe": BY_COUNTRY}.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    p = Project(root, spark=spark, environ={})
    p.deploy()
    snapshot = p.warehouse.snapshot(fresh=True)
    for name, ours in (("hourly", True), ("daily", True), ("by_country", True), ("totals", False)):
        actions = deltalog.commit_actions(local_folder(snapshot.table(name).path), 1)
        info = next(a["commitInfo"] for a in actions if "commitInfo" in a)
        assert (info.get("engineInfo") == deltaappend.ENGINE) is ours, name
        source = snapshot.table(snapshot.table(name).state.source)
        watermark = records.decode(info["userMetadata"], name)
        assert watermark.source_version == deltalog.table_state(local_folder(source.path)).version
        assert watermark.source_path == source.path
        assert ours is not any("add" in a for a in actions)  # the global aggregate's one row from no rows
    assert rows(p, "SELECT n, total FROM totals") == [(0, 0)]  # as ClickHouse: a sum of no never-NULL value is 0
    p.append("users", [{"user_id": "a", "country": "FR"}, {"user_id": "b", "country": "DE"}])
    p.append("events", events(("2024-05-01 10:00:00", "a", 1), ("2024-05-01 11:00:00", "b", 2)))
    p.append("events", events(("2024-05-02 10:00:00", "a", 4), ("2024-05-02 11:00:00", "c", 8)))
    assert_views_match_raw(p)
    assert rows(p, "SELECT n, total FROM totals") == rows(p, "SELECT count(*), sum(amount) FROM events")
    assert rows(p, "SELECT country, n FROM by_country ORDER BY 1") == rows(
        p, "SELECT u.country, count(*) FROM events e JOIN users u ON e.user_id = u.user_id GROUP BY 1 ORDER BY 1")
