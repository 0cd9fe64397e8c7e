"""How a view takes deleted rows back out, decided by the compiler (no JVM): which views can subtract states
(`negate_sql`), which column counts a group's rows (a group read with a count of 0 is gone), which tables a view
follows, its maintenance plan (joins followed through the changed rows alone, partial states, the relations the
engine substitutes as placeholders), and how a commit's rows are counted."""

from __future__ import annotations

import json
from datetime import UTC, date, datetime

import pyarrow as pa
import pytest

from pipeframe.compiler.maintenance import GroupKey, fill, key_range
from pipeframe.compiler.maintenance_sql import group_keys, joined_monotonically
from pipeframe.compiler.partials import partials
from pipeframe.engine.commits import Commit, as_followed
from pipeframe.engine.recompute import file_test, literal_bounds
from pipeframe.engine.tables import adds_rows
from pipeframe.errors import PipeframeError
from pipeframe.plan import records
from pipeframe.plan.state import desired_state
from pipeframe.project import Project
from tests.unit.test_incremental_rules import mv


def view_state(make_project, sql: str, extra: str = ""):
    project = Project(make_project({"pipes/view.pipe": mv(sql, extra)}))
    states = desired_state(project.require_valid())
    return next(s for s in states.values() if s.kind == "view")


def test_invertible_states_with_a_row_count_are_negated_and_empty_groups_are_not_read(make_project):
    state = view_state(make_project, "SELECT product, count() AS n, sum(amount) AS total, avg(amount) AS a, "
                                     "var_samp(amount) AS v, countIf(amount > 1) AS big FROM sales GROUP BY product")
    assert state.negate_sql == (
        "SELECT `product`, -`n` AS `n`, -`total` AS `total`, named_struct('sum', -`a`.sum, 'count', -`a`.count) "
        "AS `a`, named_struct('n', -`v`.n, 'mean', `v`.mean, 'm2', -`v`.m2) AS `v`, -`big` AS `big` FROM {table}")
    assert state.read_sql.endswith("GROUP BY `product` HAVING sum(`n`) > 0")
    assert state.compact_sql.endswith("GROUP BY `product` HAVING sum(`n`) > 0")  # optimize drops empty groups


@pytest.mark.parametrize("sql, why", [
    ("SELECT product, count() AS n, max(amount) AS top FROM sales GROUP BY product", "max cannot be subtracted"),
    ("SELECT product, count() AS n, uniq(amount) AS u FROM sales GROUP BY product", "a sketch"),
    ("SELECT product, sum(amount) AS total FROM sales GROUP BY product", "no count(): emptiness unknown"),
    ("SELECT product, count() FILTER (WHERE amount > 1) AS n FROM sales GROUP BY product", "a filtered count"),
    ("SELECT product, countIf(amount > 1) AS n FROM sales GROUP BY product", "a conditional count"),
])
def test_views_that_cannot_subtract_recompute_the_groups_instead(make_project, sql, why):
    state = view_state(make_project, sql)
    assert state.negate_sql is None, why
    assert "HAVING" not in state.read_sql or "count()" in sql


def test_a_global_aggregate_is_negated_without_a_count_and_always_has_its_row(make_project):
    state = view_state(make_project, "SELECT sum(amount) AS total FROM sales")
    assert state.negate_sql == "SELECT -`total` AS `total` FROM {table}"
    assert "HAVING" not in state.read_sql and state.aggregated


def test_a_view_without_group_by_is_not_aggregated(make_project):
    state = view_state(make_project, "SELECT product, amount FROM sales WHERE amount > 0")
    assert not state.aggregated and state.negate_sql is None and state.joined == ()


def test_joined_tables_are_followed_unless_dimensions(make_project):
    sql = "SELECT p.category, count() AS n FROM sales s JOIN products p ON s.product = p.product GROUP BY 1"
    assert view_state(make_project, sql).joined == ("products",)
    assert view_state(make_project, sql, "DIMENSIONS products\n").joined == ()


@pytest.mark.parametrize("sql, monotone", [
    ("SELECT c.t, count(*) FROM b AS o JOIN c ON o.k = c.k GROUP BY 1", True),
    ("SELECT c.t, count(*) FROM b AS o, c WHERE o.k = c.k GROUP BY 1", True),
    ("SELECT c.t, count(*) FROM b AS o LEFT JOIN c ON o.k = c.k GROUP BY 1", False),
    ("SELECT c.t, count(*) FROM c RIGHT JOIN b AS o ON o.k = c.k GROUP BY 1", False),
    ("SELECT c.t, count(*) FROM b AS o JOIN (SELECT k, max(t) AS t FROM c GROUP BY k) AS c ON o.k = c.k GROUP BY 1",
     False),
    ("WITH x AS (SELECT k, t FROM c) SELECT x.t, count(*) FROM b AS o JOIN x ON o.k = x.k GROUP BY 1", False),
    ("SELECT o.k, count(*) FROM b AS o JOIN d ON o.k = d.k LEFT JOIN c ON o.k = c.k GROUP BY 1", False),
])
def test_which_joins_are_followed_through_the_changed_rows_alone(sql, monotone):
    assert joined_monotonically(sql, "c") is monotone


JOIN = "FROM sales s {join} products p ON s.product = p.product"


@pytest.mark.parametrize("sql, monotonic", [
    (f"SELECT p.category, count() AS n {JOIN.format(join='JOIN')} GROUP BY 1", ("products",)),
    (f"SELECT p.category, count() AS n {JOIN.format(join='INNER JOIN')} GROUP BY 1", ("products",)),
    ("SELECT p.category, count() AS n FROM sales s, products p WHERE s.product = p.product GROUP BY 1",
     ("products",)),
    (f"SELECT p.category, count() AS n {JOIN.format(join='LEFT JOIN')} GROUP BY 1", ()),
    (("SELECT p.category, count() AS n FROM sales s JOIN (SELECT product, category FROM products) p "
     "ON s.product = p.product GROUP BY 1"), ()),
    (("WITH p AS (SELECT product, category FROM products) SELECT p.category, count() AS n FROM sales s JOIN p "
     "ON s.product = p.product GROUP BY 1"), ()),
])
def test_the_plan_recorded_with_a_view_names_the_joins_followed_through_the_changed_rows(make_project, sql,
                                                                                        monotonic):
    state = view_state(make_project, sql)
    assert state.joined == ("products",) and state.maintenance is not None
    assert state.maintenance.monotonic == monotonic


def test_the_plan_reads_the_batch_and_the_followed_tables_through_placeholders(make_project):
    """The engine fills them as text: the batch's relation, each pinned table's, and a table not pinned by name."""
    state = view_state(make_project, f"SELECT p.category, count() AS n, max(s.amount) AS top {JOIN.format(join='JOIN')} "
                                     "GROUP BY 1")
    sql = state.maintenance.state_sql
    assert "__pf_batch" not in sql and "{table} AS s" in sql and "{table:products} AS p" in sql
    assert "FROM __pf_batch AS s JOIN products AS p" in state.state_sql  # as it was: the rebuild's hash
    filled = fill(sql, "rows_1", {"products": "pinned_2"})
    assert "rows_1 AS s" in filled and "pinned_2 AS p" in filled and "{" not in filled
    assert "`products` AS p" in fill(sql, "rows_1", {})
    assert state.maintenance.partials is None  # max cannot be negated


def test_the_plan_of_a_join_view_whose_aggregates_read_only_its_source_holds_its_partial_states(make_project):
    state = view_state(make_project, f"SELECT p.category, count() AS n, sum(s.amount) AS total "
                                     f"{JOIN.format(join='JOIN')} GROUP BY 1")
    derived = state.maintenance.partials
    assert derived is not None and derived.keys == ("product",)
    assert derived.sql.endswith("FROM {table} AS `s` GROUP BY `s`.`product`")
    signed = dict(derived.signed_sql)["products"]
    assert "FROM {table} AS s JOIN {table:products} AS p" in signed and "__pf_batch" not in signed
    assert derived.negate_sql.endswith("FROM {table}") and derived.compact_sql.endswith(
        "FROM {table} GROUP BY `product`")


@pytest.mark.parametrize("sql", [
    ("SELECT p.category, count() AS n, countIf(p.category = 'x') AS c FROM sales s JOIN products p "
    "ON s.product = p.product GROUP BY 1"),
    f"SELECT p.category, count() AS n {JOIN.format(join='JOIN')} GROUP BY ALL",
])
def test_the_plan_of_a_view_of_another_shape_holds_no_partial_states(make_project, sql):
    state = view_state(make_project, sql)
    assert state.maintenance is not None and state.maintenance.partials is None


def test_a_plain_view_has_a_plan_too(make_project):
    state = view_state(make_project, "SELECT product, amount FROM sales WHERE amount > 0")
    assert state.maintenance is not None and state.maintenance.monotonic == ()
    assert state.maintenance.state_sql == state.state_sql.replace("__pf_batch", "{table}")


def commit(operation: str, **metrics: int) -> Commit:
    return Commit(1, datetime(2024, 1, 1), 0.0, operation, {}, {k: str(v) for k, v in metrics.items()})


def test_a_commits_rows_leave_out_the_rows_it_only_copied():
    replace_where = commit("WRITE", numOutputRows=1746, numCopiedRows=1745, numDeletedRows=323)
    assert replace_where.added_rows == 1 and replace_where.changed_rows == 324
    assert commit("WRITE", numOutputRows=10).changed_rows == 10
    assert commit("DELETE", numDeletedRows=3, numCopiedRows=90).changed_rows == 3
    assert commit("MERGE", numTargetRowsInserted=2, numTargetRowsUpdated=1, numTargetRowsDeleted=4).changed_rows == 7
    assert commit("OPTIMIZE", numOutputRows=50).changed_rows == 0


def test_which_commits_count_the_rows_they_changed_and_which_may_add_rows():
    """A change's rows are broadcast only when every commit counts them (an overwrite does not count what it
    removes); a DELETE, with or without the OPTIMIZE after it, adds none."""
    overwrite = Commit(1, datetime(2024, 1, 1), 0.0, "WRITE", {"mode": "Overwrite"}, {"numOutputRows": "10"})
    assert commit("WRITE", numOutputRows=10).counts_rows and not overwrite.counts_rows
    assert commit("DELETE", numDeletedRows=3).counts_rows and not commit("DELETE").counts_rows
    assert commit("MERGE", numTargetRowsInserted=2, numTargetRowsUpdated=1, numTargetRowsDeleted=0).counts_rows
    assert not commit("TRUNCATE").counts_rows
    assert not adds_rows([commit("DELETE", numDeletedRows=3), commit("OPTIMIZE", numOutputRows=50)])
    assert adds_rows([commit("DELETE", numDeletedRows=3), commit("UPDATE", numUpdatedRows=1)])
    assert adds_rows([overwrite])


def test_a_view_following_ttl_reads_the_ttl_delete_as_a_delete():
    ttl = Commit(2, datetime(2024, 1, 1), 0.0, "DELETE", {}, {"numDeletedRows": "4"}, records.Retention())
    assert not ttl.changes_data and not ttl.rewrites_rows() and ttl.changed_rows == 0  # every other view skips it
    assert as_followed([ttl], False) == [ttl]
    followed = as_followed([ttl, commit("WRITE", numOutputRows=1)], True)
    assert followed[0].changes_data and followed[0].rewrites_rows() and followed[0].changed_rows == 4
    assert followed[0].metadata is None and followed[1] == commit("WRITE", numOutputRows=1)


SALES_COLUMNS = ["ts", "order_id", "product", "amount", "quantity"]


def partials_of(make_project, sql: str):
    state = view_state(make_project, sql)
    return partials(state.state_sql, state.compact_sql, state.negate_sql or "", SALES_COLUMNS,
                    {"products": ["product", "category"]})


def test_a_join_view_whose_aggregates_read_only_its_source_has_partial_states(make_project):
    derived = partials_of(make_project, "SELECT p.category, count() AS n, sum(s.amount) AS total, avg(quantity) AS q "
                                        "FROM sales s JOIN products p ON s.product = p.product "
                                        "WHERE s.quantity > 1 GROUP BY 1")
    # grouped by every source column read outside the aggregates: the join key and the filtered column
    assert derived.keys == ("product", "quantity")
    assert derived.sql.startswith("SELECT `s`.`product` AS `product`, `s`.`quantity` AS `quantity`, "
                                  "COUNT(*) AS `__pf_p1`")
    assert derived.sql.endswith("FROM __pf_batch AS `s` GROUP BY `s`.`product`, `s`.`quantity`")
    # the view's query over the partial rows and the changed products: the same joins and filter, each state merged
    # from its partials per group and sign (added, removed), the removed rows' state negated
    signed = dict(derived.signed_sql)["products"]
    assert signed.startswith("SELECT p.category, CASE WHEN `p`.`__pf_sign` < 0 THEN -(SUM(`s`.`__pf_p1`)) "
                             "ELSE SUM(`s`.`__pf_p1`) END AS `n`, ")
    assert "ELSE STRUCT(SUM(`s`.`__pf_p3`.`sum`) AS sum, SUM(`s`.`__pf_p3`.`count`) AS count) END AS `q`" in signed
    assert signed.endswith("FROM __pf_batch AS s JOIN products AS p ON s.product = p.product WHERE s.quantity > 1 "
                           "GROUP BY 1, `p`.`__pf_sign`")
    assert derived.negate_sql == ("SELECT `product`, `quantity`, -`__pf_p1` AS `__pf_p1`, -`__pf_p2` AS `__pf_p2`, "
                                  "STRUCT(-`__pf_p3`.`sum` AS sum, -`__pf_p3`.`count` AS count) AS `__pf_p3` "
                                  "FROM {table}")
    assert derived.compact_sql.endswith("FROM {table} GROUP BY `product`, `quantity`")


def test_partial_states_resolve_names_in_any_case_as_spark_does(make_project):
    derived = partials_of(make_project, "SELECT p.category, count() AS n FROM sales S JOIN products p "
                                        "ON s.Product = p.product GROUP BY 1")
    assert derived.keys == ("Product",)  # `s.Product` is the source's `product`
    assert derived.sql == "SELECT `S`.`Product` AS `Product`, COUNT(*) AS `__pf_p1` FROM __pf_batch AS `S` " \
                          "GROUP BY `S`.`Product`"


@pytest.mark.parametrize("sql, why", [
    (("SELECT p.category, count() AS n, countIf(p.category = 'x') AS c FROM sales s JOIN products p "
     "ON s.product = p.product GROUP BY 1"), "an aggregate reads the joined table"),
    (("SELECT p.category, count() AS n, max(s.amount) AS top FROM sales s JOIN products p ON s.product = p.product "
     "GROUP BY 1"), "max cannot be negated"),
    (("SELECT p.category, count() AS n FROM sales s JOIN (SELECT * FROM products) p ON s.product = p.product "
     "GROUP BY 1"), "a subquery"),
    ("SELECT category, count() AS n FROM sales JOIN products USING (product) GROUP BY category",
     "a USING join: its column is named by no reference"),
    ("SELECT p.category, count() AS n FROM sales s NATURAL JOIN products p GROUP BY 1", "a NATURAL join"),
    ("SELECT p.category, count() AS n FROM sales s JOIN products p ON s.product = p.product GROUP BY ALL",
     "GROUP BY ALL"),
    (("SELECT p.category, count() AS n FROM sales s JOIN products p ON s.product = p.product "
      "GROUP BY p.category WITH ROLLUP"), "WITH ROLLUP"),
    (("SELECT p.category, count() AS n FROM sales s JOIN products p ON s.product = p.product "
      "WHERE EXISTS (SELECT 1 FROM products q WHERE q.product = s.product) GROUP BY 1"), "a subquery in EXISTS"),
])
def test_other_join_views_have_no_partial_states(make_project, sql, why):
    assert partials_of(make_project, sql) is None, why


# ------------------------------------------------------------------ group keys over a source row (recompute)
def key_of(make_project, sql: str, extra: str = "") -> tuple:
    plan = view_state(make_project, sql, extra).maintenance
    return tuple((k.name, k.sql, k.column, k.column_type, k.unit) for k in plan.group_keys)


@pytest.mark.parametrize("sql, keys", [
    ("SELECT toStartOfHour(ts) AS hour, max(amount) AS top FROM sales GROUP BY hour",
     (("hour", "DATE_TRUNC('HOUR', `ts`)", "ts", "TIMESTAMP", "HOUR"),)),
    ("SELECT toDate(ts) AS day, product, max(amount) AS top FROM sales GROUP BY day, product",
     (("day", "CAST(`ts` AS DATE)", "ts", "TIMESTAMP", "DAY"), ("product", "`product`", None, None, None))),
    ("SELECT toStartOfMonth(ts) AS month, quantity, min(amount) AS low FROM sales GROUP BY 1, 2",
     (("month", "CAST(DATE_TRUNC('MONTH', `ts`) AS DATE)", "ts", "TIMESTAMP", "MONTH"),
      ("quantity", "`quantity`", "quantity", "INT", None))),
    # the date of an hour is a floor to the day, not to the hour
    ("SELECT toDate(toStartOfHour(ts)) AS d, max(amount) AS top FROM sales GROUP BY d",
     (("d", "CAST(DATE_TRUNC('HOUR', `ts`) AS DATE)", "ts", "TIMESTAMP", "DAY"),)),
    # a key of an earlier node is followed to the source columns it is made of
    (("SELECT h, max(amount) AS top FROM (SELECT toStartOfDay(ts) AS h, amount FROM sales WHERE quantity > 1) "
     "GROUP BY h"), (("h", "DATE_TRUNC('DAY', `ts`)", "ts", "TIMESTAMP", "DAY"),)),
    # a value of the row that is no floor of one column: narrowed by the semi join only
    ("SELECT toStartOfFifteenMinutes(ts) AS q, max(amount) AS top FROM sales GROUP BY q",
     (("q", "TIMESTAMP_SECONDS(FLOOR(UNIX_TIMESTAMP(`ts`) / 900) * 900)", None, None, None),)),
    ("SELECT s.product, max(s.amount) AS top FROM sales s JOIN products p ON s.product = p.product GROUP BY 1",
     (("product", "`product`", None, None, None),)),
])
def test_a_views_group_keys_are_recorded_as_values_of_a_source_row(make_project, sql, keys):
    assert key_of(make_project, sql) == keys


@pytest.mark.parametrize("sql", [
    "SELECT p.category, max(s.amount) AS top FROM sales s JOIN products p ON s.product = p.product GROUP BY 1",
    "SELECT max(amount) AS top FROM sales",
    "SELECT product, amount FROM sales",
])
def test_keys_that_are_not_values_of_a_source_row_record_none(make_project, sql):
    assert key_of(make_project, sql) == ()


def test_group_keys_survive_the_state_store_and_a_format_3_plan_reads_with_none(make_project):
    state = view_state(make_project, "SELECT toDate(ts) AS day, max(amount) AS top FROM sales GROUP BY day")
    assert state.maintenance.group_keys
    assert records.decode_state(records.encode_state(state), "r") == state
    stored = json.loads(records.encode_state(state))
    del stored["maintenance"]["group_keys"]
    old = records.decode_state(json.dumps({**stored, "format": 3}), "r")
    assert old.maintenance.group_keys == () and old.maintenance.state_sql == state.maintenance.state_sql
    stored["maintenance"]["group_keys"] = [{"name": "day", "sql": "`ts`", "typo": 1}]
    with pytest.raises(PipeframeError) as err:
        records.decode_state(json.dumps(stored), "The record of `view`")
    assert err.value.code == "PF611" and "typo" in str(err.value)


CHANGED_ROWS = [  # changed rows of `sales` as the change feed gives them (UTC instants)
    {"ts": datetime(2024, 3, 31, 23, 59, 59, tzinfo=UTC), "order_id": "a", "product": "pear", "amount": 2.0,
     "quantity": 3},
    {"ts": datetime(2024, 4, 1, 0, 30, tzinfo=UTC), "order_id": "b", "product": None, "amount": 1.0, "quantity": None},
    {"ts": datetime(2024, 4, 1, 0, 45, tzinfo=UTC), "order_id": "c", "product": "pear", "amount": 5.0, "quantity": 3},
    {"ts": None, "order_id": "d", "product": "fig", "amount": 0.5, "quantity": 7},
]


@pytest.mark.parametrize("sql, expected", [
    ("SELECT toStartOfHour(ts) AS hour, max(amount) AS top FROM sales GROUP BY hour",
     {(datetime(2024, 3, 31, 23, tzinfo=UTC),), (datetime(2024, 4, 1, 0, tzinfo=UTC),), (None,)}),
    ("SELECT toDate(ts) AS day, product, max(amount) AS top FROM sales GROUP BY day, product",
     {(date(2024, 3, 31), "pear"), (date(2024, 4, 1), None), (date(2024, 4, 1), "pear"), (None, "fig")}),
    ("SELECT toStartOfMonth(ts) AS month, quantity, min(amount) AS low FROM sales GROUP BY 1, 2",
     {(date(2024, 3, 1), 3), (date(2024, 4, 1), None), (date(2024, 4, 1), 3), (None, 7)}),
])
def test_the_touched_keys_query_in_duckdb_gives_each_changed_rows_group(make_project, sql, expected):
    """`keys_duckdb` (recorded at deploy) run by DuckDB over changed rows, as a recompute runs it over the change
    feed read by delta-rs (engine/sparkstore.changed_keys): one row per touched group, NULL keys included."""
    import duckdb

    from pipeframe.compiler.maintenance import CHANGED

    plan = view_state(make_project, sql).maintenance
    changed = pa.Table.from_pylist(CHANGED_ROWS, pa.schema([
        ("ts", pa.timestamp("us", tz="UTC")), ("order_id", pa.string()), ("product", pa.string()),
        ("amount", pa.float64()), ("quantity", pa.int32())]))
    with duckdb.connect() as db:
        db.execute("SET TimeZone = 'UTC'")
        db.register(CHANGED, changed)
        found = db.execute(plan.keys_duckdb).fetchall()
    assert len(found) == len(expected) and set(found) == expected


def test_a_key_duckdb_may_compute_otherwise_records_no_duckdb_query_and_a_format_4_plan_reads_with_none(
        make_project):
    bucket = view_state(make_project, "SELECT cityHash64(product) % 8 AS bucket, max(amount) AS top FROM sales "
                                      "GROUP BY bucket").maintenance
    assert bucket.group_keys and bucket.keys_duckdb is None
    # DuckDB translates upper(), but its Unicode case rules are not Java's ('ß'): a key that is not a column or a
    # floor of one is left to Spark, which computes it as the view did
    upper = view_state(make_project, "SELECT upper(product) AS p, max(amount) AS top FROM sales GROUP BY p").maintenance
    assert upper.group_keys and upper.keys_duckdb is None
    state = view_state(make_project, "SELECT toDate(ts) AS day, max(amount) AS top FROM sales GROUP BY day")
    stored = json.loads(records.encode_state(state))
    assert stored["maintenance"]["keys_duckdb"] == state.maintenance.keys_duckdb is not None
    del stored["maintenance"]["keys_duckdb"]
    old = records.decode_state(json.dumps({**stored, "format": 4}), "r")
    assert old.maintenance.keys_duckdb is None and old.maintenance.group_keys == state.maintenance.group_keys


KEY = GroupKey("k", "x", "c", "TIMESTAMP", "HOUR")


@pytest.mark.parametrize("key, expected", [
    (GroupKey("k", "`c`", "c", "INT", None), "`c` >= L AND `c` <= H"),
    (KEY, "`c` >= CAST(L AS TIMESTAMP) AND `c` < CAST(H AS TIMESTAMP) + INTERVAL 1 HOUR + INTERVAL 3 HOUR"),
    (GroupKey("k", "x", "c", "TIMESTAMP", "MONTH"),
     "`c` >= CAST(L AS TIMESTAMP) AND `c` < CAST(H AS TIMESTAMP) + INTERVAL 1 MONTH + INTERVAL 1 DAY"),
    (GroupKey("k", "x", "c", "DATE", "WEEK"),
     "`c` >= CAST(L AS DATE) AND `c` < CAST(CAST(H AS DATE) + INTERVAL 7 DAY AS DATE)"),
    # a truncation of a date below a day is the date itself: whole days (an hour after a date is that date)
    (GroupKey("k", "x", "c", "DATE", "HOUR"),
     "`c` >= CAST(L AS DATE) AND `c` < CAST(CAST(H AS DATE) + INTERVAL 1 DAY AS DATE)"),
    (GroupKey("k", "x", "c", "INT", "DAY"), None),  # a truncation of a number: no range
    (GroupKey("k", "x", None, None, None), None),
])
def test_a_keys_range_filter_over_its_source_column(key, expected):
    assert key_range(key, "L", "H") == expected


def test_touched_keys_become_exact_literals_whatever_the_time_zone():
    stamps = pa.chunked_array([pa.array([datetime(2024, 3, 10, 7, 30, tzinfo=UTC), None,
                                         datetime(2024, 3, 9, 23, 0, tzinfo=UTC)], pa.timestamp("us", tz="UTC"))])
    assert literal_bounds(stamps) == (f"timestamp_micros({1710025200 * 10**6})", f"timestamp_micros({1710055800 * 10**6})")
    days = pa.chunked_array([pa.array([date(1970, 1, 11), date(1969, 12, 31)], pa.date32())])
    assert literal_bounds(days) == ("date_from_unix_date(-1)", "date_from_unix_date(10)")
    assert literal_bounds(pa.chunked_array([pa.array([5, None, -2], pa.int32())])) == ("-2", "5")
    assert literal_bounds(pa.chunked_array([pa.array([None, None], pa.int64())])) is None
    assert literal_bounds(pa.chunked_array([pa.array(["a"])])) is None


def stats_add(column: str, low: object, high: object, nulls: int = 0) -> dict:
    return {"stats": json.dumps({"numRecords": 10, "minValues": {column: low}, "maxValues": {column: high},
                                 "nullCount": {column: nulls}})}


def test_a_recompute_reads_only_the_files_whose_statistics_overlap_the_touched_keys():
    hour = GroupKey("hour", "DATE_TRUNC('HOUR', `ts`)", "ts", "TIMESTAMP", "HOUR")
    touched = pa.table({"hour": pa.array([datetime(2024, 5, 2, 5, tzinfo=UTC)], pa.timestamp("us", tz="UTC"))})
    keep = file_test((hour,), touched)
    assert keep(stats_add("ts", "2024-05-02T05:59:59.999Z", "2024-05-02T07:00:00.000Z"))  # holds the hour's end
    assert keep(stats_add("ts", "2024-05-02T07:30:00.000+02:00", "2024-05-02T08:30:00.000+02:00"))  # 05:30-06:30Z
    assert not keep(stats_add("ts", "2024-05-02T06:00:00.000+02:00", "2024-05-02T06:59:58.000+02:00"))  # before it
    assert not keep(stats_add("ts", "2024-04-29T00:00:00.000Z", "2024-05-01T00:00:00.000Z"))  # days before
    assert not keep(stats_add("ts", "2024-05-04T00:00:00.000Z", "2024-05-05T00:00:00.000Z"))  # days after
    assert keep({"stats": json.dumps({"numRecords": 3})}) and keep({})  # no statistics: may hold anything
    # a touched NULL key keeps the files holding NULLs
    with_null = pa.table({"hour": pa.array([None], pa.timestamp("us", tz="UTC"))})
    assert file_test((hour,), with_null)({"stats": json.dumps({"nullCount": {"ts": 2}, "minValues": {},
                                                                "maxValues": {}})})
    assert not file_test((hour,), with_null)(stats_add("ts", "2024-05-04T00:00:00.000Z", "2024-05-05T00:00:00Z"))
    # a date key over a timestamp column, and an integer key: the other keys' files are not told apart
    day = GroupKey("day", "CAST(`ts` AS DATE)", "ts", "TIMESTAMP", "DAY")
    status = GroupKey("status", "`status`", "status", "INT", None)
    keys = pa.table({"day": pa.array([date(2024, 5, 2)], pa.date32()), "status": pa.array([404], pa.int32())})
    both = file_test((day, status), keys)
    assert both({"stats": json.dumps({"minValues": {"ts": "2024-05-02T10:00:00Z", "status": 200},
                                      "maxValues": {"ts": "2024-05-02T11:00:00Z", "status": 500},
                                      "nullCount": {"ts": 0, "status": 0}})})
    assert not both({"stats": json.dumps({"minValues": {"ts": "2024-05-02T10:00:00Z", "status": 200},
                                          "maxValues": {"ts": "2024-05-02T11:00:00Z", "status": 302},
                                          "nullCount": {"ts": 0, "status": 0}})})
    assert file_test((GroupKey("u", "`u`", None, None, None),), pa.table({"u": ["a"]})) is None


@pytest.mark.parametrize("unit, floor", [("MM", ("d", "MONTH")), ("YEAR", ("d", "YEAR")), ("DD", (None, None)),
                                         ("HOUR", (None, None))])
def test_sparks_trunc_of_a_date_is_a_floor_only_for_the_units_it_knows(unit, floor):
    """Spark's trunc(date, unit) answers NULL for a unit below a week: such a key is no floor of its column."""
    sql = f"SELECT TRUNC(d, '{unit}') AS k, max(x) AS m FROM __pf_batch AS e GROUP BY TRUNC(d, '{unit}')"
    [key] = group_keys(sql, ("k",), [("d", "DATE"), ("x", "INT")], {})
    assert (key.column, key.unit) == floor
