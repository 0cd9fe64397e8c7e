"""engine.recompute without a JVM: which touched keys a narrow recompute matches as literals instead of a semi join,
and how each is written. tests/spark/test_recompute_ranges.py proves on Spark, in four time zones and for every kind
of group key, that the literals keep the rows the join keeps."""

from __future__ import annotations

from datetime import UTC, date, datetime

import pyarrow as pa

from pipeframe.compiler.maintenance import GroupKey
from pipeframe.engine.recompute import LITERAL_KEYS, _as_literals

HOUR = GroupKey("hour", "DATE_TRUNC('HOUR', `ts`)", "ts", "TIMESTAMP", "HOUR")


def keys(values: list, kind: pa.DataType, name: str = "hour") -> pa.Table:
    return pa.table({name: pa.array(values, kind)})


def test_instants_dates_and_integers_are_written_as_exact_literals():
    moment = datetime(2024, 5, 1, 13, tzinfo=UTC)
    assert _as_literals((HOUR,), keys([moment], pa.timestamp("us", tz="Asia/Kolkata"))) == [
        f"timestamp_micros({int(moment.timestamp()) * 1_000_000})"]
    assert _as_literals((HOUR,), keys([moment], pa.timestamp("ms", tz="UTC"))) == [
        f"timestamp_micros({int(moment.timestamp()) * 1_000_000})"]
    assert _as_literals((HOUR,), keys([date(1970, 1, 2), date(1969, 12, 31)], pa.date32())) == [
        "date_from_unix_date(1)", "date_from_unix_date(-1)"]
    assert _as_literals((HOUR,), keys([-5, 2 ** 40], pa.int64())) == ["-5", str(2 ** 40)]


def test_the_join_decides_where_literals_could_differ_or_grow():
    moment = datetime(2024, 5, 1, 13)
    assert _as_literals((HOUR,), keys([moment], pa.timestamp("us"))) is None  # a wall-clock time: no instant
    assert _as_literals((HOUR,), keys([1, None], pa.int64())) is None  # IN never matches a NULL key
    assert _as_literals((HOUR,), keys(["/api"], pa.string())) is None
    assert _as_literals((HOUR,), keys([1_000_000_001], pa.timestamp("ns", tz="UTC"))) is None  # finer than Spark
    assert _as_literals((HOUR,), keys([2 ** 63], pa.uint64())) is None
    assert _as_literals((HOUR,), keys(list(range(LITERAL_KEYS + 1)), pa.int32())) is None
    assert _as_literals((HOUR,), keys(list(range(LITERAL_KEYS)), pa.int32())) is not None
    two = pa.table({"hour": pa.array([1], pa.int32()), "status": pa.array([200], pa.int32())})
    assert _as_literals((HOUR, GroupKey("status", "`status`", "status", "INT")), two) is None
