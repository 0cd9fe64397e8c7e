"""Keeps materialized views in step with their sources: rounds of incremental refreshes (each view's refresh is
engine/refresh.py's loop, under the view's lock, in graph order through cascades, its record kept: errors, stale
reasons, pauses), populate and rebuild (pinned to a source version, chunked and resumable), and optimize
(engine/optimize.py)."""

from __future__ import annotations

import itertools
import logging
import math
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from pipeframe.compiler.maintenance import MaintenancePlan
from pipeframe.engine import optimize, refresh, tables
from pipeframe.engine.conflicts import is_cancelled, is_conflict, is_out_of_memory, retrying, view_lock
from pipeframe.engine.refresh import ViewRefresh
from pipeframe.engine.sparkstore import SparkStore
from pipeframe.engine.warehouse import ViewRecord, Warehouse
from pipeframe.errors import PipeframeError
from pipeframe.plan import records
from pipeframe.plan.snapshot import DeployedResource, DeployedSnapshot, resolve_view
from pipeframe.plan.state import ResourceState
from pipeframe.sqltext import first_line, quote_string

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

DEFAULT_CHUNK_ROWS = 1_000_000
# Views refreshed at once: a view's refresh is mostly waiting (Delta log reads and commits, the driver planning a
# small job), so independent views overlap; a view still starts only after the views it reads are refreshed.
REFRESH_THREADS = 4
ORDERED_TYPES = ("tinyint", "smallint", "int", "bigint", "float", "double", "decimal", "date", "timestamp")

StepHook = Callable[[str], None]
log = logging.getLogger("pipeframe.materialize")
_MEMORY_RETRY = threading.Lock()  # one refresh retried after running out of execution memory at a time


@dataclass(frozen=True)
class BackfillProgress:
    """How far a populate or rebuild has got (also what `status` shows for an interrupted one)."""

    view: str
    mode: str  # backfilling (into the live table) | rebuilding (a new version beside the live one)
    total_rows: int
    processed_rows: int
    chunks: int
    done_chunks: int
    started_at: float
    updated_at: float
    cursor: str | None
    pinned_version: int
    running: bool = True  # False when the process that ran it is gone

    @property
    def percent(self) -> float:
        return 100.0 * self.processed_rows / self.total_rows if self.total_rows else 100.0 * (
            self.done_chunks / self.chunks if self.chunks else 1.0)

    @property
    def rate(self) -> float:
        elapsed = self.updated_at - self.started_at
        return self.processed_rows / elapsed if elapsed > 0 else 0.0

    @property
    def eta_seconds(self) -> float | None:
        return (self.total_rows - self.processed_rows) / self.rate if self.rate > 0 else None

    def to_json(self) -> dict:
        return {"mode": self.mode, "total": self.total_rows, "processed": self.processed_rows,
                "percent": round(self.percent, 1), "rate": round(self.rate, 1),
                "eta_seconds": None if self.eta_seconds is None else round(self.eta_seconds, 1),
                "cursor": self.cursor, "chunks": self.chunks, "done_chunks": self.done_chunks,
                "pinned_version": self.pinned_version, "running": self.running}

    @classmethod
    def from_run(cls, view: str, run: dict) -> BackfillProgress:
        done = int(run["done"])
        chunks = run["chunks"]
        running = run.get("host") != socket.gethostname() or _alive(run.get("pid"))
        return cls(view, run["mode"], int(run["total_rows"]), sum(run["chunk_rows"][:done]), len(chunks), done,
                   float(run["started_at"]), float(run.get("updated_at") or run["started_at"]),
                   chunks[done] if done < len(chunks) else None, int(run["pinned_version"]), running)


class Materializer:
    """Refreshes, populates and optimizes the deployed views of one warehouse."""

    def __init__(self, spark: SparkSession, warehouse: Warehouse, deployed: DeployedSnapshot, *,
                 on_step: StepHook | None = None,
                 on_progress: Callable[[BackfillProgress], None] | None = None, direct_commit: bool = True) -> None:
        self.spark = spark
        self.direct_commit = direct_commit  # increments of local views appended by `deltaappend` (ingest setting)
        self.warehouse = warehouse
        self.on_step = on_step or (lambda _step: None)
        self.store = SparkStore(spark, warehouse, deployed, direct_commit, on_step=self.on_step)
        self.on_progress = on_progress or (lambda _progress: None)

    @property
    def deployed(self) -> DeployedSnapshot:
        return self.store.deployed

    @deployed.setter
    def deployed(self, deployed: DeployedSnapshot) -> None:
        self.store.deployed = deployed

    # ------------------------------------------------------------------------------------ lookup
    def views(self) -> list[DeployedResource]:
        """Every deployed view, upstream before downstream."""
        return self.deployed.views()

    def resolve(self, name: str) -> DeployedResource:
        """A view by its target name or its pipe name."""
        return resolve_view(self.deployed, name)

    def table(self, name: str) -> DeployedResource:
        resource = self.deployed.table(name)
        if resource is None or not resource.path:
            known = ", ".join(sorted(r.state.name for r in self.deployed.values() if r.state.has_table))
            raise PipeframeError("PF702", f"No deployed datasource `{name}`.",
                                 f"Deployed datasources: {known or 'none'}. Run `pipeframe deploy` first.")
        return resource

    def downstream(self, names: Iterable[str]) -> list[DeployedResource]:
        """The views fed (directly or through other views) by the tables `names`, in graph order."""
        return self.deployed.downstream(names)

    # ----------------------------------------------------------------------------------- refresh
    def refresh(self, views: list[DeployedResource] | None = None, full: bool = False) -> list[ViewRefresh]:
        """Bring views up to date with their sources, upstream first; one failing view does not stop the rest.

        Incremental refreshes of independent views run at once (`REFRESH_THREADS`, Spark's FAIR pool "views");
        a view starts once every view it reads has been refreshed. The answers come in the order of `views`."""
        self.warehouse.require_safe_writers()
        views = self.views() if views is None else views
        records = self.warehouse.view_records()
        self.store.begin_round(views)
        try:
            if not full:
                return self._refresh_concurrently(views, records)
            results: list[ViewRefresh] = []
            for view in views:
                if any(r.view == view.state.name for r in results):
                    continue  # rebuilt already, as the downstream of a rebuilt view
                results += self.rebuild(view.state.name, record=records.get(view.state.name))
            return results
        finally:
            self.store.end_round()

    def _refresh_concurrently(self, views: list[DeployedResource], records: dict[str, ViewRecord]) -> list[ViewRefresh]:
        if len(views) <= 1:
            return [self._refresh_one(self.deployed[v.key], records.get(v.state.name) or ViewRecord(v.state.name))
                    for v in views]
        from pipeframe.engine.session import scheduler_pool

        def refresh_after(upstream: list[Future], view: DeployedResource) -> ViewRefresh:
            for future in upstream:
                future.exception()  # waits; the upstream's own failure is reported with the upstream
            scheduler_pool(self.spark, "views")
            return self._refresh_one(self.deployed[view.key], records.get(view.state.name) or ViewRecord(view.state.name))

        futures: dict[object, Future] = {}
        # `views` is in graph order and the pool starts tasks in the order they are given, so a view's upstream
        # views are running or done when it starts waiting for them: no thread waits on a task not started.
        with ThreadPoolExecutor(min(REFRESH_THREADS, len(views)), thread_name_prefix="pipeframe-refresh") as pool:
            for view in views:
                upstream = [futures[k] for k in view.state.depends_on if k in futures]
                futures[view.key] = pool.submit(refresh_after, upstream, view)
        return [future.result() for future in futures.values()]

    def _refresh_one(self, view: DeployedResource, record: ViewRecord) -> ViewRefresh:
        name = view.state.name
        held = _held(record)
        if held is not None:
            return held
        try:
            with view_lock(self.warehouse.uri, name):
                # The records were read when the round began: a pause saved since (under this lock) holds the view.
                record = self.warehouse.view_record_now(name, record)
                held = _held(record)
                if held is not None:
                    return held
                try:
                    return retrying(lambda: self._apply_increment(view))
                except Exception as exc:
                    if not is_out_of_memory(exc):
                        raise
                    # the other views' jobs held the memory: once more, with no other retry of this kind running
                    log.warning("view %s: a Spark job ran out of execution memory; refreshing it again", name)
                    with _MEMORY_RETRY:
                        return retrying(lambda: self._apply_increment(view))
        except PipeframeError:
            raise
        except Exception as exc:  # noqa: BLE001 — recorded on the view, shown by status, cleared by recover
            message = first_line(exc)
            if is_cancelled(exc):  # not the view's fault: nothing committed, the next refresh applies the rows
                return ViewRefresh(name, "error", message=f"the refresh was cancelled ({message}); nothing was "
                                   "applied, and the next refresh applies the same rows")
            if is_conflict(exc):
                message = (f"other writers kept committing to this view while it applied new rows ({message}); "
                           "nothing was applied twice")
            self.warehouse.save_view_record(replace(record, error=message))
            return ViewRefresh(name, "error", message=message)

    def _apply_increment(self, view: DeployedResource) -> ViewRefresh:
        """One refresh of the view (engine/refresh.py); a change it cannot follow makes it stale."""
        plan = maintained(view)  # refused before anything is read
        source = self._source_of(view)
        try:
            return refresh.refresh_view(self.store, view, source, plan, self.deployed,
                                        read_by_views=bool(self._children(view)), history_gone=tables.history_gone,
                                        on_commit=self.on_step)
        except refresh.Stale as stale:
            return self._mark_stale(view, str(stale))

    def _children(self, view: DeployedResource) -> list[DeployedResource]:
        """The views that read this view's rows."""
        return [v for v in self.views() if v.state.source == view.state.name]

    def _pinned(self, view: DeployedResource, versions: dict[str, int]) -> dict[str, DataFrame]:
        return refresh.pinned(self.store, view, self.deployed, versions)

    def _joined_now(self, view: DeployedResource) -> dict[str, int]:
        """The latest version of each table a view joins and follows."""
        return {name: tables.latest_commit(self.spark, t.path).version for name in view.state.joined
                if (t := self.deployed.table(name)) is not None and t.path}

    def _states(self, view: DeployedResource, rows: DataFrame, pins: dict[str, DataFrame] | None = None,
                sql: str | None = None) -> DataFrame:
        """The view's query (or `sql`, another query of its plan over `{table}`) over `rows` of its source (and
        `pins`: joined tables as given frames, instead of by name): the state rows (or plain rows) they make."""
        return self.store.run(view, maintained(view).state_sql if sql is None else sql, rows, pins)

    def _write_batch(self, view: DeployedResource, batch: DataFrame, joined: dict[str, int] | None,
                     metadata: records.ViewCommit | records.PopulateChunk, **watermark) -> bool:
        """Append the states of `batch` (joined tables as of `joined`, the versions recorded with the rows)."""
        states = self._states(view, batch, self._pinned(view, joined or {}))
        written = self.store.append(view, states, metadata=replace(metadata, joined=joined or {}), watermark=watermark)
        self.store.forget(view.path or "")  # its history changed: a downstream view reads it afresh
        return written

    def _mark_stale(self, view: DeployedResource, reason: str) -> ViewRefresh:
        record = self.warehouse.view_record(view.state.name)
        self.warehouse.save_view_record(replace(record, stale_reason=reason))
        return ViewRefresh(view.state.name, "stale", message=reason)

    def _source_of(self, view: DeployedResource) -> DeployedResource:
        source = self.deployed.table(view.state.source or "")
        if source is None or not source.path:
            raise PipeframeError("PF605", f"View `{view.state.name}` reads `{view.state.source}`, which has no "
                                 "table.", "Run `pipeframe deploy`.")
        return source

    # ---------------------------------------------------------------------- populate / rebuild
    def rebuild(self, name: str, where: str | None = None, chunk_by: str | None = None,
                chunk_rows: int = DEFAULT_CHUNK_ROWS, record: ViewRecord | None = None) -> list[ViewRefresh]:
        """Build the view again beside the live version from its source as of a pinned version, catch up on
        what arrived meanwhile, then swap it in. Its downstream views are rebuilt after it (returned too)."""
        view = self.resolve(name)
        maintained(view)  # refused before a table is made
        holder = f"rebuild-{view.state.name}-{uuid.uuid4().hex[:8]}"
        self.warehouse.acquire_lock(holder)
        try:
            record = self.warehouse.view_record(view.state.name) if record is None else record
            run = record.backfill if record.backfill and record.backfill.get("mode") == "rebuilding" else None
            if run is None:
                version = view.version + 1
                path = self.warehouse.table_path(view.state.name, version)
                tables.remove_path(self.spark, path)  # a leftover of an abandoned rebuild
                tables.create_table(self.spark, path, view.state,
                                    tables.creates_directly(self.spark, self.warehouse.shares_disk))
                run = self._new_run(view, "rebuilding", path, version, None, where, chunk_by, chunk_rows)
                run["replaces_path"] = view.path  # removed after the swap, even by a resumed run
            target = DeployedResource(view.state, int(run["target_version"]), run["target_path"])
            record = self._run_chunks(view, target, run, record)
            self._apply_increment(target)  # what was appended to the source while the rebuild ran
            self.warehouse.swap(view, target.version, target.path or "")
            self.on_step(f"swapped {view.state.name}")
            self.warehouse.save_view_record(replace(record, backfill=None, stale_reason=None, error=None))
        finally:
            self.warehouse.release_lock(holder)
        old = run.get("replaces_path") or view.path
        if old and old != target.path:
            tables.remove_path(self.spark, old)
        self.store.end_round()
        self.deployed = self.warehouse.snapshot()  # with the swap
        results = [ViewRefresh(view.state.name, "rebuilt", None, int(run["pinned_version"]),
                               rows=run.get("total_rows"))]
        for child in self._children(view):
            results += self.rebuild(child.state.name)
        return results

    def populate(self, name: str, truncate: bool = False, where: str | None = None, chunk_by: str | None = None,
                 chunk_rows: int = DEFAULT_CHUNK_ROWS) -> list[ViewRefresh]:
        """Backfill a view from its source. With `truncate`, a rebuild; without, the states of the source rows
        up to the version the view started from (and matching `where`) are added to the live table: the history
        a view deployed with BACKFILL skip has not seen. An interrupted run of either kind resumes."""
        self.warehouse.require_safe_writers()
        view = self.resolve(name)
        maintained(view)
        record = self.warehouse.view_record(view.state.name)
        if record.backfill:
            if record.backfill.get("mode") == "rebuilding":
                return self.rebuild(name, record=record)
            run = record.backfill
        elif truncate:
            return self.rebuild(name, where, chunk_by, chunk_rows, record)
        else:
            start = tables.initial_watermark(self.spark, view.path or "")
            skipped = start.commit is not None and isinstance(start.commit.metadata, records.ViewCommit) and \
                start.commit.metadata.backfill == "skip"
            if start.commit is not None and not skipped and not where:
                raise PipeframeError(
                    "PF706", f"`{view.state.name}` already holds every row of `{view.state.source}` up to version "
                    f"{start.source_version}, where it started; adding them again would count them twice.",
                    f"Rebuild it with `pipeframe populate {view.state.view_pipe or view.state.name} --truncate`, "
                    "or add only rows you know are missing with --where.")
            run = self._new_run(view, "backfilling", view.path or "", view.version, start.source_version,
                                where, chunk_by, chunk_rows)
        self._run_chunks(view, view, run, record)
        self.store.end_round()
        self.warehouse.save_view_record(replace(self.warehouse.view_record(view.state.name), backfill=None))
        return [ViewRefresh(view.state.name, "applied", None, int(run["pinned_version"]), rows=run.get("total_rows"))]

    def _new_run(self, view: DeployedResource, mode: str, path: str, version: int, pinned: int | None,
                 where: str | None, chunk_by: str | None, chunk_rows: int) -> dict:
        source = self._source_of(view)
        if pinned is None:
            pinned = tables.latest_commit(self.spark, source.path or "").version
        frame = self._filtered(source, pinned, where)
        chunks, counts = plan_chunks(frame, chunk_by, chunk_rows, f"`{source.state.name}`")
        started = time.time()
        return {"id": uuid.uuid4().hex[:12], "mode": mode, "target_path": path, "target_version": version,
                "joined": self._joined_now(view),
                "source_path": source.path, "pinned_version": pinned, "where": where, "chunk_by": chunk_by,
                "chunks": chunks, "chunk_rows": counts, "done": 0, "total_rows": sum(counts),
                "started_at": started, "updated_at": started, "pid": os.getpid(), "host": socket.gethostname()}

    def _filtered(self, source: DeployedResource, version: int, where: str | None) -> DataFrame:
        frame = tables.read_snapshot(self.spark, source.state, source.path or "", version)
        if where:
            try:
                frame = frame.where(where)
                frame.schema  # noqa: B018 — analyze now, to report a bad condition before any work
            except Exception as exc:  # noqa: BLE001
                raise PipeframeError("PF703", f"--where `{where}` is not a valid condition on "
                                     f"`{source.state.name}`: {first_line(exc)}",
                                     "Write a Spark SQL boolean expression over the source's columns.") from None
        return frame

    def _run_chunks(self, view: DeployedResource, target: DeployedResource, run: dict,
                    record: ViewRecord) -> ViewRecord:
        """Process the remaining chunks of a run into `target`; each chunk is one idempotent Delta commit,
        so a chunk replayed after a crash is skipped by Delta."""
        source = self._source_of(view)
        if source.path != run["source_path"]:
            raise PipeframeError("PF704", f"The interrupted backfill of `{view.state.name}` read a source table "
                                 "that has been replaced since.", f"Run `pipeframe refresh {view.state.name} "
                                 "--full` to rebuild from the current source.")
        run = {**run, "pid": os.getpid(), "host": socket.gethostname()}
        record = replace(record, backfill=run)
        self.warehouse.save_view_record(record)
        pinned = int(run["pinned_version"])
        frame = self._filtered(source, pinned, run.get("where"))
        self.on_progress(BackfillProgress.from_run(view.state.name, run))
        for index in range(int(run["done"]), len(run["chunks"])):
            batch = frame if run["chunks"][index] == "TRUE" else frame.where(run["chunks"][index])
            self._write_batch(target, batch, run.get("joined"),
                              records.PopulateChunk(target.state.name, run["id"], index + 1),
                              app_id=f"pipeframe-populate:{run['id']}", txn_version=index + 1)
            self.on_step(f"chunk committed {index + 1}")
            run = {**run, "done": index + 1, "updated_at": time.time()}
            record = replace(record, backfill=run)
            self.warehouse.save_view_record(record)
            self.on_progress(BackfillProgress.from_run(view.state.name, run))
        # A resumed run whose watermark is committed already (and maybe more after it) must not set it back.
        if run["mode"] == "rebuilding" and tables.read_watermark(self.spark, target.path or "").source_version is None:
            empty = self.spark.createDataFrame([], target.state.schema)
            tables.write_states(empty, target.state, target.path or "", source_version=pinned,
                                source_path=source.path,
                                metadata=records.ViewCommit(target.state.name, backfill="full",
                                                            joined=run.get("joined") or {}))
            self.on_step("watermark committed")
        return record

    def backfill_new_table(self, view: DeployedResource) -> None:
        """Fill a freshly created view table (deploy; `deployed`: what is live at that step of the deploy): all
        source rows as of the latest version, or none with BACKFILL skip; either way the table records that version
        as its watermark."""
        source = self._source_of(view)
        pinned = tables.latest_commit(self.spark, source.path or "").version
        metadata = records.ViewCommit(view.state.name, backfill=view.state.backfill or "full")
        empty = view.state.backfill == "skip" or tables.holds_no_rows(source.path or "", pinned)
        if empty and self.direct_commit and _none_from_none(view.state) and tables.commit_watermark(
                self.spark, view.state, view.path or "", source_version=pinned, source_path=source.path,
                metadata=replace(metadata, joined=self._joined_now(view))):
            self.store.forget(view.path or "")
            return  # no rows, none made from them: the watermark alone, without a Spark job
        self.warehouse.register(self.deployed.values())  # its query may read any deployed table by name
        if empty:
            batch = self.spark.createDataFrame([], source.state.schema)
        else:
            batch = tables.read_snapshot(self.spark, source.state, source.path or "", pinned)
        self._write_batch(view, batch, self._joined_now(view), source_version=pinned, source_path=source.path,
                          metadata=metadata)
        self.store.end_round()

    # ---------------------------------------------------------------------------------- optimize
    def optimize(self, names: list[str] | None = None, retention_hours: float = 168.0) -> list[str]:
        """engine/optimize.py, over the deployed tables `names` (every table when None)."""
        self.warehouse.require_safe_writers()
        targets = [self.table(n) for n in names] if names else \
            [r for r in self.deployed.values() if r.state.has_table and r.path]
        return optimize.optimize(self.spark, targets, retention_hours, self.on_step)


def _held(record: ViewRecord) -> ViewRefresh | None:
    """What a refresh answers for a view its record holds back (failed, stale, paused); None for an active one."""
    name = record.name
    if record.error:
        return ViewRefresh(name, "error", message=f"{record.error} (run `pipeframe recover {name}`)")
    if record.stale_reason:
        return ViewRefresh(name, "stale", message=record.stale_reason)
    if record.paused:
        return ViewRefresh(name, "paused")
    return None


def plan_chunks(frame: DataFrame, chunk_by: str | None, chunk_rows: int, where: str) -> tuple[list[str], list[int]]:
    """Split a populate into conditions of about `chunk_rows` rows each: value ranges (from approximate
    quantiles) for numbers, dates and timestamps, hash buckets for anything else."""
    if not chunk_by:
        return ["TRUE"], [frame.count()]
    names = {f.name.lower(): f for f in frame.schema.fields}
    field = names.get(chunk_by.strip("`").lower())
    if field is None:
        raise PipeframeError("PF705", f"--chunk-by `{chunk_by}` is not a column of {where}.",
                             f"Columns: {', '.join(f.name for f in frame.schema.fields)}.")
    total = frame.count()
    n = max(1, math.ceil(total / max(1, chunk_rows)))
    if n == 1:
        return ["TRUE"], [total]
    col, type_ = f"`{field.name}`", field.dataType.simpleString()
    if type_.split("(")[0] in ORDERED_TYPES:
        fractions = ", ".join(str(i / n) for i in range(1, n))
        bounds = frame.selectExpr(f"CAST(percentile_approx({col}, array({fractions}), 10000) AS ARRAY<STRING>)") \
            .first()[0] or []
        bounds = [b for i, b in enumerate(bounds) if b is not None and b not in bounds[:i]]
        lits = [f"CAST({quote_string(b)} AS {type_})" for b in bounds]
        chunks = [f"{col} IS NULL OR {col} < {lits[0]}"] if lits else ["TRUE"]
        chunks += [f"{col} >= {lo} AND {col} < {hi}" for lo, hi in itertools.pairwise(lits)]
        if lits:
            chunks.append(f"{col} >= {lits[-1]}")
    else:
        chunks = [f"pmod(xxhash64({col}), {n}) = {i}" for i in range(n)]
    bucket = "CASE " + " ".join(f"WHEN {c} THEN {i}" for i, c in enumerate(chunks)) + " END"
    counts = dict(frame.selectExpr(f"{bucket} AS b").groupBy("b").count().collect())
    return chunks, [int(counts.get(i, 0)) for i in range(len(chunks))]


def maintained(view: DeployedResource) -> MaintenancePlan:
    """The maintenance plan recorded with a view's deployed state; a view deployed before plans were recorded has
    none, and is not maintained until a deploy records it (the engine never derives it from the view's SQL)."""
    plan = view.state.maintenance
    if plan is None:
        raise PipeframeError("PF612", f"View `{view.state.name}` was deployed by an older pipeframe that did not "
                             "record how to maintain it; it is left as it is.",
                             "Run `pipeframe deploy`: it records the plan without moving any data.")
    return plan


def _alive(pid: object) -> bool:
    try:
        os.kill(int(pid), 0)  # type: ignore[arg-type]
    except (ProcessLookupError, TypeError, ValueError):
        return False
    except PermissionError:
        return True
    return True


def _none_from_none(state: ResourceState) -> bool:
    """Whether the view's query makes no row when its source has none: any query maintained from batches of its
    source's rows does (the view is the union of the batches' rows or states, so a row made from no rows would be
    made again by every batch), whatever else it joins, except a global aggregate (no GROUP BY), whose one row of
    states from no rows merges as nothing."""
    return not state.aggregated or bool(state.keys)
