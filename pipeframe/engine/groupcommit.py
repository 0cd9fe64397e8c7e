"""Group commit: appends of NDJSON lines to one datasource that arrive together (HTTP events, `Project.append` from
several threads) share one Delta commit, as a database shares one log flush between transactions.

Each datasource has a queue and one thread that commits it. A request waits in the queue until the group it joined
is committed, and is acknowledged only then: never from memory alone. A request lands whole or not at all (its
lines are never split between commits). The group is cut when it holds `flush_rows` lines or `flush_bytes` bytes,
or its first request has waited `flush_ms`, or as many requests wait as the last commit answered (clients that
wait for their answer before sending again are all back); while one commit is written the next group gathers, so
the busier the datasource the larger its commits. Above `buffer_bytes` waiting, a request is refused (PF819, HTTP 429) instead of
growing memory without bound.

An idempotency key makes a retried request land once: the keys of a commit are kept in its userMetadata with what
each request landed, so they survive a restart; a key already committed is answered from there, a key whose request
is still waiting shares its outcome."""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from pipeframe.config import IngestSettings
from pipeframe.engine import deltalog
from pipeframe.engine.conflicts import local_folder
from pipeframe.engine.deltaappend import Fenced
from pipeframe.engine.ingest import Batch, Ingestor, IngestResult, committed_keys, conform_lines, fence_of
from pipeframe.engine.jsonlines import type_lines
from pipeframe.errors import PipeframeError
from pipeframe.plan import records
from pipeframe.sqltext import first_line

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from pipeframe.datafiles.model import Datasource
    from pipeframe.engine.warehouse import Warehouse
    from pipeframe.plan.snapshot import DeployedResource

RATE_SECONDS = 60.0  # the window of the rows/s figures
IDLE_SECONDS = 30.0  # a datasource's committing thread ends after this long without requests

Target = Callable[[str], "tuple[DeployedResource, Datasource]"]


@dataclass
class _Request:
    lines: list[str]
    key: str | None
    size: int
    arrived: float
    done: Future = field(default_factory=Future)


@dataclass
class IngestStats:
    """What `GET /v0/ingest` shows for one datasource."""

    commits: int = 0
    arrow_parsed: int = 0  # commits whose lines were typed without Spark (`jsonlines`)
    arrow_committed: int = 0  # commits written by pyarrow and a commit file (`deltaappend`), not Spark's writer
    requests: int = 0
    rows: int = 0
    quarantined: int = 0
    rejected: int = 0  # requests refused with 429
    failed: int = 0  # requests whose commit failed
    replayed: int = 0  # requests answered from an idempotency key
    buffered_requests: int = 0
    buffered_bytes: int = 0
    last_commit_version: int | None = None
    last_commit_ms: float | None = None  # how long the last commit took
    recent: deque = field(default_factory=deque)  # (time, rows) of the last RATE_SECONDS

    def rows_per_second(self, now: float) -> float:
        while self.recent and self.recent[0][0] < now - RATE_SECONDS:
            self.recent.popleft()
        return sum(rows for _, rows in self.recent) / RATE_SECONDS

    def counts(self) -> dict[str, int]:
        """The counters and the buffer's depth: plain numbers, read by any thread at any time (a metrics scrape)
        without touching the rate window the commit thread appends to."""
        return {"commits": self.commits, "requests": self.requests, "rows": self.rows,
                "quarantined_rows": self.quarantined, "rejected_requests": self.rejected,
                "failed_requests": self.failed, "replayed_requests": self.replayed,
                "buffered_requests": self.buffered_requests, "buffered_bytes": self.buffered_bytes}

    def to_json(self, now: float) -> dict:
        return {**self.counts(), "arrow_parsed_commits": self.arrow_parsed,
                "arrow_committed_commits": self.arrow_committed,
                "rows_per_second": round(self.rows_per_second(now), 1),
                "last_commit_version": self.last_commit_version,
                "last_commit_ms": None if self.last_commit_ms is None else round(self.last_commit_ms, 1)}


class _Queue:
    """One datasource's waiting requests, its committing thread, its known keys and its figures."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.cond = threading.Condition()
        self.pending: list[_Request] = []
        self.waiting: dict[str, Future] = {}  # idempotency keys of requests not committed yet
        self.keys: dict[str, IngestResult] | None = None  # committed keys, read on first use
        self.keys_of: str | None = None  # the table (path) they were read from: a re-created table has its own
        self.stats = IngestStats()
        self.thread: threading.Thread | None = None
        self.committed = 0.0  # when the last commit ended (time.monotonic)
        self.last_group = 0  # how many requests the last commit answered


class GroupCommitter:
    """The group commits of one warehouse's landing datasources. `target(name)` gives a datasource's deployed table
    and its definition (raising the user's error for an unknown one); it is asked again for every commit, so a
    deploy in between is followed. `on_commit(name, version)` is told of every commit (the continuous
    materializer wakes on it); what it returns is kept on the requests' results (`IngestResult.mark`). `record` is
    told of every group commit made or failed (the service log's `operation`)."""

    def __init__(self, spark: SparkSession, warehouse: Warehouse, target: Target, settings: IngestSettings,
                 on_commit: Callable[[str, int], object] | None = None,
                 record: Callable[..., None] | None = None) -> None:
        self.spark = spark
        self.record = record or (lambda *_args, **_kwargs: None)
        self.ingestor = Ingestor(spark, warehouse)
        self.target = target
        self.settings = settings
        self.on_commit = on_commit or (lambda _name, _version: None)
        self._queues: dict[str, _Queue] = {}
        self._guard = threading.Lock()
        self._stopped = False

    # ------------------------------------------------------------------------------------ submit
    def submit(self, name: str, lines: list[str], key: str | None = None) -> Future:
        """Queue NDJSON lines for `name`; the future gives the IngestResult once they are committed."""
        table, _definition = self.target(name)  # an unknown datasource is refused now, not in the committer
        queue = self._queue(name)
        size = sum(len(line) + 1 for line in lines)
        with queue.cond:
            if key is not None:
                known = self._keys(queue, table).get(key)
                if known is not None:
                    queue.stats.replayed += 1
                    return _resolved(replace(known, datasource=name))
                if key in queue.waiting:
                    queue.stats.replayed += 1
                    return queue.waiting[key]
            if self._stopped:
                raise PipeframeError("PF819", f"`{name}` takes no more rows: the server is stopping.",
                                     "Send the request again to the server once it is back.", http_status=503)
            if queue.pending and queue.stats.buffered_bytes + size > self.settings.buffer_bytes:
                queue.stats.rejected += 1
                raise PipeframeError(
                    "PF819", f"`{name}` has {queue.stats.buffered_bytes:,} bytes waiting to be committed, more than "
                    f"ingest.buffer_bytes ({self.settings.buffer_bytes:,}).",
                    "Retry after the Retry-After seconds, with the same Idempotency-Key; send fewer, larger "
                    "requests, or raise ingest.buffer_bytes in pipeframe.yaml.", http_status=429)
            request = _Request(lines, key, size, time.monotonic())
            queue.pending.append(request)
            queue.stats.buffered_requests += 1
            queue.stats.buffered_bytes += size
            if key is not None:
                queue.waiting[key] = request.done
            if queue.thread is None:
                queue.thread = threading.Thread(target=self._run, args=(queue,), daemon=True,
                                                name=f"pipeframe-commit-{name}")
                queue.thread.start()
            queue.cond.notify_all()
        return request.done

    def reads_keys(self, name: str, key: str | None) -> bool:
        """Whether `submit(name, ..., key)` reads the datasource's committed keys first (the first key it sees)."""
        queue = self._queues.get(name)
        return key is not None and (queue is None or queue.keys is None)

    def append(self, name: str, lines: list[str], key: str | None = None) -> IngestResult:
        """`submit` and wait for the commit."""
        return self.submit(name, lines, key).result()

    def stats(self) -> dict[str, dict]:
        now = time.time()
        with self._guard:
            queues = list(self._queues.values())
        found = {}
        for queue in sorted(queues, key=lambda q: q.name):
            with queue.cond:  # the commit thread appends to the rate window under it: never iterated meanwhile
                found[queue.name] = queue.stats.to_json(now)
        return found

    def counts(self) -> dict[str, dict[str, int]]:
        """Per datasource, the counters and buffer depth of `stats` without its rates (`IngestStats.counts`)."""
        with self._guard:
            queues = list(self._queues.values())
        return {q.name: q.stats.counts() for q in queues}

    def stop(self, timeout: float = 30.0) -> None:
        """Commit what is waiting, then stop the committing threads."""
        self._stopped = True
        with self._guard:
            queues = list(self._queues.values())
        for queue in queues:
            with queue.cond:
                queue.cond.notify_all()
            if queue.thread is not None:
                queue.thread.join(timeout)

    # ------------------------------------------------------------------------------------ commit
    def _queue(self, name: str) -> _Queue:
        with self._guard:
            if name not in self._queues:
                self._queues[name] = _Queue(name)
            return self._queues[name]

    def _keys(self, queue: _Queue, table: DeployedResource) -> dict[str, IngestResult]:
        if queue.keys is None or queue.keys_of != table.path:
            queue.keys, queue.keys_of = committed_keys(self.spark, table.path or ""), table.path
        return queue.keys

    def _run(self, queue: _Queue) -> None:
        from pipeframe.engine.session import scheduler_pool

        scheduler_pool(self.spark, "ingest")
        while True:
            with queue.cond:
                idle = time.monotonic()
                while not queue.pending:
                    if self._stopped or time.monotonic() - idle > IDLE_SECONDS:
                        queue.thread = None  # the next submit starts another
                        return
                    queue.cond.wait(1.0)
                group = self._gather(queue)
            self._commit(queue, group)

    def _gather(self, queue: _Queue) -> list[_Request]:
        """Wait (holding no commit) until the group is full or its first request has waited `flush_ms`, then take
        it off the queue."""
        settings = self.settings
        # The clock starts when the first request arrived, but not before the previous commit ended: the clients
        # it just answered need a moment to send their next requests, which then join this group.
        deadline = max(queue.pending[0].arrived, queue.committed) + settings.flush_ms / 1000
        while not self._stopped:
            rows = sum(len(r.lines) for r in queue.pending)
            left = deadline - time.monotonic()
            # As many requests as the last commit answered are back: clients that each wait for their answer
            # (a closed loop, one connection per request) have all sent their next one, and none is coming.
            back = queue.last_group and len(queue.pending) >= queue.last_group
            if rows >= settings.flush_rows or queue.stats.buffered_bytes >= settings.flush_bytes or left <= 0 or back:
                break
            queue.cond.wait(left)
        group, rows, size = [], 0, 0
        for request in queue.pending:
            if group and (rows + len(request.lines) > settings.flush_rows or size + request.size > settings.flush_bytes):
                break
            group.append(request)
            rows, size = rows + len(request.lines), size + request.size
        del queue.pending[:len(group)]
        return group

    def _commit(self, queue: _Queue, group: list[_Request]) -> None:
        started = time.monotonic()
        stats = queue.stats
        try:
            table, definition = self.target(queue.name)
            group = self._unfenced(queue, table, group)
            if not group:
                return
            lines, parts = [], []
            for index, request in enumerate(group):
                lines += request.lines
                parts += [index] * len(request.lines)
            typed = type_lines(lines, definition, self.spark.conf.get("spark.sql.session.timeZone")) \
                if self.settings.direct_commit else None
            if typed is None:  # Spark's conform reads the lines
                batch = Batch(conform_lines(self.spark, lines, definition, parts), "events")
            else:
                kept = [part for line, part in zip(lines, parts, strict=True) if line.strip()]
                batch = Batch(None, "events", typed.rows, parts=tuple(kept[i] for i in typed.kept),
                              misfits=tuple((kept[i], raw, reason) for i, raw, reason in typed.misfits))
            sizes = [sum(1 for line in r.lines if line.strip()) for r in group]
            version, landed = self.ingestor.commit(
                table, batch, len(group), [r.key for r in group], sizes=sizes, direct=self.settings.direct_commit,
                metadata=records.GroupCommit(requests=len(group), parse="spark" if typed is None else "arrow"))
        except Exception as exc:  # noqa: BLE001 — every request of the group fails with it; none landed
            queue.committed = time.monotonic()
            with queue.cond:
                self._settle(queue, group)
                stats.failed += len(group)
                # A commit can fail after it landed (an unclear storage error): its keys are read again before a
                # retry of the same key is answered, so the retry finds them rather than committing twice.
                queue.keys = None
            error = exc if isinstance(exc, PipeframeError) and not isinstance(exc, Fenced) else PipeframeError(
                "PF718", f"Cannot commit rows to `{queue.name}`: {first_line(exc)}",
                "Nothing of the request landed: send it again (with the same Idempotency-Key).", http_status=503)
            for request in group:  # a writer of a sequence won meanwhile: its requests are told, the rest try again
                fence = fence_of(request.key)
                fenced = isinstance(exc, Fenced) and fence is not None and fence[0] in exc.landed
                request.done.set_exception(exc if fenced else error)
            self.record("append", datasource=queue.name, seconds=time.monotonic() - started, error=error)
            return
        results = [IngestResult(queue.name, part.accepted, part.quarantined, version, part.reasons)
                   for part in landed]
        with queue.cond:
            self._settle(queue, group)
            for request, result in zip(group, results, strict=True):
                if request.key is not None:  # its submit read the committed keys: no I/O under the lock here
                    self._keys(queue, table)[request.key] = replace(result, replayed=True)
            accepted = sum(r.accepted for r in results)
            stats.commits += 1
            stats.arrow_parsed += typed is not None
            stats.arrow_committed += bool(landed) and landed[0].direct
            stats.requests += len(group)
            stats.rows += accepted
            stats.quarantined += sum(r.quarantined for r in results)
            stats.last_commit_version = version
            stats.last_commit_ms = (time.monotonic() - started) * 1000
            stats.recent.append((time.time(), accepted))
        queue.last_group = len(group)
        mark = self.on_commit(queue.name, version) if version is not None else None
        for request, result in zip(group, results, strict=True):
            request.done.set_result(replace(result, mark=mark))
        queue.committed = time.monotonic()
        self.record("append", datasource=queue.name, seconds=queue.committed - started,
                    rows=sum(r.accepted for r in results), rows_quarantine=sum(r.quarantined for r in results))  # once answered: the next group's `flush_ms` clock starts no earlier

    def _unfenced(self, queue: _Queue, table: DeployedResource, group: list[_Request]) -> list[_Request]:
        """The group less its requests that continue a sequence (a Kafka partition: `fence_of` their key) from a
        number the table already holds, another writer's: each of those fails with `Fenced` (what the table holds)
        before anything is written, so the rest of the group lands. The commit checks again (`deltaappend.append`)
        against a writer that wins in between; a table not in a local folder is checked there only."""
        fences = [fence_of(request.key) for request in group]
        folder = local_folder(table.path or "")
        if folder is None or not any(fences):
            return group
        held = deltalog.transaction_versions(folder, frozenset(f[0] for f in fences if f is not None))
        if held is None:
            return group
        kept, refused = [], []
        for request, fence in zip(group, fences, strict=True):
            if fence is not None:
                app, first, last = fence
                if held.get(app, -1) >= first:
                    refused.append((request, Fenced({app: held[app]})))
                    continue
                held[app] = last  # a later request of the sequence in this group continues after this one
            kept.append(request)
        if refused:
            with queue.cond:
                self._settle(queue, [request for request, _ in refused])
            for request, error in refused:
                request.done.set_exception(error)
        return kept

    @staticmethod
    def _settle(queue: _Queue, group: list[_Request]) -> None:
        for request in group:
            queue.stats.buffered_requests -= 1
            queue.stats.buffered_bytes -= request.size
            if request.key is not None:
                queue.waiting.pop(request.key, None)


def _resolved(result: IngestResult) -> Future:
    future: Future = Future()
    future.set_result(result)
    return future
