"""The two ways a view whose states cannot be subtracted (max, min) takes a delete back out (engine/recompute.py), on
real Spark + Delta, each followed by a view that reads its rows: after every change both views equal their queries
run once over the source, and the view's commit was made without a Spark job (deltaappend.replace_keys), rewriting
only what the change needs:

- a delete of one hour: only that hour's source rows are aggregated, and only the view files holding it rewritten
  (here files of a rebuild by Spark, whose timestamps are INT96);
- a delete touching most groups: every group is computed again from the whole source, every row of the view
  replaced (nothing copied)."""

from __future__ import annotations

import shutil
from datetime import datetime, timedelta
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from pipeframe.compiler.maintenance import SIGN, fill
from pipeframe.engine import deltalog, recompute
from pipeframe.engine.conflicts import local_folder
from pipeframe.project import Project
from tests.conftest import answered_tuples

SOURCE = """\
SCHEMA >
    `ts` Nullable(DateTime),
    `user_id` String,
    `lat` Int32
"""
PEAKS = """\
NODE peaks
SQL >
    SELECT toStartOfHour(ts) AS hour, max(lat) AS top, min(lat) AS low, count() AS n FROM events GROUP BY hour
TYPE materialized
DATASOURCE peaks
"""
DAILY = """\
NODE daily
SQL >
    SELECT toDate(hour) AS day, max(top) AS top, uniqExact(hour) AS hours FROM peaks GROUP BY day
TYPE materialized
DATASOURCE daily_peaks
"""
TOPS = """\
NODE tops
SQL >
    SELECT toDate(ts) AS day, max(lat) AS top, uniq(user_id) AS users, minIf(lat, user_id != 'u1') AS low
    FROM events GROUP BY day
TYPE materialized
DATASOURCE tops
"""
BOUNDS = """\
NODE bounds
SQL >
    SELECT toDate(ts) AS day, max(lat) AS top, minIf(lat, user_id != 'u1') AS low FROM events GROUP BY day
TYPE materialized
DATASOURCE bounds
"""
BOUNDS_TRUTH = "SELECT to_date(ts) AS day, max(lat) AS top, min(IF(user_id != 'u1', lat, NULL)) AS low FROM events GROUP BY 1"
TOPS_TRUTH = ("SELECT to_date(ts) AS day, max(lat) AS top, count(DISTINCT user_id) AS users, "
              "min(IF(user_id != 'u1', lat, NULL)) AS low FROM events GROUP BY 1")
PEAKS_TRUTH = ("SELECT date_trunc('hour', ts) AS hour, max(lat) AS top, min(lat) AS low, count(*) AS n FROM events "
               "GROUP BY 1")
DAILY_TRUTH = ("SELECT to_date(ts) AS day, max(lat) AS top, count(DISTINCT date_trunc('hour', ts)) AS hours "
               "FROM events GROUP BY 1")
START = datetime(2024, 5, 1)


@pytest.fixture
def project(request, spark, spark_config) -> Project:
    """`events`, `peaks` and `daily_peaks` deployed; `tops` and `bounds` as well where a test asks (indirect
    parametrization)."""
    root = Path(spark_config.root) / "recompute_paths"
    shutil.rmtree(root, ignore_errors=True)
    tops = {"pipes/tops.pipe": TOPS, "pipes/bounds.pipe": BOUNDS} if getattr(request, "param", None) == "tops" else {}
    for rel, text in {"datasources/events.datasource": SOURCE, "pipes/peaks.pipe": PEAKS,
                      "pipes/daily.pipe": DAILY, **tops}.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    (root / "pipeframe.yaml").write_text("name: recompute\n")
    p = Project(root, spark=spark, environ={})
    p.deploy()
    yield p
    shutil.rmtree(root, ignore_errors=True)


def rows(p: Project, sql: str) -> list[tuple]:
    return sorted(answered_tuples(p, sql), key=repr)


def last_commit(p: Project, view: str) -> dict:
    folder = local_folder(p.warehouse.snapshot(fresh=True).table(view).path)
    version = deltalog.latest_version(folder)
    [info] = [a["commitInfo"] for a in deltalog.commit_actions(folder, version) if "commitInfo" in a]
    return info


def test_a_delete_recomputes_only_the_touched_groups_or_every_group(project, monkeypatch):
    p = project
    # 3 days of hourly rows in 6 commits (files laid out in time), u1 in every hour, one row without a time
    for day in range(3):
        for half in range(2):
            batch = [{"ts": (START + timedelta(days=day, hours=12 * half + h, minutes=m)).isoformat(sep=" "),
                      "user_id": "u1" if m == 20 else f"u{2 + h % 2}", "lat": (day * 37 + h * 11 + m) % 97}
                     for h in range(12) for m in (0, 20, 40)]
            assert p.append("events", batch).accepted == len(batch)
    assert p.append("events", [{"ts": None, "user_id": "u9", "lat": 500}]).accepted == 1
    p.refresh("peaks", full=True)  # the view's files written by Spark (its timestamps as INT96), not by pyarrow
    assert rows(p, "SELECT * FROM peaks") == rows(p, PEAKS_TRUTH)
    view_rows = len(rows(p, "SELECT * FROM peaks"))
    # the rows of the view's files that hold the hour deleted next (Spark's rebuild wrote one file per partition)
    folder = local_folder(p.warehouse.snapshot(fresh=True).table("peaks").path)
    written = [pq.read_table(f) for f in deltalog.data_files(folder)[1]]
    [holding] = [t for t in written if datetime(2024, 5, 2, 5) in t.column("hour").to_pylist()]
    assert sum(t.num_rows for t in written) == view_rows

    # one hour: its group alone is recomputed, from its own rows
    deleted, views = p.delete("events", "ts >= TIMESTAMP '2024-05-02 05:00:00' AND ts < TIMESTAMP '2024-05-02 06:00:00'")
    assert deleted == 3 and {v.view: (v.outcome, v.path) for v in views}["peaks"] == ("applied", "recompute")
    assert rows(p, "SELECT * FROM peaks") == rows(p, PEAKS_TRUTH)
    assert rows(p, "SELECT * FROM daily_peaks") == rows(p, DAILY_TRUTH)
    narrow = last_commit(p, "peaks")
    assert narrow["engineInfo"].startswith("pipeframe") and narrow["operation"] == "MERGE"
    # the hour's row out (all 3 of its rows deleted: nothing to insert), the other hours of its file copied, and
    # no other file rewritten
    assert (narrow["operationMetrics"]["numTargetRowsDeleted"], narrow["operationMetrics"]["numTargetRowsInserted"],
            narrow["operationMetrics"]["numTargetRowsCopied"]) == ("1", "0", str(holding.num_rows - 1))
    assert narrow["operationMetrics"]["numTargetFilesRemoved"] == "1"

    # the group of rows without a time
    deleted, views = p.delete("events", "ts IS NULL")
    assert deleted == 1 and rows(p, "SELECT * FROM peaks") == rows(p, PEAKS_TRUTH)
    assert all(r[0] is not None for r in rows(p, "SELECT * FROM peaks"))

    # a user in every hour of two days of three: most groups touched, so every group is computed again from the
    # whole source and every view row replaced (the untouched groups' too, with the values they had)
    deleted, views = p.delete("events", "user_id = 'u1' AND ts < TIMESTAMP '2024-05-03 00:00:00'")
    assert deleted > 0 and {v.view: (v.outcome, v.path) for v in views}["peaks"] == ("applied", "recompute")
    assert rows(p, "SELECT * FROM peaks") == rows(p, PEAKS_TRUTH)
    assert rows(p, "SELECT * FROM daily_peaks") == rows(p, DAILY_TRUTH)
    wide = last_commit(p, "peaks")
    assert wide["engineInfo"].startswith("pipeframe") and wide["operationMetrics"]["numTargetRowsCopied"] == "0"
    assert wide["operationMetrics"]["numTargetRowsInserted"] == str(len(rows(p, PEAKS_TRUTH)))

    # an update moving rows to other hours, then new rows: the views still follow
    p.spark.sql(f"UPDATE delta.`{p.warehouse.snapshot(fresh=True).table('events').path}` "
                "SET ts = ts + INTERVAL 30 HOURS, lat = lat + 1 WHERE user_id = 'u2' AND lat % 3 = 0")
    p.refresh()
    p.append("events", [{"ts": "2024-05-09 01:00:00", "user_id": "u3", "lat": 1}])
    assert rows(p, "SELECT * FROM peaks") == rows(p, PEAKS_TRUTH)
    assert rows(p, "SELECT * FROM daily_peaks") == rows(p, DAILY_TRUTH)

    # a Spark job that runs out of execution memory (seen with two views recomputing every group of 10M rows at
    # once) is run again, not recorded as the view's error: nothing was committed
    calls, real = [], recompute.narrowed

    def first_fails(*args, **kwargs):
        calls.append(len(calls))
        if len(calls) == 1:
            raise RuntimeError("Job aborted due to stage failure: org.apache.spark.memory.SparkOutOfMemoryError: "
                               "[UNABLE_TO_ACQUIRE_MEMORY] Unable to acquire 65536 bytes of memory, got 0.")
        return real(*args, **kwargs)

    monkeypatch.setattr(recompute, "narrowed", first_fails)
    deleted, views = p.delete("events", "user_id = 'u3' AND lat > 50")
    assert deleted > 0 and {v.view: v.outcome for v in views} == {"peaks": "applied", "daily_peaks": "applied"}
    assert len(calls) == 3  # the two views, and the one whose job failed once more
    assert rows(p, "SELECT * FROM peaks") == rows(p, PEAKS_TRUTH)
    assert rows(p, "SELECT * FROM daily_peaks") == rows(p, DAILY_TRUTH)



@pytest.mark.parametrize("project", ["tops"], indirect=True)
def test_a_change_whose_removed_values_are_covered_is_absorbed_and_the_other_groups_recomputed(project, monkeypatch):
    """`tops` (max, a distinct count, a conditional min, by day), `bounds` (the same without the distinct count) and
    `daily_peaks` (max and a set over `peaks`' rows). An UPDATE that raises one user's latencies leaves every removed
    max covered by an added one and every day's users as they were: the views append the new images' states
    (`absorb`). One that lowers values below each day's max is covered by the day's current max, read from the view's
    files; one that lowers a day's max row recomputes that day alone, in the same commit as the other day's states
    (`absorb-recompute`), as does moving rows to another day (a day that loses a user and gains none). A row inserted
    and updated before one refresh is netted out of both sides of the change. A delete of values inside each day's
    extremes changes no state of `bounds`. After each, every view equals its query over the
    source. `tops`'s witnesses come from the change files by DuckDB (its plan's `Absorb.duckdb`) and give the
    verdict Spark's give; `daily_peaks`'s set (uniqExact) has no DuckDB translation: a Spark job finds them."""
    from pipeframe.engine import sparkstore, strategies, tables

    seen = []
    real = sparkstore.changed_witnesses

    def compared(spark, change, limit):
        found = real(spark, change, limit)
        if change.view.state.name != "tops":
            seen.append((change.view.state.name, found is not None, None, None))
            return found
        added, removed = tables.read_change_rows(spark, change.source.state, change.source.path, change.commits)
        if not change.settled:  # a row may be on both sides: netted
            added, removed = added.exceptAll(removed), removed.exceptAll(added)
        by_spark = []
        for sign, changed in ((-1, removed), (1, added)):
            changed.createOrReplaceTempView("__pf_witnessed")
            by_spark += [{**row, SIGN: sign} for row in
                         spark.sql(fill(change.plan.absorb.sql, "__pf_witnessed", {})).toArrow().to_pylist()]
        keys, rules = change.view.state.keys, change.plan.absorb.rules
        seen.append((change.view.state.name, found is not None,
                     None if found is None else (sorted(map(repr, strategies.uncovered(found, keys, rules))), sorted(
                         (r[SIGN], repr(strategies._key(r, keys))) for r in found)),
                     (sorted(map(repr, strategies.uncovered(by_spark, keys, rules))), sorted(
                         (r[SIGN], repr(strategies._key(r, keys))) for r in by_spark))))
        return found

    monkeypatch.setattr(sparkstore, "changed_witnesses", compared)
    extremes, real_extremes = [], sparkstore.SparkStore.extremes

    def both_ways(store, view, groups, rules):
        """The groups' current values from the view's files (pyarrow), and by the Spark job used elsewhere."""
        fast = real_extremes(store, view, groups, rules)
        with monkeypatch.context() as patched:
            patched.setattr(tables, "held_extremes", lambda *_args: None)
            by_spark = real_extremes(store, view, groups, rules)
        extremes.append((view.state.name, sorted(map(repr, fast)), sorted(map(repr, by_spark))))
        return fast

    monkeypatch.setattr(sparkstore.SparkStore, "extremes", both_ways)
    p = project
    for day in range(3):
        batch = [{"ts": (START + timedelta(days=day, hours=h, minutes=m)).isoformat(sep=" "), "user_id": f"u{h % 3}",
                  "lat": (day * 31 + h * 7 + m) % 89} for h in range(24) for m in (5, 35)]
        assert p.append("events", batch).accepted == len(batch)
    p.refresh()
    path = p.warehouse.snapshot(fresh=True).table("events").path
    views = {"tops": TOPS_TRUTH, "bounds": BOUNDS_TRUTH, "peaks": PEAKS_TRUTH, "daily_peaks": DAILY_TRUTH}

    def changed(sql: str) -> dict[str, str | None]:
        """The change made and refreshed; `tops` and `bounds` then checked (all four views at the end)."""
        p.spark.sql(sql.format(events=f"delta.`{path}`"))
        paths = {v.view: v.path for v in p.refresh()}
        for view in ("tops", "bounds"):
            assert rows(p, f"SELECT * FROM {view}") == rows(p, views[view]), (sql, view)
        return paths

    def view_rows(view: str, day: int) -> int:
        table = p.warehouse.snapshot(fresh=True).table(view).path
        return p.spark.read.format("delta").load(table).where(f"day = DATE '2024-05-0{day + 1}'").count()

    assert changed("UPDATE {events} SET lat = lat + 5 WHERE user_id = 'u1'") == {
        "peaks": "recompute", "daily_peaks": "absorb", "tops": "absorb", "bounds": "absorb"}
    assert last_commit(p, "tops")["operation"] == "WRITE"  # an append: no row of the view taken out
    # lowered, but below each day's max and above its min: the view's current values cover them
    def highest() -> list[int]:
        return [rows(p, f"SELECT max(lat) FROM events WHERE to_date(ts) = DATE '2024-05-0{d + 1}'")[0][0]
                for d in range(3)]

    paths = changed(f"UPDATE {{events}} SET lat = lat - 1 WHERE user_id = 'u2' AND lat < {min(highest()) - 1}")
    assert (paths["tops"], paths["bounds"]) == ("absorb", "absorb"), paths
    # a row inserted and changed again before the refresh is on both sides of the change feed: netted out of both
    # (its first image, above every day's max, would cover itself and stay in the views)
    p.spark.sql(f"INSERT INTO delta.`{path}` VALUES (TIMESTAMP '2024-05-02 10:10:00', 'u2', 500)")
    paths = changed("UPDATE {events} SET lat = 1 WHERE lat = 500")
    assert (paths["tops"], paths["bounds"]) == ("absorb", "absorb"), paths
    # day 0's max row lowered: that day alone recomputed (a third of the groups), the other days' lowered values
    # absorbed
    first, *others = highest()
    before = [view_rows("tops", day) for day in range(3)]
    paths = changed(f"UPDATE {{events}} SET lat = lat - 3 WHERE (to_date(ts) = DATE '2024-05-01' AND lat = {first})"
                    f" OR (to_date(ts) > DATE '2024-05-01' AND user_id = 'u2' AND lat < {min(others) - 3})")
    assert (paths["tops"], paths["bounds"]) == ("absorb-recompute", "absorb-recompute"), paths
    merge = last_commit(p, "tops")
    assert merge["operation"] == "MERGE" and merge["operationMetrics"]["numTargetRowsDeleted"] == str(before[0])
    # days 1 and 2 kept their rows, and gained the new images' states
    assert [view_rows("tops", day) > before[day] for day in (1, 2)] == [True, True]
    # rows moved to another day: day 0 lost a user and gained none, so it cannot be covered
    assert changed("UPDATE {events} SET ts = ts + INTERVAL 1 DAY WHERE user_id = 'u0' AND lat % 2 = 0")["tops"] == \
        "absorb-recompute"
    # a delete of values strictly inside each day's extremes: `bounds` keeps its states, and appends none
    held = sum(view_rows("bounds", day) for day in range(4))
    [(high,)] = rows(p, "SELECT min(top) FROM (SELECT max(lat) AS top FROM events GROUP BY to_date(ts))")
    paths = changed(f"DELETE FROM {{events}} WHERE user_id = 'u1' AND lat > 1 AND lat < {high - 1}")
    assert (paths["bounds"], paths["tops"]) == ("absorb", "recompute"), paths
    assert sum(view_rows("bounds", day) for day in range(4)) == held
    for view, truth in views.items():
        assert rows(p, f"SELECT * FROM {view}") == rows(p, truth), view
    # the current values read from the views' files equal Spark's (the views refresh in threads: some of the first
    # readings may be Spark's as well)
    assert extremes and all(fast == by_spark for _, fast, by_spark in extremes), extremes
    assert {"tops", "bounds"} <= {name for name, fast, _ in extremes if fast}, extremes
    # tops's witnesses by DuckDB each time, with the verdicts and groups of Spark's; daily_peaks's by Spark
    by_duckdb = [(fast, spark) for name, without_spark, fast, spark in seen if name == "tops" and without_spark]
    assert len(by_duckdb) == 5 and all(fast == spark for fast, spark in by_duckdb), seen
    # (daily_peaks's sixth: the delete, which `peaks` applied as a MERGE: an update to the views that read it)
    assert [without_spark for name, without_spark, _, _ in seen if name == "daily_peaks"] == [False] * 6, seen


def test_touched_keys_read_from_the_change_files_without_spark_equal_sparks(project, monkeypatch):
    """The touched groups of a recompute come from the change feed's files (delta-rs) and the plan's DuckDB query,
    without a Spark job, for every kind of change a source takes: a delete of part of a file (Delta writes change
    files), of whole files (none: the removed files' rows are the feed), an update (both images), a MERGE, and a
    range with a neutral commit (compaction) inside it. Each time the keys equal the ones Spark computes from its own
    change feed, and the view equals its query over the source."""
    from pipeframe.engine import sparkstore, tables

    p = project
    seen = []
    real = sparkstore.changed_keys

    def compared(spark, change, limit):
        found = real(spark, change, limit)
        added, removed = tables.read_change_rows(spark, change.source.state, change.source.path, change.commits)
        expected = added.unionByName(removed).selectExpr(
            *[f"{k.sql} AS `{k.name}`" for k in change.plan.group_keys]).distinct()
        types = dict(change.view.state.columns)
        mine = None if found is None else spark.createDataFrame(found).selectExpr(
            *[f"CAST(`{k.name}` AS {types[k.name]}) AS `{k.name}`" for k in change.plan.group_keys])
        seen.append((found is not None, expected.count(),
                     None if mine is None else (mine.exceptAll(expected).count(), expected.exceptAll(mine).count())))
        return found

    monkeypatch.setattr(sparkstore, "changed_keys", compared)
    for day in range(2):
        batch = [{"ts": (START + timedelta(days=day, hours=h, minutes=m)).isoformat(sep=" "), "user_id": f"u{h % 3}",
                  "lat": (day * 31 + h * 7 + m) % 89} for h in range(24) for m in (5, 35)]
        assert p.append("events", batch).accepted == len(batch)
    assert p.append("events", [{"ts": "2024-05-04 10:00:00", "user_id": "u7", "lat": 3}]).accepted == 1
    path = p.warehouse.snapshot(fresh=True).table("events").path

    p.delete("events", "ts >= TIMESTAMP '2024-05-01 03:00:00' AND ts < TIMESTAMP '2024-05-01 04:00:00'")  # part
    p.delete("events", "user_id = 'u7'")  # the whole file of its own commit
    p.spark.sql(f"UPDATE delta.`{path}` SET ts = ts + INTERVAL 2 HOURS WHERE user_id = 'u1' AND lat % 4 = 0")
    p.spark.sql(f"MERGE INTO delta.`{path}` AS t USING (SELECT TIMESTAMP '2024-05-02 07:05:00' AS ts, 'u0' AS u) AS s "
                "ON t.ts = s.ts AND t.user_id = s.u WHEN MATCHED THEN UPDATE SET lat = t.lat + 100 "
                "WHEN NOT MATCHED THEN INSERT (ts, user_id, lat) VALUES (s.ts, s.u, 1)")
    p.optimize("events")  # compaction: a neutral commit inside the range peaks applies next
    p.optimize("peaks")  # and inside daily_peaks's (whose changes it absorbs: its witnesses come from Spark)
    p.delete("events", "user_id = 'u2' AND lat > 60")
    p.refresh()
    assert rows(p, "SELECT * FROM peaks") == rows(p, PEAKS_TRUTH)
    assert rows(p, "SELECT * FROM daily_peaks") == rows(p, DAILY_TRUTH)
    assert len(seen) >= 3 and all(without_spark and counts == (0, 0) and touched > 0
                                  for without_spark, touched, counts in seen), seen
