"""A join view's partial states (compiler/partials.py) kept in a Delta table beside its source's: the source grouped
by the columns the join reads, as of the source version the view's rows agree with. A change to a joined table
then joins these rows instead of the whole source (the `join-negate` path).

The table is a cache, named by its SQL (`<source table>_partials/<hash>`), so a rebuilt view finds it again and
views of the same shape share it. It is built from the source the first time it is needed, brought forward from
the source's change feed the times after (its new rows, and its deleted rows negated), folded to one row per key
every COMPACT_AFTER catch-ups, and built again whenever its record does not fit (another source table, a history
no longer kept). It is removed with the source's table. Its writers take turns under a file lock, so it is kept
only in a local warehouse: two refreshers catching it up at once would count the same rows twice, and no Delta
transaction id tells an append that repeats another's apart. Elsewhere the view joins the source itself."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING

from pipeframe.compiler.maintenance import MaintenancePlan, Partials
from pipeframe.engine import tables
from pipeframe.engine.commits import FOLLOWED_OPS, as_followed
from pipeframe.engine.conflicts import local_folder, view_lock
from pipeframe.plan import records
from pipeframe.plan.snapshot import DeployedResource, DeployedSnapshot

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

COMPACT_AFTER = 16  # catch-ups appended before the partial rows are folded to one row per key
# Runs a SQL statement of a view's plan over the given rows (its `{table}`).
Query = Callable[[str, "DataFrame"], "DataFrame"]


def derive(view: DeployedResource, deployed: DeployedSnapshot, plan: MaintenancePlan) -> Partials | None:
    """The partial states of `view`'s source its plan names (when its query has their shape and its states can all
    be negated), where they can be kept: its source's table is in a local folder."""
    source = deployed.table(view.state.source or "")
    if source is None or not source.path or local_folder(source.path) is None:
        return None
    return plan.partials


def kept(source_path: str) -> list[str]:
    """The partial-state tables kept for a source table (local folders only)."""
    folder = local_folder(tables.partials_path(source_path))
    if folder is None or not os.path.isdir(folder):
        return []
    return sorted(os.path.join(folder, name) for name in os.listdir(folder)
                  if os.path.isdir(os.path.join(folder, name, "_delta_log")))


def current(spark: SparkSession, query: Query, warehouse_uri: str, source: DeployedResource, version: int,
            derived: Partials) -> DataFrame | None:
    """The partial states of `source` as of `version`, brought there first when the table is behind; None when
    another view with the same partial states has already brought them further."""
    tag = hashlib.sha256(derived.sql.encode()).hexdigest()[:16]
    path = f"{tables.partials_path(source.path or '')}/{tag}"
    record = records.Partials(version, source.path, tag, 0)
    with view_lock(warehouse_uri, f"{source.state.name}.partials.{tag}"):
        recorded = _record(spark, path)
        fits = recorded is not None and (recorded.source_path, recorded.sql) == (record.source_path, record.sql)
        start = recorded.source_version if fits else -1
        if start > version:
            return None
        if start < version and not (start >= 0 and _catch_up(spark, query, path, source, start, derived, record,
                                                               recorded.appended)):
            rows = query(derived.sql, tables.read_snapshot(spark, source.state, source.path or "", version))
            _write(rows, path, "overwrite", record)
        pinned = tables.latest_commit(spark, path).version
    return spark.read.format("delta").option("versionAsOf", pinned).load(path)


def _catch_up(spark: SparkSession, query: Query, path: str, source: DeployedResource, start: int, derived: Partials,
              record: records.Partials, appended: int) -> bool:
    """Bring the partial states from source version `start` to the one `record` names; False when the source
    changed in a way its change feed does not describe (or no longer keeps)."""
    # The partial states follow the source's rows as a snapshot has them: TTL deletes included.
    commits = as_followed(tables.commits_between(spark, source.path or "", start, record.source_version), True)
    if [c.version for c in commits] != list(range(start + 1, record.source_version + 1)):
        return False  # part of the history is no longer in the log (cleaned up): its changes are unknown
    if any(c.rewrites_rows() and c.operation not in FOLLOWED_OPS for c in commits):
        return False
    added, removed = tables.read_change_rows(spark, source.state, source.path or "", commits)
    negated = query(derived.negate_sql, query(derived.sql, removed))
    delta = query(derived.sql, added).unionByName(negated) if tables.adds_rows(commits) else negated
    try:
        if appended + 1 < COMPACT_AFTER:
            _write(delta, path, "append", replace(record, appended=appended + 1))
        else:  # Delta reads the version it overwrites from files the overwrite only marks removed
            rows = spark.read.format("delta").load(path)
            folded = query(derived.compact_sql, rows.unionByName(delta))
            _write(folded, path, "overwrite", replace(record, appended=0))
    except Exception as exc:
        if tables.history_gone(exc):  # vacuumed away: built again from the source
            return False
        raise
    return True


def _record(spark: SparkSession, path: str) -> records.Partials | None:
    """What the newest commit of the partial states records (None when there is no table)."""
    folder = local_folder(path)
    if folder is None or not os.path.isdir(os.path.join(folder, "_delta_log")):
        return None
    # `optimize` vacuums the table: the newest of its own commits, past VACUUM START / END
    return next((c.metadata for c in tables.history(spark, path, 10) if isinstance(c.metadata, records.Partials)),
                None)


def _write(rows: DataFrame, path: str, mode: str, record: records.Partials) -> None:
    (rows.write.format("delta").mode(mode).option("overwriteSchema", "true")
     .option("userMetadata", records.encode(record)).save(path))
