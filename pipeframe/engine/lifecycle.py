"""View lifecycle: each view's status (active, backfilling, rebuilding, paused, stale, error) with its lag,
size and backfill progress, and the transitions pause, resume and recover."""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from datetime import datetime

from pipeframe.engine import tables
from pipeframe.engine.materialize import BackfillProgress, Materializer, ViewRefresh
from pipeframe.engine.warehouse import DeployedResource, ViewRecord, quote_path

STATUSES = ("active", "backfilling", "rebuilding", "paused", "stale", "error")


@dataclass(frozen=True)
class ViewStatus:
    """What `pipeframe status` shows for one view."""

    name: str
    pipe: str | None
    status: str
    reason: str | None  # why it is stale, or the last error
    table_version: int  # the physical version (tables/<name>/v<N>) that serves reads
    rows: int  # state rows stored (several per key until `optimize` compacts them)
    files: int
    bytes: int
    source: str | None
    source_version: int | None
    applied_version: int | None
    lag_versions: int | None
    lag_seconds: float | None  # how long the oldest source commit not yet applied has waited
    last_refresh: datetime | None
    permanent: bool = False
    backfill: BackfillProgress | None = None

    def to_json(self) -> dict:
        return {"name": self.name, "pipe": self.pipe, "status": self.status, "reason": self.reason,
                "table_version": self.table_version, "rows": self.rows, "files": self.files, "bytes": self.bytes,
                "source": self.source, "source_version": self.source_version,
                "applied_version": self.applied_version, "lag_versions": self.lag_versions,
                "lag_seconds": None if self.lag_seconds is None else round(self.lag_seconds, 1),
                "last_refresh": self.last_refresh.isoformat() if self.last_refresh else None,
                "permanent": self.permanent,
                "backfill": self.backfill.to_json() if self.backfill else None}


def effective_status(record: ViewRecord) -> str:
    if record.error:
        return "error"
    if record.backfill:
        return str(record.backfill.get("mode") or "backfilling")
    if record.stale_reason:
        return "stale"
    return "paused" if record.paused else "active"


class Lifecycle:
    """Reads and changes the lifecycle of the deployed views of one warehouse."""

    def __init__(self, materializer: Materializer) -> None:
        self.materializer = materializer
        self.spark = materializer.spark
        self.warehouse = materializer.warehouse

    def status(self, name: str | None = None) -> list[ViewStatus]:
        views = [self.materializer.resolve(name)] if name else self.materializer.views()
        records = self.warehouse.view_records()
        return [self._status(v, records.get(v.state.name) or ViewRecord(v.state.name)) for v in views]

    def _status(self, view: DeployedResource, record: ViewRecord) -> ViewStatus:
        path = view.path or ""
        detail = self.spark.sql(f"DESCRIBE DETAIL {quote_path(path)}").first()
        rows = int(self.spark.sql(f"SELECT count(*) FROM {quote_path(path)}").first()[0])
        watermark = tables.read_watermark(self.spark, path)
        source = self.materializer.deployed.get(f"datasource:{view.state.source}")
        source_version = lag = lag_seconds = None
        if source is not None and source.path:
            latest = tables.latest_commit(self.spark, source.path)
            source_version = latest.version
            if watermark.source_version is not None:
                lag = max(0, latest.version - watermark.source_version)
                lag_seconds = 0.0
                if lag:
                    pending = tables.commits_between(self.spark, source.path, watermark.source_version,
                                                     latest.version)
                    waiting = [c.epoch for c in pending if not c.neutral]
                    lag_seconds = max(0.0, time.time() - min(waiting)) if waiting else 0.0
        reason = record.error or record.stale_reason
        backfill = BackfillProgress.from_run(view.state.name, record.backfill) if record.backfill else None
        return ViewStatus(view.state.name, view.state.view_pipe, effective_status(record), reason, view.version,
                          rows, int(detail["numFiles"] or 0), int(detail["sizeInBytes"] or 0), view.state.source,
                          source_version, watermark.source_version, lag, lag_seconds,
                          watermark.commit.timestamp if watermark.commit else None, record.permanent, backfill)

    def pause(self, name: str, permanent: bool = False) -> ViewRecord:
        """Stop applying new source rows to a view; it keeps its watermark and catches up on resume."""
        view = self.materializer.resolve(name)
        record = replace(self.warehouse.view_record(view.state.name), paused=True, permanent=permanent)
        self.warehouse.save_view_record(record)
        return record

    def resume(self, name: str) -> list[ViewRefresh]:
        """Un-pause a view and apply everything its source received meanwhile (downstream views too)."""
        view = self.materializer.resolve(name)
        record = self.warehouse.view_record(view.state.name)
        self.warehouse.save_view_record(replace(record, paused=False, permanent=False))
        return self.materializer.refresh([view, *self.materializer.downstream([view.state.name])])

    def recover(self, name: str) -> list[ViewRefresh]:
        """Bring a failed or stale view back: retry the incremental refresh, and rebuild the view from its
        source when that is not possible (stale, or its table is damaged)."""
        view = self.materializer.resolve(name)
        record = self.warehouse.view_record(view.state.name)
        was_stale = bool(record.stale_reason)
        record = replace(record, error=None)
        self.warehouse.save_view_record(record)
        if not was_stale:
            results = self.materializer.refresh([view])
            if not results[0].failed and results[0].outcome != "stale":
                return results + self.materializer.refresh(self.materializer.downstream([view.state.name]))
            self.warehouse.save_view_record(replace(self.warehouse.view_record(view.state.name), error=None))
        return self.materializer.rebuild(view.state.name)
