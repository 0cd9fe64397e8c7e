"""View maintenance's write strategies without a JVM: which strategy a change takes (a pure decision over the
change and the view's recorded plan), and a differential test of the whole refresh loop (`engine/refresh.py`) on
the in-memory store (`serving/memstore.py`): random appends, deletes and updates of a source, each followed by a
refresh, leave every view answering what one recomputation from the source answers."""

from __future__ import annotations

import random
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from pipeframe.engine import strategies
from pipeframe.engine.changes import Change, JoinChange
from pipeframe.engine.commits import Commit
from pipeframe.engine.refresh import ViewRefresh
from pipeframe.plan.snapshot import DeployedResource, DeployedSnapshot
from pipeframe.plan.state import desired_state
from pipeframe.project import Project
from pipeframe.serving.memstore import MemoryStore
from tests.conftest import PRODUCTS, SALES, write_project
from tests.memviews import answer, built, pipe, recomputed, refresh

VIEWS = {
    # every state subtracts: negate (fold when views read it)
    "sums": "SELECT product, count() AS n, sum(amount) AS total, avg(amount) AS mean FROM sales GROUP BY product",
    # max, min and a sketch do not: the touched groups are recomputed
    "peaks": "SELECT product, toStartOfHour(ts) AS hour, count() AS n, max(amount) AS top, min(quantity) AS low, "
             "uniq(order_id) AS buyers FROM sales GROUP BY product, hour",
    # every state depends only on the set of its values (max, min, any, a distinct count, a condition): an update
    # whose added rows cover the removed ones appends their states (absorb), any other recomputes
    "extremes": "SELECT product, toStartOfHour(ts) AS hour, max(amount) AS top, min(quantity) AS low, "
                "uniq(order_id) AS buyers, any(order_id) AS one, maxIf(amount, quantity > 3) AS big "
                "FROM sales GROUP BY product, hour",
    # no distinct count: a delete is absorbed as well where the removed values lie strictly inside the groups' current
    # max and min, the other groups recomputed in the same commit
    "bounds": "SELECT product, toStartOfHour(ts) AS hour, max(amount) AS top, min(quantity) AS low, "
              "any(order_id) AS one, minIf(amount, quantity > 3) AS small FROM sales GROUP BY product, hour",
    # sums of values that may be NULL (`quantity`, and `amount` where a FILTER keeps no row) do not subtract: a
    # negated sum cannot tell "no value left" (NULL) from zero. sumIf over never-NULL `amount` does (0 if none match)
    "nullable_sums": "SELECT product, count() AS n, sum(quantity) AS q, sumIf(amount, amount > 40) AS big, "
                     "sum(amount) FILTER (WHERE quantity > 15) AS many FROM sales GROUP BY product",
    "sum_if": "SELECT product, count() AS n, sumIf(amount, amount > 40) AS big FROM sales GROUP BY product",
    # no GROUP BY: a view row per source row
    "doubled": "SELECT product, amount * 2 AS twice, quantity FROM sales WHERE amount > 1",
    # one group, no keys
    "overall": "SELECT sum(amount) AS total, count() AS n FROM sales",
    # a followed inner join whose states subtract: products' changes join-negate
    "by_category": "SELECT p.category, count() AS n, sum(s.amount) AS total FROM sales AS s "
                   "JOIN products AS p ON s.product = p.product GROUP BY p.category",
    # an outer join: products' changes recompute the groups whose states differ
    "top_by_category": "SELECT p.category, count() AS n, max(s.amount) AS top FROM sales AS s "
                       "LEFT JOIN products AS p ON s.product = p.product GROUP BY p.category",
}
PRODUCT_NAMES = ["apple", "pear", "fig", None]
CATEGORIES = ["fruit", "tree", None]


@pytest.fixture(scope="module")
def deployed(tmp_path_factory) -> DeployedSnapshot:
    """The views above and `sales`, compiled and deployed (states recorded) at in-memory paths."""
    root = write_project(tmp_path_factory.mktemp("strategies") / "proj", {
        "datasources/sales.datasource": SALES, "datasources/products.datasource": PRODUCTS,
        **{f"pipes/{name}.pipe": pipe(name, sql) for name, sql in VIEWS.items()}})
    states = desired_state(Project(root).require_valid())
    return DeployedSnapshot.of(DeployedResource(s, 1, f"mem://{s.name}") for s in states.values() if s.has_table)


def commit(operation: str, **metrics: str) -> Commit:
    now = datetime.now(UTC)
    return Commit(1, now, now.timestamp(), operation, {"mode": "Append"} if operation == "WRITE" else {}, metrics)


def change(deployed: DeployedSnapshot, view: str, operation: str, read_by_views: bool = False) -> Change:
    found = deployed.table(f"{view}_mv")
    metrics = {"WRITE": {"numOutputRows": "3"}, "DELETE": {"numDeletedRows": "2"},
               "UPDATE": {"numUpdatedRows": "1"}}[operation]
    return Change(found, deployed.table("sales"), found.state.maintenance, (commit(operation, **metrics),),
                             {"source_version": 1, "source_path": "mem://sales", "after": 0},
                             read_by_views=read_by_views)


@pytest.mark.parametrize("view, operation, read_by_views, expected", [
    ("sums", "WRITE", False, "append"), ("peaks", "WRITE", True, "append"), ("doubled", "WRITE", False, "append"),
    ("sums", "DELETE", False, "negate"), ("overall", "UPDATE", False, "negate"),
    ("sums", "UPDATE", True, "fold"), ("overall", "DELETE", True, "fold"),
    ("peaks", "DELETE", False, "recompute"), ("peaks", "UPDATE", True, "recompute"),
    ("extremes", "DELETE", False, "recompute"), ("extremes", "UPDATE", True, "absorb"),
    ("extremes", "WRITE", False, "append"), ("bounds", "DELETE", False, "absorb"), ("bounds", "UPDATE", True, "absorb"),
    ("doubled", "DELETE", False, "rows"), ("doubled", "UPDATE", True, "rows"),
    ("nullable_sums", "DELETE", False, "recompute"), ("sum_if", "DELETE", False, "negate"),
])
def test_exactly_one_strategy_applies_to_each_change(deployed, view, operation, read_by_views, expected):
    found = change(deployed, view, operation, read_by_views)
    assert [s.name for s in strategies.STRATEGIES if s.applies(found)] == [expected]
    assert strategies.choose(found).name == expected


def test_an_update_too_large_to_compare_on_the_driver_is_recomputed(deployed):
    found = change(deployed, "extremes", "UPDATE")
    found = Change(found.view, found.source, found.plan,
                   (commit("UPDATE", numUpdatedRows=str(strategies.ABSORB_ROWS + 1)),), found.watermark)
    assert strategies.choose(found).name == "recompute"


@pytest.mark.parametrize("operations, expected", [(("UPDATE",), "absorb"), (("WRITE", "UPDATE"), "recompute")])
def test_rows_with_a_map_column_are_absorbed_only_where_they_need_no_netting(deployed, operations, expected):
    """Spark's set operations refuse a map column: a change whose added and removed rows must be netted (an append
    before the update) recomputes where the source has one."""
    found = change(deployed, "extremes", "UPDATE")
    source = found.source
    mapped = DeployedResource(replace(source.state, columns=(*source.state.columns, ("attrs", "MAP<STRING,STRING>"))),
                              source.version, source.path)
    metrics = {"WRITE": {"numOutputRows": "3"}, "UPDATE": {"numUpdatedRows": "1"}}
    found = Change(found.view, mapped, found.plan, tuple(commit(o, **metrics[o]) for o in operations), found.watermark)
    assert strategies.choose(found).name == expected


def test_a_row_appended_and_updated_before_one_refresh_leaves_no_trace_in_a_view_of_extremes(deployed):
    """The change feed of an append then an update of the appended row holds its first image among both the added
    and the removed rows, where its value would cover itself: netted out of both sides, the update is an append of
    the new image, and the view keeps no state of the gone value."""
    store, source, view = MemoryStore(), deployed.table("sales"), deployed.table("bounds_mv")
    store.create(source)
    built(store, view, source, deployed)
    start = datetime(2026, 11, 1, 22, tzinfo=UTC)
    store.insert(source.path, [{"ts": start, "order_id": "o1", "product": "fig", "amount": 5.0, "quantity": 4}])
    assert refresh(store, view, deployed).path == "append"
    store.insert(source.path, [{"ts": start, "order_id": "o2", "product": "fig", "amount": 90.0, "quantity": 9}])
    store.update(source.path, lambda row: {**row, "amount": 7.0} if row["order_id"] == "o2" else None)
    assert refresh(store, view, deployed).path == "absorb"
    assert answer(store, view, store.current(view)) == recomputed(store, view, deployed)
    assert [row[1:3] for row in recomputed(store, view, deployed)] == [(start, 7.0)]  # hour, top


def witness(sign: int, product: str | None, **states) -> dict:
    return {"product": product, "hour": datetime(2026, 11, 1, 3, tzinfo=UTC), **states, "__pf_sign": sign}


RULES = (("top", "max"), ("low", "min"), ("orders", "set"))


@pytest.mark.parametrize("witnesses, expected", [
    # each removed value covered by an added one of the same group: a larger max, a smaller min, the same values
    ([witness(-1, "fig", top=5.0, low=3, orders=["a", "b"]), witness(1, "fig", top=5.5, low=3, orders=["b", "a", "c"])],
     []),
    # a group only added to, and a NULL key (matched as NULL): nothing removed to cover
    ([witness(1, "fig", top=1.0, low=None, orders=[]), witness(-1, None, top=None, low=None, orders=[]),
      witness(1, None, top=2.0, low=1, orders=["x"])], []),
    ([witness(-1, "fig", top=5.0, low=3, orders=["a"]), witness(1, "fig", top=4.0, low=3, orders=["a"])], ["fig"]),
    ([witness(-1, "fig", top=5.0, low=3, orders=["a"]), witness(1, "fig", top=5.0, low=4, orders=["a"])], ["fig"]),
    ([witness(-1, "fig", top=5.0, low=3, orders=["a", "d"]), witness(1, "fig", top=6.0, low=3, orders=["a"])],
     ["fig"]),
    # a group that lost rows and gained none may be gone: recomputed
    ([witness(-1, "fig", top=None, low=None, orders=[])], ["fig"]),
    ([witness(-1, "fig", top=1.0, low=3, orders=[]), witness(1, "pear", top=9.0, low=0, orders=[])], ["fig"]),
    # a removed value with no added one to cover it, and values Spark orders differently from Python
    ([witness(-1, "fig", top=1.0, low=None, orders=[]), witness(1, "fig", top=None, low=None, orders=[])], ["fig"]),
    ([witness(-1, "fig", top=float("nan"), low=3, orders=[]), witness(1, "fig", top=float("nan"), low=3, orders=[])],
     ["fig"]),
    ([witness(-1, "fig", top=1.0, low=3, orders=[-0.0]), witness(1, "fig", top=1.0, low=3, orders=[0.0])], ["fig"]),
])
def test_an_update_is_absorbed_only_where_the_added_values_cover_the_removed_ones(witnesses, expected):
    assert [g["product"] for g in strategies.uncovered(witnesses, ("product", "hour"), RULES)] == expected


def held(product: str | None, **states) -> dict:
    return {"product": product, "hour": datetime(2026, 11, 1, 3, tzinfo=UTC), **states}


@pytest.mark.parametrize("witnesses, current, expected", [
    # a lowered max (min raised) strictly inside the group's current one: the row holding that one stays
    ([witness(-1, "fig", top=5.0, low=3, orders=[]), witness(1, "fig", top=4.0, low=4, orders=[])],
     [held("fig", top=9.0, low=1)], []),
    # ... but not where the removed value may be the current max (or min) itself
    ([witness(-1, "fig", top=5.0, low=3, orders=[]), witness(1, "fig", top=4.0, low=4, orders=[])],
     [held("fig", top=5.0, low=1)], ["fig"]),
    ([witness(-1, "fig", top=5.0, low=3, orders=[]), witness(1, "fig", top=4.0, low=4, orders=[])],
     [held("fig", top=9.0, low=3)], ["fig"]),
    # a delete: the group keeps the rows holding its current max and min, or values of its own that no removed row had
    ([witness(-1, "fig", top=5.0, low=3, orders=[])], [held("fig", top=9.0, low=1)], []),
    ([witness(-1, "fig", top=None, low=None, orders=[])], [held("fig", top=9.0, low=None)], []),
    # ... else it may be gone
    ([witness(-1, "fig", top=None, low=None, orders=[])], [held("fig", top=None, low=None)], ["fig"]),
    ([witness(-1, "fig", top=5.0, low=3, orders=[])], [held("pear", top=9.0, low=1)], ["fig"]),
    # a set's removed value is covered by the added ones alone: the view cannot tell which other rows hold it
    ([witness(-1, "fig", top=5.0, low=3, orders=["a"])], [held("fig", top=9.0, low=1)], ["fig"]),
    # values Spark orders differently from Python, and of another type than the view holds
    ([witness(-1, "fig", top=5.0, low=3, orders=[])], [held("fig", top=float("nan"), low=1)], ["fig"]),
    ([witness(-1, "fig", top=5.0, low=3, orders=[])], [held("fig", top=9, low=1)], ["fig"]),
])
def test_a_removed_value_strictly_inside_the_groups_current_extremes_is_covered(witnesses, current, expected):
    assert [g["product"] for g in strategies.uncovered(witnesses, ("product", "hour"), RULES, current)] == expected


@pytest.mark.parametrize("view, start, read_by_views, expected", [
    ("by_category", 3, False, "join-negate"),
    ("by_category", -1, False, "join"),  # the version its rows agree with is not known: recomputed
    ("by_category", 3, True, "join"),  # views read it: its groups' rows replaced, not negated
    ("top_by_category", 3, False, "join"),  # an outer join, and max does not subtract
])
def test_exactly_one_strategy_applies_to_a_joined_tables_change(deployed, view, start, read_by_views, expected):
    found = deployed.table(f"{view}_mv")
    joined = JoinChange(found, deployed.table("sales"), found.state.maintenance, deployed.table("products"),
                        (commit("UPDATE", numUpdatedRows="1"),), start, 4, {}, {"products": 5},
                        read_by_views=read_by_views)
    assert [s.name for s in strategies.JOIN_STRATEGIES if s.applies(joined)] == [expected]
    assert strategies.choose(joined).name == expected


def test_a_delete_that_removed_no_row_is_an_append_of_nothing(deployed):
    """A DELETE that counted no deleted row rewrote nothing: adding states (of no rows) follows it."""
    found = change(deployed, "peaks", "DELETE")
    found = Change(found.view, found.source, found.plan, (commit("DELETE", numDeletedRows="0"),),
                              found.watermark)
    assert strategies.choose(found).name == "append"


def random_rows(rng: random.Random, count: int, start: datetime) -> list[dict]:
    """Rows `sales` takes: `amount` (DEFAULT 0) is never NULL; `product` and `quantity` may be."""
    return [{"ts": start + timedelta(minutes=rng.randrange(0, 300)), "order_id": f"o{rng.randrange(40)}",
             "product": rng.choice(PRODUCT_NAMES), "amount": round(rng.uniform(-2, 50), 2),
             "quantity": None if rng.random() < 0.1 else rng.randrange(-3, 20)} for _ in range(count)]


def change_products(store: MemoryStore, path: str, rng: random.Random) -> None:
    """A new product row, a product's category changed, or a product's rows deleted."""
    product, category = rng.choice(PRODUCT_NAMES), rng.choice(CATEGORIES)
    way = rng.randrange(3)
    if way == 0:
        store.insert(path, [{"product": product, "category": category}])
    elif way == 1:
        store.update(path, lambda row: {**row, "category": category} if row["product"] == product else None)
    else:
        store.delete(path, lambda row: row["product"] == product)


@pytest.mark.parametrize("seed", range(3))
def test_random_batches_through_every_strategy_equal_one_recomputation(deployed, seed):
    """Each seed: 30 random batches on `sales` (appends of 1-25 rows, deletes by product, amount or order, updates of amounts
    and products) or on `products`, which two views join (new products, a product's category changed, a product
    deleted), each followed (a fifth of them after another one) by a refresh of every view (`sums` both as read by no view and as read by another:
    negate and fold); every view's answer equals the recomputation after every batch, and every strategy was taken."""
    rng = random.Random(seed)
    store = MemoryStore()
    source, products = deployed.table("sales"), deployed.table("products")
    store.create(source)
    store.create(products)
    store.insert(products.path, [{"product": p, "category": rng.choice(CATEGORIES)} for p in PRODUCT_NAMES[:2]])
    views = [deployed.table(f"{name}_mv") for name in VIEWS]
    folded = DeployedResource(views[0].state, 1, "mem://sums_folded")  # the same view, read by another one
    for view in (*views, folded):
        built(store, view, source, deployed)
    start = datetime(2026, 11, 1, 22, tzinfo=UTC)
    taken: set[str] = set()
    for step in range(30):
        # one change, or (a fifth of the time) two before the refresh: a row may then be added and removed in its range
        kinds = rng.choices(["insert", "delete", "update", "products"], [0.4, 0.2, 0.2, 0.2],
                            k=1 if step < 2 or rng.random() < 0.8 else 2)
        for kind in kinds:
            if kind == "products":
                change_products(store, products.path, rng)
            elif kind == "insert" or step < 2:
                store.insert(source.path, random_rows(rng, rng.randrange(1, 26), start))
            elif kind == "delete" and rng.random() < 0.5:
                product, floor = rng.choice(PRODUCT_NAMES), rng.uniform(0, 30)
                store.delete(source.path, lambda row, p=product, f=floor:
                             row["product"] == p or row["amount"] < f / 6)
            elif kind == "delete":  # one order's rows of one product: mostly inside their groups' max and min
                product, order = rng.choice(PRODUCT_NAMES), f"o{rng.randrange(40)}"
                store.delete(source.path, lambda row, p=product, o=order:
                             row["product"] == p and row["order_id"] == o)
            else:
                # a raise of a product's amounts (absorbed where no other state moves), a cut (its groups
                # absorbed where the cut rows held neither the max nor the min, else recomputed), a move
                product, bump = rng.choice(PRODUCT_NAMES), rng.choice([-1.5, 2.25, 2.25, 10.0])
                store.update(source.path, lambda row, p=product, b=bump: None if row["product"] != p else {
                    **row, "amount": row["amount"] + b,
                    "product": rng.choice(PRODUCT_NAMES) if b > 5 else p})
        for view in (*views, folded):
            done = refresh(store, view, deployed, read_by_views=view is folded)
            assert isinstance(done, ViewRefresh) and done.outcome in ("applied", "up to date"), (step, kinds, done)
            assert (done.outcome == "applied") == (
                set(kinds) != {"products"} or view.state.name.endswith("category_mv"))
            taken.update([done.path] if done.outcome == "applied" else [])
            assert answer(store, view, store.current(view)) == recomputed(store, view, deployed), \
                (seed, step, kinds, view.path, done.path)
    assert taken == {"append", "negate", "fold", "absorb", "absorb-recompute", "recompute", "rows", "join-negate",
                     "join"}, taken


def test_a_refresh_with_nothing_new_is_up_to_date_and_commits_nothing(deployed):
    store = MemoryStore()
    source, view = deployed.table("sales"), deployed.table("sums_mv")
    store.create(source)
    built(store, view, source, deployed)
    store.insert(source.path, random_rows(random.Random(7), 5, datetime(2026, 11, 1, tzinfo=UTC)))
    assert refresh(store, view, deployed).path == "append"
    versions = len(store.history(view.path, None))
    again = refresh(store, view, deployed)
    assert (again.outcome, again.from_version, again.to_version) == ("up to date", 1, 1)
    assert len(store.history(view.path, None)) == versions


def test_a_commit_from_a_watermark_the_view_moved_past_is_skipped_as_a_replay(deployed):
    """Two refreshers that read the same watermark: the second one's commit is skipped, as Delta's idempotent
    write skips it, and the view's answer counts the rows once."""
    store = MemoryStore()
    source, view = deployed.table("sales"), deployed.table("sums_mv")
    store.create(source)
    built(store, view, source, deployed)
    store.insert(source.path, random_rows(random.Random(3), 8, datetime(2026, 11, 1, tzinfo=UTC)))
    late = Change(view, source, view.state.maintenance, tuple(store.commits_between(source.path, 0, 1)),
                             {"source_version": 1, "source_path": source.path, "after": 0})
    assert refresh(store, view, deployed).outcome == "applied"
    assert strategies.choose(late).apply(store, late) is None
    assert answer(store, view, store.current(view)) == recomputed(store, view, deployed)
