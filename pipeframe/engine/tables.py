"""Physical Delta tables: creating them, writing view states with their watermark, and reading what changed in
a source between two versions (its commit history and its change data feed)."""

from __future__ import annotations

import functools
import json
import logging
import re
import shutil
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import replace
from datetime import datetime
from typing import TYPE_CHECKING

from pipeframe.engine import deltaappend, deltalog
from pipeframe.engine.commits import Commit, Watermark, watermark_app_id, watermark_of
from pipeframe.engine.conflicts import local_folder, table_lock
from pipeframe.engine.warehouse import IO
from pipeframe.plan import records
from pipeframe.plan.state import ResourceState
from pipeframe.sqltext import first_line, quote_path, quote_string

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame, SparkSession

log = logging.getLogger("pipeframe.tables")
PARTITION_COLUMN = "__pf_partition"
_GLOB = re.compile(r"[{}\[\]*?\\%]")  # characters Hadoop reads as a glob pattern (or an escape) in a path
# How Spark says rows brought to the driver did not fit: more than spark.driver.maxResultSize, or its heap.
_TOO_BIG = re.compile(r"maxResultSize|OutOfMemoryError|Java heap space")
# A view increment of at most this many source rows has its states brought to the driver and appended by
# `deltaappend` (no Spark write job); a larger one is written by Spark's writer. An aggregating view's states are
# at most one row per group the increment touches, usually far fewer than its rows: a higher bound keeps a view
# that fell behind a busy source (200,000 rows is under two seconds of `POST /v0/events` at full speed) from
# paying a Spark write job, which would put it further behind.
DIRECT_ROWS = 200_000
DIRECT_ROWS_AGGREGATED = 1_000_000
# A change of at most this many rows has its removed and added rows broadcast where a view's query joins them: the
# change feed's relation has no size Spark can plan with, and a sort-merge join would shuffle the whole table they
# join (a view following a 1% update of a 100,000-row dimension joined with 10M rows: 4.3-6.7 s, broadcast 2.8-3.2 s).
BROADCAST_ROWS = 100_000
_CHECKPOINTING: set[str] = set()  # tables whose checkpoint a thread of `checkpoint_later` is writing
_CHECKPOINTED: dict[str, float] = {}  # table -> when (monotonic) `checkpoint_later` last started one of it
_CHECKPOINTS_GUARD = threading.Lock()
# Group commits land up to tens of times a second, so every `delta.checkpointInterval` (10) commits came due several
# times a second, and a checkpoint of a table of thousands of small files (one per group commit until `optimize`)
# is a Spark job over all of them: back to back, they took a core. At most one per table this often instead: a
# Spark reader then replays at most this many seconds of commits after the checkpoint.
CHECKPOINT_SECONDS = 10.0
IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
ViewRecord = records.ViewCommit | records.PopulateChunk | records.CompactionRestore  # made by write_states


class NeedsSpark(Exception):
    """What was asked, without a Spark session, can only be answered by Spark (a table's log this process cannot
    read exactly: on object storage, or cleaned)."""


def history(spark: SparkSession | None, path: str, limit: int | None = None) -> list[Commit]:
    """The newest `limit` commits of a table, newest first: read from the commit files of a local table's
    `_delta_log` when they can answer exactly (no Spark job), else with `DESCRIBE HISTORY` (counted in IO); without
    a session (`spark` None), NeedsSpark where the log cannot answer."""
    folder = local_folder(path)
    if folder is not None:
        commits = deltalog.history(folder, limit)
        if commits is not None:
            IO["history_log"] += 1
            return commits
    if spark is None:
        raise NeedsSpark(f"the history of {path}")
    sql = f"DESCRIBE HISTORY {quote_path(path)}" + (f" LIMIT {int(limit)}" if limit else "")
    IO["history"] += 1
    commits = []
    for row in spark.sql(sql).selectExpr("version", "timestamp", "unix_micros(timestamp) AS micros", "operation",
                                         "operationParameters", "operationMetrics", "userMetadata",
                                         "engineInfo").collect():
        commits.append(Commit(int(row["version"]), row["timestamp"], row["micros"] / 1e6, row["operation"] or "",
                              dict(row["operationParameters"] or {}), dict(row["operationMetrics"] or {}),
                              records.decode(row["userMetadata"], f"Commit {row['version']} of the table at {path}"),
                              row["engineInfo"] or ""))
    return commits


def latest_commit(spark: SparkSession | None, path: str) -> Commit:
    return history(spark, path, 1)[0]


def find_commit(spark: SparkSession, path: str, commit_id: str, within: int | None = None) -> Commit | None:
    """The newest commit whose pipeframe record has the id `commit_id`, looking further back
    while other writers' commits came after it (at most `within` commits back)."""
    limit: int | None = min(10, within or 10)
    while True:
        commits = history(spark, path, limit)
        for commit in commits:
            if getattr(commit.metadata, "commit", None) == commit_id:
                return commit
        if limit is None or len(commits) < limit or limit == within:
            return None
        limit = limit * 10 if limit < 10_000 else None
        if within is not None:
            limit = min(limit or within, within)


def commits_between(spark: SparkSession | None, path: str, after: int, upto: int) -> list[Commit]:
    """The commits with after < version <= upto, oldest first."""
    commits = [c for c in history(spark, path, upto - after + 1) if after < c.version <= upto]
    if len(commits) < upto - after:  # newer commits arrived meanwhile: read further back
        commits = [c for c in history(spark, path) if after < c.version <= upto]
    return sorted(commits, key=lambda c: c.version)


def read_watermark(spark: SparkSession | None, path: str) -> Watermark:
    """The newest watermark a view's table records (in the userMetadata of its newest state commit)."""
    limit: int | None = 20
    while True:
        commits = history(spark, path, limit)
        for commit in commits:
            if (recorded := watermark_of(commit)) is not None:
                return recorded
        if limit is None or len(commits) < limit:
            return Watermark(None)
        limit = limit * 10 if limit < 2000 else None


def initial_watermark(spark: SparkSession, path: str) -> Watermark:
    """The first watermark a view's table recorded: the source version it started from (its backfill, or
    the version at its creation with BACKFILL skip)."""
    for commit in sorted(history(spark, path), key=lambda c: c.version):
        if (recorded := watermark_of(commit)) is not None:
            return recorded
    return Watermark(None)


def too_big_for_driver(exc: BaseException) -> bool:
    """Whether a `toArrow()` failed only because the rows did not fit the driver (Spark's writer can take them)."""
    return bool(_TOO_BIG.search(str(exc)))


def read_changes(spark: SparkSession, source: ResourceState, path: str, commits: Iterable[Commit],
                 persist: bool = False) -> DataFrame:
    """The rows that `commits` added to a source, from Delta's change data feed (neutral commits skipped); for a
    local table whose commits only appended rows, read from the files they added (`deltalog.appended_files`): the
    same rows, without planning the feed. `persist` (the rows have several readers): the feed's rows are cached
    once read; the files are not, as reading local parquet again costs less than caching it
    (three views of a 100,000-row append: 0.52 s against 0.75 s, docs/benchmarks.md)."""
    commits = list(commits)
    folder = local_folder(path)
    files = deltalog.appended_files(folder, [c.version for c in commits if not c.neutral]) if folder else None
    frame = None if files is None else _appended_rows(spark, source, files)
    if frame is None:
        added = read_change_rows(spark, source, path, commits)[0]
        return added.persist() if persist else added
    return frame


# The partition column types whose logged value Spark's CAST of the string reads exactly; a column of another type
# (a timestamp's value is logged in its writer's zone, a decimal's or a float's in spellings of its own) and commits
# spread over more than MAX_PARTITIONS partitions (a frame each) are read through the change feed.
_PARTITION_TYPES = re.compile(r"(?i)(TINYINT|SMALLINT|INT|INTEGER|BIGINT|STRING|DATE|BOOLEAN)")
MAX_PARTITIONS = 64


def _appended_rows(spark: SparkSession, source: ResourceState, files: list[deltalog.AppendedFile]) -> DataFrame | None:
    """The rows of data files a local table's commits appended, as the change feed gives them. A partition column's
    value comes from the file's partition values (Delta keeps it out of the file); one the source does not have (the
    generated column of a partition key expression) is not read. None when Spark's file reader cannot give them
    alone: a path it would read as a pattern, a partition column of a type above, too many partitions."""
    if not files:
        return spark.createDataFrame([], source.schema)
    types = dict(source.columns)
    groups: dict[tuple, list[str]] = {}
    for file in files:
        if _GLOB.search(file.path):  # Spark's file reader would expand a pattern
            return None
        fixed = tuple(sorted((k, v) for k, v in file.partition_values.items() if k in types))
        if any(not _PARTITION_TYPES.fullmatch(types[k]) for k, _ in fixed):
            return None
        groups.setdefault(fixed, []).append(f"file://{file.path}")  # the local file, not the cluster's fs
    if len(groups) > MAX_PARTITIONS:
        return None
    frames = []
    for fixed, paths in groups.items():
        values = dict(fixed)
        stored = [(n, t) for n, t in source.columns if n not in values]
        if not stored:
            return None
        frame = spark.read.schema(", ".join(f"`{n}` {t}" for n, t in stored)).parquet(*paths)
        if values:
            frame = frame.selectExpr(*[
                f"CAST({'NULL' if values[n] is None else quote_string(values[n])} AS {t}) AS `{n}`" if n in values
                else f"`{n}`" for n, t in source.columns])
        frames.append(frame)
    return functools.reduce(lambda a, b: a.unionByName(b), frames)


def read_change_rows(spark: SparkSession, source: ResourceState, path: str,
                     commits: Iterable[Commit]) -> tuple[DataFrame, DataFrame]:
    """(added, removed): the rows `commits` inserted (and the new images of updated rows), and the rows they
    deleted (and the old images of updated rows), from Delta's change data feed; neutral commits skipped. Both carry
    a broadcast hint (taken where a query joins them as they are) when the commits count their rows
    (`Commit.counts_rows`) and changed at most BROADCAST_ROWS of them."""
    commits = list(commits)
    frame = _change_feed(spark, path, commits)
    columns = [f"`{name}`" for name, _ in source.columns]

    def empty() -> DataFrame:  # only when needed: an empty frame still costs the driver a schema round trip
        return spark.createDataFrame([], source.schema)

    if frame is None:
        return empty(), empty()
    removed = frame.where(f"_change_type IN {REMOVED_CHANGES}").select(*columns)
    if not adds_rows(commits):  # no second scan of the feed
        return empty(), removed
    added = frame.where("_change_type IN ('insert', 'update_postimage')").select(*columns)
    return added, removed


def read_signed_rows(spark: SparkSession, source: ResourceState, path: str, commits: Iterable[Commit]) -> DataFrame:
    """The rows of `read_change_rows` in one frame (one read of the change feed), with a column `__pf_sign`: 1 for
    an added row, -1 for a removed one."""
    from pipeframe.compiler.maintenance import SIGN

    commits = list(commits)
    frame = _change_feed(spark, path, commits)
    columns = [f"`{name}`" for name, _ in source.columns]
    if frame is None:
        return spark.createDataFrame([], f"{source.schema}, `{SIGN}` INT")
    return frame.selectExpr(*columns, f"CASE WHEN _change_type IN {REMOVED_CHANGES} THEN -1 ELSE 1 END AS `{SIGN}`")


REMOVED_CHANGES = "('delete', 'update_preimage')"


def _change_feed(spark: SparkSession, path: str, commits: list[Commit]) -> DataFrame | None:
    """The change data feed of `commits` (neutral ones skipped; None when that leaves none), with a broadcast hint
    when they changed few rows (`broadcastable`)."""
    wanted = [c.version for c in commits if not c.neutral]
    if not wanted:
        return None
    frame = (spark.read.format("delta").option("readChangeFeed", "true")
             .option("startingVersion", min(wanted)).option("endingVersion", max(wanted)).load(path))
    skipped = [c.version for c in commits if c.neutral and min(wanted) < c.version < max(wanted)]
    if skipped:
        frame = frame.where(f"_commit_version NOT IN ({', '.join(map(str, skipped))})")
    return frame.hint("broadcast") if broadcastable(commits) else frame


def broadcastable(commits: Iterable[Commit]) -> bool:
    """Whether the rows `commits` changed are few enough to broadcast where a query joins them: every commit counts
    its rows (`Commit.counts_rows`), and they changed at most BROADCAST_ROWS of them."""
    changing = [c for c in commits if c.changes_data]
    return all(c.counts_rows for c in changing) and sum(c.changed_rows for c in changing) <= BROADCAST_ROWS


def history_gone(exc: Exception) -> bool:
    """A change-feed read that failed because the files it needs were vacuumed or the log was cleaned."""
    text = str(exc)
    return any(s in text for s in ("FileNotFound", "CHANGE_DATA_FILE_NOT_FOUND", "VersionNotFound",
                                   "DELTA_FILE_NOT_FOUND", "CDC_NOT_ALLOWED"))


def adds_rows(commits: Iterable[Commit]) -> bool:
    """Whether `commits` may have added rows: the change feed of DELETEs has only removed ones (and maintenance,
    e.g. the OPTIMIZE after a TTL's delete, none)."""
    return any(c.operation != "DELETE" for c in commits if c.changes_data)


def read_snapshot(spark: SparkSession, source: ResourceState, path: str, version: int,
                  from_files: bool = False, keep: Callable[[dict], bool] | None = None) -> DataFrame:
    """A source's rows as of one version: the pinned input of a populate or rebuild.

    `from_files`: for a local table whose latest version this is, the files its log lists (`deltalog.live_files`:
    no deletion vectors, partitions or column mapping; those whose `add` action `keep` keeps) read as plain
    parquet. The first read of a version after a commit otherwise waits for Delta to rebuild the snapshot's state
    in a Spark job of its own (0.5-0.7 s here, docs/benchmarks.md)."""
    folder = local_folder(path) if from_files else None
    found = deltalog.live_files(folder) if folder is not None else None
    if found is not None and found[0] == version:
        files = _appended_rows(spark, source, [deltalog.AppendedFile(name) for name, add in found[1].items()
                                               if keep is None or keep(add)])
        if files is not None:
            return files
    frame = spark.read.format("delta").option("versionAsOf", version).load(path)
    return frame.select(*[f"`{name}`" for name, _ in source.columns])


def write_states(frame: DataFrame, state: ResourceState, path: str, *, source_version: int | None = None,
                 source_path: str | None = None, after: int | None = None, app_id: str | None = None,
                 txn_version: int | None = None, metadata: ViewRecord | None = None, direct: bool = False) -> bool:
    """Append view rows to `path` in one Delta commit; False when Delta skipped it as a replay.

    With `source_version`, the commit also records the view's watermark: the userMetadata names the source
    version and table for `read_watermark`. Where the view's writers take turns under a file lock
    (`guarded_by_lock`), that is all. Elsewhere the commit is also an idempotent write under the view's transaction
    id (txnAppId) with txnVersion = the watermark the increment started from (`after`) + 1: Delta skips the write
    when the view has recorded that number or a higher one, i.e. when another refresher already applied an
    increment from the same watermark, and refuses it as a concurrent transaction when the other commits while it
    writes. Either way two refreshers never apply one range twice. Populate chunks pass their own
    `app_id`/`txn_version` (kept everywhere: they make a chunk replayed after a crash a no-op).

    With `direct`, an increment of a view in a local folder (no transaction id; `metadata.rows`, the source rows
    it applies, at most DIRECT_ROWS, or DIRECT_ROWS_AGGREGATED with GROUP BY: a bound on its state rows, so not
    for joins) that `deltaappend` can write has its states brought to the driver as Arrow and appended by it: one
    Spark job instead of a write job and Delta's commit. States the driver cannot take go to Spark's writer."""
    info, app_id, txn_version = _commit_info(state, path, source_version, source_path, after, app_id, txn_version,
                                             metadata)
    typed = frame.selectExpr(*_typed(state))
    folder = local_folder(path)
    bound = DIRECT_ROWS_AGGREGATED if state.aggregated else DIRECT_ROWS
    if direct and app_id is None and folder is not None and \
            _rows(metadata, bound + 1) <= bound and deltaappend.writable(folder):
        spark = frame.sparkSession
        try:
            rows = typed.toArrow()
        except Exception as exc:
            if not too_big_for_driver(exc):
                raise
            log.warning("states of %s not brought to the driver (%s): written by Spark", path, first_line(exc))
            rows = None
        if rows is not None:
            if _append_directly(spark, path, folder, rows, info):
                return True
            typed = spark.createDataFrame(rows, schema=typed.schema)  # Spark's writer, without computing them again
    writer = typed.write.format("delta").mode("append")
    if app_id is not None and txn_version is not None:
        writer = writer.option("txnAppId", app_id).option("txnVersion", txn_version)
    writer.option("userMetadata", records.encode(info)).save(path)
    return app_id is None or find_commit(frame.sparkSession, path, info.commit, within=50) is not None


def commit_watermark(spark: SparkSession, state: ResourceState, path: str, *, source_version: int,
                     source_path: str | None, metadata: ViewRecord) -> bool:
    """A view commit of no rows that records the watermark `source_version`, made without a Spark job where
    `deltaappend` can write the table (a local view, whose writers take turns under the file lock): a view deployed
    over a source without rows. False when it cannot be: nothing was written, the caller writes with Spark."""
    info, app_id, _ = _commit_info(state, path, source_version, source_path, None, None, None, metadata)
    folder = local_folder(path)
    rows = deltaappend.no_rows(folder) if app_id is None and folder is not None else None
    return rows is not None and _append_directly(spark, path, folder, rows, info)


def _append_directly(spark: SparkSession, path: str, folder: str, rows: pa.Table, info: ViewRecord) -> bool:
    """`rows` appended to the view table in local `folder` by `deltaappend` with the commit record `info`, under
    the table's lock: False when it leaves the append to Spark (nothing written)."""
    with table_lock(path):
        return deltaappend.append(folder, rows, records.encode(info), checkpoint_later(spark, path),
                                  spark.conf.get("spark.sql.session.timeZone")) is not None


def replace_groups(spark: SparkSession, state: ResourceState, path: str, keys: tuple[str, ...], doomed: DataFrame,
                   rows: DataFrame, *, source_version: int, source_path: str | None, after: int | None = None,
                   app_id: str | None = None, txn_version: int | None = None,
                   metadata: ViewRecord | None = None, direct: bool = False,
                   touched_rows: pa.Table | None = None) -> bool:
    """In one Delta commit (a MERGE), delete the view rows whose `keys` equal (NULL-safe) a row of `doomed`
    (every row when `keys` is empty) and insert `rows`; the commit records the view's watermark, idempotently, as
    `write_states` does. False when Delta skipped it as a replay.

    With `direct` (few groups: the caller knows both frames are small), a view in a local folder whose writers take
    turns under its file lock has both brought to the driver and the change committed by `deltaappend.replace_keys`
    without a Spark job; where it cannot, Spark's MERGE takes them from the driver, without computing them again.
    `touched_rows`: the rows `doomed` was made of, where the driver holds them (not brought back by a Spark job).

    The MERGE runs in a session of its own: Delta takes the transaction id and userMetadata of SQL commands
    from session settings, which must not reach the writes other threads make meanwhile."""
    from pipeframe.engine.session import child_session, release_child

    info, app_id, txn_version = _commit_info(state, path, source_version, source_path, after, app_id, txn_version,
                                             metadata)
    types = dict(state.columns)
    folder = local_folder(path)
    if direct and keys and app_id is None and folder is not None and deltaappend.writable(folder):
        touched = touched_rows.select(list(keys)) if touched_rows is not None else \
            doomed.distinct().selectExpr(*[f"CAST(`{k}` AS {types[k]}) AS `{k}`" for k in keys]).toArrow()
        replacement = rows.selectExpr(*_typed(state)).toArrow()
        with table_lock(path):
            if deltaappend.replace_keys(folder, list(keys), touched, replacement, records.encode(info),
                                        checkpoint_later(spark, path)) is not None:
                return True
        doomed, rows = spark.createDataFrame(touched), spark.createDataFrame(replacement)
    dead = doomed.distinct().selectExpr(*[f"CAST(`{n}` AS {t}) AS `{n}`" if n in keys else f"CAST(NULL AS {t}) AS `{n}`"
                                          for n, t in state.columns], "'d' AS __pf_op")
    source = rows.selectExpr(*_typed(state), "'i' AS __pf_op").unionByName(dead)
    relation = f"__pf_groups_{uuid.uuid4().hex[:12]}"
    source.createOrReplaceGlobalTempView(relation)
    names = [f"`{n}`" for n in types]
    match = " AND ".join(["s.__pf_op = 'd'", *(f"t.`{k}` <=> s.`{k}`" for k in keys)])
    child = child_session(spark)
    try:
        if app_id is not None:
            child.conf.set("spark.databricks.delta.write.txnAppId", app_id)
            child.conf.set("spark.databricks.delta.write.txnVersion", str(txn_version))
        child.conf.set("spark.databricks.delta.commitInfo.userMetadata", records.encode(info))
        child.sql(f"MERGE INTO {quote_path(path)} AS t USING global_temp.{relation} AS s ON {match} "
                  "WHEN MATCHED THEN DELETE WHEN NOT MATCHED AND s.__pf_op = 'i' THEN INSERT "
                  f"({', '.join(names)}) VALUES ({', '.join('s.' + n for n in names)})")
    finally:
        spark.catalog.dropGlobalTempView(relation)
        release_child(spark, child)
    return app_id is None or find_commit(spark, path, info.commit, within=50) is not None


def held_keys(path: str, keys: tuple[str, ...]) -> pa.Table | None:
    """The distinct values of `keys` in the local table at `path`, read from its files without a Spark job (None
    elsewhere, or when its log cannot list them exactly)."""
    folder = local_folder(path)
    return deltaappend.key_rows(folder, list(keys)) if folder is not None else None


def held_extremes(path: str, keys: Sequence[str], wanted: pa.Table, rules: Sequence[tuple[str, str]]) -> list[dict] | None:
    """For the groups of the local view at `path` whose `keys` equal a row of `wanted`: their keys (as `wanted`
    types them) and each `rules` column's largest ("max") or smallest ("min") value, read from its files without a
    Spark job (`deltaappend.group_extremes`); None elsewhere, or where that cannot answer as Spark would."""
    folder = local_folder(path)
    return deltaappend.group_extremes(folder, list(keys), wanted, list(rules)) if folder is not None else None


def _rows(record: ViewRecord | None, unknown: int) -> int:
    """The source rows a view commit applies (`unknown` when it does not say)."""
    rows = record.rows if isinstance(record, records.ViewCommit) else None
    return unknown if rows is None else rows


def _typed(state: ResourceState) -> list[str]:
    return [f"CAST(`{name}` AS {type_}) AS `{name}`" for name, type_ in state.columns]


def holds_no_rows(path: str, version: int | None = None) -> bool:
    """Whether the table at `path` holds no rows at `version` (None: its latest), known from its local log without
    a Spark job (no file at all; False where the log cannot say)."""
    folder = local_folder(path)
    count = deltalog.file_count(folder) if folder is not None else None
    return count is not None and count[1] == 0 and version in (None, count[0])


def compacted_already(path: str, clustered: bool) -> bool:
    """Whether an OPTIMIZE of the table at `path` would find nothing to do, known from its local log without a
    Spark job: no file added since an OPTIMIZE compacted it, or (not clustered) at most one data file. False where
    the log cannot say (a table elsewhere than in a local folder)."""
    folder = local_folder(path)
    if folder is None:
        return False
    if deltalog.added_since_optimize(folder) is False:
        return True
    count = None if clustered else deltalog.file_count(folder)
    return count is not None and count[1] <= 1


# Commit times come from file times and writers' clocks: a table is taken as younger than the retention only when
# it is so by a margin.
_CLOCK_MARGIN_MS = 60_000


def nothing_to_vacuum(path: str, retention_hours: float) -> bool:
    """Whether `VACUUM ... LITE RETAIN retention_hours HOURS` would delete nothing at `path`, known from its local
    log: no commit of the table is older than the retention (Delta then finds no commit outside the retention window
    and returns at once, after two empty VACUUM START/END commits). False where the log cannot say."""
    folder = local_folder(path)
    oldest = deltalog.oldest_commit_ms(folder) if folder is not None else None
    return oldest is not None and oldest - _CLOCK_MARGIN_MS > time.time() * 1000 - retention_hours * 3_600_000


def nothing_before(path: str, column: str, bound: datetime) -> bool:
    """Whether no row of the table at `path` holds a `column` (a TIMESTAMP) earlier than `bound` (aware), known from
    the file statistics of its local log (a minimum there is never above the file's least value: Delta rounds it
    down to the millisecond). False where the log cannot say: a table elsewhere, a file without the column's bounds
    and with rows that are not NULL in it."""
    folder = local_folder(path)
    found = deltalog.live_files(folder) if folder is not None else None
    if found is None:
        return False
    for add in found[1].values():
        stats = json.loads(add.get("stats") or "{}")
        rows = stats.get("numRecords")
        if rows == 0 or (rows is not None and stats.get("nullCount", {}).get(column) == rows):
            continue  # no row, or only NULLs: `column < bound` holds for none
        least = stats.get("minValues", {}).get(column)
        try:
            low = datetime.fromisoformat(least) if isinstance(least, str) else None
        except ValueError:
            low = None
        if low is None or low.tzinfo is None or low < bound:
            return False
    return True


def guarded_by_lock(path: str) -> bool:
    """Whether the writers of the view table at `path` take turns under `conflicts.view_lock`'s file lock: a table
    in a local folder. There the lock keeps a view's increments apart, and its watermark commits carry no Delta
    transaction id: Delta 4.4 answers "which transaction versions does this table hold" by replaying the table's
    whole log in three Spark jobs, which was half the cost of a small refresh (docs/benchmarks.md). Elsewhere
    (object storage, no file lock) the transaction id is what keeps two refreshers from applying one range twice."""
    return local_folder(path) is not None


def _commit_info(state: ResourceState, path: str, source_version: int | None, source_path: str | None,
                 after: int | None, app_id: str | None, txn_version: int | None,
                 metadata: ViewRecord | None) -> tuple[ViewRecord, str | None, int | None]:
    """A view commit's pipeframe record (`metadata` with a unique commit id and the watermark), and its
    idempotent transaction: a watermark commit's (the view's transaction id, or the one given) where no file lock
    guards the table; a populate chunk's (given) always."""
    info = replace(metadata or records.ViewCommit(state.name), commit=uuid.uuid4().hex)
    if source_version is not None:
        if not isinstance(info, records.ViewCommit):
            raise TypeError(f"a watermark is recorded by a view commit, not {type(info).__name__}")
        info = replace(info, source=state.source, source_version=source_version, source_path=source_path)
        if guarded_by_lock(path):
            app_id = txn_version = None
        elif app_id is None:
            app_id, txn_version = watermark_app_id(state.name), (after + 1 if after is not None else source_version)
    return info, app_id, txn_version


def create_table(spark: SparkSession, path: str, state: ResourceState, direct: bool = False) -> None:
    """Create an empty Delta table for a datasource or view target, with its layout and properties.

    Every table keeps a change data feed: that is how views read exactly the rows a commit added. With `direct`
    (`creates_directly`), a table in a local folder is written by `deltaappend.create` without a Spark job, unless
    its layout or types are ones it leaves to Spark (a partition key expression, whose type Spark's analysis gives;
    VARCHAR)."""
    columns = [f"`{name}` {type_}" for name, type_ in state.columns]
    properties = {"pipeframe.resource": state.name, "pipeframe.kind": state.kind,
                  "delta.enableChangeDataFeed": "true"}
    if state.ttl:
        properties["pipeframe.ttl"] = state.ttl
    if state.partition_key and state.sorting_key:
        properties["pipeframe.zorder"] = ", ".join(state.sorting_key)  # used by OPTIMIZE ... ZORDER BY
    key = (state.partition_key or "").strip()
    plain_key = key.strip("`") if IDENTIFIER.fullmatch(key.strip("`")) and key.strip("`") in dict(state.columns) \
        else None
    folder = local_folder(path)
    if direct and folder is not None and (plain_key or not key) and \
            deltaappend.create(folder, list(state.columns), description=state.description, properties=properties,
                               partition_by=plain_key, cluster_by=() if key else state.sorting_key):
        return
    layout = ""
    if state.partition_key:
        if plain_key:
            layout = f" PARTITIONED BY (`{plain_key}`)"
        else:
            ddl = ", ".join(columns)
            part_type = spark.createDataFrame([], ddl).selectExpr(f"{key} AS p").schema[0].dataType
            columns.append(f"`{PARTITION_COLUMN}` {part_type.simpleString()} GENERATED ALWAYS AS ({key})")
            layout = f" PARTITIONED BY (`{PARTITION_COLUMN}`)"
    elif state.sorting_key:
        layout = f" CLUSTER BY ({', '.join(f'`{k}`' for k in state.sorting_key)})"
    props = ", ".join(f"'{k}' = {quote_string(v)}" for k, v in properties.items())
    spark.sql(f"CREATE TABLE {quote_path(path)} ({', '.join(columns)}) USING DELTA{layout} "
              f"COMMENT {quote_string(state.description)} TBLPROPERTIES ({props})")


def creates_directly(spark: SparkSession, shared_disk: bool) -> bool:
    """Whether `create_table` may write tables without a Spark job (`direct`): where the warehouse is on this
    machine's disk and Spark's (`Warehouse.shares_disk`), and the session sets nothing Delta gives new tables
    (`spark.databricks.delta.properties.defaults.*`, column mapping, table features: only Spark's CREATE TABLE makes
    the table it would then). Asked once per deploy or rebuild: listing the settings takes ~50 ms."""
    if not shared_disk:
        return False
    try:
        settings = spark.conf.getAll
    except Exception:  # noqa: BLE001 — a session that cannot list them: Spark creates the tables
        return False
    return not any(k.startswith(("spark.databricks.delta.properties.defaults.", "spark.databricks.delta.columnMapping",
                                 "spark.databricks.delta.protocol.", "spark.databricks.delta.tableFeatures"))
                   for k in settings)


def partials_path(path: str) -> str:
    """Where the partial states of a table read by join views are kept (engine/partials.py): beside the table."""
    return f"{path.rstrip('/')}_partials"


def remove_path(spark: SparkSession, path: str) -> None:
    """Delete a table's folder (local paths directly, any other URI through Hadoop's FileSystem), and the partial
    states kept beside it (only ever in local folders)."""
    folder = local_folder(path)
    if folder is not None:
        shutil.rmtree(folder, ignore_errors=True)
        shutil.rmtree(partials_path(folder), ignore_errors=True)
        return
    from pipeframe.engine.session import is_connect
    from pipeframe.errors import PipeframeError

    if is_connect(spark):  # no Hadoop FileSystem in a Connect client, and no SQL that deletes a folder
        try:
            spark.sql(f"DESCRIBE HISTORY {quote_path(path)} LIMIT 1").collect()
        except Exception:  # noqa: BLE001 — no table there: nothing to remove
            return
        raise PipeframeError("PF510", f"Spark Connect cannot delete the folder {path}: a Connect client has no "
                             "access to the warehouse's file system (Spark Connect lacks Hadoop's FileSystem API).",
                             "The folder is no longer used by pipeframe: remove it with your storage's tool (e.g. "
                             "`aws s3 rm --recursive`), or run this command with embedded Spark (no spark.remote).")
    jvm = spark.sparkContext._jvm  # type: ignore[attr-defined]
    hadoop_path = jvm.org.apache.hadoop.fs.Path(path)
    fs = hadoop_path.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration())  # type: ignore[attr-defined]
    if fs.exists(hadoop_path):
        fs.delete(hadoop_path, True)


def checkpoint(spark: SparkSession, path: str) -> bool:
    """Write a checkpoint of the table's latest version (Delta's writer does so every `delta.checkpointInterval`
    commits; commits made by `deltaappend` ask for it here): by delta-rs for a local table it can checkpoint
    (`deltaappend.checkpoint`, milliseconds), else with Delta's own code (a Spark job). False on Spark Connect for a
    table delta-rs does not take: its client has no handle on Delta's JVM objects."""
    from pipeframe.engine import deltaappend
    from pipeframe.engine.session import is_connect

    folder = local_folder(path)
    if folder is not None and deltaappend.checkpoint(folder):
        return True
    if is_connect(spark):
        return False
    jvm = spark.sparkContext._jvm  # type: ignore[attr-defined]
    session = spark._jsparkSession  # type: ignore[attr-defined]
    # Delta reads the JVM thread's active session while it rebuilds the snapshot it checkpoints. A Python thread of
    # its own (`checkpoint_later`) runs on a JVM thread that may have none: every checkpoint then failed inside
    # Delta, which logs and swallows it, and the log grew by one JSON commit per group commit with no checkpoint.
    getattr(jvm, "org.apache.spark.sql.classic.SparkSession").setActiveSession(session)
    delta_log = jvm.org.apache.spark.sql.delta.DeltaLog.forTable(session, path)
    none = jvm.scala.Option.apply(None)
    delta_log.checkpoint(delta_log.update(False, none, none), none)
    return True


def checkpoint_later(spark: SparkSession, path: str) -> Callable[[int], None] | None:
    """How a commit made by `deltaappend` on a checkpoint version has its checkpoint written: by Delta
    (`checkpoint`), in a thread of its own (one at a time per table), so the commit is answered meanwhile; a process
    that exits waits for it (not a daemon thread). None on Spark Connect: Spark's writer then makes those commits,
    and their checkpoints."""
    from pipeframe.engine.session import is_connect

    if is_connect(spark):
        return None

    def run() -> None:
        try:
            checkpoint(spark, path)
        except Exception as exc:  # noqa: BLE001 — the next checkpoint version tries again; readers replay more
            log.warning("could not write a checkpoint of %s: %s", path, first_line(exc))
        finally:
            with _CHECKPOINTS_GUARD:
                _CHECKPOINTING.discard(path)

    def later(_version: int) -> None:
        with _CHECKPOINTS_GUARD:
            now = time.monotonic()
            if path in _CHECKPOINTING or now - _CHECKPOINTED.get(path, -CHECKPOINT_SECONDS) < CHECKPOINT_SECONDS:
                return
            _CHECKPOINTING.add(path)
            _CHECKPOINTED[path] = now
        try:
            threading.Thread(target=run, daemon=False, name="pipeframe-checkpoint").start()
        except RuntimeError:  # no new thread (the interpreter is shutting down): the next checkpoint version asks
            with _CHECKPOINTS_GUARD:
                _CHECKPOINTING.discard(path)
            raise

    return later
