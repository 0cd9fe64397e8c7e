"""Sums that meet NULLs, against ClickHouse itself: views over a ClickHouse-typed datasource (a `Nullable(Int32)`
beside plain `Int32`/`Float64` columns) are maintained on the in-memory store through random appends, deletes and
updates, and after each change every view answers what chdb (in-process ClickHouse) answers for the same query
over the same rows.

What it pins down: a negated sum cannot tell "no value left" (NULL) from values summing to zero, so a sum over a
column that may hold NULL recomputes the groups a delete touches, while a sum over never-NULL values keeps being
subtracted; and `sumIf` of a never-NULL column is 0 for a group where no row matches (ClickHouse's answer), NULL
for a `Nullable` one."""

from __future__ import annotations

import json
import math
import random

import chdb
import pytest

from pipeframe.plan.snapshot import DeployedResource, DeployedSnapshot
from pipeframe.plan.state import desired_state
from pipeframe.project import Project
from pipeframe.serving.memstore import MemoryStore
from tests.conftest import write_project
from tests.memviews import answer, built, pipe, refresh

COLUMNS = "k String, x Int32, n Nullable(Int32), f Float64"
EVENTS = "SCHEMA >\n" + ",\n".join(f"    `{c.split()[0]}` {c.split(' ', 1)[1]}" for c in COLUMNS.split(", ")) + "\n"
VIEWS = {
    # `n` may be NULL: deletes recompute the groups they touch
    "nullable": "SELECT k, count() AS c, sum(n) AS sn, sumIf(n, x > 50) AS sni, avg(n) AS an, sum(x) AS sx "
                "FROM events GROUP BY k",
    # every sum is of never-NULL values: deletes subtract (negate); sumIf of no matching row is 0
    "plain": "SELECT k, count() AS c, sum(x) AS sx, sumIf(x, x > 50) AS sxi, sum(f) AS sf, sum(x * 2 + 1) AS sy "
             "FROM events GROUP BY k",
}
KEYS = ["a", "b", "c"]


@pytest.fixture(scope="module")
def deployed(tmp_path_factory) -> DeployedSnapshot:
    root = write_project(tmp_path_factory.mktemp("null_sums") / "proj", {
        "datasources/events.datasource": EVENTS, **{f"pipes/{name}.pipe": pipe(name, sql) for name, sql in VIEWS.items()}})
    states = desired_state(Project(root).require_valid())
    return DeployedSnapshot.of(DeployedResource(s, 1, f"mem://{s.name}") for s in states.values() if s.has_table)


def clickhouse(sql: str, rows: list[dict]) -> list[tuple]:
    """`sql` run by ClickHouse over `rows` as the table `events`, in answer()'s order and rounding."""
    data = "\n".join(json.dumps(row) for row in rows)
    table = f"format(JSONEachRow, '{COLUMNS}', $${data}$$)" if rows else f"(SELECT * FROM generateRandom('{COLUMNS}') LIMIT 0)"
    result = chdb.query(sql.replace("FROM events", f"FROM {table}") +
                        " SETTINGS output_format_json_quote_64bit_integers = 0", "JSONCompactEachRow")
    out = []
    for line in str(result).splitlines():
        values = json.loads(line)
        out.append(tuple(None if isinstance(v, float) and math.isnan(v) else round(v, 9) if isinstance(v, float)
                         else v for v in values))
    return sorted(out, key=repr)


def random_rows(rng: random.Random) -> list[dict]:
    return [{"k": rng.choice(KEYS), "x": rng.randrange(-10, 100), "n": None if rng.random() < 0.4 else rng.randrange(-5, 9),
             "f": rng.randrange(-40, 400) / 4} for _ in range(rng.randrange(1, 12))]


def test_the_plan_subtracts_only_sums_of_never_null_values(deployed):
    assert deployed.table("nullable_mv").state.negate_sql is None
    assert deployed.table("plain_mv").state.negate_sql is not None


@pytest.mark.parametrize("seed", range(3))
def test_random_changes_through_views_with_nulls_equal_clickhouse(deployed, seed):
    rng = random.Random(seed)
    store = MemoryStore()
    source = deployed.table("events")
    store.create(source)
    views = [deployed.table(f"{name}_mv") for name in VIEWS]
    for view in views:
        built(store, view, source, deployed)
    taken: dict[str, set[str]] = {view.state.name: set() for view in views}
    for step in range(25):
        kind = "insert" if step < 2 else rng.choice(["insert", "insert", "delete", "update"])
        if kind == "insert":
            store.insert(source.path, random_rows(rng))
        elif kind == "delete":  # often every row of a group with a value in `n`, or every row a sumIf counts
            key, floor = rng.choice(KEYS), rng.randrange(0, 110)
            store.delete(source.path, rng.choice([lambda r, k=key: r["k"] == k and r["n"] is not None,
                                                  lambda r, f=floor: r["x"] > max(f, 50),
                                                  lambda r, k=key, f=floor: r["k"] == k and r["x"] < f]))
        else:  # a value becomes NULL, or a row moves to another group
            key = rng.choice(KEYS)
            store.update(source.path, lambda r, k=key: {**r, "n": None} if r["k"] == k and rng.random() < 0.5
                         else {**r, "k": rng.choice(KEYS)} if rng.random() < 0.2 else None)
        rows = store.rows(source.path)
        for view in views:
            done = refresh(store, view, deployed)
            assert done.outcome == "applied", (step, kind, done)
            taken[view.state.name].add(done.path)
            assert answer(store, view, store.current(view)) == clickhouse(VIEWS[view.state.name.removesuffix("_mv")], rows), \
                (seed, step, kind, view.state.name, done.path)
    assert taken["nullable_mv"] >= {"append", "recompute"} and "negate" not in taken["nullable_mv"], taken
    assert taken["plain_mv"] >= {"append", "negate"} and "recompute" not in taken["plain_mv"], taken


DIMS = "SCHEMA >\n    `k` String,\n    `w` Int32,\n    `v` Nullable(Int32),\n    `d` INT DEFAULT 1\n"
PLANS = {  # view -> whether deletes can subtract its states
    "inner_join": (("SELECT e.k, count() AS c, sum(d.w + d.d) AS s FROM events AS e JOIN dims AS d ON e.k = d.k "
                   "GROUP BY e.k"), True),
    "inner_join_nullable": (("SELECT e.k, count() AS c, sum(d.v) AS s FROM events AS e JOIN dims AS d ON e.k = d.k "
                            "GROUP BY e.k"), False),
    "left_join_kept_side": (("SELECT e.k, count() AS c, sum(e.x) AS s FROM events AS e LEFT JOIN dims AS d "
                            "ON e.k = d.k GROUP BY e.k"), True),
    "left_join_padded_side": (("SELECT e.k, count() AS c, sum(d.w) AS s FROM events AS e LEFT JOIN dims AS d "
                              "ON e.k = d.k GROUP BY e.k"), False),
    "coalesced": (("SELECT k, count() AS c, sum(coalesce(n, 0)) AS s, sum(if(x > 0, x, 0)) AS p FROM events "
                  "GROUP BY k"), True),
    "case_without_else": ("SELECT k, count() AS c, sum(CASE WHEN x > 0 THEN x END) AS s FROM events GROUP BY k",
                          False),
    "filtered": ("SELECT k, count() AS c, sum(x) FILTER (WHERE x > 0) AS s FROM events GROUP BY k", False),
    "narrowing_cast": ("SELECT k, count() AS c, sum(toInt8(f)) AS s FROM events GROUP BY k", False),
}


def test_which_sums_subtract_follows_what_may_be_null(tmp_path):
    """A sum subtracts only when `check` can tell from the schema that what it sums is never NULL: a non-Nullable
    ClickHouse type or a DEFAULT; not the padded side of a LEFT JOIN, a CASE without ELSE, a FILTER or a narrowing
    conversion; through earlier nodes and cascading views."""
    root = write_project(tmp_path / "proj", {
        "datasources/events.datasource": EVENTS, "datasources/dims.datasource": DIMS,
        **{f"pipes/{name}.pipe": pipe(name, sql) for name, sql in VIEWS.items()},
        **{f"pipes/{name}.pipe": pipe(name, sql) for name, (sql, _) in PLANS.items()},
        "pipes/earlier_node.pipe": "NODE doubled\nSQL >\n    SELECT k, x * 2 AS twice, n AS maybe FROM events\n"
                                   + pipe("earlier_node", "SELECT k, count() AS c, sum(twice) AS s FROM doubled GROUP BY k"),
        "pipes/cascade.pipe": pipe("cascade", "SELECT k, sum(c) AS c, sum(sx) AS sx, sum(sn) AS sn FROM plain_mv "
                                              "JOIN nullable_mv USING (k) GROUP BY k"),
        "pipes/earlier_nullable.pipe": "NODE doubled\nSQL >\n    SELECT k, x * 2 AS twice, n AS maybe FROM events\n"
                                       + pipe("earlier_nullable", "SELECT k, count() AS c, sum(maybe) AS s FROM doubled "
                                              "GROUP BY k")})
    compiled = Project(root).require_valid()
    states = {s.name: s for s in desired_state(compiled).values()}
    # a cascade's sums of the upstream's sum states: never NULL where those are not
    assert {c.name: c.not_null for c in compiled.pipes["cascade"].view.plan.columns} == \
        {"k": True, "c": True, "sx": True, "sn": False}
    expected = {**{name: subtracts for name, (_, subtracts) in PLANS.items()},
                "earlier_node": True, "earlier_nullable": False}
    assert {name: states[f"{name}_mv"].negate_sql is not None for name in expected} == expected
