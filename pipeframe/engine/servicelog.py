"""The writer of the service datasources (compiler/service.py): `pipeframe.pipe_stats`, a row per endpoint request,
and `pipeframe.ops_log`, a row per operation.

Recording is a row appended to a list under a lock (no I/O): a server's requests never wait for a write, and a
request's row is made by the writer (`request`: the request's thread records a function that makes it).
While the runtime runs (`serve`, `dev`, `run`) a thread of its own writes what was recorded every `flush_ms`, one
append per table; elsewhere (a CLI command, a script) each operation is written as it ends, once Spark has started. Writes are Delta appends
(`deltaappend`, without a Spark job, in a local warehouse; Spark's writer elsewhere); a write that fails keeps its rows
for the next one (up to `MAX_BUFFERED` rows a table, the oldest dropped beyond it, counted in `dropped`). Rows older
than `retention_days` are deleted (a Delta DELETE) at most once an hour."""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from pipeframe.compiler.service import OPS_LOG, PIPE_STATS, SERVICE_TABLES, ServiceTable
from pipeframe.engine import deltaappend, session, tables
from pipeframe.engine.conflicts import local_folder, retrying, table_lock
from pipeframe.errors import PipeframeError
from pipeframe.sqltext import first_line, quote_path

if TYPE_CHECKING:
    import pyarrow as pa

    from pipeframe.config import ServiceLogSettings
    from pipeframe.engine.refresh import ViewRefresh
    from pipeframe.engine.warehouse import Warehouse

log = logging.getLogger("pipeframe.servicelog")
MAX_BUFFERED = 100_000  # rows a table keeps while its writes fail
MAX_REQUEST_ID = 200  # characters of a request's X-Request-Id kept
RETENTION_EVERY = 3600.0  # seconds between two deletes of expired rows
VACUUM_RETENTION_HOURS = 168.0  # what a plain VACUUM keeps: Delta's default delta.deletedFileRetentionDuration


class ServiceLog:
    """What one process records about itself. `warehouse()` gives the warehouse written to, asked only when a write
    is due (a local warehouse is appended to without a Spark job, but for the checkpoint Delta writes every tenth
    commit)."""

    def __init__(self, warehouse: Callable[[], Warehouse], settings: ServiceLogSettings,
                 clock: Callable[[], datetime] = lambda: datetime.now(UTC)) -> None:
        self.warehouse = warehouse
        self.settings = settings
        self.clock = clock
        self.dropped = 0
        self._rows: dict[ServiceTable, list[dict | Callable[[], dict]]] = {t: [] for t in SERVICE_TABLES}
        self._lock = threading.Lock()
        self._write = threading.Lock()  # one write at a time (the thread's and a caller's `flush`)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._expired_at = time.monotonic()  # the first delete an hour after start (a CLI command never deletes)
        self._made: set[ServiceTable] = set()

    # ------------------------------------------------------------------------------------------ recording
    def request(self, seconds: float, fields: Callable[[], Mapping[str, Any]]) -> None:
        """One endpoint request answered, `seconds` long (`pipeframe.pipe_stats`). `fields()` gives its other columns
        (`request_row`'s keywords): the writer calls it when it writes, so the request's thread only reads the clock
        (parsing the URL and the parameters again, a uuid, the row: off the request path)."""
        if self.settings.enabled:
            ended = self.clock()
            self._record(PIPE_STATS, lambda: request_row(ended, seconds, **fields()))

    def operation(self, event_type: str, *, datasource: str = "", pipe: str = "", seconds: float = 0.0,
                  error: BaseException | str | None = None, rows: int = 0, rows_quarantine: int = 0,
                  strategy: str = "", operation_id: str = "") -> None:
        """One operation ended (`pipeframe.ops_log`): `error`, what it failed with (None: it succeeded)."""
        code = "" if error is None else error.code if isinstance(error, PipeframeError) else "PF999"
        if isinstance(error, str):
            error = RuntimeError(error)
        self._record(OPS_LOG, {
            "timestamp": self.clock(), "event_type": event_type, "datasource_id": datasource,
            "datasource_name": datasource, "pipe_id": pipe, "pipe_name": pipe,
            "result": "error" if error is not None else "ok", "error": first_line(error) if error is not None else "",
            "error_code": code, "elapsed_time": seconds, "rows": rows, "rows_quarantine": rows_quarantine,
            "strategy": strategy, "operation_id": operation_id or uuid.uuid4().hex})
        if self._thread is None and session.started():  # no writer thread: written as it ends (an operation refused
            self.flush()  # before Spark started, e.g. a missing file, is written with this process's next one)

    def refreshed(self, seconds: float, refreshes: list[ViewRefresh]) -> None:
        """A round of refreshes (`seconds` long): a row per view it changed, or failed to change (a view held in error
        or stale, which the round passed over, is not an operation)."""
        for done in refreshes:
            held = done.outcome == "error" and (done.message or "").endswith(f"`pipeframe recover {done.view}`)")
            if done.outcome in ("applied", "rebuilt") or done.outcome == "error" and not held:
                self.operation("rebuild" if done.outcome == "rebuilt" else "refresh", pipe=done.view,
                               seconds=seconds, rows=done.rows or 0, strategy=done.path or "",
                               error=(done.message or "failed") if done.outcome == "error" else None)

    def buffered(self) -> int:
        """Rows recorded and not written yet (all tables)."""
        with self._lock:
            return sum(len(rows) for rows in self._rows.values())

    def _record(self, table: ServiceTable, row: dict | Callable[[], dict]) -> None:
        if not self.settings.enabled:
            return
        with self._lock:
            rows = self._rows[table]
            rows.append(row)
            if len(rows) > MAX_BUFFERED:
                self.dropped += len(rows) - MAX_BUFFERED
                del rows[: len(rows) - MAX_BUFFERED]

    # ------------------------------------------------------------------------------------------ writing
    def start(self, _service: Any = None) -> None:
        """Write what is recorded every `flush_ms` from a thread of its own, until `stop`."""
        if self._thread is not None:
            return
        if not self.settings.enabled:
            self.ensure()  # nothing to write, but pipes may read them
            return
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="pipeframe-servicelog", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop the thread after writing what it holds."""
        thread, self._thread = self._thread, None
        if thread is not None:
            self._stop.set()
            thread.join()
        self.flush()

    def _run(self) -> None:
        self.ensure()
        while not self._stop.wait(self.settings.flush_ms / 1000):
            try:
                self.flush()
            except Exception:  # a bug: said, and the thread goes on writing
                log.exception("pipeframe's service log could not write")

    def flush(self) -> int:
        """Write what was recorded: the rows written. A table whose write fails keeps its rows for the next flush;
        rows that cannot be typed (a bug) are dropped, said and counted in `dropped`."""
        written = 0
        with self._write:
            for table in SERVICE_TABLES:
                with self._lock:
                    rows, self._rows[table] = self._rows[table], []
                if not rows:
                    continue
                try:
                    frame = arrow_rows(table, rows := self._built(table, rows))
                except (TypeError, ValueError, KeyError) as exc:  # pyarrow's ArrowInvalid is a ValueError
                    self.dropped += len(rows)
                    log.error("pipeframe dropped %d rows of %s that do not fit its columns: %s", len(rows),
                              table.qualified, first_line(exc))
                    continue
                try:
                    self._append(table, rows, frame)
                    written += len(rows)
                except Exception as exc:  # noqa: BLE001 — storage unavailable: kept, tried again
                    log.warning("pipeframe could not write %d rows to %s (kept for the next write): %s", len(rows),
                                table.qualified, first_line(exc))
                    with self._lock:
                        self._rows[table][:0] = rows[-MAX_BUFFERED:]
            if time.monotonic() - self._expired_at >= RETENTION_EVERY:
                self.expire()
        return written

    def _built(self, table: ServiceTable, rows: list[dict | Callable[[], dict]]) -> list[dict]:
        """The rows recorded, those recorded as a function made now; one that fails to be made (a bug) is dropped,
        said and counted."""
        built = []
        for row in rows:
            try:
                built.append(row() if callable(row) else row)
            except Exception as exc:  # noqa: BLE001 — a bug in a row's making must not lose the others
                self.dropped += 1
                log.error("pipeframe dropped a row of %s it could not make: %s", table.qualified, first_line(exc))
        return built

    def ensure(self) -> None:
        """Create the service tables that are missing, also with `enabled: false` (a deploy and a server's start do,
        so that pipes read them at once, empty or not). A failure is said, and tried again at the next write."""
        try:
            for table in SERVICE_TABLES:
                self._create(table, self.warehouse())
        except Exception as exc:  # noqa: BLE001 — the warehouse's storage: the next write tries again
            log.warning("pipeframe could not create its service datasources: %s", first_line(exc))

    def _append(self, table: ServiceTable, rows: list[dict], frame: pa.Table) -> None:
        from pipeframe.engine import tables

        warehouse = self.warehouse()
        self._create(table, warehouse)
        path = table.path(warehouse.uri)
        folder = local_folder(path) if warehouse.shares_disk else None
        if folder is not None:
            with table_lock(path):
                if deltaappend.append(folder, frame, on_checkpoint=tables.checkpoint_later(warehouse.spark, path)) \
                        is not None:
                    return
        records = [{k: dict(v) if k == "parameters" else v for k, v in r.items()} for r in rows]  # a MAP: a dict
        writer = warehouse.spark.createDataFrame(records, schema=ddl(table)).write.format("delta").mode("append")
        with table_lock(path):
            retrying(lambda: writer.save(path))

    def _create(self, table: ServiceTable, warehouse: Warehouse) -> None:
        if table in self._made:
            return
        path = table.path(warehouse.uri)
        folder = local_folder(path) if warehouse.shares_disk else None
        if folder is not None and (deltaappend.create(folder, list(table.columns), description=table.description)
                                   is not None or deltaappend.writable(folder)):  # made now, or there already
            self._made.add(table)
            return
        sql = f"CREATE TABLE IF NOT EXISTS {quote_path(path)} ({ddl(table)}) USING delta"
        retrying(lambda: warehouse.spark.sql(sql))
        self._made.add(table)

    def expire(self) -> None:
        """Delete the rows older than `retention_days`, compact the small files of the hour's appends and vacuum
        what no version within Delta's default retention (7 days) reads (`flush` does, once an hour; a table not
        made yet: nothing). A step a local table's log shows has nothing to do is left out."""
        self._expired_at = time.monotonic()
        cutoff = (self.clock() - timedelta(days=self.settings.retention_days)).astimezone(UTC).replace(microsecond=0)
        for table in list(self._made):
            column = table.columns[0][0]  # the time of the row
            try:
                warehouse = self.warehouse()
                location = table.path(warehouse.uri)
                path = quote_path(location)
                # Each step runs unless the table's local log shows it has nothing to do (a Spark job each, an
                # hour apart, beside the server's ingest): no row older than the cutoff, no file added since the
                # last OPTIMIZE, no commit older than VACUUM's 7 days (a file it could delete is older still).
                if not tables.nothing_before(location, column, cutoff):
                    warehouse.spark.sql(f"DELETE FROM {path} WHERE `{column}` < "
                                        f"TIMESTAMP '{cutoff:%Y-%m-%d %H:%M:%S}+00:00'")
                if not tables.compacted_already(location, clustered=False):
                    warehouse.spark.sql(f"OPTIMIZE {path}")
                if not tables.nothing_to_vacuum(location, VACUUM_RETENTION_HOURS):
                    warehouse.spark.sql(f"VACUUM {path}")
            except Exception as exc:  # noqa: BLE001 — tried again in an hour
                log.warning("pipeframe could not delete expired rows of %s: %s", table.qualified, first_line(exc))


def request_row(ended: datetime, seconds: float, *, pipe: str, status: int, engine: str | None,
                token_name: str | None, method: str, url: str, parameters: Mapping[str, str], error_code: str = "",
                read_rows: int = 0, read_bytes: int = 0, result_rows: int = 0, user_agent: str = "",
                request_id: str = "") -> dict:
    """A row of `pipeframe.pipe_stats`: a request answered at `ended` after `seconds`."""
    return {
        "start_datetime": ended - timedelta(seconds=seconds),
        "request_id": request_id[:MAX_REQUEST_ID] or uuid.uuid4().hex,
        "pipe_id": pipe, "pipe_name": pipe, "token_name": token_name or "", "method": method, "url": url,
        "parameters": list(parameters.items()), "status_code": status, "error": int(status >= 400),
        "error_code": error_code, "duration": seconds, "read_rows": read_rows, "read_bytes": read_bytes,
        "result_rows": result_rows, "engine": engine or "none", "user_agent": user_agent}


def ddl(table: ServiceTable) -> str:
    return ", ".join(f"`{name}` {type_}" for name, type_ in table.columns)


def arrow_rows(table: ServiceTable, rows: list[dict]) -> pa.Table:
    """Recorded rows as an Arrow table of the service table's columns (timestamps in UTC)."""
    import pyarrow as pa

    types = {"TIMESTAMP": pa.timestamp("us", "UTC"), "STRING": pa.string(), "INT": pa.int32(), "BIGINT": pa.int64(),
             "DOUBLE": pa.float64(), "MAP<STRING, STRING>": pa.map_(pa.string(), pa.string())}
    return pa.table({name: pa.array([r[name] for r in rows], types[type_]) for name, type_ in table.columns})
