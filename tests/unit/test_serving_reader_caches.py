"""What the read path keeps between requests (statements, answers, a view finalized per version, what is deployed
during one request) never answers with an old state: tables and a state store written by delta-rs, no JVM."""

from __future__ import annotations

import datetime as dt

import pyarrow as pa
import pytest
from deltalake import write_deltalake

from pipeframe.compiler.graph import ResourceKey
from pipeframe.plan.records import encode_state
from pipeframe.plan.state import ResourceState
from pipeframe.serving.reader import STATE_TABLE, Reader

COLUMNS = (("k", "STRING"), ("n", "BIGINT"))
SUM = "SELECT `k`, sum(`n`) AS `n` FROM {table} GROUP BY `k` HAVING sum(`n`) > 0"
MAX = "SELECT `k`, max(`n`) AS `n` FROM {table} GROUP BY `k`"
QUERY = "SELECT k, n FROM totals WHERE n >= {least} ORDER BY k"


def view(read_sql: str) -> ResourceState:
    return ResourceState(ResourceKey.datasource("totals"), "totals", "view", columns=COLUMNS, read_sql=read_sql)


def deploy(warehouse, state: ResourceState, mode: str = "append") -> None:
    """One deploy's record of the view in the state store (the newest record of a key is what is deployed)."""
    record = pa.table({"record": ["resource"], "key": [str(state.key)], "version": pa.array([1], pa.int64()),
                       "path": [str(warehouse / "totals")], "state": [encode_state(state)],
                       "deployed_at": pa.array([dt.datetime(2026, 1, 1)], pa.timestamp("us", tz="UTC"))})
    write_deltalake(str(warehouse / STATE_TABLE), record, mode=mode)


def partials(warehouse, rows: list[tuple[str, int]]) -> None:
    """Partial rows of the view (one commit): the view's answer is their merge."""
    write_deltalake(str(warehouse / "totals"), pa.table({"k": [k for k, _ in rows],
                                                          "n": pa.array([n for _, n in rows], pa.int64())}),
                    mode="append")


@pytest.fixture
def warehouse(tmp_path):
    partials(tmp_path, [("a", 1), ("a", 2), ("b", 5)])
    deploy(tmp_path, view(SUM), mode="overwrite")
    return tmp_path


def answer(reader: Reader, least: int = 0) -> list[tuple]:
    return reader.query(QUERY.format(least=least)).rows


def test_a_new_version_of_a_view_is_in_the_next_answer(warehouse):
    reader = Reader(str(warehouse))
    assert answer(reader) == [("a", 3), ("b", 5)]
    assert answer(reader) == [("a", 3), ("b", 5)]  # kept: the same statement over the same versions
    partials(warehouse, [("a", 10), ("c", 1)])
    assert answer(reader) == [("a", 13), ("b", 5), ("c", 1)]
    partials(warehouse, [("b", -5)])  # a retraction: the finalized view drops the key
    assert answer(reader) == [("a", 13), ("c", 1)]


def test_another_parameter_value_is_another_answer(warehouse):
    reader = Reader(str(warehouse))
    assert answer(reader, least=0) == [("a", 3), ("b", 5)]
    assert answer(reader, least=4) == [("b", 5)]
    assert answer(reader, least=6) == []
    assert answer(reader, least=0) == [("a", 3), ("b", 5)]


def test_a_redeploy_of_the_view_is_in_the_next_answer(warehouse):
    reader = Reader(str(warehouse))
    assert answer(reader) == [("a", 3), ("b", 5)]
    deploy(warehouse, view(MAX))  # the same table, finalized another way
    assert answer(reader) == [("a", 2), ("b", 5)]
    deploy(warehouse, view(SUM))
    assert answer(reader) == [("a", 3), ("b", 5)]


def test_a_request_reads_one_deployed_state_and_the_next_one_the_newest(warehouse):
    reader = Reader(str(warehouse))
    with reader.pinned() as pinned:
        deploy(warehouse, view(MAX))
        assert reader.deployed() is pinned
        assert answer(reader) == [("a", 3), ("b", 5)]  # as deployed when the request began
        partials(warehouse, [("a", 4)])
        assert answer(reader) == [("a", 7), ("b", 5)]  # its tables at their newest versions
    assert reader.deployed().version == pinned.version + 1
    assert answer(reader) == [("a", 4), ("b", 5)]


# ------------------------------------------------------------------ a Date or DateTime parameter bound, not re-translated
EVENTS = [(dt.datetime(2024, 5, 1, 0, 0), 1), (dt.datetime(2024, 5, 1, 10, 30, 0, 500000), 2),
          (dt.datetime(2024, 5, 2, 0, 0), 4), (dt.datetime(2024, 5, 3, 12, 0), 8)]
SINCE = "SELECT sum(n) AS n, count(*) AS c FROM hits WHERE ts >= CAST('{since}' AS TIMESTAMP) AND tag = '{tag}'"


@pytest.fixture
def hits(tmp_path):
    write_deltalake(str(tmp_path / "hits"), pa.table({
        "ts": pa.array([t for t, _ in EVENTS], pa.timestamp("us", tz="UTC")),
        "n": pa.array([n for _, n in EVENTS], pa.int64()), "tag": ["x", "x", "x", "y"]}))
    state = ResourceState(ResourceKey.datasource("hits"), "hits", "datasource",
                          columns=(("ts", "TIMESTAMP"), ("n", "BIGINT"), ("tag", "STRING")))
    record = pa.table({"record": ["resource"], "key": [str(state.key)], "version": pa.array([1], pa.int64()),
                       "path": [str(tmp_path / "hits")], "state": [encode_state(state)],
                       "deployed_at": pa.array([dt.datetime(2026, 1, 1)], pa.timestamp("us", tz="UTC"))})
    write_deltalake(str(tmp_path / STATE_TABLE), record)
    return tmp_path


@pytest.mark.parametrize("since", ["2024-05-01", "2024-05-01 10:30:00", "2024-05-01 10:30:00.5", "2024-05-01T10:30:01",
                                   "2024-05-02 00:00:00", "2024-05-04"])
def test_a_time_parameter_bound_answers_as_the_statement_written_out(hits, since):
    reader = Reader(str(hits))
    reader.query(SINCE.format(since="2024-05-01 00:00:00", tag="x"))  # the shape translated with another value
    bound = reader.query(SINCE.format(since=since, tag="x")).rows
    limit = dt.datetime.fromisoformat(since)
    expected = [n for t, n in EVENTS[:3] if t >= limit]
    assert bound == [(sum(expected) if expected else None, len(expected))]
    assert Reader(str(hits)).query(SINCE.format(since=since, tag="x")).rows == bound  # translated afresh


def test_a_literal_not_bound_is_never_taken_from_another_statement(hits):
    reader = Reader(str(hits))
    assert reader.query(SINCE.format(since="2024-05-01", tag="x")).rows == [(7, 3)]
    assert reader.query(SINCE.format(since="2024-05-01", tag="y")).rows == [(8, 1)]
    assert reader.query(SINCE.format(since="2024-05-03", tag="x")).rows == [(None, 0)]
