"""Writers that meet: Delta's optimistic-concurrency conflicts retried, and the per-view lock that makes two
processes refreshing one view take turns (read its watermark, apply what follows, commit)."""

from __future__ import annotations

import contextlib
import fcntl
import os
import threading
import time
from collections.abc import Callable, Iterator
from typing import TypeVar

T = TypeVar("T")

# Delta's error classes for a commit that lost a race (nothing of it was committed: it can be run again).
CONFLICTS = ("DELTA_CONCURRENT_", "DELTA_METADATA_CHANGED", "DELTA_PROTOCOL_CHANGED", "ConcurrentAppendException",
             "ConcurrentTransactionException", "ConcurrentWriteException", "ConcurrentDeleteReadException",
             "ConcurrentDeleteDeleteException", "MetadataChangedException", "ProtocolChangedException")
ATTEMPTS = 6


def is_conflict(exc: BaseException) -> bool:
    """True when `exc` is Delta refusing a commit because another writer committed first."""
    text = f"{type(exc).__name__} {str(exc)[:400]}"
    return any(marker in text for marker in CONFLICTS)


# Spark's words for a job cancelled under a refresh (Ctrl-C in a process whose SIGINT handler is pyspark's, which
# cancels every job; the session stopping): nothing was committed, and the next refresh applies the same rows.
CANCELLED = ("cancelled as part of cancellation of all jobs", "cancelled part of cancelled job group",
             "SparkContext was shut down", "SPARK_JOB_CANCELLED")


# Spark's words for a task that could not get execution memory while other jobs held it: an aggregation whose
# groups did not fit its hash map sorts its input instead, and the sorter cannot always spill its own pointer
# array (seen with two views recomputing every group of a 10M-row source at once). Nothing was committed.
OUT_OF_MEMORY = ("UNABLE_TO_ACQUIRE_MEMORY", "SparkOutOfMemoryError")


def is_out_of_memory(exc: BaseException) -> bool:
    """True when a Spark job under `exc` failed for want of execution memory (the JVM's text with its causes)."""
    text = f"{exc}\n{getattr(exc, '_stackTrace', '')}"
    return any(marker in text for marker in OUT_OF_MEMORY)


def is_cancelled(exc: BaseException) -> bool:
    """True when `exc` is a Spark job of this refresh cancelled from outside (not an error of the view), also when
    the cancellation is the cause of what was raised (Delta wraps the failures of its own jobs): the JVM's
    exception text with its causes, and the Python causes."""
    seen: BaseException | None = exc
    for _ in range(8):
        if seen is None:
            return False
        text = f"{seen}\n{getattr(seen, '_stackTrace', '')}"
        if any(marker in text for marker in CANCELLED):
            return True
        seen = getattr(seen, "_cause", None) or seen.__cause__ or seen.__context__
    return False


def retrying(action: Callable[[], T], attempts: int = ATTEMPTS) -> T:
    """Run `action`, again after a short pause each time Delta refuses its commit for a concurrent one."""
    for attempt in range(attempts):
        try:
            return action()
        except Exception as exc:
            if not is_conflict(exc) or attempt == attempts - 1:
                raise
            time.sleep(0.1 * 2 ** attempt)
    raise AssertionError("unreachable")


_THREAD_LOCKS: dict[str, threading.Lock] = {}
_GUARD = threading.Lock()


def table_lock(path: str) -> threading.Lock:
    """The lock this process's pipeframe writes to one table take (`engine.deltaappend` commits without Spark's own
    per-table lock, so pipeframe's Spark writes to the same table wait for it here)."""
    folder = local_folder(path)
    key = os.path.realpath(folder) if folder else path  # `file:/x` and `/x` are one table
    with _GUARD:
        return _THREAD_LOCKS.setdefault(f"table\0{key}", threading.Lock())


@contextlib.contextmanager
def view_lock(warehouse_uri: str, view: str) -> Iterator[None]:
    """Held while one view's watermark is read and its increment committed, so two refreshers (threads or
    processes on this machine) never apply one source range twice: the second waits, then finds the view up to
    date or applies only what came after.

    Threads take a lock per view; processes also take an exclusive `flock` on `_pipeframe/locks/<view>.lock`
    in a local warehouse. A warehouse on object storage has no file lock: there the second refresher's commit
    can still fail on Delta's conflict check and is retried."""
    key = f"{warehouse_uri}\0{view}"
    with _GUARD:
        lock = _THREAD_LOCKS.setdefault(key, threading.Lock())
    with lock:
        folder = local_folder(warehouse_uri)
        if folder is None:
            yield
            return
        locks = os.path.join(folder, "_pipeframe", "locks")
        os.makedirs(locks, exist_ok=True)
        with open(os.path.join(locks, f"{view}.lock"), "a+") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)  # released when the file is closed, also by a killed process
            try:
                yield
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)


def local_folder(uri: str) -> str | None:
    """The local folder of a warehouse URI (a path or file: URI), or None for any other filesystem."""
    if "://" not in uri and not uri.startswith("file:"):
        return uri
    if uri.startswith("file:"):
        return uri.removeprefix("file://").removeprefix("file:") or "/"
    return None
