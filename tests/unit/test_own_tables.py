"""pipeframe's own small tables (state store, deploy lock, view records) created and rewritten without Spark
(`deltaappend.create` / `deltaappend.rewrite`), read back by an independent Delta reader (delta-rs). No JVM:
tests/spark/test_deltaappend.py reads the same commits with Spark."""

from __future__ import annotations

import threading
from datetime import datetime

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from pipeframe.engine import deltaappend, deltalog

COLUMNS = "id INT, holder STRING, n BIGINT, at TIMESTAMP"


def rows_of(folder) -> list[dict]:
    table = DeltaTable(str(folder))
    return sorted(table.to_pyarrow_table().to_pylist(), key=lambda r: r["id"])


def add_one(rows: list[dict]) -> list[dict]:
    return [{**r, "n": r["n"] + 1} for r in rows]


def test_a_created_table_is_read_by_delta_rs_and_a_second_create_finds_it_there(tmp_path):
    assert deltaappend.create(str(tmp_path), COLUMNS, [{"id": 1, "n": 0}]) is True
    assert deltaappend.create(str(tmp_path), COLUMNS, [{"id": 2, "n": 5}]) is False  # one writer takes version 0
    table = DeltaTable(str(tmp_path))
    assert table.version() == 0
    assert [(f.name, str(f.type)) for f in table.schema().fields] == [
        ("id", 'PrimitiveType("integer")'), ("holder", 'PrimitiveType("string")'), ("n", 'PrimitiveType("long")'),
        ("at", 'PrimitiveType("timestamp")')]
    assert rows_of(tmp_path) == [{"id": 1, "holder": None, "n": 0, "at": None}]


def test_a_rewrite_replaces_every_row_and_nothing_to_change_commits_nothing(tmp_path):
    deltaappend.create(str(tmp_path), COLUMNS, [{"id": 1, "n": 0}, {"id": 2, "n": 7}])
    stamp = datetime(2026, 11, 27, 9, 30, 1, 250000)  # naive: UTC, as pipeframe's clock
    version, rows = deltaappend.rewrite(str(tmp_path), lambda rs: [
        {**r, "holder": "me", "at": stamp} for r in rs if r["id"] == 2])
    assert version == 1 and rows == [{"id": 2, "holder": "me", "n": 7, "at": stamp}]
    assert [{**r, "at": r["at"].replace(tzinfo=None)} for r in rows_of(tmp_path)] == rows
    assert deltalog.read_rows(str(tmp_path), ["id", "holder", "n", "at"]) == (1, rows)

    assert deltaappend.rewrite(str(tmp_path), lambda rs: None) == (1, rows)
    assert DeltaTable(str(tmp_path)).version() == 1
    assert deltaappend.rewrite(str(tmp_path), lambda rs: []) == (2, [])  # every row deleted
    assert rows_of(tmp_path) == []


def test_two_writers_that_read_one_version_both_land_and_neither_loses_the_others_change(tmp_path):
    deltaappend.create(str(tmp_path), COLUMNS, [{"id": 1, "n": 0}])
    both_read = threading.Barrier(2)
    calls = []
    first = threading.local()

    def increment(rows: list[dict]) -> list[dict]:
        calls.append(rows[0]["n"])
        if not getattr(first, "done", False):  # each writer's first attempt reads version 0 before either commits
            first.done = True
            both_read.wait(timeout=30)
        return add_one(rows)

    def writer() -> None:
        for _ in range(4):
            assert deltaappend.rewrite(str(tmp_path), increment) is not None

    threads = [threading.Thread(target=writer) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert rows_of(tmp_path)[0]["n"] == 8  # eight increments, none lost
    assert DeltaTable(str(tmp_path)).version() == 8
    assert calls.count(0) == 2 and len(calls) > 8  # both read version 0; the loser read again and retried


def test_a_rewrite_leaves_to_spark_a_checkpoint_version_and_what_needs_more_than_removes(tmp_path):
    deltaappend.create(str(tmp_path / "t"), COLUMNS, [{"id": 1, "n": 0}])
    for expected in range(1, 10):
        assert deltaappend.rewrite(str(tmp_path / "t"), add_one)[0] == expected
    assert deltaappend.rewrite(str(tmp_path / "t"), add_one) is None  # version 10: Spark writes it and its checkpoint
    assert DeltaTable(str(tmp_path / "t")).version() == 9

    rows = pa.table({"id": pa.array([1], pa.int32()), "n": pa.array([0], pa.int64())})
    for name, config in (("cdf", {"delta.enableChangeDataFeed": "true"}), ("append_only", {"delta.appendOnly": "true"})):
        write_deltalake(str(tmp_path / name), rows, configuration=config)
        assert deltaappend.rewrite(str(tmp_path / name), add_one) is None, name
        assert DeltaTable(str(tmp_path / name)).version() == 0


@pytest.mark.parametrize("change", [lambda rs: [{**r, "n": "many"} for r in rs], lambda rs: [{"id": 1, "zz": 1}]])
def test_rows_that_do_not_fit_the_table_are_left_to_spark(tmp_path, change):
    deltaappend.create(str(tmp_path), COLUMNS, [{"id": 1, "n": 0}])
    assert deltaappend.rewrite(str(tmp_path), change) is None
    assert DeltaTable(str(tmp_path)).version() == 0
