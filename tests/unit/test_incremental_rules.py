"""Each incrementality rule of PRODUCT.md section 3: a failing project, its code and its file:line."""

from __future__ import annotations

import pickle

import pytest

from pipeframe.project import Project
from tests.conftest import PRODUCTS, SALES


def mv(sql: str, extra: str = "") -> str:
    body = "\n".join("    " + line for line in sql.strip().splitlines())
    return f"NODE agg\nSQL >\n{body}\n{extra}TYPE materialized\nDATASOURCE target\n"


def check(make_project, sql: str, extra: str = ""):
    root = make_project({"pipes/view.pipe": mv(sql, extra)})
    report = Project(root).check()
    view = report.project.pipes["view"].view
    return report, view


REJECTED = [
    ("PF401", "SELECT product, row_number() OVER (PARTITION BY product ORDER BY ts) AS n\nFROM sales", 3),
    ("PF404", "SELECT product, amount\nFROM sales\nLIMIT 10", 5),
    ("PF405", "SELECT product, sum(amount) AS revenue\nFROM sales\nGROUP BY product\nHAVING sum(amount) > 10", 6),
    ("PF403", "SELECT DISTINCT product, count(*) AS n\nFROM sales\nGROUP BY product", 3),
    ("PF403", "SELECT product FROM sales\nUNION\nSELECT product FROM products", 4),
    ("PF407", "SELECT product, rand() AS r\nFROM sales", 3),
    ("PF407", "SELECT product, current_timestamp() AS loaded_at\nFROM sales", 3),
    ("PF408", "SELECT product, percentile(amount, 0.5) AS median\nFROM sales\nGROUP BY product", 3),
    ("PF408", "SELECT product, collect_list(order_id) AS orders\nFROM sales\nGROUP BY product", 3),
    ("PF408", "SELECT product, first(amount) AS first_amount\nFROM sales\nGROUP BY product", 3),
    ("PF408", "SELECT product, sum(amount) / count(*) AS avg_amount\nFROM sales\nGROUP BY product", 3),
    ("PF406", "SELECT product, max(sum(amount)) AS m\nFROM sales\nGROUP BY product", 3),
    ("PF411", "SELECT product, count(DISTINCT order_id) AS orders\nFROM sales\nGROUP BY product", 3),
    ("PF409", "SELECT product, count(*) AS n\nFROM target\nGROUP BY product", 4),
    ("PF415", "SELECT s.product, p.category\nFROM sales s\nRIGHT JOIN products p ON s.product = p.product", 5),
    ("PF408", "SELECT product, count(*) FILTER (WHERE amount > avg(amount)) AS n\nFROM sales\nGROUP BY product", 3),
    ("PF408", "SELECT product, upper(product) FILTER (WHERE amount > 1) AS p\nFROM sales", 3),
    ("PF413", "SELECT a.product, count(*) AS pairs\nFROM sales a\nJOIN sales b ON a.product = b.product\nGROUP BY 1",
     5),
    ("PF413", "SELECT product, amount\nFROM sales\nWHERE product IN (SELECT product FROM sales WHERE amount > 10)", 5),
    ("PF413", ("WITH s AS (SELECT product, amount FROM sales)\nSELECT a.product, b.amount\nFROM s a\n"
               "LEFT JOIN s b ON a.product = b.product"), 6),
]


@pytest.mark.parametrize(("code", "sql", "line"), REJECTED, ids=[f"{c}-{i}" for i, (c, _, _) in enumerate(REJECTED)])
def test_rejected_rule_reports_code_and_location(make_project, code, sql, line):
    report, view = check(make_project, sql)
    matches = [d for d in report.errors if d.code == code]
    assert matches, [d.format() for d in report.diagnostics]
    assert matches[0].location.path == "pipes/view.pipe"
    assert matches[0].location.line == line
    assert matches[0].hint, "every rule carries a fix"
    assert view.verdict.status == "rejected"
    assert not report.ok


def test_nested_aggregate_across_nodes_is_rejected(make_project):
    root = make_project({"pipes/view.pipe": (
        "NODE totals\nSQL >\n    SELECT product, sum(amount) AS s FROM sales GROUP BY product\n"
        "NODE peak\nSQL >\n    SELECT max(s) AS m FROM totals\nTYPE materialized\nDATASOURCE target\n")})
    report = Project(root).check()
    codes = {d.code: d for d in report.errors}
    assert "PF406" in codes and codes["PF406"].location.line == 3


def test_self_join_is_rejected_with_the_reason_and_the_fix(make_project):
    report, view = check(make_project, "SELECT a.product, count(*) AS pairs\nFROM sales a\n"
                         "JOIN sales b ON a.product = b.product\nGROUP BY 1")
    (error,) = [d for d in report.errors if d.code == "PF413"]
    assert "Node `agg` reads `sales` more than once" in error.message
    assert "depend on how rows were split into appends" in error.message
    assert "DIMENSIONS" in error.hint and "endpoint" in error.hint and "copy pipe" in error.hint
    assert view.verdict.status == "rejected" and view.plan is None


def test_a_second_read_of_the_trigger_through_an_earlier_node_is_rejected(make_project):
    root = make_project({"pipes/view.pipe": (
        "NODE big\nSQL >\n    SELECT product, amount FROM sales WHERE amount > 10\n"
        "NODE pairs\nSQL >\n    SELECT s.product, count(*) AS n\n    FROM sales s\n"
        "    JOIN big ON s.product = big.product\n    GROUP BY 1\nTYPE materialized\nDATASOURCE target\n")})
    report = Project(root).check()
    (error,) = [d for d in report.errors if d.code == "PF413"]
    assert "Node `pairs`" in error.message and error.location.line == 8  # at `JOIN big`


def test_the_trigger_in_each_branch_of_a_union_all_or_beside_a_dimension_is_read_once(make_project):
    report, _ = check(make_project, "SELECT product, amount FROM sales WHERE amount > 0\nUNION ALL\n"
                      "SELECT product, -amount FROM sales WHERE amount < 0")
    assert report.ok, [d.format() for d in report.diagnostics]
    report, _ = check(make_project, "WITH s AS (SELECT * FROM sales)\nSELECT p.category, count(*) AS n\n"
                      "FROM s JOIN products p ON s.product = p.product\nGROUP BY 1", extra="DIMENSIONS products\n")
    assert report.ok, [d.format() for d in report.diagnostics]


def test_joined_tables_trigger_an_aggregated_view_unless_declared_dimensions(make_project):
    sql = "SELECT p.category, count(*) AS n\nFROM sales s\nJOIN products p ON s.product = p.product\nGROUP BY 1"
    report, view = check(make_project, sql)
    assert report.ok and not [d for d in report.diagnostics if d.code == "PF410"]
    assert view.trigger == "sales" and view.joined == ("products",) and view.verdict.status == "rewritten"
    report, view = check(make_project, sql, extra="DIMENSIONS products\n")
    assert view.dimensions == ("products",) and view.joined == ()


def test_a_join_in_a_view_without_group_by_warns_that_only_the_first_table_triggers(make_project):
    sql = "SELECT s.product, p.category\nFROM sales s\nJOIN products p ON s.product = p.product"
    report, view = check(make_project, sql)
    warnings = [d for d in report.warnings if d.code == "PF410"]
    assert warnings and "products" in warnings[0].message and warnings[0].location.line == 5
    assert report.ok and view.trigger == "sales" and view.joined == ()
    report, view = check(make_project, sql, extra="DIMENSIONS products\n")
    assert not [d for d in report.diagnostics if d.code == "PF410"]


def test_follow_ttl_warns_when_no_table_the_view_follows_has_a_ttl(make_project):
    sql = "SELECT p.category, count(*) AS n\nFROM sales s\nJOIN products p ON s.product = p.product\nGROUP BY 1"
    report, view = check(make_project, sql, extra="FOLLOW_TTL true\n")
    warnings = [d for d in report.warnings if d.code == "PF418"]
    assert report.ok and view.follow_ttl and len(warnings) == 1 and warnings[0].location.line == 7
    assert warnings[0].message == "FOLLOW_TTL true does nothing here: no ENGINE_TTL on `sales`, `products`."
    root = make_project({"pipes/view.pipe": mv(sql, "FOLLOW_TTL true\n"),
                         "datasources/sales.datasource": SALES + "ENGINE_TTL ts + INTERVAL 1 DAY\n"})
    assert not [d for d in Project(root).check().diagnostics if d.code == "PF418"]
    (root / "datasources/target.datasource").write_text(
        "SCHEMA >\n    `category` STRING,\n    `n` BIGINT\nBACKFILL skip\n")  # would retract rows never counted
    report = Project(root).check()
    warnings = [d for d in report.warnings if d.code == "PF418"]
    assert report.ok and len(warnings) == 1 and "BACKFILL skip on `target`" in warnings[0].message
    assert "pipeframe populate target" in warnings[0].hint


def test_follow_ttl_follows_the_ttl_of_a_joined_table_only_where_the_view_follows_that_table(make_project):
    """An aggregating view follows the tables it joins: an ENGINE_TTL on the joined `products` is enough. A view
    without GROUP BY follows its first table only, so the same TTL leaves it with nothing to follow."""
    ttl = {"datasources/products.datasource": PRODUCTS + "ENGINE_TTL toDateTime('2030-01-01') + INTERVAL 1 DAY\n"}
    grouped = "SELECT p.category, count(*) AS n\nFROM sales s\nJOIN products p ON s.product = p.product\nGROUP BY 1"
    report = Project(make_project({"pipes/view.pipe": mv(grouped, "FOLLOW_TTL true\n"), **ttl})).check()
    assert report.ok and not [d for d in report.diagnostics if d.code == "PF418"]
    plain = "SELECT s.product, p.category\nFROM sales s\nJOIN products p ON s.product = p.product"
    report = Project(make_project({"pipes/view.pipe": mv(plain, "FOLLOW_TTL true\n"), **ttl})).check()
    assert [d.message for d in report.warnings if d.code == "PF418"] == [
        "FOLLOW_TTL true does nothing here: no ENGINE_TTL on `sales`."]


def test_order_by_warns_and_is_dropped_from_the_views_query(make_project):
    sql = ("WITH recent AS (SELECT product, amount FROM sales ORDER BY amount)\n"
           "SELECT product, sum(amount) AS revenue\nFROM recent\nGROUP BY product\nORDER BY revenue DESC")
    report, view = check(make_project, sql)
    warnings = [d for d in report.warnings if d.code == "PF402"]
    assert warnings and "dropped" in warnings[0].message and warnings[0].location.line == 3
    assert not [d for d in report.errors if d.code == "PF402"]
    assert view.verdict.status in ("accepted", "rewritten")
    assert "ORDER BY" not in view.plan.state_sql.upper()


def test_a_view_over_an_endpoint_pipe_is_triggered_by_its_datasource(make_project):
    """As in Tinybird: the pipe's nodes run on each block of new rows, with no request (`defined(x)` is false)."""
    root = make_project({
        "pipes/clean_sales.pipe": ("NODE positive\nSQL >\n    SELECT product, amount FROM sales WHERE amount > 0\n"
                                   "NODE endpoint\nSQL >\n    %\n    SELECT product, amount FROM positive\n"
                                   "    {% if defined(p) %} WHERE product = {{ String(p) }} {% end %}\n"),
        "pipes/view.pipe": mv("SELECT product, sum(amount) AS revenue\nFROM clean_sales\nGROUP BY product"),
    })
    report = Project(root).check()
    assert report.ok, [d.format() for d in report.diagnostics]
    view = report.project.pipes["view"].view
    assert view.trigger == "sales" and view.verdict.status == "rewritten"
    state_sql = view.plan.state_sql
    assert "clean_sales__positive AS (" in state_sql and "amount > 0" in state_sql and "__pf_batch" in state_sql
    assert "placeholder" not in state_sql and "product =" not in state_sql


def test_a_view_over_a_pipe_that_cannot_run_on_a_block_is_rejected_where_it_reads_it(make_project):
    root = make_project({
        "datasources/copied.datasource": "SCHEMA >\n    `product` String,\n    `amount` Float64\n",
        "pipes/snapshot.pipe": ("NODE n\nSQL >\n    SELECT product, amount FROM sales\nTYPE copy\n"
                                "TARGET_DATASOURCE copied\n"),
        "pipes/view.pipe": mv("SELECT product, sum(amount) AS revenue\nFROM snapshot\nGROUP BY product"),
    })
    report = Project(root).check()
    found = [d for d in report.errors if d.code == "PF416"]
    assert found and "`snapshot`" in found[0].message and found[0].hint
    assert (found[0].location.path, found[0].location.line) == ("pipes/view.pipe", 4)
    assert report.project.pipes["view"].view.verdict.status == "rejected"


def test_accepted_filters_projections_and_union_all(make_project):
    report, view = check(make_project, "SELECT ts, upper(product) AS product, amount * 2 AS doubled\nFROM sales\n"
                         "WHERE amount > 0\nUNION ALL\nSELECT ts, product, amount FROM sales WHERE amount < 0")
    assert report.ok, [d.format() for d in report.diagnostics]
    assert view.verdict.status == "accepted"


def test_plain_aggregates_are_rewritten_to_states(make_project):
    report, view = check(make_project, "SELECT date_trunc('hour', ts) AS hour, product, count(*) AS orders,\n"
                         "  sum(amount) AS revenue, avg(amount) AS avg_ticket,\n"
                         "  approx_count_distinct(order_id) AS buyers, percentile_approx(amount, 0.9) AS p90,\n"
                         "  max_by(order_id, ts) AS last_order, stddev(amount) AS sd\nFROM sales\nGROUP BY 1, 2")
    assert report.ok, [d.format() for d in report.diagnostics]
    assert view.verdict.status == "rewritten"
    states = {c.name: (c.state, c.type) for c in view.plan.columns}
    assert states["hour"] == (None, "TIMESTAMP")
    assert states["orders"] == ("count", "BIGINT")
    assert states["revenue"] == ("sum", "DOUBLE")
    assert states["avg_ticket"][0] == "avg" and states["avg_ticket"][1].startswith("STRUCT<")
    assert states["buyers"] == ("uniq", "BINARY")
    assert states["p90"] == ("quantiles", "BINARY")
    assert states["last_order"][0] == "arg_max"
    assert states["sd"][0] == "stddev_samp"
    assert view.plan.keys == ("hour", "product")
    assert "__pf_batch" in view.plan.state_sql and "hll_sketch_agg" in view.plan.state_sql.lower()
    assert any("avg_ticket" in r for r in view.verdict.rewrites)


def test_aggregates_with_filter_keep_it_in_their_state(make_project):
    report, view = check(make_project, "SELECT product, count(*) FILTER (WHERE amount > 10) AS big,\n"
                         "  avg(amount) FILTER (WHERE quantity > 1) AS avg_multi,\n"
                         "  sumState(amount) FILTER (WHERE amount > 10) AS big_revenue\nFROM sales\nGROUP BY product")
    assert report.ok, [d.format() for d in report.diagnostics]
    assert view.verdict.status == "rewritten"
    assert {c.name: c.state for c in view.plan.columns} == {
        "product": None, "big": "count", "avg_multi": "avg", "big_revenue": "sum"}
    state_sql = view.plan.state_sql
    assert "COUNT(*) FILTER(WHERE amount > 10) AS `big`" in state_sql
    # every aggregate of a struct state keeps the filter, so sum and count cover the same rows
    assert "SUM(CAST(amount AS DOUBLE)) FILTER(WHERE quantity > 1)" in state_sql
    assert "COUNT(amount) FILTER(WHERE quantity > 1)" in state_sql
    assert "SUM(amount) FILTER(WHERE amount > 10) AS `big_revenue`" in state_sql
    assert "big: count(…) FILTER (WHERE …) → count state with the same FILTER" in view.verdict.rewrites
    assert "sum(`big`) AS `big`" in view.plan.read_sql("t")  # merged as an unfiltered count


def test_plain_clickhouse_aggregates_are_states_too(make_project):
    report, view = check(make_project, "SELECT product, uniq(order_id) AS buyers, uniqExact(order_id) AS orders,\n"
                         "  quantile(0.9)(amount) AS p90, argMax(order_id, ts) AS last_order\nFROM sales\n"
                         "GROUP BY product")
    assert report.ok, [d.format() for d in report.diagnostics]
    states = {c.name: (c.state, c.type) for c in view.plan.columns}
    assert states["buyers"] == ("uniq", "BINARY")
    assert states["orders"][0] == "uniq_exact" and states["orders"][1].startswith("ARRAY<")
    assert states["p90"] == ("quantiles", "BINARY")  # ClickHouse's quantile is approximate: a KLL sketch
    assert states["last_order"][0] == "arg_max"


def test_count_distinct_opt_in_rewrites(make_project):
    sql = "SELECT product, count(DISTINCT order_id) AS orders\nFROM sales\nGROUP BY product"
    report, view = check(make_project, sql, extra="COUNT_DISTINCT exact\n")
    assert report.ok and view.plan.columns[1].state == "uniq_exact"
    report, view = check(make_project, sql, extra="COUNT_DISTINCT sketch\n")
    assert report.ok and view.plan.columns[1].state == "uniq"


def test_select_distinct_becomes_group_by(make_project):
    report, view = check(make_project, "SELECT DISTINCT product\nFROM sales")
    assert report.ok and view.verdict.status == "rewritten"
    assert view.plan.keys == ("product",)
    assert "GROUP BY" in view.plan.state_sql.upper()


def test_cascade_over_partial_states(make_project):
    hourly = mv("SELECT date_trunc('hour', ts) AS hour, product, count(*) AS orders, avg(amount) AS a\n"
                "FROM sales GROUP BY 1, 2").replace("DATASOURCE target", "DATASOURCE hourly")
    good = mv("SELECT date_trunc('day', hour) AS day, sum(orders) AS orders\nFROM hourly GROUP BY 1")
    bad = mv("SELECT date_trunc('day', hour) AS day, avg(a) AS a, count(*) AS n\nFROM hourly GROUP BY 1")
    root = make_project({"pipes/hourly.pipe": hourly, "pipes/view.pipe": good})
    report = Project(root).check()
    assert report.ok, [d.format() for d in report.diagnostics]
    (root / "pipes/view.pipe").write_text(bad)
    report = Project(root).check()
    assert {d.code for d in report.errors} == {"PF412"}
    assert report.errors[0].location.line == 3


def test_any_keeps_the_least_value_whatever_the_spelling(make_project):
    """ClickHouse's any(x) returns some non-NULL value: in a view it keeps the least one, so the view does not depend
    on how rows were split into blocks (min semantics), in every spelling."""
    report, view = check(make_project, "SELECT product, any_value(order_id) AS a, anySimpleState(order_id) AS b,\n"
                         "  anyState(amount) AS c, anyIf(order_id, amount > 10) AS d\nFROM sales\nGROUP BY product")
    assert report.ok, [d.format() for d in report.diagnostics]
    states = {c.name: c.state for c in view.plan.columns}
    assert states == {"product": None, "a": "any", "b": "any", "c": "any", "d": "any"}
    types = {c.name: c.type for c in view.plan.columns}
    assert (types["a"], types["c"]) == ("STRING", "DOUBLE")  # the value's own type, as min's state
    state_sql = view.plan.state_sql
    assert "MIN(order_id) AS `a`" in state_sql and "MIN(order_id) AS `b`" in state_sql
    assert "MIN(amount) AS `c`" in state_sql and "MIN(CASE WHEN amount > 10 THEN order_id END) AS `d`" in state_sql
    assert "ANY_VALUE" not in state_sql.upper()
    assert "min(`a`) AS `a`" in view.plan.read_sql("t")


@pytest.mark.parametrize("function", ["anyLast", "anyHeavy"])
def test_any_last_and_any_heavy_stay_rejected(make_project, function):
    root = make_project({"pipes/view.pipe": mv(f"SELECT product, {function}(order_id) AS a\nFROM sales\n"
                                                "GROUP BY product")})
    (error,) = Project(root).check().errors
    assert (error.code, error.location.line) == ("PF309", 3)
    assert f"`{function}` has no Spark translation" in error.message


def test_xmerge_over_a_views_states_is_a_merge_of_states(make_project):
    """Tinybird's cascade: a materialized pipe reading another view's target with countMerge(x) / avgMerge(x): the
    states are merged and stored as states (the target is read finalized), as xMergeState would."""
    hourly = mv("SELECT date_trunc('hour', ts) AS hour, product, countState() AS orders, avgState(amount) AS a\n"
                "FROM sales GROUP BY 1, 2").replace("DATASOURCE target", "DATASOURCE hourly")
    daily = mv("SELECT date_trunc('day', hour) AS day, countMerge(orders) AS orders, avgMerge(a) AS a\n"
               "FROM hourly GROUP BY 1")
    compiled = Project(make_project({"pipes/hourly.pipe": hourly, "pipes/view.pipe": daily})).require_valid()
    view = compiled.pipes["view"].view
    assert view.verdict.status == "rewritten"
    assert [(c.name, c.state, c.type, c.value_type, c.explicit) for c in view.plan.columns] == [
        ("day", None, "TIMESTAMP", "TIMESTAMP", False), ("orders", "count", "BIGINT", "BIGINT", False),
        ("a", "avg", "STRUCT<sum: DOUBLE, count: BIGINT>", "DOUBLE", False)]
    assert "SUM(orders) AS `orders`" in view.plan.state_sql
    assert "orders: countMerge(…) → a merge of the count states (finalized when read)" in view.verdict.rewrites
    # plain countMerge over a column that holds no state is still refused where it misreads partial states
    bad = mv("SELECT date_trunc('day', hour) AS day, count(*) AS n\nFROM hourly GROUP BY 1")
    report = Project(make_project({"pipes/hourly.pipe": hourly, "pipes/view.pipe": bad})).check()
    assert {d.code for d in report.errors} == {"PF412"}


def _two_nodes(first: str, last: str) -> str:
    return (f"NODE totals\nSQL >\n    {first}\nNODE agg\nSQL >\n    {last}\nTYPE materialized\nDATASOURCE target\n")


def test_a_last_node_that_only_picks_an_aggregating_nodes_columns_is_one_select(make_project):
    """Tinybird pipes often aggregate in one node and materialize from the next, picking and renaming columns: that
    is one aggregating SELECT (its states kept); SELECT DISTINCT in the earlier node too. A last node doing more
    (filtering the aggregate, aggregating again) is still refused, precisely."""
    pipe = _two_nodes("SELECT product, count() AS n, sum(amount) AS revenue FROM sales GROUP BY product",
                      "SELECT product AS item, n AS orders, revenue FROM totals")
    compiled = Project(make_project({"pipes/view.pipe": pipe})).require_valid()
    view = compiled.pipes["view"].view
    assert [(c.name, c.state) for c in view.plan.columns] == [("item", None), ("orders", "count"), ("revenue", "sum")]
    assert view.verdict.rewrites[0] == ("node `totals` aggregates and `agg` picks its columns: one SELECT, whose "
                                        "states the view keeps")
    assert "GROUP BY product" in view.plan.state_sql and "FROM __pf_batch" in view.plan.state_sql
    kept = pickle.loads(pickle.dumps(view.plan))  # as the check cache keeps it (text), parsed again
    assert kept.state_sql == view.plan.state_sql
    distinct = _two_nodes("SELECT DISTINCT product, quantity FROM sales", "SELECT * FROM totals")
    compiled = Project(make_project({"pipes/view.pipe": distinct})).require_valid()
    assert compiled.pipes["view"].view.plan.keys == ("product", "quantity")
    filtered = _two_nodes("SELECT product, count() AS n FROM sales GROUP BY product",
                          "SELECT product, n FROM totals WHERE n > 10")
    report = Project(make_project({"pipes/view.pipe": filtered})).check()
    assert {d.code for d in report.errors} == {"PF406"}
