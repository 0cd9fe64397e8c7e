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
    # one group, which every row may leave: ClickHouse's sums of no row are 0
    "overall": "SELECT count() AS c, sum(x) AS sx, sumIf(f, x > 90) AS sf FROM events",
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
                                                  lambda r, k=key, f=floor: r["k"] == k and r["x"] < f,
                                                  lambda r: True]))
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
    assert taken["overall_mv"] >= {"append", "negate"}, taken


DIMS = "SCHEMA >\n    `k` String,\n    `w` Int32,\n    `v` Nullable(Int32),\n    `d` INT DEFAULT 1\n"
PLANS = {  # view -> (earlier nodes, the materialized node's SQL, whether deletes can subtract its states)
    "inner_join": ((), ("SELECT e.k, count() AS c, sum(d.w + d.d) AS s FROM events AS e JOIN dims AS d ON e.k = d.k "
                       "GROUP BY e.k"), True),
    "inner_join_nullable": ((), ("SELECT e.k, count() AS c, sum(d.v) AS s FROM events AS e JOIN dims AS d "
                                "ON e.k = d.k GROUP BY e.k"), False),
    "left_join_kept_side": ((), ("SELECT e.k, count() AS c, sum(e.x) AS s FROM events AS e LEFT JOIN dims AS d "
                                "ON e.k = d.k GROUP BY e.k"), True),
    "left_join_padded_side": ((), ("SELECT e.k, count() AS c, sum(d.w) AS s FROM events AS e LEFT JOIN dims AS d "
                                  "ON e.k = d.k GROUP BY e.k"), False),
    "ambiguous_bare_name": ((), ("SELECT e.k, count() AS c, sum(w) AS s FROM events AS e JOIN dims AS d "
                                "ON e.k = d.k GROUP BY e.k"), True),  # only dims has `w`
    "coalesced": ((), ("SELECT k, count() AS c, sum(coalesce(n, 0)) AS s, sum(if(x > 0, x, 0)) AS p FROM events "
                      "GROUP BY k"), True),
    "widening_cast": ((), ("SELECT k, count() AS c, sum(toInt64(x)) AS s, sum(toFloat64(x) * 2) AS t FROM events "
                          "GROUP BY k"), True),
    "case_without_else": ((), "SELECT k, count() AS c, sum(CASE WHEN x > 0 THEN x END) AS s FROM events GROUP BY k",
                          False),
    "in_a_list_with_null": ((), "SELECT k, count() AS c, sum(if(x IN (1, NULL), 1, 0)) AS s FROM events GROUP BY k",
                            True),  # if() makes the NULL of `IN` a 0
    "filtered": ((), "SELECT k, count() AS c, sum(x) FILTER (WHERE x > 0) AS s FROM events GROUP BY k", False),
    "narrowing_cast": ((), "SELECT k, count() AS c, sum(toInt8(f)) AS s FROM events GROUP BY k", False),
    "subquery": ((), "SELECT k, count() AS c, sum(x) AS s FROM (SELECT k, n AS x FROM events) GROUP BY k", False),
    "cte": ((), "WITH t AS (SELECT k, n AS x FROM events) SELECT k, count() AS c, sum(x) AS s FROM t GROUP BY k",
            False),
    "earlier_node": ((("doubled", "SELECT k, x * 2 AS twice, n AS maybe FROM events"),),
                     "SELECT k, count() AS c, sum(twice) AS s FROM doubled GROUP BY k", True),
    "earlier_nullable": ((("doubled", "SELECT k, x * 2 AS twice, n AS maybe FROM events"),),
                         "SELECT k, count() AS c, sum(maybe) AS s FROM doubled GROUP BY k", False),
    "union_node": ((("both", "SELECT k, x FROM events UNION ALL SELECT k, n AS x FROM events"),),
                   "SELECT k, count() AS c, sum(x) AS s FROM both GROUP BY k", False),
    "left_join_of_a_node": ((("ev", "SELECT k, x FROM events"), ("cl", "SELECT k, coalesce(v, 0) AS vv FROM dims")),
                            ("SELECT ev.k, count() AS c, sum(cl.vv) AS s FROM ev LEFT JOIN cl ON ev.k = cl.k "
                            "GROUP BY ev.k"), False),
    "a_node_does_not_shadow_a_table": ((("unused", "SELECT k, coalesce(v, 0) AS v FROM dims"),),
                                       ("SELECT e.k, count() AS c, sum(d.v) AS s FROM events AS e JOIN dims AS d "
                                       "ON e.k = d.k GROUP BY e.k"), False),
}


def nodes(name: str, earlier: tuple[tuple[str, str], ...], sql: str) -> str:
    return "".join(f"NODE {node}\nSQL >\n    {text}\n\n" for node, text in earlier) + pipe(name, sql)


def test_which_sums_subtract_follows_what_may_be_null(tmp_path):
    """A sum subtracts only when `check` can tell from the schema that what it sums is never NULL: a non-Nullable
    ClickHouse type or a DEFAULT, through arithmetic, coalesce, CASE with ELSE, widening casts and earlier nodes; not
    the padded side of a LEFT JOIN (a table or a node), a CASE without ELSE, a FILTER, a narrowing conversion, or a
    column read through a subquery, a CTE or a UNION, nor a table's column a node's output of the same name hides."""
    root = write_project(tmp_path / "proj", {
        "datasources/events.datasource": EVENTS, "datasources/dims.datasource": DIMS,
        **{f"pipes/{name}.pipe": pipe(name, sql) for name, sql in VIEWS.items()},
        **{f"pipes/{name}.pipe": nodes(name, earlier, sql) for name, (earlier, sql, _) in PLANS.items()},
        "pipes/cascade.pipe": pipe("cascade", "SELECT p.k, sum(p.c) AS c, sum(p.sx) AS sx, sum(q.sn) AS sn "
                                              "FROM plain_mv AS p JOIN nullable_mv AS q ON p.k = q.k GROUP BY p.k")})
    compiled = Project(root).require_valid()
    states = {s.name: s for s in desired_state(compiled).values()}
    # a cascade's sums of the upstream's sum states: never NULL where those are not
    assert {c.name: c.not_null for c in compiled.pipes["cascade"].view.plan.columns} == \
        {"k": True, "c": True, "sx": True, "sn": False}
    assert {name: states[f"{name}_mv"].negate_sql is not None for name in PLANS} == \
        {name: subtracts for name, (_, _, subtracts) in PLANS.items()}
