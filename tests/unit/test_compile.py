"""Compiler checks of PRODUCT.md section 3 beyond the incrementality rules: names, graph, types, keys, targets,
and the SQL the compiler produces (rendered per request, states generated and checked)."""

from __future__ import annotations

import pickle

import pytest

from pipeframe.compiler.sql import to_sql
from pipeframe.errors import PipeframeError
from pipeframe.project import Project
from pipeframe.templating import TemplateError

ENDPOINT = """\
NODE filtered
SQL >
    %
    SELECT * FROM sales
    WHERE ts >= {{ DateTime(start, '2024-01-01 00:00:00', description="first hour") }}
    {% if defined(product) %} AND product = {{ String(product) }} {% end %}
NODE endpoint
SQL >
    %
    SELECT product, sum(amount) AS revenue FROM filtered
    GROUP BY product ORDER BY revenue DESC
    LIMIT {{ Int(limit, 10) }}
TYPE endpoint
"""


def codes(report):
    return {(d.code, d.location.path, d.location.line) for d in report.diagnostics}


def test_endpoint_parameters_and_rendering(make_project):
    project = Project(make_project({"pipes/top.pipe": ENDPOINT}))
    compiled = project.require_valid()
    pipe = compiled.pipes["top"]
    params = {p.name: p for p in pipe.parameters}
    assert list(params) == ["start", "product", "limit"]
    assert params["start"].type == "DateTime" and params["start"].description == "first hour"
    assert params["limit"].default == 10
    sql = pipe.render({"limit": "3", "product": "mat' OR '1'='1"})
    assert "LIMIT 3" in sql and "'mat\\' OR \\'1\\'=\\'1'" in sql
    with pytest.raises(TemplateError) as err:
        pipe.render({"limit": "ten"})
    assert err.value.code == "PF202" and "limit" in err.value.diagnostics[0].message
    assert err.value.diagnostics[0].location.line == 12


PAGED = """\
NODE endpoint
SQL >
    %
    SELECT product, amount FROM sales
    WHERE amount > {{ Int(min_amount, 0) }}
    {% if defined(page) %} LIMIT {{ Int(page_size, 10) }} OFFSET {{ Int(page) }} {% end %}
TYPE endpoint
"""


@pytest.mark.parametrize(("params", "name", "clause", "got"), [
    ({"page": "0", "page_size": "-1"}, "page_size", "LIMIT", "'-1'"),
    ({"page": "0", "page_size": "2147483648"}, "page_size", "LIMIT", "'2147483648'"),
    ({"page": "-5"}, "page", "OFFSET", "'-5'"),
])
def test_a_parameter_rendered_into_limit_or_offset_must_fit_there(make_project, params, name, clause, got):
    pipe = Project(make_project({"pipes/paged.pipe": PAGED})).require_valid().pipes["paged"]
    with pytest.raises(TemplateError) as err:
        pipe.render(params)
    assert (err.value.code, err.value.http_status, err.value.parameter) == ("PF202", 400, name)
    [d] = err.value.diagnostics
    assert d.message == f"Parameter `{name}` is used in {clause}, so it must be a whole number from 0 to 2147483647, " \
                        f"got {got}."
    assert (d.location.path, d.location.line) == ("pipes/paged.pipe", 6)


def test_limit_and_offset_values_in_range_and_other_uses_are_unrestricted(make_project):
    compiled = Project(make_project({"pipes/paged.pipe": PAGED, "pipes/wrap.pipe": (
        "NODE n\nSQL >\n    SELECT count(*) AS n FROM paged\nTYPE endpoint\n")})).require_valid()
    sql = compiled.pipes["paged"].render({"page": "2147483647", "page_size": "0", "min_amount": "-1"})
    assert "amount > -1" in sql and "LIMIT 0 OFFSET 2147483647" in sql
    with pytest.raises(TemplateError) as err:  # a pipe reading the endpoint renders it with the same parameters
        compiled.pipes["wrap"].render({"page": "1", "page_size": "-1"})
    assert err.value.parameter == "page_size"


def test_a_bare_parameter_in_limit_is_checked_too(make_project):
    pipe = "NODE n\nSQL >\n    SELECT product FROM sales LIMIT {{ n }}\nTYPE endpoint\n"
    compiled = Project(make_project({"pipes/p.pipe": pipe})).require_valid()
    with pytest.raises(TemplateError) as err:
        compiled.pipes["p"].render({"n": "-1"})
    assert err.value.parameter == "n" and "used in LIMIT" in err.value.diagnostics[0].message


def test_a_limit_default_out_of_range_is_a_parameter_error(make_project):
    pipe = ENDPOINT.replace("Int(limit, 10)", "Int(limit, -1)")
    compiled = Project(make_project({"pipes/top.pipe": pipe})).require_valid()
    with pytest.raises(TemplateError) as err:
        compiled.pipes["top"].render({})
    assert err.value.diagnostics[0].message.startswith("The default of parameter `limit` is used in LIMIT")
    assert "LIMIT 5" in compiled.pipes["top"].render({"limit": "5"})


def test_unknown_reference_with_suggestion(make_project):
    report = Project(make_project({"pipes/p.pipe": "NODE n\nSQL >\n    SELECT * FROM sale\nTYPE endpoint\n"})).check()
    [d] = report.errors
    assert (d.code, d.location.line) == ("PF301", 3) and "`sales`" in d.hint


def test_a_percent_line_inside_the_sql_is_named_with_its_fix(make_project):
    pipe = "NODE n\nSQL >\n    SELECT * FROM sales\n    %\n    WHERE amount > {{ Int(m, 1) }}\nTYPE endpoint\n"
    [d] = Project(make_project({"pipes/p.pipe": pipe})).check().errors
    assert (d.code, d.location.line, d.location.col) == ("PF303", 4, 5)
    assert "first line" in d.hint


def test_cycle_prints_the_whole_cycle(make_project):
    a = "NODE n\nSQL >\n    SELECT product FROM b_out\nTYPE materialized\nDATASOURCE a_out\n"
    b = "NODE n\nSQL >\n    SELECT product FROM a_out\nTYPE materialized\nDATASOURCE b_out\n"
    report = Project(make_project({"pipes/a.pipe": a, "pipes/b.pipe": b})).check()
    cycle = [d for d in report.errors if d.code == "PF302"]
    assert cycle and "a_out" in cycle[0].message and "b_out" in cycle[0].message
    assert cycle[0].message.count("→") == 4 and cycle[0].location.path.startswith("pipes/")


def test_two_typed_nodes_and_missing_target(make_project):
    pipe = "NODE a\nSQL >\n    SELECT 1 AS x\nTYPE endpoint\nNODE b\nSQL >\n    SELECT 2 AS x\nTYPE materialized\n"
    report = Project(make_project({"pipes/p.pipe": pipe})).check()
    assert ("PF304", "pipes/p.pipe", 8) in codes(report)


def test_copy_target_must_exist(make_project):
    pipe = "NODE n\nSQL >\n    SELECT * FROM sales\nTYPE copy\nTARGET_DATASOURCE snapshot\n"
    report = Project(make_project({"pipes/c.pipe": pipe})).check()
    assert ("PF301", "pipes/c.pipe", 5) in codes(report)


def test_generated_target_schema(make_project):
    pipe = ("NODE n\nSQL >\n    SELECT to_date(ts) AS day, product, count(*) AS n, sum(quantity) AS units,\n"
            "    max(amount) AS top FROM sales GROUP BY 1, 2\nTYPE materialized\nDATASOURCE daily\n")
    compiled = Project(make_project({"pipes/daily.pipe": pipe})).require_valid()
    target = compiled.datasources["daily"]
    assert target.generated and target.view == "daily"
    assert [(c.name, c.type, c.state) for c in target.columns] == [
        ("day", "DATE", None), ("product", "STRING", None), ("n", "BIGINT", "count"), ("units", "BIGINT", "sum"),
        ("top", "DOUBLE", "max")]
    read = compiled.pipes["daily"].view.plan.read_sql("t")
    assert read.startswith("SELECT `day`, `product`, sum(`n`) AS `n`") and read.endswith("GROUP BY `day`, `product` HAVING sum(`n`) > 0")


def test_declared_target_checked_with_the_safe_cast_lattice(make_project):
    pipe = ("NODE n\nSQL >\n    SELECT product, count(*) AS n, sum(amount) AS revenue, min(ts) AS first_seen\n"
            "    FROM sales GROUP BY product\nTYPE materialized\nDATASOURCE stats\n")
    good = "SCHEMA >\n    `product` String,\n    `n` Int64,\n    `revenue` Float64,\n    `first_seen` DateTime\n"
    bad = "SCHEMA >\n    `product` String,\n    `n` Int32,\n    `revenue` String,\n    `extra` Int64\n"
    root = make_project({"pipes/stats.pipe": pipe, "datasources/stats.datasource": good})
    assert Project(root).check().ok
    (root / "datasources/stats.datasource").write_text(bad)
    report = Project(root).check()
    found = codes(report)
    assert ("PF306", "datasources/stats.datasource", 3) in found  # BIGINT count into Int32: narrowing
    assert ("PF306", "datasources/stats.datasource", 4) in found  # DOUBLE into STRING
    assert ("PF308", "datasources/stats.datasource", 5) in found  # declared but not produced
    assert any(c == "PF308" and p == "pipes/stats.pipe" for c, p, _ in found)  # produced but not declared


def test_widening_into_declared_target_is_fine(make_project):
    pipe = ("NODE n\nSQL >\n    SELECT to_date(ts) AS day, quantity FROM sales\nTYPE materialized\n"
            "DATASOURCE wide\n")
    target = "SCHEMA >\n    `day` TIMESTAMP,\n    `quantity` BIGINT\n"
    report = Project(make_project({"pipes/wide.pipe": pipe, "datasources/wide.datasource": target})).check()
    assert report.ok, [d.format() for d in report.diagnostics]


def test_keys_must_be_columns(make_project):
    ds = ("SCHEMA >\n    `ts` TIMESTAMP,\n    `id` STRING\nENGINE_PARTITION_KEY to_date(tss)\n"
          "ENGINE_SORTING_KEY id, product\nENGINE_TTL ts + INTERVAL 1 DAY\n")
    report = Project(make_project({"datasources/events.datasource": ds})).check()
    found = codes(report)
    assert ("PF307", "datasources/events.datasource", 4) in found
    assert ("PF307", "datasources/events.datasource", 5) in found
    assert not any(line == 6 for _, _, line in found)


def test_materialized_pipe_cannot_use_request_parameters(make_project):
    pipe = ("NODE n\nSQL >\n    %\n    SELECT product, count(*) AS n FROM sales\n"
            "    WHERE product = {{ String(p, 'x') }} GROUP BY product\nTYPE materialized\nDATASOURCE t\n")
    report = Project(make_project({"pipes/v.pipe": pipe})).check()
    assert ("PF205", "pipes/v.pipe", 3) in codes(report)


def test_project_vars_render_verbatim(make_project):
    pipe = "NODE n\nSQL >\n    SELECT {{ col }} AS c FROM sales\nTYPE endpoint\n"
    root = make_project({"pipes/p.pipe": pipe, "pipeframe.yaml": "vars: {col: product}\n"})
    assert "SELECT product AS c FROM sales" in Project(root).require_valid().pipes["p"].sql


def test_pipe_reading_another_pipe_is_inlined(make_project):
    top = ENDPOINT
    wrap = "NODE n\nSQL >\n    SELECT count(*) AS products FROM top\nTYPE endpoint\n"
    compiled = Project(make_project({"pipes/top.pipe": top, "pipes/wrap.pipe": wrap})).require_valid()
    pipe = compiled.pipes["wrap"]
    assert pipe.templated and [p.name for p in pipe.parameters] == ["start", "product", "limit"]
    sql = pipe.render({"limit": "5"})
    assert "top__filtered AS (" in sql and "top AS (" in sql and "LIMIT 5" in sql


def test_pipes_read_twice_are_inlined_once_without_name_clashes(make_project):
    base = "NODE endpoint\nSQL >\n    SELECT product, amount FROM sales\nTYPE endpoint\n"
    left = "NODE endpoint\nSQL >\n    SELECT product FROM base\nTYPE endpoint\n"
    right = "NODE endpoint\nSQL >\n    SELECT product FROM base WHERE amount > 0\nTYPE endpoint\n"
    both = ("NODE endpoint\nSQL >\n    SELECT l.product FROM l_pipe AS l JOIN r_pipe AS r ON l.product = r.product\n"
            "TYPE endpoint\n")
    compiled = Project(make_project({"pipes/base.pipe": base, "pipes/l_pipe.pipe": left, "pipes/r_pipe.pipe": right,
                                     "pipes/both.pipe": both})).require_valid()
    sql = compiled.pipes["both"].sql
    assert sql.count("base AS (") == 1 and "l_pipe AS (" in sql and "r_pipe AS (" in sql


def test_explicit_states_and_merge_reads(make_project):
    mv = ("NODE n\nSQL >\n    SELECT product, uniqState(order_id) AS buyers, sumState(amount) AS revenue\n"
          "    FROM sales GROUP BY product\nTYPE materialized\nDATASOURCE by_product\n")
    target = ("SCHEMA >\n    `product` String,\n    `buyers` AggregateFunction(uniq, String),\n"
              "    `revenue` AggregateFunction(sum, Float64)\n")
    read = ("NODE n\nSQL >\n    SELECT product, uniqMerge(buyers) AS buyers, sumMerge(revenue) AS revenue\n"
            "    FROM by_product GROUP BY product\nTYPE endpoint\n")
    compiled = Project(make_project({"pipes/by_product.pipe": mv, "datasources/by_product.datasource": target,
                                     "pipes/api.pipe": read})).require_valid()
    view = compiled.pipes["by_product"].view
    assert view.verdict.status == "accepted" and not view.verdict.rewrites
    assert [(c.name, c.state, c.explicit) for c in compiled.datasources["by_product"].columns] == [
        ("product", None, False), ("buyers", "uniq", True), ("revenue", "sum", True)]
    sql = compiled.pipes["api"].sql.lower()
    assert "hll_sketch_estimate(hll_union_agg(buyers, true))" in sql and "sum(revenue)" in sql


def test_state_declared_for_a_plain_value_is_a_type_error(make_project):
    mv = ("NODE n\nSQL >\n    SELECT product, count(*) AS buyers\n    FROM sales GROUP BY product\n"
          "TYPE materialized\nDATASOURCE by_product\n")
    target = "SCHEMA >\n    `product` String,\n    `buyers` AggregateFunction(uniq, String)\n"
    report = Project(make_project({"pipes/by_product.pipe": mv,
                                   "datasources/by_product.datasource": target})).check()
    assert ("PF306", "datasources/by_product.datasource", 3) in codes(report)


def test_pipe_named_like_an_unrelated_datasource(make_project):
    report = Project(make_project({"pipes/sales.pipe": "NODE n\nSQL >\n    SELECT 1 AS x\nTYPE endpoint\n"})).check()
    assert ("PF105", "pipes/sales.pipe", 1) in codes(report)


def test_sql_of_unknown_node_is_an_error(make_project):
    project = Project(make_project({"pipes/top.pipe": ENDPOINT}))
    assert "FROM sales" in project.sql("top.filtered")
    with pytest.raises(PipeframeError) as err:
        project.sql("top.nope")
    assert err.value.code == "PF301"


def test_starter_template_and_example_project_check_clean():
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    for folder in ("pipeframe/templates", "example_project"):
        report = Project(root / folder).check()
        assert report.ok and not report.warnings, [d.format() for d in report.diagnostics]
        assert all(v.verdict.status != "rejected" for v in report.project.views)


# ------------------------------------------------------------------------------------- Tinybird projects

def test_a_pipe_without_type_publishes_its_last_node(make_project):
    pipe = "NODE a\nSQL >\n    SELECT product, amount FROM sales\nNODE b\nSQL >\n    SELECT product FROM a\n"
    compiled = Project(make_project({"pipes/plain.pipe": pipe})).require_valid()
    assert compiled.pipes["plain"].type == "endpoint"
    assert compiled.pipes["plain"].sql.endswith("SELECT product FROM a")


def test_clickhouse_keys_are_deployed_as_spark_sql_and_spark_keys_as_written(make_project):
    tinybird = ('SCHEMA >\n    `ts` DateTime,\n    `id` String\nENGINE "MergeTree"\n'
                'ENGINE_PARTITION_KEY "toYYYYMM(ts)"\nENGINE_SORTING_KEY "id, ts"\n'
                'ENGINE_TTL "toDateTime(ts) + toIntervalDay(90)"\n')
    spark = "SCHEMA >\n    `ts` TIMESTAMP\nENGINE_PARTITION_KEY to_date(ts)\nENGINE_TTL ts + INTERVAL 1 DAY\n"
    compiled = Project(make_project({"datasources/events.datasource": tinybird,
                                     "datasources/plain.datasource": spark})).require_valid()
    events = compiled.datasources["events"].definition
    assert (events.partition_key, events.sorting_key, events.ttl) == (
        "(YEAR(ts) * 100 + MONTH(ts))", ("id", "ts"), "DATE_TRUNC('SECOND', CAST(ts AS TIMESTAMP)) + MAKE_DT_INTERVAL(90)")
    plain = compiled.datasources["plain"].definition
    assert (plain.partition_key, plain.ttl) == ("to_date(ts)", "ts + INTERVAL 1 DAY")


def test_count_if_states_and_merges_as_tinybird_writes_them(make_project):
    events = "SCHEMA >\n    `ts` DateTime,\n    `event` String,\n    `product` String\n"
    mv = ("NODE n\nSQL >\n    SELECT toStartOfHour(ts) AS hour, product,\n"
          "        countIfState(event = 'view') AS views, countIfState(event = 'cart') AS carts\n"
          "    FROM events GROUP BY hour, product\nTYPE materialized\nDATASOURCE by_hour\n")
    target = ("SCHEMA >\n    `hour` DateTime,\n    `product` String,\n"
              "    `views` AggregateFunction(countIf, UInt8),\n    `carts` AggregateFunction(countIf, UInt8)\n"
              'ENGINE "AggregatingMergeTree"\nENGINE_SORTING_KEY "hour, product"\n')
    read = ("NODE n\nSQL >\n    SELECT product, countIfMerge(views) AS views FROM by_hour\n"
            "    WHERE hour > now() - toIntervalDay(7) GROUP BY product\n")
    compiled = Project(make_project({"datasources/events.datasource": events, "pipes/by_hour_mv.pipe": mv,
                                     "datasources/by_hour.datasource": target, "pipes/api.pipe": read})
                       ).require_valid()
    assert [(c.name, c.state) for c in compiled.datasources["by_hour"].columns] == [
        ("hour", None), ("product", None), ("views", "count_if"), ("carts", "count_if")]
    sql = compiled.pipes["api"].sql
    assert "SUM(views)" in sql and "MAKE_DT_INTERVAL(7)" in sql.upper() and "CURRENT_TIMESTAMP()" in sql


def test_an_untranslatable_clickhouse_call_is_an_error_at_its_line(make_project):
    pipe = "NODE n\nSQL >\n    SELECT toDate(ts) AS day,\n        anyLast(product) AS last FROM sales GROUP BY day\n"
    report = Project(make_project({"pipes/p.pipe": pipe})).check()
    (d,) = [d for d in report.diagnostics if d.is_error]
    assert (d.code, d.location.line, d.location.col) == ("PF309", 4, 9)
    assert d.message == "ClickHouse function `anyLast` has no Spark translation." and "max_by" in d.hint


def test_text_after_end_is_ignored_as_tinybird_does(make_project):
    pipe = ("NODE n\nSQL >\n%\n    SELECT product FROM sales\n    {% if defined(p) %} WHERE product = {{ String(p) }}"
            " {% end if %}\nTYPE endpoint\n")
    compiled = Project(make_project({"pipes/p.pipe": pipe})).require_valid()
    assert compiled.pipes["p"].render({"p": "mat"}).endswith("WHERE product = 'mat'")
    assert compiled.pipes["p"].render({}).endswith("SELECT product FROM sales")


def test_paths_inside_a_json_column_read_the_json(make_project):
    ds = "SCHEMA >\n    `ts` DateTime,\n    `event` JSON `json:$`,\n    `meta` String\n"
    pipe = ("NODE n\nSQL >\n    %\n    SELECT e.ts, event.data.user_id::String AS user, meta\n    FROM logs AS e\n"
            "    WHERE e.event.data.kind = {{ String(kind, 'login') }}\n")
    compiled = Project(make_project({"datasources/logs.datasource": ds, "pipes/p.pipe": pipe})).require_valid()
    expected = ("SELECT e.ts, CAST(GET_JSON_OBJECT(event, '$.data.user_id') AS STRING) AS user, meta FROM logs AS e "
                "WHERE GET_JSON_OBJECT(e.event, '$.data.kind') = ")
    assert compiled.pipes["p"].sql.startswith(expected)
    assert compiled.pipes["p"].render({"kind": "logout"}) == expected + "'logout'"
    kept = pickle.loads(pickle.dumps(compiled.pipes["p"].trees))  # as the check cache keeps it: text only
    assert "GET_JSON_OBJECT(event, '$.data.user_id')" in to_sql(kept[0][1])


def test_a_qualified_column_its_source_lacks_is_pf310_at_check(make_project):
    root = make_project({"pipes/bad.pipe": (
        "NODE recent\nSQL >\n    SELECT product, amount FROM sales\n"
        "NODE joined\nSQL >\n    SELECT s.prodct, r.amount, r.ts, p.category\n    FROM sales s\n"
        "    JOIN recent r ON r.product = s.product\n    JOIN (SELECT product, category FROM products) p "
        "ON p.product = s.product\nTYPE endpoint\n")})
    report = Project(root).check()
    found = sorted((d.message, d.hint, d.location.line) for d in report.errors if d.code == "PF310")
    assert found == [
        ("Unknown column `r.ts`: `recent` has no such column.", "Use a column `recent` has.", 6),
        ("Unknown column `s.prodct`: `sales` has no such column.", "Did you mean `s.product`?", 6),
    ]
    # what the sources have passes, in any letter case (Spark compares names case-insensitively)
    root = make_project({"pipes/bad.pipe": "NODE n\nSQL >\n    SELECT s.PRODUCT, x.Category FROM sales s, "
                                           "(SELECT * FROM products) x\nTYPE endpoint\n"})
    assert not [d for d in Project(root).check().errors if d.code == "PF310"]


def test_a_versioned_resource_is_read_by_its_versioned_or_bare_name(make_project):
    root = make_project({
        "datasources/page_views.datasource": "VERSION 3\nSCHEMA >\n    `id` String,\n    `duration` UInt32\n",
        "pipes/bare.pipe": "NODE n\nSQL >\n    %\n    SELECT p.id, sum(duration) AS d FROM page_views AS p\n"
                           "    WHERE id = {{ String(id, 'x') }} GROUP BY p.id\nTYPE endpoint\n",
        "pipes/named.pipe": "VERSION 2\nNODE n\nSQL >\n    SELECT id FROM page_views__v3\nTYPE endpoint\n",
        "pipes/reader.pipe": "NODE n\nSQL >\n    SELECT id FROM named\nTYPE endpoint\n"}, with_sources=False)
    compiled = Project(root).require_valid()
    assert set(compiled.pipes) == {"bare", "named__v2", "reader"} and set(compiled.datasources) == {"page_views__v3"}
    assert compiled.pipes["bare"].reads == ("page_views__v3",)
    assert "FROM page_views__v3 AS p" in compiled.pipes["bare"].render({"id": "a"})
    assert compiled.pipes["reader"].reads == ("named__v2",) and "named__v2 AS named" in compiled.pipes["reader"].sql


def test_keys_as_delta_takes_them(make_project):
    """A partition key is a Delta generated column (no timestamp_millis there: from_unixtime), and Delta clusters by
    at most 4 columns (the sorting key's leading ones); a FINAL read still dedupes by the whole sorting key."""
    ds = ("SCHEMA >\n    `a` String,\n    `b` String,\n    `c` String,\n    `d` String,\n    `e` String,\n"
          "    `ts` Int64,\n    `v` UInt64\nENGINE \"ReplacingMergeTree\"\n"
          "ENGINE_PARTITION_KEY \"toYYYYMM(fromUnixTimestamp64Milli(ts))\"\nENGINE_SORTING_KEY \"a, b, c, d, e\"\n"
          "ENGINE_VER \"v\"\n")
    pipe = "NODE n\nSQL >\n    SELECT a, e FROM wide FINAL\nTYPE endpoint\n"
    compiled = Project(make_project({"datasources/wide.datasource": ds, "pipes/p.pipe": pipe},
                                    with_sources=False)).require_valid()
    definition = compiled.datasources["wide"].definition
    assert definition.sorting_key == ("a", "b", "c", "d")
    assert definition.partition_key == ("(YEAR(CAST(FROM_UNIXTIME(ts DIV 1000) AS TIMESTAMP)) * 100 + "
                                        "MONTH(CAST(FROM_UNIXTIME(ts DIV 1000) AS TIMESTAMP)))")
    assert "PARTITION BY `a`, `b`, `c`, `d`, `e` ORDER BY `v` DESC" in compiled.pipes["p"].sql
