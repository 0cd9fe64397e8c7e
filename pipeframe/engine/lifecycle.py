"""View lifecycle: each view's status (active, backfilling, rebuilding, paused, stale, error) with its lag,
size and backfill progress, and the transitions pause, resume, recover and delete."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from datetime import datetime
from typing import TYPE_CHECKING

from pipeframe.engine import tables
from pipeframe.engine.commits import Commit, as_followed
from pipeframe.engine.conflicts import view_lock
from pipeframe.engine.warehouse import ViewRecord
from pipeframe.plan import records
from pipeframe.plan.diff import drop_views
from pipeframe.plan.snapshot import DeployedResource, DeployedSnapshot, resolve_view
from pipeframe.sqltext import first_line, quote_path

if TYPE_CHECKING:  # materialize and deploy are imported where used: `status` reads without them (a fresh process)
    from pipeframe.engine.deploy import DeployResult
    from pipeframe.engine.materialize import BackfillProgress, Materializer, ViewRefresh
    from pipeframe.engine.session import SparkSession

RATE_SECONDS = 60.0  # the window of a view's rows/s
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
    lag_versions: int | None  # source commits with new rows that the view has not applied
    lag_seconds: float | None  # how long the oldest source commit not yet applied has waited
    last_refresh: datetime | None
    permanent: bool = False
    backfill: BackfillProgress | None = None
    rows_per_second: float = 0.0  # source rows applied per second over the last minute
    last_path: str | None = None  # how the last refresh applied its rows: append, negate, fold, recompute, rows, join(-negate)
    kafka: dict | None = None  # over a Kafka datasource: its topic's lag per partition (connectors/kafka.topic_lag)
    ingest: dict | None = None  # over a landing datasource: how its newest group commits were made (ingest_paths)

    @property
    def lag_ms(self) -> float | None:
        return None if self.lag_seconds is None else self.lag_seconds * 1000

    def to_json(self) -> dict:
        return {"name": self.name, "pipe": self.pipe, "status": self.status, "reason": self.reason,
                "table_version": self.table_version, "rows": self.rows, "files": self.files, "bytes": self.bytes,
                "source": self.source, "source_version": self.source_version,
                "applied_version": self.applied_version, "lag_versions": self.lag_versions,
                "lag_seconds": None if self.lag_seconds is None else round(self.lag_seconds, 1),
                "lag_ms": None if self.lag_ms is None else round(self.lag_ms),
                "rows_per_second": round(self.rows_per_second, 1),
                "last_refresh": self.last_refresh.isoformat() if self.last_refresh else None,
                "last_path": self.last_path,
                "permanent": self.permanent,
                "backfill": self.backfill.to_json() if self.backfill else None, "kafka": self.kafka,
                "ingest": self.ingest}


def effective_status(record: ViewRecord) -> str:
    if record.error:
        return "error"
    if record.backfill:
        return str(record.backfill.get("mode") or "backfilling")
    if record.stale_reason:
        return "stale"
    return "paused" if record.paused else "active"


@dataclass(frozen=True)
class TableDetail:
    """A table's current snapshot in figures: data files, their bytes, and its rows."""

    files: int
    bytes: int
    rows: int


def view_statuses(deployed: DeployedSnapshot, records: Mapping[str, ViewRecord], name: str | None,
                  spark: SparkSession | None, detail: Callable[[str], TableDetail]) -> list[ViewStatus]:
    """What `pipeframe status` shows for the view `name` (every view when None). Histories are read from the tables'
    logs, through `spark` where the log cannot answer; without a session (None) that raises NeedsSpark. `detail`
    gives a table's figures."""
    views = [resolve_view(deployed, name)] if name else deployed.views()
    return [_status(deployed, v, records.get(v.state.name) or ViewRecord(v.state.name), spark, detail)
            for v in views]


def _status(deployed: DeployedSnapshot, view: DeployedResource, record: ViewRecord, spark: SparkSession | None,
            detail: Callable[[str], TableDetail]) -> ViewStatus:
    """Never raises for a damaged table: what cannot be read is reported as the view's error."""
    path = view.path or ""
    rows = files = size = 0
    rate = 0.0
    watermark = tables.Watermark(None)
    problem = None
    try:
        figures = detail(path)
        files, size, rows = figures.files, figures.bytes, figures.rows
        watermark = tables.read_watermark(spark, path)
        rate = _rate(spark, path)
    except tables.NeedsSpark:
        raise
    except Exception as exc:  # noqa: BLE001 — shown as the view's error; `recover` rebuilds the table
        problem = f"cannot read its table: {first_line(exc)}"
    source = deployed.table(view.state.source or "")
    source_version = lag = lag_seconds = None
    try:
        if source is not None and source.path:
            latest = tables.latest_commit(spark, source.path)
            source_version = latest.version
            if watermark.source_version is not None:
                lag, lag_seconds = _lag(spark, source.path, watermark.source_version, latest.version,
                                        view.state.follow_ttl)
    except tables.NeedsSpark:
        raise
    except Exception as exc:  # noqa: BLE001
        problem = problem or f"cannot read its source `{view.state.source}`: {first_line(exc)}"
    reason = record.error or problem or record.stale_reason
    state = "error" if problem and not record.backfill else effective_status(record)
    backfill = None
    if record.backfill:
        from pipeframe.engine.materialize import BackfillProgress

        backfill = BackfillProgress.from_run(view.state.name, record.backfill)
    return ViewStatus(view.state.name, view.state.view_pipe, state, reason, view.version, rows, files, size,
                      view.state.source, source_version, watermark.source_version, lag, lag_seconds,
                      watermark.commit.timestamp if watermark.commit else None, record.permanent, backfill,
                      rate, _path(watermark.commit))


def _rate(spark: SparkSession | None, path: str) -> float:
    """Source rows a view applied per second over the last minute (its commits record how many)."""
    since = time.time() - RATE_SECONDS
    recent = [c for c in tables.history(spark, path, 200) if c.epoch >= since]
    return sum(c.metadata.rows or 0 for c in recent if isinstance(c.metadata, records.ViewCommit)) / RATE_SECONDS


def _path(commit: Commit | None) -> str | None:
    """The write strategy a view's commit took (None when it does not say)."""
    return commit.metadata.path if commit is not None and isinstance(commit.metadata, records.ViewCommit) else None


def _lag(spark: SparkSession | None, source_path: str, applied: int, latest: int,
         follow_ttl: bool) -> tuple[int, float]:
    """Source commits with rows not applied yet, and how long the oldest of them has waited."""
    if latest <= applied:
        return 0, 0.0
    commits = as_followed(tables.commits_between(spark, source_path, applied, latest), follow_ttl)
    pending = [c for c in commits if c.changes_data]
    return len(pending), max(0.0, time.time() - min(c.epoch for c in pending)) if pending else 0.0


class Lifecycle:
    """Reads and changes the lifecycle of the deployed views of one warehouse."""

    def __init__(self, materializer: Materializer) -> None:
        self.materializer = materializer
        self.spark = materializer.spark
        self.warehouse = materializer.warehouse

    def status(self, name: str | None = None) -> list[ViewStatus]:
        return view_statuses(self.materializer.deployed, self.warehouse.view_records(), name, self.spark,
                             self._detail)

    def _detail(self, path: str) -> TableDetail:
        detail = self.spark.sql(f"DESCRIBE DETAIL {quote_path(path)}").first()
        rows = int(self.spark.sql(f"SELECT count(*) FROM {quote_path(path)}").first()[0])
        return TableDetail(int(detail["numFiles"] or 0), int(detail["sizeInBytes"] or 0), rows)

    def pause(self, name: str, permanent: bool = False) -> ViewRecord:
        """Stop applying new source rows to a view; it keeps its watermark and catches up on resume."""
        view = self.materializer.resolve(name)
        # Under the view's refresh lock: an increment under way finishes first, and any refresh after this answer
        # reads the record inside that lock (`Materializer._refresh_one`), so no row that lands later is applied.
        with view_lock(self.warehouse.uri, view.state.name):
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

    def delete(self, name: str, force: bool = False, git_commit: str | None = None) -> DeployResult:
        """Drop a view's table; refused (ViewInUse) while views or pipes read it, unless `force` drops them too.

        It is a deploy of drop changes (planned in `plan.diff.drop_views`): it takes the deploy lock and is recorded
        in the deploy history. The files still declare what was dropped, so the next deploy creates it again."""
        view = self.materializer.resolve(name)
        deployed = self.materializer.deployed
        plan = drop_views(deployed.states, view.key, force, deployed.fingerprint)
        from pipeframe.engine.deploy import Deployer

        result = Deployer(self.spark, self.warehouse).apply(plan, git_commit)
        for change in plan.changes:
            if change.deployed is not None and (change.deployed.has_table or change.deployed.kind == "shared"):
                self.warehouse.unregister(change.name)  # its name no longer reads a table
        self.materializer.deployed = self.warehouse.snapshot()
        return result
