"""Fenced appends without a JVM (engine/deltaappend.py, engine/ingest.py): an append that continues a sequence (a
Kafka partition's offsets) records the last number in a Delta `txn` action, and lands only while the table holds no
number of its range. Two writers racing over one sequence in two processes land every number exactly once."""

from __future__ import annotations

import multiprocessing
import os
import random

import pyarrow as pa
import pytest

from pipeframe.engine import deltaappend, deltalog
from pipeframe.engine.deltaappend import Fenced
from pipeframe.engine.ingest import fence_of, fences_of
from pipeframe.errors import PipeframeError

APP = "kafka/clicks/3"
NUMBERS = 400


def rows(first: int, last: int, writer: str = "a") -> pa.Table:
    return pa.table({"n": pa.array(range(first, last + 1), pa.int64()), "writer": [writer] * (last - first + 1)})


def append(folder: str, first: int, last: int, writer: str = "a") -> int | None:
    return deltaappend.append(folder, rows(first, last, writer), on_checkpoint=lambda _version: None,
                              fences={APP: (first, last)})


def landed(folder: str) -> list[int]:
    found = deltalog.read_rows(folder, ["n"])
    assert found is not None
    return sorted(row["n"] for row in found[1])


@pytest.fixture
def table(tmp_path) -> str:
    folder = str(tmp_path / "clicks")
    assert deltaappend.create(folder, "n BIGINT, writer STRING") is True
    return folder


def test_a_kafka_key_names_its_partition_and_its_offsets():
    assert fence_of("kafka/clicks/3/100-199") == (APP, 100, 199)
    assert fence_of("kafka/web.events-v2/0/7-7") == ("kafka/web.events-v2/0", 7, 7)
    for other in (None, "", "order-17", "s3://bucket/key#etag", "kafka/clicks/3/9-2", "kafka/clicks/3/x-9",
                  "kafka/clicks/3/-1-5"):
        assert fence_of(other) is None, other
    keys = ["kafka/clicks/3/10-19", None, "evt-1", "kafka/clicks/3/20-29", "kafka/clicks/0/5-6"]
    assert fences_of(keys) == {APP: (10, 29), "kafka/clicks/0": (5, 6)}


def test_an_append_that_reaches_into_numbers_the_table_holds_is_refused_and_writes_nothing(table):
    assert append(table, 0, 9) == 1
    before = sorted(os.listdir(os.path.join(table, "_delta_log")))
    for first, last in ((5, 14), (9, 9), (0, 3)):
        with pytest.raises(Fenced) as refused:
            append(table, first, last, "b")
        assert refused.value.landed == {APP: 9}
        assert isinstance(refused.value, PipeframeError) and refused.value.diagnostics[0].code == "PF719"
    assert sorted(os.listdir(os.path.join(table, "_delta_log"))) == before
    assert append(table, 10, 19) == 2
    assert append(table, 25, 30) == 3  # a gap (offsets compacted away, or quarantined before) is no refusal
    assert landed(table) == [*range(20), *range(25, 31)]
    assert deltalog.transaction_versions(table, frozenset({APP, "kafka/clicks/0"})) == {APP: 30}
    commit = deltalog.commit_actions(table, 3) or []
    assert [a["txn"]["appId"] for a in commit if "txn" in a] == [APP]
    assert [a["txn"]["version"] for a in commit if "txn" in a] == [30]


def test_an_append_without_a_fence_is_not_held_back_by_one(table):
    assert append(table, 0, 9) == 1
    assert deltaappend.append(table, rows(3, 4, "events"), on_checkpoint=lambda _version: None) == 2
    assert landed(table) == sorted([*range(10), 3, 4])


def test_a_writer_of_the_same_sequence_that_wins_the_version_refuses_the_append_it_overtook(table, monkeypatch):
    """The race made certain: another writer commits while this append writes its files (after its check against the
    snapshot, before its commit): the commit that won is read, and its `txn` refuses this one."""
    write_files = deltaappend._write_files
    other: list = []  # what the other writer's append is, and then what it answered

    def then_another_writer(*args):
        if other and callable(other[0]):
            job = other.pop()  # taken first: its own append writes its files through here too
            other.append(job())
        return write_files(*args)

    monkeypatch.setattr(deltaappend, "_write_files", then_another_writer)
    other[:] = [lambda: append(table, 0, 4, "b")]
    with pytest.raises(Fenced) as refused:
        append(table, 0, 9)
    assert other == [1] and refused.value.landed == {APP: 4}
    # Another sequence's commit wins the version: no refusal, the append takes the next version.
    other[:] = [lambda: deltaappend.append(table, rows(0, 0, "c"), fences={"kafka/clicks/0": (0, 0)})]
    assert append(table, 5, 9) == 3 and other == [2]
    assert landed(table) == [0, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9]


def race(folder: str, writer: str, seed: int, go) -> None:
    """One writer of the whole sequence 0..NUMBERS-1 in random batches; when refused, on after what the table holds."""
    chooser = random.Random(seed)
    go.wait()
    position = 0
    while position < NUMBERS:
        last = min(NUMBERS - 1, position + chooser.randint(1, 25))
        try:
            assert append(folder, position, last, writer) is not None
            position = last + 1
        except Fenced as refused:
            position = refused.landed[APP] + 1


def test_two_processes_writing_one_sequence_land_every_number_once(table):
    context = multiprocessing.get_context("fork")
    go = context.Barrier(3)
    writers = [context.Process(target=race, args=(table, name, seed, go)) for name, seed in (("a", 1), ("b", 2))]
    for writer in writers:
        writer.start()
    go.wait()
    for writer in writers:
        writer.join(120)
        assert writer.exitcode == 0
    assert landed(table) == list(range(NUMBERS))
    assert deltalog.transaction_versions(table, frozenset({APP})) == {APP: NUMBERS - 1}
