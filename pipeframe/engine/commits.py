"""One entry of a Delta table's history as views see it (`Commit`): what the operation did to the table's rows.
Made from `DESCRIBE HISTORY` (`tables.history`) and from the log read in pure Python (`deltalog.history`); and
what a view's commit records of the source it has applied (`Watermark`)."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import datetime

from pipeframe.plan import records

# Maintenance commits that leave every view's merged values as they were: compaction rewrites state rows into
# fewer rows, and retention (TTL) deletes old rows on purpose. Views downstream skip these commits.
NEUTRAL_RECORDS = (records.Compaction, records.CompactionRestore, records.Retention)
# Operations that never add, change or remove rows.
METADATA_OPS = {"OPTIMIZE", "VACUUM START", "VACUUM END", "SET TBLPROPERTIES", "UNSET TBLPROPERTIES", "ADD COLUMNS",
                "CHANGE COLUMN", "CLUSTER BY", "UPGRADE PROTOCOL", "COMPUTE STATS", "CREATE TABLE"}
# Operations that rewrite or remove rows in place; any other operation only adds rows or changes metadata.
REWRITING_OPS = {"WRITE": None, "DELETE": ("numDeletedRows",), "UPDATE": ("numUpdatedRows",),
                 "MERGE": ("numTargetRowsUpdated", "numTargetRowsDeleted"), "TRUNCATE": (), "RESTORE": (),
                 "REPLACE TABLE": (), "REPLACE TABLE AS SELECT": (), "CREATE OR REPLACE TABLE": (),
                 "CREATE OR REPLACE TABLE AS SELECT": ()}
# Rewrites a view follows from the change feed (retracting removed rows, adding new ones); after any other
# rewrite (RESTORE, REPLACE TABLE) its views are stale until rebuilt.
FOLLOWED_OPS = {"WRITE", "DELETE", "UPDATE", "MERGE", "TRUNCATE"}
DML_ROW_METRICS = ("numDeletedRows", "numUpdatedRows", "numTargetRowsInserted", "numTargetRowsUpdated",
                   "numTargetRowsDeleted")


@dataclass(frozen=True)
class Commit:
    """One entry of a Delta table's history, as far as views care."""

    version: int
    timestamp: datetime
    epoch: float  # the commit time in seconds since 1970 (UTC), whatever the session's time zone
    operation: str
    parameters: dict = field(default_factory=dict)
    metrics: dict = field(default_factory=dict)
    metadata: records.CommitRecord | None = None  # the `pipeframe` record of the commit's userMetadata
    engine: str = ""  # the writer's engineInfo: Spark's Delta writer, or pyarrow's append (`deltaappend.ENGINE`)

    @property
    def neutral(self) -> bool:
        return isinstance(self.metadata, NEUTRAL_RECORDS)

    @property
    def changes_data(self) -> bool:
        """False for commits a view has nothing to do with: maintenance, metadata, and neutral commits."""
        return not self.neutral and self.operation not in METADATA_OPS

    def rewrites_rows(self) -> bool:
        """True when this commit updated or deleted rows in place (a view over the table can no longer
        follow it by adding states)."""
        if self.neutral or self.operation not in REWRITING_OPS:
            return False
        if self.operation == "WRITE":
            return str(self.parameters.get("mode", "")).strip('"').lower() == "overwrite"
        counters = REWRITING_OPS[self.operation]
        if not counters:
            return True
        values = [self.metrics.get(c) for c in counters]
        return any(v is None or str(v) != "0" for v in values)

    @property
    def counts_rows(self) -> bool:
        """Whether `changed_rows` counts every row the commit changed: an append, or a DELETE, UPDATE or MERGE that
        recorded its counters (an overwrite does not count the rows it removes)."""
        if self.operation == "WRITE":
            return not self.rewrites_rows() and "numOutputRows" in self.metrics
        counters = REWRITING_OPS.get(self.operation) if self.operation in ("DELETE", "UPDATE", "MERGE") else None
        return bool(counters) and all(self.metrics.get(c) is not None for c in counters)

    @property
    def added_rows(self) -> int:
        """Rows a write added: its output rows less the rows it only copied (a replaceWhere rewrites files)."""
        return int(self.metrics.get("numOutputRows") or 0) - int(self.metrics.get("numCopiedRows") or 0)

    @property
    def changed_rows(self) -> int:
        """Rows this commit added, changed or removed (0 for commits views skip)."""
        if not self.changes_data:
            return 0
        if self.operation in ("DELETE", "UPDATE", "MERGE"):
            return sum(int(self.metrics.get(k) or 0) for k in DML_ROW_METRICS)
        return self.added_rows + int(self.metrics.get("numDeletedRows") or 0)

    def describe(self) -> str:
        return f"{self.operation} at version {self.version} ({self.timestamp:%Y-%m-%d %H:%M:%S})"


def watermark_app_id(view: str) -> str:
    """Delta idempotent-write id under which a view records the last source version it applied."""
    return f"pipeframe:{view}"


@dataclass(frozen=True)
class Watermark:
    """What a view has applied: the last source version, and which physical source table it came from."""

    source_version: int | None
    source_path: str | None = None
    commit: Commit | None = None  # the view's commit that recorded it

    @property
    def joined(self) -> dict[str, int]:
        """The version of each joined table the view's rows agree with (a table not named: not known yet)."""
        recorded = self.commit.metadata if self.commit else None
        return dict(recorded.joined) if isinstance(recorded, records.ViewCommit) else {}


def watermark_of(commit: Commit) -> Watermark | None:
    """The watermark a view's commit records, if it records one."""
    record = commit.metadata
    if isinstance(record, records.ViewCommit) and record.source_version is not None:
        return Watermark(record.source_version, record.source_path, commit)
    return None


def as_followed(commits: list[Commit], follow_ttl: bool) -> list[Commit]:
    """Commits as a view reads them: a view with FOLLOW_TTL true takes its tables' ENGINE_TTL deletes (tagged
    `"op": "ttl"`, neutral to every other view) as the deletes they are."""
    if not follow_ttl:
        return commits
    return [replace(c, metadata=None) if isinstance(c.metadata, records.Retention) else c for c in commits]
