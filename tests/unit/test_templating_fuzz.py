"""Property tests for templating: arbitrary text and request values never escape as raw Python errors.

And any text a request passes renders as exactly one inert literal that reads back as the same text.
"""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from pipeframe.errors import Location, PipeframeError
from pipeframe.templating import TemplateError, analyze, render

LOC = Location("pipes/fuzz.pipe", 1, 5)
NAMES = ["x", "y", "limit", "start", "ids", "col", "flag"]

SEEDS = [
    "%\nSELECT * FROM t WHERE ts >= {{ DateTime(start, '2024-01-01 00:00:00') }}\nLIMIT {{ Int(limit, 10) }}",
    "SELECT 1 {% if defined(x) %}AND x = {{ String(x) }}{% end %}",
    "SELECT {{ columns(col, 'a,b') }} FROM t ORDER BY {{ column(col, 'a') }}",
    "WHERE {{ sql_and(a__eq=x, b__in=Array(ids, 'Int', default='1,2'), c__gt=y) }}",
    "{% for i in Array(ids, 'Int', default='1') %}{{ i }}{% if not loop.last %},{% end %}{% end %}",
    "{% if Boolean(flag, False) %}{{ error('no', 403) }}{% else %}{{ Float(y, 1.5) }}{% end %}",
    "{% macro m(v) %}{{ Int(v, 1) }}{% endmacro %}{{ m(limit) }} {{ x }}",
]
TOKENS = [
    "{{",
    "}}",
    "{%",
    "%}",
    "{#",
    "#}",
    "{% end %}",
    "{% if x %}",
    "{% for i in ids %}",
    "{% else %}",
    "{%- end -%}",
    "String(",
    "Int(",
    "Array(",
    "column(",
    "sql_and(",
    "defined(",
    "error(",
    ")",
    "(",
    ",",
    "'",
    '"',
    "\\",
    "x",
    "limit",
    "ids",
    " ",
    "\n",
    "%",
    "=",
    "**",
    "*",
    "__",
    ".",
    "[",
    "]",
    "1",
    "0",
    "none",
    "true",
    "raw",
    "endraw",
    "set",
    "macro",
    "|",
    "~",
    "-",
]

param_values = st.one_of(
    st.text(max_size=30),
    st.integers(),
    st.none(),
    st.booleans(),
    st.floats(allow_nan=True, allow_infinity=True),
    st.lists(st.one_of(st.text(max_size=8), st.integers()), max_size=4),
)
params_dicts = st.dictionaries(st.sampled_from(NAMES), param_values, max_size=5)
token_text = st.lists(st.one_of(st.sampled_from(TOKENS), st.text(max_size=4)), max_size=40).map("".join)


@st.composite
def mutated_templates(draw: st.DrawFn) -> str:
    text = draw(st.sampled_from(SEEDS))
    for _ in range(draw(st.integers(1, 4))):
        at = draw(st.integers(0, len(text)))
        kind = draw(st.sampled_from(["insert", "delete", "duplicate"]))
        if kind == "insert":
            text = text[:at] + draw(st.sampled_from(TOKENS)) + text[at:]
        elif kind == "delete":
            text = text[:at] + text[at + draw(st.integers(1, 8)) :]
        else:
            text = text[:at] + text[at : at + 12] + text[at:]
    return text


def run_everything(sql: str, params: dict[str, Any]) -> None:
    """analyze() and render() either succeed with text or raise a PipeframeError with a PF code."""
    for run in (
        lambda: analyze(sql, location=LOC).sql,
        lambda: render(sql, params, location=LOC),
        lambda: render(sql, params, variables={"x": "v", "n": 3}, location=LOC),
    ):
        try:
            out = run()
        except PipeframeError as problem:
            assert problem.code.startswith("PF")
            assert isinstance(problem, TemplateError)
            assert problem.location is not None and problem.location.path == LOC.path
        else:
            assert isinstance(out, str)


@settings(max_examples=300, deadline=None)
@given(sql=st.text(max_size=200), params=params_dicts)
def test_random_text_only_raises_template_errors(sql: str, params: dict[str, Any]) -> None:
    run_everything(sql, params)


@settings(max_examples=300, deadline=None)
@given(sql=token_text, params=params_dicts)
def test_random_template_tokens_only_raise_template_errors(sql: str, params: dict[str, Any]) -> None:
    run_everything(sql, params)


@settings(max_examples=300, deadline=None)
@given(sql=mutated_templates(), params=params_dicts)
def test_mutated_templates_only_raise_template_errors(sql: str, params: dict[str, Any]) -> None:
    run_everything(sql, params)


def read_literal(literal: str) -> str:
    """Unescape a Spark string literal, asserting that no quote inside it is unescaped."""
    assert len(literal) >= 2 and literal[0] == literal[-1] == "'"
    body, text, i = literal[1:-1], [], 0
    while i < len(body):
        char = body[i]
        if char == "\\":
            assert i + 1 < len(body), "dangling backslash escapes the closing quote"
            text.append(body[i + 1])
            i += 2
            continue
        assert char != "'", "unescaped quote ends the literal early"
        text.append(char)
        i += 1
    return "".join(text)


@settings(max_examples=300, deadline=None)
@given(value=st.text(min_size=1))
def test_any_text_is_one_literal_that_round_trips(value: str) -> None:
    for template in ("SELECT {{ String(x) }}", "SELECT {{ x }}", "SELECT {{ String(y, x) }}"):
        out = render(template, {"x": value}, location=LOC)
        assert out.startswith("SELECT ")
        assert read_literal(out[len("SELECT ") :]) == value


@settings(max_examples=300, deadline=None)
@given(value=st.text())
def test_column_accepts_only_identifiers(value: str) -> None:
    try:
        out = render("{{ column(c, 'a') }}", {"c": value}, location=LOC)
    except TemplateError as problem:
        assert problem.code == "PF203" and problem.parameter == "c"
    else:
        name = value or "a"
        assert out == ".".join(f"`{part}`" for part in name.split("."))
        assert all(part and (part[0].isascii() and (part[0].isalpha() or part[0] == "_")) for part in name.split("."))


@settings(max_examples=300, deadline=None)
@given(number=st.integers())
def test_int_round_trips_or_is_rejected_by_range(number: int) -> None:
    try:
        out = render("{{ Int32(n) }}", {"n": str(number)}, location=LOC)
    except TemplateError as problem:
        assert problem.code == "PF202" and not -(2**31) <= number < 2**31
    else:
        assert int(out) == number
