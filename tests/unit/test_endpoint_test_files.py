"""The `tests/<endpoint>.yaml` format without Spark: parsing and its PF82x errors, selecting cases by name,
comparing answers (diffs, float tolerance) and `--update`'s in-place rewrite."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pipeframe.errors import PipeframeError
from pipeframe.project import Project
from pipeframe.testing import Case, CaseResult, _rewrite, explain, load_cases, select

ROOT = Path(__file__).resolve().parents[2]
ENDPOINT = """\
NODE endpoint
SQL >
    %
    SELECT product, sum(amount) AS revenue FROM sales GROUP BY product ORDER BY revenue DESC
    LIMIT {{ Int(limit, 10) }}
TYPE endpoint
"""


def project_with_tests(make_project, tests: dict[str, str]) -> Project:
    return Project(make_project({"pipes/top.pipe": ENDPOINT, **{f"tests/{k}": v for k, v in tests.items()}}),
                   environ={})


def case(**overrides) -> Case:
    from pipeframe.errors import Location

    fields = {"file": "tests/top.yaml", "pipe": "top", "name": "default", "params": {}, "rows": None,
              "status": None, "location": Location("tests/top.yaml", 1, 3)}
    return Case(**{**fields, **overrides})


def test_the_example_projects_cases_are_read_with_their_expectations():
    cases = load_cases(Project(ROOT / "example_project", environ={}))
    by_id = {c.id: c for c in cases}
    assert len(cases) == 16 and len({c.pipe for c in cases}) == 5
    top_3 = by_id["top_products.top_3"]
    assert top_3.params == {"limit": 3} and top_3.status is None
    assert top_3.rows[0] == {"product": "espresso-machine", "orders": 17, "revenue": 8899.5, "currency": "EUR"}
    assert by_id["top_products.bad_limit"].status == 400 and by_id["top_products.bad_limit"].rows is None
    assert str(top_3.location) == "tests/top_products.yaml:17:3"


def test_names_select_files_or_single_cases():
    cases = load_cases(Project(ROOT / "example_project", environ={}))
    assert {c.id for c in select(cases, ["slow_pages"])} == {
        "slow_pages.default", "slow_pages.above_300ms_by_views", "slow_pages.bad_threshold", "slow_pages.bad_order_by"}
    assert [c.id for c in select(cases, ["top_products.top_3", "product_hours"])] == [
        "product_hours.espresso_machine_may_15", "product_hours.missing_product", "top_products.top_3"]
    with pytest.raises(PipeframeError) as err:
        select(cases, ["top_product.top_3"])
    assert err.value.code == "PF825" and "Did you mean `top_products.top_3`?" in err.value.diagnostics[0].hint


@pytest.mark.parametrize(("text", "code", "where", "words"), [
    ("- name: a\n  params: {limit: 3\n", "PF821", "tests/top.yaml:3:1", "is not valid YAML"),
    ("name: a\nparams: {}\n", "PF822", "tests/top.yaml:1:1", "must be a list of test cases, not a mapping"),
    ("- name: a\n  parameters: {}\n  expected_http_status: 400\n", "PF822", "tests/top.yaml:2:3",
     "unknown key `parameters`"),
    ("- params: {}\n  expected_http_status: 400\n", "PF822", "tests/top.yaml:1:3", "has no `name`"),
    ("- name: a\n  params: [3]\n  expected_http_status: 400\n", "PF822", "tests/top.yaml:2:11",
     "`params` of case `a`"),
    ("- name: a\n  params: {}\n", "PF823", "tests/top.yaml:1:3", "needs exactly one of"),
    ("- name: a\n  expected_http_status: 4000\n", "PF823", "tests/top.yaml:2:25", "must be an HTTP status code"),
    ('- name: a\n  expected_result: |\n    {"product":"x","revenue":1}\n    product,revenue\n', "PF823",
     "tests/top.yaml:4:1", "Line 2 of `expected_result` of case `a`"),
    ("- name: a\n  expected_http_status: 400\n- name: a\n  expected_http_status: 400\n", "PF822",
     "tests/top.yaml:3:3", "two cases named `a`"),
])
def test_malformed_test_files_name_the_file_the_place_and_the_fix(make_project, text, code, where, words):
    project = project_with_tests(make_project, {"top.yaml": text})
    with pytest.raises(PipeframeError) as err:
        load_cases(project)
    [diagnostic] = err.value.diagnostics
    assert diagnostic.code == code and str(diagnostic.location) == where, diagnostic.format()
    assert words in diagnostic.message and "tests/top.yaml" in diagnostic.message and diagnostic.hint


def test_a_test_file_must_be_named_after_an_endpoint_and_every_problem_is_reported_at_once(make_project):
    project = project_with_tests(make_project, {"tops.yaml": "- name: a\n  expected_http_status: 400\n",
                                                "top.yaml": "- name: a\n"})
    with pytest.raises(PipeframeError) as err:
        load_cases(project)
    codes = {d.code: d for d in err.value.diagnostics}
    assert set(codes) == {"PF823", "PF824"}
    assert "`tops` is not an endpoint pipe" in codes["PF824"].message
    assert "Did you mean `top.yaml`?" in codes["PF824"].hint


def test_rows_compare_as_json_in_order_with_a_tiny_float_tolerance():
    expected = case(rows=({"product": "a", "revenue": 0.3, "n": 2, "ok": True}, {"product": "b", "revenue": 1.0,
                                                                                 "n": 1, "ok": False}))
    assert explain(expected, 200, [{"n": 2, "product": "a", "revenue": 0.1 + 0.2, "ok": True},
                                   {"product": "b", "revenue": 1, "n": 1, "ok": False}]) == ""
    assert explain(expected, 200, [{"product": "b", "revenue": 1.0, "n": 1, "ok": False},
                                   {"product": "a", "revenue": 0.3, "n": 2, "ok": True}]) != ""
    assert explain(expected, 200, [{"product": "a", "revenue": 0.3, "n": 2, "ok": 1},
                                   {"product": "b", "revenue": 1.0, "n": 1, "ok": False}]) != ""


def test_a_failure_is_a_unified_diff_of_ndjson_lines_naming_the_file_and_case():
    expected = case(name="top_2", params={"limit": 2},
                    rows=({"product": "a", "revenue": 3.0}, {"product": "b", "revenue": 2.0}))
    failure = explain(expected, 200, [{"product": "a", "revenue": 3.0000000000000004}, {"product": "c", "revenue": 2.5}])
    assert failure.splitlines() == [
        "--- expected  tests/top.yaml :: top_2",
        "+++ actual    top(limit=2)",
        "@@ -1,2 +1,2 @@",
        ' {"product":"a","revenue":3.0}',  # equal within the tolerance: shown as written, not as a change
        '-{"product":"b","revenue":2.0}',
        '+{"product":"c","revenue":2.5}',
    ]


def test_status_expectations():
    assert explain(case(status=400), 400, None, "PF202 error: bad limit") == ""
    assert explain(case(status=400), 200, [{"x": 1}]) == "expected HTTP 400, got HTTP 200: 1 row(s)"
    assert explain(case(rows=()), 400, None, "PF202 error: bad limit") == \
        "expected rows, got HTTP 400:\nPF202 error: bad limit"


FILE = """\
# Tests for top: keep this comment.

- name: default   # the first case
  params: {}
  expected_result: |
    {"product":"a","revenue":3.0}

- name: top_1
  params: {limit: 1}
  expected_result: |-  # stays
    {"product":"a","revenue":3.0}
    {"product":"b","revenue":2.0}

# an error case
- name: bad
  params: {limit: "x"}
  expected_http_status: 404
- {name: flow, params: {limit: 0}, expected_result: "{\\"product\\":\\"z\\"}\\n"}
- name: now_an_error
  params: {}
  expected_result: ''
"""


def test_update_rewrites_only_the_expectations_keeping_comments_and_other_cases():
    def result(name: str, status: int, rows: list | None) -> CaseResult:
        return CaseResult(case(name=name), status, rows, 0.1, "differs", updated=True)

    wanted = {"top_1": result("top_1", 200, [{"product": "a", "revenue": 3.5}]),
              "bad": result("bad", 400, None),
              "flow": result("flow", 200, []),
              "now_an_error": result("now_an_error", 400, None)}
    new = _rewrite(FILE, wanted)
    assert new == FILE.replace('    {"product":"a","revenue":3.0}\n    {"product":"b","revenue":2.0}\n',
                               '    {"product":"a","revenue":3.5}\n') \
        .replace("expected_http_status: 404", "expected_http_status: 400") \
        .replace('expected_result: "{\\"product\\":\\"z\\"}\\n"', 'expected_result: ""') \
        .replace("expected_result: ''", "expected_http_status: 400")
    import yaml

    data = yaml.safe_load(new)
    assert [json.loads(line) for line in data[1]["expected_result"].splitlines()] == [{"product": "a", "revenue": 3.5}]


def test_update_writes_a_literal_block_where_a_quoted_string_was():
    text = '- name: a\n  expected_result: "{\\"x\\":1}\\n"\n- name: b\n  expected_http_status: 400\n'
    new = _rewrite(text, {"a": CaseResult(case(name="a"), 200, [{"x": 2}, {"x": 3}], 0.1, "differs", updated=True)})
    assert new == '- name: a\n  expected_result: |\n    {"x":2}\n    {"x":3}\n- name: b\n  expected_http_status: 400\n'
