"""deltaappend.replace_keys without a JVM, with the touched keys as DuckDB computes them (`sparkstore.changed_keys`:
a recompute's touched groups, committed without a Spark job to bring them back): keys of other Arrow types than the
table's files hold (an instant with a zone, a 64-bit integer for an INT, NULL) replace exactly the groups they name,
and a key that does not fit the table's type leaves the change to Spark, committing nothing."""

from __future__ import annotations

import os
from datetime import UTC, datetime

import duckdb
import pyarrow as pa

from pipeframe.engine import deltaappend, deltalog

COLUMNS = "hour TIMESTAMP, status INT, endpoint STRING, requests BIGINT"
HOURS = [datetime(2024, 5, 1, h, tzinfo=UTC) for h in range(4)]


def view(tmp_path) -> str:
    folder = str(tmp_path / "hourly")
    rows = [{"hour": hour, "status": status, "endpoint": endpoint, "requests": 1}
            for hour in HOURS for status in (200, 500, None) for endpoint in ("/a", "/b")]
    assert deltaappend.create(folder, COLUMNS, rows) is True
    return folder


def held(folder: str) -> list[tuple]:
    found = deltalog.read_rows(folder, ["hour", "status", "endpoint", "requests"])
    assert found is not None
    return ordered((r["hour"].replace(tzinfo=None), r["status"], r["endpoint"], r["requests"]) for r in found[1])


def ordered(rows) -> list[tuple]:
    return sorted(rows, key=lambda row: tuple((value is None, str(value)) for value in row))


def new_rows(touched: list[tuple]) -> pa.Table:
    return pa.table({"hour": pa.array([h for h, _ in touched for _e in "ab"], pa.timestamp("us", tz="UTC")),
                     "status": pa.array([s for _, s in touched for _e in "ab"], pa.int32()),
                     "endpoint": [f"/{e}" for _ in touched for e in "ab"],
                     "requests": pa.array([7] * 2 * len(touched), pa.int64())})


def test_keys_computed_by_duckdb_replace_exactly_their_groups(tmp_path):
    folder = view(tmp_path)
    before = held(folder)
    keys = duckdb.sql("SELECT TIMESTAMPTZ '2024-05-01 01:00:00+00' AS hour, 500::BIGINT AS status UNION ALL "
                      "SELECT TIMESTAMPTZ '2024-05-01 05:00:00+03' AS hour, NULL::BIGINT AS status").to_arrow_table()
    assert keys.schema.field("status").type == pa.int64()  # not the table's INT: cast as the files hold it
    touched = [(HOURS[1], 500), (HOURS[2], None)]
    version = deltaappend.replace_keys(folder, ["hour", "status"], keys, new_rows(touched))
    assert version == 1
    replaced = {(h.replace(tzinfo=None), s) for h, s in touched}
    expected = [row for row in before if (row[0], row[1]) not in replaced]
    expected += [(h.replace(tzinfo=None), s, f"/{e}", 7) for h, s in touched for e in "ab"]
    assert len(expected) == len(before)  # two groups of two rows replaced
    assert held(folder) == ordered(expected)


def test_a_key_that_does_not_fit_the_tables_type_commits_nothing(tmp_path):
    folder = view(tmp_path)
    before, files = held(folder), sorted(os.listdir(folder))
    keys = pa.table({"hour": pa.array([HOURS[0]], pa.timestamp("us", tz="UTC")),
                     "status": pa.array([2 ** 40], pa.int64())})  # no INT holds it: Spark's MERGE decides
    assert deltaappend.replace_keys(folder, ["hour", "status"], keys, new_rows([(HOURS[0], 200)])) is None
    assert held(folder) == before and sorted(os.listdir(folder)) == files
