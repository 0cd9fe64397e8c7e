"""Templating: typed parameters, SQL-safe rendering, `{% end %}`, analysis mode and error locations.

No JVM: everything here is Jinja and string checks.
"""

from __future__ import annotations

import time
from datetime import date, datetime

import pytest

from pipeframe.errors import Location, PipeframeError
from pipeframe.templating import Analysis, Parameter, TemplateError, analyze, is_templated, render
from pipeframe.templating.sandbox import compile_template

LOC = Location("pipes/sales.pipe", 10, 5)

PRODUCT_EXAMPLE = """%
SELECT * FROM sales_by_hour
WHERE hour >= {{ DateTime(start, '2024-01-01 00:00:00', description="first hour") }}
{% if defined(product) %} AND product = {{ String(product) }} {% endif %}
"""

ENDPOINT_EXAMPLE = """%
SELECT product, sum(revenue) AS revenue FROM filtered
GROUP BY product ORDER BY revenue DESC
LIMIT {{ Int(limit, 10) }}
"""


def r(sql: str, params: dict | None = None, **kwargs: object) -> str:
    return render(sql, params or {}, location=LOC, **kwargs)  # type: ignore[arg-type]


def err(sql: str, params: dict | None = None, **kwargs: object) -> TemplateError:
    with pytest.raises(TemplateError) as info:
        r(sql, params, **kwargs)
    return info.value


def a(sql: str, **kwargs: object) -> Analysis:
    return analyze(sql, location=LOC, **kwargs)  # type: ignore[arg-type]


# --- detection and the fast path -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "sql, templated",
    [
        ("SELECT 1", False),
        ("SELECT '%' AS pct", False),
        ("SELECT a % 2 FROM t", False),
        ("%\nSELECT 1", True),
        ("\n  \n  %  \nSELECT 1", True),
        ("SELECT 1\n%", False),
        ("SELECT {{ x }}", True),
        ("SELECT 1 {% if a %}{% end %}", True),
        ("SELECT 1 {# note #}", True),
    ],
)
def test_is_templated(sql: str, templated: bool) -> None:
    assert is_templated(sql) is templated


def test_plain_sql_is_returned_unchanged() -> None:
    sql = "SELECT a, 'it''s' FROM t WHERE b % 2 = 0\n"
    assert r(sql, {"a": "x"}) == sql
    assert a(sql) == Analysis(sql, ())


def test_plain_sql_analysis_is_fast() -> None:
    sql = "SELECT a, b, c FROM t WHERE x = 1\n" * 20
    start = time.perf_counter()
    for _ in range(1000):
        a(sql)
    assert (time.perf_counter() - start) / 1000 < 0.0002


def test_percent_line_is_blanked_keeping_line_numbers() -> None:
    assert r("%\nSELECT {{ Int(n, 1) }}") == "\nSELECT 1"
    assert r("\n%\nSELECT 1") == "\n\nSELECT 1"
    assert r("%\r\nSELECT 1") == "\nSELECT 1"  # Jinja normalises line endings


def test_compiled_templates_are_cached() -> None:
    sql = "SELECT {{ Int(cached_n, 7) }} -- cache test"
    r(sql)
    hits = compile_template.cache_info().hits
    r(sql, {"cached_n": "8"})
    a(sql)
    assert compile_template.cache_info().hits == hits + 2


# --- typed functions: good values ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "call, value, expected",
    [
        ("String(p)", "abc", "'abc'"),
        ("String(p)", 42, "'42'"),
        ("Int(p)", "123", "123"),
        ("Int(p)", " -5 ", "-5"),
        ("Int(p)", "007", "7"),
        ("Int(p)", 9, "9"),
        ("Int8(p)", "-128", "-128"),
        ("Int16(p)", "32767", "32767"),
        ("Int32(p)", "-2147483648", "-2147483648"),
        ("Int64(p)", "9223372036854775807", "9223372036854775807"),
        ("UInt8(p)", "255", "255"),
        ("UInt16(p)", "65535", "65535"),
        ("UInt32(p)", "4294967295", "4294967295"),
        ("UInt64(p)", "18446744073709551615", "18446744073709551615"),
        ("Float(p)", "1.5", "1.5"),
        ("Float(p)", "-.25", "-0.25"),
        ("Float(p)", "1e3", "1000.0"),
        ("Float(p)", 2, "2.0"),
        ("Float32(p)", "3.25", "3.25"),
        ("Float64(p)", "0.1", "0.1"),
        ("Boolean(p)", "true", "true"),
        ("Boolean(p)", "FALSE", "false"),
        ("Boolean(p)", "1", "true"),
        ("Boolean(p)", "0", "false"),
        ("Boolean(p)", True, "true"),
        ("Date(p)", "2024-01-01", "DATE '2024-01-01'"),
        ("Date(p)", date(2024, 2, 29), "DATE '2024-02-29'"),
        ("DateTime(p)", "2024-01-01 00:00:00", "TIMESTAMP '2024-01-01 00:00:00'"),
        ("DateTime(p)", "2024-01-01T10:20:30", "TIMESTAMP '2024-01-01 10:20:30'"),
        ("DateTime(p)", datetime(2024, 5, 6, 7, 8, 9), "TIMESTAMP '2024-05-06 07:08:09'"),
        ("DateTime64(p)", "2024-01-01 10:20:30.250", "TIMESTAMP '2024-01-01 10:20:30.250000'"),
        ("Array(p, 'Int')", "1,2,3", "(1, 2, 3)"),
        ("Array(p, 'Int')", [4, "5"], "(4, 5)"),
        ("Array(p, 'String')", "a,b", "('a', 'b')"),
        ("Array(p)", "it's,x", r"('it\'s', 'x')"),
        ("Array(p, 'Float')", "1.5,2", "(1.5, 2.0)"),
        ("Array(p, 'Date')", "2024-01-01,2024-01-02", "(DATE '2024-01-01', DATE '2024-01-02')"),
        ("Array(p, 'Boolean')", "true,0", "(true, false)"),
        ("Array(p, 'Int')", [], "(NULL)"),
    ],
)
def test_typed_function_renders_checked_literal(call: str, value: object, expected: str) -> None:
    assert r("SELECT {{ " + call + " }}", {"p": value}) == f"SELECT {expected}"


@pytest.mark.parametrize(
    "call, value, expected_type",
    [
        ("Int(p)", "abc", "an Int"),
        ("Int(p)", "1.5", "an Int"),
        ("Int(p)", "", None),
        ("Int(p)", "1 2", "an Int"),
        ("Int(p)", True, "an Int"),
        ("Int(p)", "9223372036854775808", "an Int"),
        ("Int8(p)", "128", "an Int8 (-128 to 127)"),
        ("Int16(p)", "-32769", "an Int16 (-32768 to 32767)"),
        ("Int32(p)", "2147483648", "an Int32 (-2147483648 to 2147483647)"),
        ("Int32(p)", "-2147483649", "an Int32 (-2147483648 to 2147483647)"),
        ("Int8(p)", "-129", "an Int8 (-128 to 127)"),
        ("Int64(p)", "9223372036854775808", "an Int64"),
        ("UInt64(p)", "18446744073709551616", "a UInt64 (0 to 18446744073709551615)"),
        ("Int64(p)", "1e3", "an Int64"),
        ("UInt8(p)", "-1", "a UInt8 (0 to 255)"),
        ("UInt16(p)", "65536", "a UInt16 (0 to 65535)"),
        ("UInt32(p)", "-1", "a UInt32 (0 to 4294967295)"),
        ("UInt64(p)", "-1", "a UInt64 (0 to 18446744073709551615)"),
        ("Float(p)", "abc", "a Float"),
        ("Float(p)", "nan", "a Float"),
        ("Float(p)", "inf", "a Float"),
        ("Float(p)", "1e400", "a Float"),
        ("Float(p)", "1_000", "a Float"),
        ("Float32(p)", "1e39", "a Float32"),
        ("Float64(p)", "--1", "a Float64"),
        ("Boolean(p)", "yes", "a Boolean"),
        ("Boolean(p)", "2", "a Boolean"),
        ("Date(p)", "2024-02-30", "a Date"),
        ("Date(p)", "2024/01/01", "a Date"),
        ("Date(p)", "20240101", "a Date"),
        ("Date(p)", datetime(2024, 1, 1, 10, 0), "a Date"),
        ("DateTime(p)", "2024-01-01", "a DateTime"),
        ("DateTime(p)", "2024-01-01 25:00:00", "a DateTime"),
        ("DateTime(p)", "2024-01-01 00:00:00+02:00", "a DateTime"),
        ("DateTime64(p)", "yesterday", "a DateTime64"),
        ("String(p)", ["a"], "a String"),
        ("Array(p, 'Int')", "1,x,3", "an Array of Int"),
        ("Array(p, 'Int')", "1,,3", "an Array of Int"),
        ("Array(p, 'Date')", "2024-01-01,tomorrow", "an Array of Date"),
        ("Array(p, 'UInt8')", "1,256", "an Array of UInt8"),
    ],
)
def test_typed_function_rejects_bad_value_naming_parameter_and_type(
    call: str, value: object, expected_type: str | None
) -> None:
    problem = err("SELECT {{ " + call + " }}", {"p": value})
    assert isinstance(problem, PipeframeError)
    assert problem.code == "PF202"
    assert problem.parameter == "p"
    assert problem.http_status == 400
    assert "`p`" in problem.message
    if expected_type is None:  # an empty value counts as not passed
        assert problem.message == "Parameter `p` is missing."
    else:
        assert f"must be {expected_type}, got " in problem.message
        assert "p=" in problem.hint


def test_bad_value_message_quotes_value_and_hint_gives_example() -> None:
    problem = err("LIMIT {{ Int(limit, 10) }}", {"limit": "abc"})
    assert problem.message == "Parameter `limit` must be an Int, got 'abc'."
    assert problem.hint == "Pass a whole number, e.g. limit=10."
    array = err("{{ Array(ids, 'Int') }}", {"ids": "1,x"})
    assert array.message == "Parameter `ids` must be an Array of Int, got '1,x' (bad item 'x')."
    assert array.hint == "Pass comma-separated Int values (pass a whole number), e.g. ids=10,10."


def test_long_bad_value_is_cut_to_60_characters() -> None:
    problem = err("{{ Int(n) }}", {"n": "x" * 500})
    assert f"got '{'x' * 60}...'." in problem.message
    assert len(problem.message) < 120


def test_enum_membership() -> None:
    sql = "{{ String(order, 'asc', enum=['asc', 'desc']) }} {{ Int(k, enum=[1, 2]) }}"
    assert r(sql, {"order": "desc", "k": "2"}) == "'desc' 2"
    assert r(sql, {"k": "1"}) == "'asc' 1"
    problem = err(sql, {"order": "sideways", "k": "1"})
    assert (problem.code, problem.parameter) == ("PF202", "order")
    assert problem.message == "Parameter `order` must be one of asc, desc, got 'sideways'."
    assert err(sql, {"k": "3"}).parameter == "k"
    assert err("{{ Array(c, 'String', enum=['a', 'b']) }}", {"c": "a,z"}).parameter == "c"


def test_missing_required_and_default() -> None:
    assert r("{{ Int(n, 10) }}") == "10"
    assert r("{{ Int(n, 10) }}", {"n": ""}) == "10"
    assert r("{{ Array(ids, 'Int', default='1,2') }}") == "(1, 2)"
    assert r("{{ Array(ids, 'Int', default=[3]) }}") == "(3)"
    missing = err("SELECT {{ String(name) }}")
    assert (missing.code, missing.parameter, missing.message) == ("PF202", "name", "Parameter `name` is missing.")
    required = err("SELECT {{ String(name, 'x', required=True) }}")
    assert (required.code, required.parameter, required.message) == ("PF202", "name", "Parameter `name` is required.")
    bad_default = err("{{ Int(n, 'ten') }}")
    assert bad_default.message == "The default of parameter `n` must be an Int, got 'ten'."


def test_typed_values_work_in_template_logic() -> None:
    sql = "{% if Int(n, 5) > 100 %}big{% else %}small{% end %}"
    assert r(sql) == "small"
    assert r(sql, {"n": "500"}) == "big"
    flag = "{% if Boolean(f, False) %}on{% else %}off{% end %}"
    assert (r(flag), r(flag, {"f": "true"}), r(flag, {"f": "0"})) == ("off", "on", "off")
    assert r("{% for v in Array(ids, 'Int', default='1,2') %}[{{ v }}]{% end %}") == "[1][2]"
    assert r("{{ Int(n) + 1 }}", {"n": "41"}) == "42"
    assert r("{% if String(s) == 'a' %}yes{% end %}", {"s": "a"}) == "yes"


# --- bare parameters and SQL-injection safety ------------------------------------------------------------


@pytest.mark.parametrize(
    "value, literal",
    [
        ("' OR 1=1 --", r"'\' OR 1=1 --'"),
        ("\\'; DROP TABLE x; --", r"'\\\'; DROP TABLE x; --'"),
        ("a\\b\\", r"'a\\b\\'"),
        ("''", r"'\'\''"),
        ("héllo ☃ 日本 🎉", "'héllo ☃ 日本 🎉'"),
        ("line\nbreak; -- */ /*", "'line\nbreak; -- */ /*'"),
        ("{{ 7 * 7 }}", "'{{ 7 * 7 }}'"),
        ('"quoted" `tick`', "'\"quoted\" `tick`'"),
    ],
)
def test_injection_strings_render_as_inert_literals(value: str, literal: str) -> None:
    assert r("WHERE a = {{ String(x) }}", {"x": value}) == f"WHERE a = {literal}"
    assert r("WHERE a = {{ x }}", {"x": value}) == f"WHERE a = {literal}"
    assert r("WHERE a = {{ sql_and(a__eq=x) }}", {"x": value}) == f"WHERE a = `a` = {literal}"


def test_bare_parameter_renders_literal_and_missing_one_is_required() -> None:
    assert r("{{ x }}", {"x": "abc"}) == "'abc'"
    problem = err("SELECT 1\nWHERE a = {{ x }}")
    assert (problem.code, problem.parameter) == ("PF202", "x")
    assert problem.message == "Parameter `x` is required."
    assert problem.location == Location("pipes/sales.pipe", 11, 5)


@pytest.mark.parametrize(
    "value, literal",
    [
        (None, "NULL"),
        (True, "true"),
        (False, "false"),
        (12, "12"),
        (2.5, "2.5"),
        (float("nan"), "'nan'"),
        (["a", 1, None], "('a', 1, NULL)"),
        ((), "(NULL)"),
        (date(2024, 1, 2), "DATE '2024-01-02'"),
        (datetime(2024, 1, 2, 3, 4, 5), "TIMESTAMP '2024-01-02 03:04:05'"),
        ({"k": "v"}, "'{\\'k\\': \\'v\\'}'"),
    ],
)
def test_template_values_render_as_literals(value: object, literal: str) -> None:
    assert r("{{ v }}", variables={"v": value}) == literal


def test_template_expressions_and_string_constants_are_literals() -> None:
    assert r("{{ 'a' ~ x }}", {"x": "'b"}) == r"'a\'b'"
    assert r("{{ 1 + 2 }} {{ [1, 'x'] }} {{ none }}") == "3 (1, 'x') NULL"
    assert r("{{ x.upper() }}", {"x": "ab"}) == "'AB'"


def test_defined_guards_optional_parameters() -> None:
    sql = "SELECT 1 {% if defined(p) %}AND p = {{ String(p) }}{% end %}"
    assert r(sql) == "SELECT 1 "
    assert r(sql, {"p": ""}) == "SELECT 1 "
    assert r(sql, {"p": "x"}) == "SELECT 1 AND p = 'x'"
    assert r("{% if not defined(p) %}none{% end %}") == "none"
    assert r("{{ x is defined }} {{ y | default('d') }}", {"x": "1"}) == "true 'd'"


# --- column(), columns(), sql_and() ----------------------------------------------------------------------


def test_column_validates_and_backquotes() -> None:
    assert r("ORDER BY {{ column(sort, 'revenue') }}") == "ORDER BY `revenue`"
    assert r("ORDER BY {{ column(sort, 'revenue') }}", {"sort": "orders"}) == "ORDER BY `orders`"
    assert r("{{ column(c) }}", {"c": "t.amount_2"}) == "`t`.`amount_2`"
    assert err("{{ column(c) }}").code == "PF202"


@pytest.mark.parametrize("value", ["a; DROP TABLE x", "a b", "1a", "a`b", "a.", "`a`", "a-b", "é", "a\n"])
def test_column_rejects_non_identifiers(value: str) -> None:
    problem = err("{{ column(c, 'x') }}", {"c": value})
    assert (problem.code, problem.parameter, problem.http_status) == ("PF203", "c", 400)
    assert problem.message.startswith("Parameter `c` must be a column name, got ")


def test_column_rejects_bad_default() -> None:
    assert err("{{ column(c, 'a; DROP') }}").code == "PF203"


def test_columns_lists_backquoted_names() -> None:
    assert r("SELECT {{ columns(cols, 'a,b') }}") == "SELECT `a`, `b`"
    assert r("SELECT {{ columns(cols, 'a') }}", {"cols": "x, t.y"}) == "SELECT `x`, `t`.`y`"
    assert r("SELECT {{ columns(cols) }}", {"cols": ["p", "q"]}) == "SELECT `p`, `q`"
    for bad in ("a,,b", "a,b;DROP", "a, b c"):
        problem = err("SELECT {{ columns(cols, 'a') }}", {"cols": bad})
        assert (problem.code, problem.parameter) == ("PF203", "cols")


def test_sql_and_every_operator() -> None:
    sql = (
        "{{ sql_and(a__eq=String(a), b__neq=3, c__gt=Int(c, 1), d__lt=1.5, e__gte='x', f__lte=none,"
        " g__in=Array(g, 'Int', default='1,2'), h__not_in=['x', 'y'], i=true) }}"
    )
    assert r(sql, {"a": "A"}) == (
        "`a` = 'A' AND `b` != 3 AND `c` > 1 AND `d` < 1.5 AND `e` >= 'x'"
        " AND `g` IN (1, 2) AND `h` NOT IN ('x', 'y') AND `i` = true"
    )


def test_sql_and_skips_missing_and_empty_is_true() -> None:
    assert r("{{ sql_and(a__eq=a, b__in=b) }}") == "1 = 1"
    assert r("{{ sql_and(a__eq=a, b__in=b) }}", {"b": "x"}) == "`b` IN ('x')"
    assert r("{{ sql_and() }}") == "1 = 1"


def test_sql_and_rejects_bad_names_and_operators() -> None:
    assert err("{{ sql_and(**{'a; DROP__eq': 1}) }}").code == "PF203"
    problem = err("{{ sql_and(a__like='x') }}")
    assert problem.code == "PF201"
    assert "unknown operator `like`" in problem.message


# --- error() and custom_error() --------------------------------------------------------------------------


def test_error_and_custom_error_stop_with_status() -> None:
    problem = err("{% if Int(n, 1) > 10 %}{{ error('n is too big', 422) }}{% end %}", {"n": "11"})
    assert (problem.code, problem.message, problem.http_status) == ("PF204", "n is too big", 422)
    assert err("{{ error('nope') }}").http_status == 400
    custom = err("{{ custom_error({'error': 'forbidden', 'code': 403}) }}")
    assert (custom.code, custom.message, custom.http_status) == ("PF204", "forbidden", 403)
    assert err("{{ error('odd status', 200) }}").http_status == 400


def test_error_functions_do_nothing_in_analysis() -> None:
    assert a("SELECT 1 {{ error('x') }}{{ custom_error({'error': 'y'}) }}").sql == "SELECT 1 "


# --- {% end %} -------------------------------------------------------------------------------------------


def test_end_closes_if_and_for() -> None:
    assert r("{% if defined(a) %}A{% else %}B{% end %}") == "B"
    assert r("{% for i in [1, 2] %}{{ i }}{% end %}") == "12"
    nested = "{% for i in [1, 2] %}{% if i > 1 %}[{{ i }}]{% end %}{% end %}"
    assert r(nested) == "[2]"
    assert r("x {%- if true -%} y {%- end -%} z") == "xyz"
    assert r("{% macro m(v) %}<{{ v }}>{% end %}{{ m(1) }}") == "<1>"
    assert r("{% set s %}a{% end %}{{ s }}") == "a"
    assert r("{% raw %}{% end %}{% endraw %}{% if true %}ok{% end %}") == "{% end %}ok"
    assert r("{% if true %}{% if true %}1{% endif %}{% end %}") == "1"


def test_unmatched_end_is_located() -> None:
    problem = err("SELECT 1\n  {% if a %}{% end %} {% end %}")
    assert problem.code == "PF201"
    assert problem.location == Location("pipes/sales.pipe", 11, 5 + 22)  # text column 23


# --- macros, set blocks, variables -----------------------------------------------------------------------


def test_macro_output_is_sql_not_a_literal() -> None:
    sql = "{% macro cond(c, v) %}{{ column(c) }} = {{ String(v) }}{% endmacro %}WHERE {{ cond(col, val) }}"
    assert r(sql, {"col": "product", "val": "x'y"}) == r"WHERE `product` = 'x\'y'"


def test_variables_are_trusted_sql_or_literals() -> None:
    sql = "SELECT * FROM {{ table }} WHERE n > {{ threshold }} AND env = {{ String(env_name, 'dev') }}"
    out = r(sql, variables={"table": "db.sales", "threshold": 5})
    assert out == "SELECT * FROM db.sales WHERE n > 5 AND env = 'dev'"
    assert r("{{ table }}", {"table": "evil"}, variables={"table": "t"}) == "t"
    assert r("{% if env == 'prod' %}p{% end %}", variables={"env": "prod"}) == "p"
    # A string variable meant as a value goes through String(), which quotes it.
    assert r("{{ String(currency) }} AS currency", variables={"currency": "EUR"}) == "'EUR' AS currency"
    assert a("{{ String(currency) }}", variables={"currency": "EUR"}).parameters == ()


def test_arguments_may_be_other_parameters() -> None:
    sql = "{{ String(y, x) }} {{ column(c, x) }}"
    assert r(sql, {"x": "fallback"}) == "'fallback' `fallback`"
    assert r(sql, {"x": "fallback", "y": "given", "c": "col"}) == "'given' `col`"
    assert err(sql).parameter == "y"


# --- analysis --------------------------------------------------------------------------------------------


def test_analysis_of_product_example() -> None:
    analysis = a(PRODUCT_EXAMPLE)
    assert analysis.sql == (
        "\nSELECT * FROM sales_by_hour\nWHERE hour >= TIMESTAMP '2024-01-01 00:00:00'\n AND product = 'placeholder' \n"
    )
    assert analysis.parameters == (
        Parameter("start", "DateTime", default="2024-01-01 00:00:00", description="first hour"),
        Parameter("product", "String"),
    )
    endpoint = a(ENDPOINT_EXAMPLE)
    assert endpoint.parameters == (Parameter("limit", "Int", default=10),)
    assert endpoint.sql.endswith("LIMIT 10\n")


def test_analysis_placeholders_per_type() -> None:
    sql = (
        "{{ String(s) }} {{ Int(i) }} {{ UInt8(u) }} {{ Float(f) }} {{ Boolean(b) }} {{ Date(d) }}"
        " {{ DateTime(t) }} {{ Array(ai, 'Int') }} {{ Array(astr) }} {{ column(c) }} {{ columns(cs) }} {{ bare }}"
    )
    assert a(sql).sql == (
        "'placeholder' 0 0 0.0 true DATE '2000-01-01' TIMESTAMP '2000-01-01 00:00:00' (0) ('placeholder')"
        " `placeholder_column` `placeholder_column` 'placeholder'"
    )
    assert [(p.name, p.type, p.item_type) for p in a(sql).parameters] == [
        ("s", "String", None),
        ("i", "Int", None),
        ("u", "UInt8", None),
        ("f", "Float", None),
        ("b", "Boolean", None),
        ("d", "Date", None),
        ("t", "DateTime", None),
        ("ai", "Array", "Int"),
        ("astr", "Array", "String"),
        ("c", "String", None),
        ("cs", "String", None),
        ("bare", "String", None),
    ]


def test_analysis_finds_parameters_in_every_branch() -> None:
    sql = (
        "{% if defined(mode) %}{{ Int(a, 1) }}{% else %}{{ Float(b, 2.5, description='b param') }}{% end %}"
        "{% if not defined(c) %}{{ Date(d, '2024-01-01', required=True) }}{% end %}"
    )
    params = {p.name: p for p in a(sql).parameters}
    assert list(params) == ["mode", "a", "b", "c", "d"]
    assert params["b"] == Parameter("b", "Float", default=2.5, description="b param")
    assert params["d"] == Parameter("d", "Date", default="2024-01-01", required=True)
    assert params["mode"] == Parameter("mode", "String")


def test_analysis_typed_declaration_wins_and_first_declaration_wins() -> None:
    sql = "{{ x }} {{ Int(x, 5, description='first') }} {{ Int(x, 9, description='second') }} {{ Int(y) }} {{ Int(y, 3) }}"
    params = a(sql).parameters
    assert params == (Parameter("x", "Int", default=5, description="first"), Parameter("y", "Int", default=3))


def test_analysis_ignores_variables_and_tolerates_unguarded_parameters() -> None:
    analysis = a("SELECT * FROM {{ table }} WHERE a = {{ String(a) }} AND b = {{ b }}", variables={"table": "t"})
    assert [p.name for p in analysis.parameters] == ["a", "b"]
    assert analysis.sql == "SELECT * FROM t WHERE a = 'placeholder' AND b = 'placeholder'"


def test_analysis_enum_default_and_array_details() -> None:
    sql = "{{ String(o, enum=['asc', 'desc']) }} {{ Array(ids, 'Int', default='1,2', description='ids') }}"
    analysis = a(sql)
    assert analysis.sql == "'asc' (1, 2)"
    assert analysis.parameters[0] == Parameter("o", "String", enum=("asc", "desc"))
    ids = analysis.parameters[1]
    assert ids == Parameter("ids", "Array", default="1,2", description="ids", item_type="Int")
    assert ids.to_json() == {
        "name": "ids",
        "type": "Array",
        "default": "1,2",
        "description": "ids",
        "required": False,
        "enum": [],
        "item_type": "Int",
    }


def test_analysis_reports_invalid_defaults() -> None:
    with pytest.raises(TemplateError) as info:
        a("\n\n{{ Int(n, 'ten') }}")
    assert (info.value.code, info.value.parameter) == ("PF202", "n")
    assert info.value.location == Location("pipes/sales.pipe", 12, 5)


# --- robustness and error locations ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "sql, fragment",
    [
        ("{{ Int() }}", "Template failed: TypeError"),
        ("{{ 1 / 0 }}", "ZeroDivisionError"),
        ("{{ ''.__class__.__mro__ }}", "not allowed"),
        ("{{ x.__class__ }}", "not allowed"),
        ("{{ week_diff(a, b) }}", "`week_diff` is not a template function"),
        ("{{ 'a' * 10 ** 9 }}", "not allowed"),
        ("{{ 2 ** 100000 }}", "not allowed"),
        ("{% include 'other.sql' %}", "Template failed"),
        ("{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}", "RecursionError"),
        ("{{ Array(a, 'Map') }}", "Array item type 'Map' is unknown"),
        ("{{ x + 1 }}", "Template failed"),
    ],
)
def test_template_bugs_become_pf201(sql: str, fragment: str) -> None:
    for run in (lambda: r(sql, {"x": "1", "a": "1"}), lambda: a(sql)):
        with pytest.raises(TemplateError) as info:
            run()
        assert info.value.code == "PF201"
        assert fragment in info.value.message


def test_day_diff_counts_whole_days_either_way_and_is_0_in_analysis() -> None:
    assert r("{{ day_diff('2019-01-01', '2019-01-01') }}") == "0"
    assert r("{{ day_diff(a, b) }}", {"a": "2019-01-02", "b": "2019-02-01"}) == "30"
    assert r("{{ day_diff(a, b) }}", {"a": "2019-02-01", "b": "2019-01-02"}) == "30"
    assert r("{{ day_diff(a, '2019-01-03 23:59:59') }}", {"a": "2019-01-01 12:00:00"}) == "2"
    assert r("{{ day_diff(Date(a), Date(b)) }}", {"a": "2024-02-28", "b": "2024-03-01"}) == "2"
    assert r("{{ day_diff(a, b) }}", {"a": "2019-01-02"}) == "0"  # b not passed
    assert r("{{ day_diff(a, b, 7) }}", {"a": "2019-01-02"}) == "7"
    sql = "SELECT 1 {% if defined(a) and day_diff(a, b) == 0 %}AS single_day{% end %}"
    analysis = a(sql)
    assert {p.name for p in analysis.parameters} == {"a", "b"}
    assert r(sql, {"a": "2024-01-01", "b": "2024-01-01"}).strip() == "SELECT 1 AS single_day"
    problem = err("{{ day_diff(a, b) }}", {"a": "yesterday", "b": "2024-01-01"})
    assert problem.code == "PF202" and "`a`" in problem.message and "date" in problem.message


def test_syntax_error_is_located_on_its_line() -> None:
    problem = err("%\nSELECT 1\nWHERE {{ x }\n")
    assert problem.code == "PF201"
    assert problem.message.startswith("Template syntax error:")
    assert problem.location == Location("pipes/sales.pipe", 12, 5)
    unclosed = err("SELECT 1\n{% if x %}\nA\n")
    assert unclosed.code == "PF201"


def test_runtime_errors_are_located_on_their_line() -> None:
    sql = "%\nSELECT *\nFROM t\nLIMIT {{ Int(limit, 10) }}\n"
    problem = err(sql, {"limit": "many"})
    assert problem.location == Location("pipes/sales.pipe", 13, 5)
    assert str(problem).startswith("pipes/sales.pipe:13:5 PF202 error: Parameter `limit` must be an Int")
    in_macro = err("{% macro m() %}\n{{ 1 / 0 }}\n{% endmacro %}\n\n{{ m() }}")
    assert in_macro.location == Location("pipes/sales.pipe", 11, 5)


def test_template_error_is_a_pipeframe_error_with_defaults() -> None:
    problem = TemplateError("PF201", "boom")
    assert isinstance(problem, PipeframeError)
    assert (problem.http_status, problem.parameter, problem.location) == (400, None, None)
    placed = problem.located(LOC)
    assert (placed.code, placed.message, placed.location) == ("PF201", "boom", LOC)


def test_tinybird_spellings_percent_with_sql_array_type_by_name_and_json() -> None:
    # `% SELECT ...`: the marker and the SQL on one line (columns kept)
    assert r("% SELECT {{ Int(n, 1) }}") == "  SELECT 1"
    assert r("%\n% 2") == "\n% 2"  # only the leading marker goes
    # Array(ids, String): the item type named by its function
    assert r("SELECT {{ Array(ids, String) }}", {"ids": "a,b"}) == "SELECT ('a', 'b')"
    # JSON(filters, '[]'): JSON text as lists and objects for the template's own logic
    loop = ("SELECT 1 {% for f in JSON(filters, '[]') %} AND {{ column(f['field']) }} IN "
            "{{ Array(f['values'], 'String') }}{% end %}")
    assert r(loop) == "SELECT 1 "
    assert r(loop, {"filters": '[{"field": "country", "values": ["ES"]}]'}) == "SELECT 1  AND `country` IN ('ES')"
    bad = err(loop, {"filters": "[oops"})
    assert (bad.code, bad.parameter, bad.diagnostics[0].message) == (
        "PF202", "filters", "Parameter `filters` must be JSON, got '[oops'.")
