"""Compiler checks of PRODUCT.md section 3 beyond the incrementality rules: names, graph, types, keys, targets,
and the SQL the compiler produces (rendered per request, states generated and checked)."""

from __future__ import annotations

import pytest

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
    assert read.startswith("SELECT `day`, `product`, sum(`n`) AS `n`") and read.endswith("GROUP BY `day`, `product`")


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
