"""Stopping a long-running process (`serve`, `dev`) with Ctrl-C or SIGTERM, JVM-free: within
`interrupted_cleanly` both signals raise KeyboardInterrupt in the main thread and do nothing else (pyspark's own
SIGINT handler, installed when the session starts, would also cancel every Spark job: the view refresh under way
would fail half-way); and a refresh cut off by cancelled jobs is told apart from a failing view."""

from __future__ import annotations

import os
import signal

import pytest

from pipeframe.engine.conflicts import is_cancelled, is_conflict
from pipeframe.server.app import interrupted_cleanly


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_only_interrupts_the_main_thread_and_the_handlers_before_come_back(signum):
    cancelled: list[int] = []

    def pysparks_way(received, _frame):  # what pyspark's handler does: cancel every job, then interrupt
        cancelled.append(received)
        raise KeyboardInterrupt

    previous = {s: signal.signal(s, pysparks_way) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        with pytest.raises(KeyboardInterrupt), interrupted_cleanly():
            os.kill(os.getpid(), signum)
            for _ in range(1000):  # Python runs the handler between bytecodes: here, inside the block
                pass
        assert cancelled == [], "jobs would have been cancelled"
        assert signal.getsignal(signal.SIGINT) is pysparks_way and signal.getsignal(signal.SIGTERM) is pysparks_way
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)


def test_cancelled_jobs_are_told_apart_from_errors_and_conflicts():
    cancelled = Exception("An error occurred while calling o203.getResult.\n: org.apache.spark.SparkException: "
                          "Job 35 cancelled as part of cancellation of all jobs\n\tat org.apache.spark...")
    shut_down = Exception("org.apache.spark.SparkException: Job 7 cancelled because SparkContext was shut down")
    assert is_cancelled(cancelled) and is_cancelled(shut_down)
    wrapped = Exception("[DELTA_FAILED_TO_READ] Failed to read the log")  # Delta's own failure, caused by a cancel
    wrapped._stackTrace = ("org.apache.spark.sql.delta.DeltaIllegalStateException: Failed to read the log\n"
                           "Caused by: org.apache.spark.SparkException: Job 9 cancelled part of cancelled job group x")
    assert is_cancelled(wrapped)
    try:
        try:
            raise shut_down
        except Exception as inner:
            raise RuntimeError("the state write failed") from inner
    except RuntimeError as outer:
        assert is_cancelled(outer)
    assert not is_conflict(cancelled)
    for other in (Exception("[DELTA_TABLE_NOT_FOUND] Delta table `/w/t` doesn't exist."),
                  Exception("ConcurrentAppendException: Files were added"), ZeroDivisionError("division by zero")):
        assert not is_cancelled(other)
