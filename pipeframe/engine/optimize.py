"""`pipeframe optimize`: view states compacted to one row per key, rows past a table's TTL deleted (`apply_ttl`, also
run by deploy), files compacted (Z-ordered by the sorting key where a partition key is declared) and vacuumed."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from pipeframe.engine import partials, tables
from pipeframe.engine.commits import METADATA_OPS
from pipeframe.engine.conflicts import table_lock
from pipeframe.plan import records
from pipeframe.sqltext import quote_path

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from pipeframe.plan.snapshot import DeployedResource


def optimize(spark: SparkSession, targets: list[DeployedResource], retention_hours: float = 168.0,
             on_step: Callable[[str], None] = lambda _step: None) -> list[str]:
    """Compact view states to one row per key, delete rows past their TTL, compact files and vacuum; the names of
    the tables done.

    Each step that the table's log shows has nothing to do is left out (a local table's log says so without a
    Spark job; an OPTIMIZE and a VACUUM that find nothing cost ~20 Spark jobs and two empty commits a table)."""
    done = []
    for resource in targets:
        path, state = resource.path or "", resource.state
        if state.kind == "view" and state.compact_sql and not _compacted(spark, path):
            _compact(spark, resource, on_step)
        apply_ttl(spark, resource)
        # Delta refuses to Z-order by a partition column (a plain-column ENGINE_PARTITION_KEY, e.g. `day`).
        partition = (state.partition_key or "").strip().strip("`")
        zkeys = [k for k in state.sorting_key if k.strip("`") != partition]
        zorder = ", ".join(f"`{k}`" for k in zkeys) if state.partition_key and zkeys else ""
        if not tables.compacted_already(path, clustered=bool(state.sorting_key)):
            with table_lock(path):
                spark.sql(f"OPTIMIZE {quote_path(path)}" + (f" ZORDER BY ({zorder})" if zorder else ""))
        # join views' partial states of this source (overwritten when folded) are vacuumed with it
        for table in (path, *partials.kept(path)):
            if not tables.nothing_to_vacuum(table, retention_hours):
                _vacuum(spark, table, retention_hours)
        done.append(state.name)
    return done


def _compacted(spark: SparkSession, path: str) -> bool:
    """Whether the newest commit of the view's table that changed its rows is a compaction: it holds one row per
    key already (maintenance commits after it, OPTIMIZE and VACUUM, change no rows)."""
    for commit in tables.history(spark, path, 20):
        if commit.operation not in METADATA_OPS or commit.metadata is not None:
            return isinstance(commit.metadata, records.Compaction)
    return False


def _compact(spark: SparkSession, view: DeployedResource, on_step: Callable[[str], None]) -> None:
    """Rewrite the state rows as one row per key, in one overwrite commit tagged as compaction.

    The overwrite is computed from version V of the table but replaces the files of whatever version is
    current when its transaction starts; state rows committed in between (a concurrent refresh) would be
    dropped, so they are appended again right after, from the change feed. The view's watermark (a Delta
    txn, and the userMetadata of its state commits) is untouched."""
    path = view.path or ""
    version = tables.latest_commit(spark, path).version
    compacted = spark.sql((view.state.compact_sql or "").replace(
        "{table}", f"{quote_path(path)} VERSION AS OF {version}"))
    columns = [f"CAST(`{n}` AS {t}) AS `{n}`" for n, t in view.state.columns]
    with table_lock(path):
        (compacted.selectExpr(*columns).write.format("delta").mode("overwrite")
         .option("userMetadata", records.encode(records.Compaction(view.state.name, version)))
         .save(path))
    latest = tables.latest_commit(spark, path).version
    commits = tables.commits_between(spark, path, version, latest)
    mine = next((c for c in commits if isinstance(c.metadata, records.Compaction) and
                 c.metadata.compacted == version), None)
    if mine is None:  # Delta made no commit: the table was empty, nothing was rewritten
        return
    missed = [c for c in commits if c.version < mine.version and c.changes_data]
    if missed:
        rows = tables.read_changes(spark, view.state, path, missed)
        tables.write_states(rows, view.state, path, metadata=records.CompactionRestore(view.state.name, version))
    on_step(f"compacted {view.state.name}")

def _vacuum(spark: SparkSession, path: str, retention_hours: float) -> None:
    check = "spark.databricks.delta.retentionDurationCheck.enabled"
    previous = spark.conf.get(check, "true")
    if retention_hours < 168:
        spark.conf.set(check, "false")
    try:
        # LITE finds removable files from the log instead of listing the table folder (seconds, not
        # tens of seconds); when the log no longer covers the last vacuum it refuses, and a full one runs.
        try:
            spark.sql(f"VACUUM {quote_path(path)} LITE RETAIN {float(retention_hours)} HOURS")
        except Exception:  # noqa: BLE001
            spark.sql(f"VACUUM {quote_path(path)} RETAIN {float(retention_hours)} HOURS")
    finally:
        spark.conf.set(check, previous or "true")


def apply_ttl(spark: SparkSession, resource: DeployedResource) -> None:
    """Delete the rows past a table's ENGINE_TTL, tagged as retention so views downstream ignore it (unless they
    follow it: FOLLOW_TTL true, `commits.as_followed`)."""
    if resource.path and resource.state.ttl and not tables.holds_no_rows(resource.path):  # no rows: none to delete
        with table_lock(resource.path), _SessionMetadata(spark, records.encode(records.Retention())):
            spark.sql(f"DELETE FROM {quote_path(resource.path)} WHERE ({resource.state.ttl}) < current_timestamp()")


class _SessionMetadata:
    """Tags the commits of SQL statements (DELETE, ...) with pipeframe's userMetadata while it is entered."""

    KEY = "spark.databricks.delta.commitInfo.userMetadata"

    def __init__(self, spark: SparkSession, value: str) -> None:
        self.spark, self.value = spark, value

    def __enter__(self) -> None:
        self.spark.conf.set(self.KEY, self.value)

    def __exit__(self, *exc: object) -> None:
        self.spark.conf.unset(self.KEY)
