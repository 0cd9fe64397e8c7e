"""The warehouse: where every table lives, the state store (deployed resources and deploy history, as Delta
tables under `_pipeframe/`), the deploy lock, and the one place that maps resource names to physical tables."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import time
import uuid
import weakref
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from pipeframe.compiler.service import SERVICE_TABLES
from pipeframe.engine import deltaappend, deltalog
from pipeframe.engine.conflicts import local_folder, retrying, table_lock
from pipeframe.errors import PipeframeError
from pipeframe.plan import records
from pipeframe.plan.snapshot import DeployedResource, DeployedSnapshot
from pipeframe.plan.state import ResourceState
from pipeframe.sqltext import first_line, quote_path, quote_string

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

STATE_SCHEMA = ("record STRING, key STRING, name STRING, kind STRING, version BIGINT, path STRING, state STRING, "
                "definition_hash STRING, deployed_at TIMESTAMP, deployment STRING, started_at TIMESTAMP, "
                "finished_at TIMESTAMP, git_commit STRING, plan STRING, result STRING, error STRING, "
                "user STRING, host STRING")
LOCK_SCHEMA = "id INT, holder STRING, host STRING, pid INT, acquired_at TIMESTAMP, expires_at TIMESTAMP"
LOCK_TTL_SECONDS = 3600
# Reads of the state store, of view records and of Delta table histories made by this process: what tests
# and benchmarks count to keep "deployed state is read once per command" true.
IO: Counter[str] = Counter()
# Warehouses on S3: Delta's LogStore there by default (S3SingleDriverLogStore) keeps commits safe only while ONE Spark
# driver writes, because it makes a commit file exclusive with a lock inside its own JVM (S3 had no put-if-absent).
# Every guard pipeframe has between processes (the deploy lock, a view's refresh watermark, idempotency keys) rests
# on those commits, so pipeframe writes there only once pipeframe.yaml names the LogStore (docs/cluster.md).
S3_SCHEMES = ("s3", "s3a", "s3n")
SINGLE_DRIVER_LOGSTORE = "io.delta.storage.S3SingleDriverLogStore"
MULTI_DRIVER_LOGSTORE = "io.delta.storage.S3DynamoDBLogStore"
VIEWS_SCHEMA = ("name STRING, paused BOOLEAN, permanent BOOLEAN, stale_reason STRING, error STRING, "
                "backfill STRING, updated_at TIMESTAMP")
VIEW_COLUMNS = [c.split()[0] for c in VIEWS_SCHEMA.split(", ") if not c.startswith("updated_at")]
# The ledger of S3 imports (connectors/s3.py): one row per file taken, appended after the file's rows were committed.
IMPORTS_SCHEMA = ("datasource STRING, uri STRING, etag STRING, size BIGINT, modified TIMESTAMP, status STRING, "
                  "rows BIGINT, quarantined BIGINT, version BIGINT, error STRING, imported_at TIMESTAMP")
IMPORT_COLUMNS = [c.split()[0] for c in IMPORTS_SCHEMA.split(", ")]
STATE_COLUMNS = [c.split()[0] for c in STATE_SCHEMA.split(", ")]


@dataclass(frozen=True)
class Deployment:
    id: str
    started_at: datetime | None
    finished_at: datetime | None
    git_commit: str | None
    result: str
    plan: dict
    error: str | None
    user: str | None
    host: str | None


@dataclass(frozen=True)
class ViewRecord:
    """The runtime state of one view that is not in its table: paused, stale, failed, or being backfilled.
    A view without a record is active."""

    name: str
    paused: bool = False
    permanent: bool = False
    stale_reason: str | None = None
    error: str | None = None
    backfill: dict | None = None  # the running (or interrupted) populate/rebuild; see engine.materialize


@dataclass(frozen=True)
class ImportRecord:
    """One file an S3 import took, as its ledger keeps it: `ingested` (its rows in the datasource's commit `version`)
    or `failed` (unreadable: one quarantine entry names it, with `error`; none of its rows landed)."""

    datasource: str
    uri: str  # s3://bucket/key
    etag: str
    size: int
    modified: datetime | None
    status: str  # "ingested" | "failed"
    rows: int = 0
    quarantined: int = 0
    version: int | None = None
    error: str | None = None
    imported_at: datetime | None = None


def view_record(row: Mapping[str, Any]) -> ViewRecord:
    """A view's record from its row in the records table (`VIEW_COLUMNS`)."""
    return ViewRecord(row["name"], bool(row["paused"]), bool(row["permanent"]), row["stale_reason"], row["error"],
                      json.loads(row["backfill"]) if row["backfill"] else None)


def now() -> datetime:
    return datetime.now(UTC).replace(tzinfo=None)


def _updating(where: Callable[[dict], bool], values: dict) -> Callable[[list[dict]], list[dict] | None]:
    """An UPDATE ... SET values WHERE where, as a change of all rows for `Warehouse._rewritten` (None: no row)."""
    def change(rows: list[dict]) -> list[dict] | None:
        if not any(where(r) for r in rows):
            return None
        return [{**r, **values} if where(r) else r for r in rows]
    return change


class Warehouse:
    """One warehouse (a local folder or any Hadoop URI) seen through one SparkSession."""

    def __init__(self, spark: SparkSession | Callable[[], SparkSession], uri: str) -> None:
        self._spark = spark  # or how to start it: reads of a local warehouse need no session (`deploy --check`)
        self.uri = uri.rstrip("/")
        self.state_path = state_path(self.uri)
        self.lock_path = f"{self.uri}/_pipeframe/lock"
        self.views_path = f"{self.uri}/_pipeframe/views"
        self.imports_path = f"{self.uri}/_pipeframe/imports"
        self.streams_path = f"{self.uri}/_pipeframe/streams"  # Structured Streaming's checkpoints (Kafka)
        self._snapshot: DeployedSnapshot | None = None
        self._records_at: tuple[int, dict[str, ViewRecord]] | None = None  # the view records of a local version

    @property
    def spark(self) -> SparkSession:
        """The session, started on first use where the warehouse was given a function that starts it."""
        if callable(self._spark):
            self._spark = self._spark()
        return self._spark

    # ------------------------------------------------------------------------------------ layout
    def table_path(self, name: str, version: int) -> str:
        return f"{self.uri}/tables/{name}/v{version}"

    def quarantine_path(self, datasource: str) -> str:
        """Where rows that did not fit `datasource` are kept (readable as `<datasource>_quarantine`)."""
        return f"{self.uri}/quarantine/{datasource}"

    def version_of(self, path: str) -> int:
        """A Delta table's latest version; -1 while it has no commit. A local table is looked at without Spark (the
        newest commit file of its `_delta_log`), any other through Delta."""
        local = local_version(path)
        if local is not None:
            return local
        try:
            return int(self.spark.sql(f"DESCRIBE HISTORY {quote_path(path)} LIMIT 1").first()["version"])
        except Exception:  # noqa: BLE001 — no table there yet
            return -1

    def _exists(self, path: str) -> bool:
        if local_folder(path) is not None:  # a local folder: look, without a Delta log replay (a table another
            return self.version_of(path) >= 0  # process is creating has its folder before its first commit)
        from delta.tables import DeltaTable

        from pipeframe.engine.session import is_connect

        if is_connect(self.spark):  # DeltaTable needs Delta Connect's server plugin there; SQL does not
            return self.version_of(path) >= 0
        return DeltaTable.isDeltaTable(self.spark, path)

    # ------------------------------------------------------------------------------- state store
    def _records(self, kind: str) -> list:
        IO["state"] += 1
        folder = local_folder(self.state_path)
        read = deltalog.read_rows(folder, STATE_COLUMNS) if folder is not None else None
        if read is not None:  # a local warehouse: its files read by pyarrow, without a Spark job
            return [r for r in read[1] if r["record"] == kind]
        if folder is not None and self.shares_disk and deltalog.latest_version(folder) == -1:
            return []  # nothing deployed yet (no commit of the state store on this disk)
        try:  # read first, ask whether it exists only when the read fails: one Delta log replay, not two
            return self.spark.read.format("delta").load(self.state_path).where(f"record = '{kind}'").collect()
        except Exception:
            if not self._exists(self.state_path):
                return []  # nothing deployed yet
            raise

    def snapshot(self, fresh: bool = False) -> DeployedSnapshot:
        """What is deployed, read from the state store once and kept (this warehouse's own deploys and swaps
        update it); `fresh` reads it again, as a deploy does under its lock."""
        if self._snapshot is None or fresh:
            self._snapshot = DeployedSnapshot.of(
                DeployedResource(records.decode_state(r["state"], f"The record of `{r['key']}` in the state store "
                                                                  f"at {self.state_path}"),
                                 int(r["version"] or 0), r["path"], r["deployed_at"])
                for r in self._records("resource"))
        return self._snapshot

    def history(self) -> list[Deployment]:
        rows = sorted(self._records("deployment"), key=lambda r: r["started_at"])
        return [Deployment(r["key"], r["started_at"], r["finished_at"], r["git_commit"], r["result"] or "",
                           json.loads(r["plan"]) if r["plan"] else {}, r["error"], r["user"], r["host"])
                for r in rows]

    def _ensure_state(self) -> None:
        self.require_safe_writers()
        if not self._exists(self.state_path) and not self._created(self.state_path, STATE_SCHEMA):
            try:
                self.spark.createDataFrame([], STATE_SCHEMA).write.format("delta").mode("append") \
                    .save(self.state_path)
            except Exception as exc:  # noqa: BLE001 — a concurrent first deploy may create it first
                if not self._exists(self.state_path):
                    raise PipeframeError("PF601", f"The state store at {self.state_path} cannot be created: "
                                         f"{first_line(exc)}.", "Check the warehouse location and its "
                                         "permissions.") from None

    def record_start(self, deployment: str, git_commit: str | None, plan: dict) -> None:
        self._ensure_state()
        row = {"record": "deployment", "key": deployment, "started_at": now(), "git_commit": git_commit,
               "plan": json.dumps(plan), "result": "running", "user": _user(), "host": socket.gethostname()}
        if self._rewritten(self.state_path, lambda rows: [*rows, row]) is None:
            self.spark.createDataFrame([row], STATE_SCHEMA).write.format("delta").mode("append") \
                .save(self.state_path)

    def record_failure(self, deployment: str, error: str) -> None:
        failed = {"result": "failed", "finished_at": now(), "error": error[:2000]}
        if self._rewritten(self.state_path, _updating(
                lambda r: r["record"] == "deployment" and r["key"] == deployment, failed)) is None:
            self._update(self.state_path, f"record = 'deployment' AND key = {quote_string(deployment)}",
                         {"result": "'failed'", "finished_at": "current_timestamp()",
                          "error": quote_string(error[:2000])})

    def _created(self, path: str, columns: str, rows: list[dict] | None = None) -> bool:
        """One of pipeframe's own tables created in a local warehouse without a Spark job (`deltaappend.create`),
        or by another writer meanwhile: False when Spark must create it, also where the warehouse's folder is not
        on this machine (a Spark Connect server's own disk)."""
        folder = local_folder(path)
        return folder is not None and self.shares_disk and deltaappend.create(folder, columns, rows) is not None

    @property
    def shares_disk(self) -> bool:
        """Whether the warehouse is a folder of this machine's disk that Spark writes too (not object storage, nor
        the own disk of a Spark Connect server elsewhere: with Connect, only a warehouse folder this machine already
        has): where tables may be created, and found missing, without a Spark job."""
        from pipeframe.engine.session import is_connect

        root = local_folder(self.uri)
        return root is not None and (not is_connect(self.spark) or os.path.isdir(root))

    def _rewritten(self, path: str, change: Callable[[list[dict]], list[dict] | None]) -> tuple[int, list[dict]] | None:
        """One of pipeframe's own tables in a local warehouse changed by `change` (all rows → all rows, or None for
        nothing to change) without a Spark job (`deltaappend.rewrite`): the version that holds the rows and the rows.
        None when it cannot be: the caller makes the same change with Spark's SQL."""
        folder = local_folder(path)
        return None if folder is None else deltaappend.rewrite(folder, change)

    # Writes to pipeframe's own tables are SQL (UPDATE / MERGE INTO), the same on embedded Spark and on Spark
    # Connect, where `DeltaTable` would need Delta Connect's plugin on the server.
    def _update(self, path: str, condition: str, assignments: dict[str, str]) -> None:
        sets = ", ".join(f"`{column}` = {value}" for column, value in assignments.items())
        self.spark.sql(f"UPDATE {quote_path(path)} SET {sets} WHERE {condition}")

    def _merge(self, path: str, source, on: str, clauses: str) -> None:
        """MERGE INTO the table at ``path`` from the DataFrame ``source`` (aliases t and s)."""
        name = f"_pipeframe_merge_{uuid.uuid4().hex}"  # one per call: threads of one session never share it
        source.createOrReplaceTempView(name)
        try:
            self.spark.sql(f"MERGE INTO {quote_path(path)} AS t USING {name} AS s ON {on} {clauses}")
        finally:
            self.spark.catalog.dropTempView(name)

    def commit(self, deployment: str, resources: Iterable[DeployedResource]) -> None:
        """Swap in the new set of resources and mark the deployment succeeded, in ONE Delta commit: either
        every change of the deploy becomes live, or none does."""
        stamp = now()
        snapshot = DeployedSnapshot.of(resources)
        rows = [{"record": "resource", "key": str(r.key), "name": r.state.name, "kind": r.state.kind,
                 "version": r.version, "path": r.path, "state": records.encode_state(r.state),
                 "definition_hash": r.state.definition_hash(), "deployed_at": r.deployed_at or stamp,
                 "deployment": deployment} for r in snapshot.values()]
        rows.append({"record": "deployment", "key": deployment, "finished_at": stamp, "result": "succeeded"})

        def merged(current: list[dict]) -> list[dict]:  # the MERGE below, over the rows
            kept = [r for r in current if r["record"] not in ("resource", "order") and
                    not (r["record"] == "deployment" and r["key"] == deployment)]
            started = [r for r in current if r["record"] == "deployment" and r["key"] == deployment]
            finished = [{**r, "finished_at": stamp, "result": "succeeded"} for r in started] or [rows[-1]]
            return [*kept, *finished, *rows[:-1]]

        if self._rewritten(self.state_path, merged) is not None:
            self._snapshot = snapshot
            return
        source = self.spark.createDataFrame(rows, STATE_SCHEMA)
        self._merge(self.state_path, source, "t.record = s.record AND t.key = s.key",
                    "WHEN MATCHED AND s.record = 'deployment' THEN UPDATE SET finished_at = s.finished_at, "
                    "result = s.result "
                    "WHEN MATCHED AND s.record <> 'deployment' THEN UPDATE SET * "
                    "WHEN NOT MATCHED THEN INSERT * "
                    "WHEN NOT MATCHED BY SOURCE AND t.record IN ('resource', 'order') THEN DELETE")
        self._snapshot = snapshot

    def swap(self, resource: DeployedResource, version: int, path: str) -> DeployedResource:
        """Point one deployed table at a new physical version (after a rebuild outside deploy)."""
        key = str(resource.key)
        if self._rewritten(self.state_path, _updating(lambda r: r["record"] == "resource" and r["key"] == key, {
                "version": int(version), "path": path, "deployed_at": now()})) is None:
            self._update(self.state_path, f"record = 'resource' AND key = {quote_string(key)}",
                         {"version": str(int(version)), "path": quote_string(path),
                          "deployed_at": "current_timestamp()"})
        swapped = DeployedResource(resource.state, int(version), path, now())
        self._snapshot = self.snapshot().replaced(swapped)
        return swapped

    # ------------------------------------------------------------------------------ view records
    def view_records(self) -> dict[str, ViewRecord]:
        """Every view's record (paused, stale, error, backfill). In a local warehouse they are read from the
        records table's files without a Spark job (several after each change, and every refresh asks) and kept
        until a commit makes a newer version."""
        version = local_version(self.views_path)
        if version is not None and self._records_at is not None and self._records_at[0] == version:
            return dict(self._records_at[1])
        if not (version >= 0 if version is not None else self._exists(self.views_path)):
            return {}
        IO["views"] += 1
        folder = local_folder(self.views_path)
        read = deltalog.read_rows(folder, VIEW_COLUMNS) if folder is not None else None
        rows = read[1] if read is not None else \
            [r.asDict() for r in self.spark.read.format("delta").load(self.views_path).collect()]
        records = {r["name"]: view_record(r) for r in rows}
        if read is not None:
            self._records_at = (read[0], records)
        return dict(records)

    def view_record(self, name: str) -> ViewRecord:
        return self.view_records().get(name) or ViewRecord(name)

    def view_record_now(self, name: str, known: ViewRecord) -> ViewRecord:
        """A view's record as of now where reading it costs no Spark job (a local warehouse: its log's listing,
        and its files when they changed); `known` elsewhere."""
        return self.view_record(name) if local_version(self.views_path) is not None else known

    def save_view_record(self, record: ViewRecord) -> None:
        """Upsert one view's record (a record with nothing to say is deleted: the view is active)."""
        self.require_safe_writers()
        if not self._exists(self.views_path) and not self._created(self.views_path, VIEWS_SCHEMA):
            with contextlib.suppress(Exception):  # a concurrent writer may create it first
                self.spark.createDataFrame([], VIEWS_SCHEMA).write.format("delta").mode("append") \
                    .save(self.views_path)
        row = {"name": record.name, "paused": record.paused, "permanent": record.permanent,
               "stale_reason": record.stale_reason, "error": record.error,
               "backfill": json.dumps(record.backfill) if record.backfill else None, "updated_at": now()}
        idle = not (record.paused or record.stale_reason or record.error or record.backfill)

        def upserted(rows: list[dict]) -> list[dict] | None:  # the MERGE below, over the rows
            others = [r for r in rows if r["name"] != record.name]
            if idle and len(others) == len(rows):
                return None  # an active view without a record: nothing to delete
            return others if idle else [*others, row]

        done = self._rewritten(self.views_path, upserted)
        if done is not None:
            self._records_at = (done[0], {r["name"]: view_record(r) for r in done[1]})
            return
        source = self.spark.createDataFrame([row], VIEWS_SCHEMA)

        def upsert() -> None:  # retried when another view's record changed meanwhile
            self._merge(self.views_path, source, "t.name = s.name", "WHEN MATCHED THEN DELETE" if idle else
                        "WHEN MATCHED THEN UPDATE SET * WHEN NOT MATCHED THEN INSERT *")

        retrying(upsert)

    # ---------------------------------------------------------------------------------- S3 imports
    def imports(self, datasource: str) -> list[ImportRecord]:
        """The ledger's records of the files imported into `datasource` (an own table, append-only: it keeps every
        file whatever the datasource's Delta log has cleaned up since)."""
        path = self.imports_path
        folder = local_folder(path)
        read = deltalog.read_rows(folder, IMPORT_COLUMNS) if folder is not None else None
        if read is not None:
            rows = read[1]
        elif folder is not None and self.shares_disk and deltalog.latest_version(folder) == -1:
            rows = []  # nothing imported yet
        else:
            try:
                rows = [r.asDict() for r in self.spark.read.format("delta").load(path)
                        .where(f"datasource = {quote_string(datasource)}").collect()]
            except Exception:
                if not self._exists(path):
                    return []
                raise
        return [ImportRecord(**{c: r[c] for c in IMPORT_COLUMNS}) for r in rows if r["datasource"] == datasource]

    def record_imports(self, found: list[ImportRecord]) -> None:
        """Append records to the imports ledger (created on first use): by `deltaappend` in a local warehouse,
        else by Spark's writer."""
        import pyarrow as pa

        self.require_safe_writers()
        path = self.imports_path
        if not self._exists(path) and not self._created(path, IMPORTS_SCHEMA):
            with contextlib.suppress(Exception):  # a concurrent writer may create it first
                self.spark.createDataFrame([], IMPORTS_SCHEMA).write.format("delta").mode("append").save(path)
        stamp = datetime.now(UTC)
        rows = [{**{c: getattr(r, c) for c in IMPORT_COLUMNS}, "imported_at": stamp} for r in found]
        for row in rows:  # as Spark stores a TIMESTAMP: an instant, read back in UTC
            if row["modified"] is not None and row["modified"].tzinfo is None:
                row["modified"] = row["modified"].replace(tzinfo=UTC)
        arrow = pa.Table.from_pylist(rows, pa.schema(
            [(c, pa.timestamp("us", "UTC") if t == "TIMESTAMP" else pa.int64() if t == "BIGINT" else pa.string())
             for c, t in (column.split() for column in IMPORTS_SCHEMA.split(", "))]))
        folder = local_folder(path)
        if folder is not None:
            with table_lock(path):  # a commit due a checkpoint is left to Spark's writer, which writes it
                if deltaappend.append(folder, arrow) is not None:
                    return
        frame = self.spark.createDataFrame(arrow.to_pylist(), IMPORTS_SCHEMA)
        retrying(lambda: frame.write.format("delta").mode("append").save(path))

    # ------------------------------------------------------------------------------------- writers
    def require_safe_writers(self) -> None:
        """Refuse (PF609) to write to a warehouse on S3 whose settings do not name Delta's LogStore for it: the
        default one is safe for one writing process only, and pipeframe cannot tell whether another one writes.
        Every command that commits to the warehouse asks this first; reads never do."""
        scheme = s3_scheme(self.uri)
        if scheme is None:
            return
        conf = self.spark.conf
        logstore = conf.get(f"spark.delta.logStore.{scheme}.impl", None) or conf.get("spark.delta.logStore.class", None)
        problem = s3_writers_problem(self.uri, scheme, logstore)
        if problem is not None:
            raise problem

    # ------------------------------------------------------------------------------------- lock
    def acquire_lock(self, holder: str) -> None:
        """Serialize deploys: fail fast while another live deploy holds the lock.

        The lock is a one-row Delta table taken with a conditional UPDATE; Delta's optimistic concurrency makes
        two simultaneous takes conflict, so exactly one wins. A lock left by a killed process on this host, or
        older than an hour, is taken over."""
        self.require_safe_writers()
        try:
            if not self._exists(self.lock_path) and not self._created(self.lock_path, LOCK_SCHEMA, [{"id": 1}]):
                self.spark.createDataFrame([(1, None, None, None, None, None)], LOCK_SCHEMA) \
                    .write.format("delta").mode("error").save(self.lock_path)  # "error": Connect's spelling too
            if self._take_local(holder):
                return
            if self._take("holder IS NULL OR expires_at < current_timestamp()", holder):
                return
            current = self.spark.read.format("delta").load(self.lock_path).first()
            if current is None or not self._stale(current) \
                    or not self._take(f"holder = {quote_string(current['holder'])}", holder):
                raise _busy(current)
        except PipeframeError:
            raise
        except Exception as exc:
            text = f"{type(exc).__name__} {exc}".lower()
            if "concurrent" in text or "already exists" in text:
                raise PipeframeError("PF602", "Another deploy is running on this warehouse.",
                                     "Wait for it to finish and run deploy again; deploys are serialized.") from None
            raise

    def _take_local(self, holder: str) -> bool:
        """The lock of a local warehouse taken without a Spark job (`_rewritten`): True when taken, PF602 while a
        live holder has it, False when Spark must take it (`_take`)."""
        taken: list[dict] = []

        def take(rows: list[dict]) -> list[dict] | None:
            taken.clear()
            if len(rows) != 1:
                return None  # not the one-row table this writes: Spark's UPDATE decides
            row = rows[0]
            if row["holder"] is not None and not self._stale(row):  # expired, or its process on this host is gone
                return None
            stamp = now()
            taken.append({**row, "holder": holder, "host": socket.gethostname(), "pid": os.getpid(),
                          "acquired_at": stamp, "expires_at": stamp + timedelta(seconds=LOCK_TTL_SECONDS)})
            return taken

        done = self._rewritten(self.lock_path, take)
        if done is None or len(done[1]) != 1:
            return False
        if taken and done[1] == taken:
            return True
        raise _busy(done[1][0])

    def _take(self, condition: str, holder: str) -> bool:
        result = self.spark.sql(
            f"UPDATE {quote_path(self.lock_path)} SET holder = {quote_string(holder)}, "
            f"host = {quote_string(socket.gethostname())}, pid = {os.getpid()}, acquired_at = current_timestamp(), "
            f"expires_at = current_timestamp() + INTERVAL {LOCK_TTL_SECONDS} SECONDS WHERE {condition}").first()
        return bool(result and result[0])

    def _stale(self, row) -> bool:
        if row["expires_at"] is not None and row["expires_at"] < now():
            return True
        if row["host"] == socket.gethostname() and row["pid"]:
            try:
                os.kill(int(row["pid"]), 0)
            except ProcessLookupError:
                return True
            except PermissionError:
                return False
        return False

    def release_lock(self, holder: str) -> None:
        free = {"holder": None, "host": None, "pid": None, "acquired_at": None, "expires_at": None}
        if self._rewritten(self.lock_path, _updating(lambda r: r["holder"] == holder, free)) is not None:
            return
        if self._exists(self.lock_path):
            self._update(self.lock_path, f"holder = {quote_string(holder)}",
                         {"holder": "NULL", "host": "NULL", "pid": "NULL", "acquired_at": "NULL", "expires_at": "NULL"})

    # --------------------------------------------------------------------------- name mapping
    def register(self, resources: Iterable[DeployedResource]) -> None:
        """Make every resource readable by its name in this session: the one place names become tables.

        Landing datasources read their declared columns; view targets read through their finalizing SQL,
        so users see merged values, never partial states. A name already registered with the same SQL in this
        session is left as it is (a reload that changed no table registers nothing). A datasource several pipes
        write reads the union of their tables' state rows, finalized once."""
        listed = list(resources)
        paths = {r.state.name: r.path for r in listed if r.state.has_table and r.path}
        for resource in listed:
            state = resource.state
            if state.kind == "shared" and all(w in paths for w in state.writers):
                self._view(state.name, state.union_sql(quote_path(paths[w]) for w in state.writers))
            if not state.has_table or resource.path is None:
                continue
            self._view(state.name, read_sql(state, resource.path))
            if state.kind == "datasource":
                self._view_if_made(f"{state.name}_quarantine", self.quarantine_path(state.name))
        for service in SERVICE_TABLES:  # pipeframe.pipe_stats, pipeframe.ops_log (engine/servicelog.py)
            self._view_if_made(service.relation, service.path(self.uri))

    def unregister(self, name: str) -> None:
        """Forget a name (its table was dropped)."""
        self.spark.catalog.dropTempView(name)
        _registered(self.spark).pop(name, None)

    def _view(self, name: str, sql: str) -> None:
        registered = _registered(self.spark)
        if registered.get(name) != sql:
            self.spark.sql(f"CREATE OR REPLACE TEMPORARY VIEW `{name}` AS {sql}")
            registered[name] = sql

    def _view_if_made(self, name: str, path: str) -> None:
        """Name the table at `path` once it exists (a quarantine, a service table). A table that was made is not
        dropped, so one already registered by this path is not looked for again (on object storage, a Spark call
        on every register, which runs for every query)."""
        sql = f"SELECT * FROM {quote_path(path)}"
        if _registered(self.spark).get(name) != sql and self._exists(path):
            self._view(name, sql)


def state_path(uri: str) -> str:
    """Where the state store of the warehouse at `uri` is: what is deployed, and the deployments' history."""
    return f"{uri.rstrip('/')}/_pipeframe/state"


def s3_scheme(uri: str) -> str | None:
    """The scheme of a warehouse on S3 (`s3a`, `s3`, `s3n`), or None for any other place."""
    scheme = uri.split("://", 1)[0].lower() if "://" in uri else ""
    return scheme if scheme in S3_SCHEMES else None


def s3_writers_problem(uri: str, scheme: str, logstore: str | None) -> PipeframeError | None:
    """Why pipeframe will not write to the S3 warehouse `uri` whose Delta LogStore setting for `scheme` is `logstore`
    (None when unset), or None when it will: any LogStore named on purpose is taken as the team's decision, the
    single-driver one as "only one process writes this warehouse at a time", another one (S3DynamoDBLogStore) as
    coordinating several."""
    if logstore and logstore.strip():
        return None
    return PipeframeError(
        "PF609", f"The warehouse {uri} is on S3, where Delta's default LogStore keeps commits safe only while ONE "
        "process writes: a second pipeframe process (a deploy next to a `serve`, two `append`s) could overwrite "
        "the other's commit, and the deploy lock would not stop it.",
        f"Say which holds in pipeframe.yaml under spark.conf: `spark.delta.logStore.{scheme}.impl: "
        f"{SINGLE_DRIVER_LOGSTORE}` when one process at a time writes this warehouse, or "
        f"`{MULTI_DRIVER_LOGSTORE}` (jar io.delta:delta-storage-s3-dynamodb and a DynamoDB table) for several; "
        "see docs/cluster.md.")


def local_version(path: str) -> int | None:
    """The latest version of a Delta table in a local folder, from the names of its log files, without Spark: -1
    while it has no commit, None when `path` is not local (or its log cannot be listed)."""
    folder = local_folder(path)
    return None if folder is None else deltalog.latest_version(folder)


# The temporary views each Spark session has had registered by `Warehouse.register`: name → its SQL.
_REGISTRATIONS: weakref.WeakKeyDictionary[SparkSession, dict[str, str]] = weakref.WeakKeyDictionary()


def _registered(spark: SparkSession) -> dict[str, str]:
    return _REGISTRATIONS.setdefault(spark, {})


def read_sql(state: ResourceState, path: str) -> str:
    """The SELECT that reads a resource by name from its physical table."""
    table = quote_path(path)
    if state.read_sql:
        return state.read_sql.replace("{table}", table)
    return f"SELECT {', '.join(f'`{name}`' for name, _ in state.columns)} FROM {table}"


def new_deployment_id() -> str:
    return f"{time.strftime('%Y%m%d%H%M%S')}-{uuid.uuid4().hex[:8]}"


def _busy(row) -> PipeframeError:
    who = f" (pid {row['pid']} on {row['host']}, since {row['acquired_at']:%Y-%m-%d %H:%M:%S} UTC)" \
        if row is not None and row["acquired_at"] else ""
    return PipeframeError("PF602", f"Another deploy or view rebuild is running on this warehouse{who}.",
                          "Wait for it to finish and run the command again; deploys and rebuilds are serialized.")


def _user() -> str | None:
    return os.environ.get("USER") or os.environ.get("USERNAME")
