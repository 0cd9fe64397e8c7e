"""Templates of one shape (the same tags, other plain text) share one compile (`sandbox._compile`); the code each
gets is what Jinja compiles for it, line for line, and its errors are Jinja's."""

from __future__ import annotations

import dis
from types import CodeType

import pytest
from jinja2.exceptions import TemplateSyntaxError

from pipeframe.errors import Location
from pipeframe.templating import TemplateError, analyze, render, sandbox
from pipeframe.templating.blocks import close_end_tags

TEMPLATES = [
    "SELECT 1",
    ("\nSELECT * FROM t\nWHERE ts >= {{ DateTime(start, '2024-01-01 00:00:00') }}\n"
     "{% if defined(p) %} AND p = {{ String(p) }} {% end %}"),
    "SELECT {{ columns(cols, 'a,b') }} FROM t {%- if x %}\n  WHERE x = {{ x }}\n{%- else -%}  LIMIT 1 {% endif %}",
    "{# a comment #}SELECT {% raw %}{{ not a tag }}{% endraw %} FROM t",
    "{% set cond %}a = 1\nAND b = 2{% endset %}SELECT * FROM t WHERE {{ cond }}",
    "{% macro f(c) %}sum({{ c }})\n{% endmacro %}SELECT {{ f('x') }}, {{ f('y') }} FROM t",
    "{% for c in ['a', 'b'] %}{{ c }}{% if not loop.last %}, {% endif %}{% else %}none{% endfor %} FROM t",
    "SELECT '{{ 'x' }}' || 'tail' FROM t\r\nWHERE a\r\n",
    "SELECT {{ '\\x000\\x00' }} FROM t",  # a NUL of its own, from an escape: compiled without sharing
    "SELECT \x00 FROM t {{ 1 }}",
]


def instructions(code: CodeType) -> list:
    """What the code does, line by line, with constants by value (their order in co_consts may differ)."""
    own = [(i.opname, None if isinstance(i.argval, CodeType) else i.argval, i.positions.lineno)
           for i in dis.get_instructions(code)]
    return own + [instructions(c) for c in code.co_consts if isinstance(c, CodeType)]


@pytest.mark.parametrize("text", TEMPLATES)
def test_the_shared_compile_is_jinjas(text: str) -> None:
    text = close_end_tags(text)
    assert instructions(sandbox._compile(text)) == instructions(sandbox.ENVIRONMENT.compile(text))


@pytest.mark.parametrize("text", ["{%c{% if x %}\"", "SELECT {{ Int(x, }}", "{% if x %}open", "{{ a. }}"])
def test_errors_are_jinjas(text: str) -> None:
    with pytest.raises(TemplateSyntaxError) as expected:
        sandbox.ENVIRONMENT.compile(text)
    with pytest.raises(TemplateSyntaxError) as got:
        sandbox._compile(text)
    assert (got.value.message, got.value.lineno) == (expected.value.message, expected.value.lineno)


def test_one_shape_is_compiled_once_and_each_keeps_its_text() -> None:
    sandbox._SHAPES.clear()
    sandbox.compile_template.cache_clear()
    template = "%\nSELECT * FROM {table}\nWHERE n > {{{{ Int(n, {default}) }}}}\n"
    rendered = [render(template.format(table=f"events_{i}", default=7), {}, location=Location("p.pipe"))
                for i in range(3)]
    assert len(sandbox._SHAPES) == 1
    assert [r.split() for r in rendered] == [["SELECT", "*", "FROM", f"events_{i}", "WHERE", "n", ">", "7"]
                                             for i in range(3)]
    render(template.format(table="events_0", default=8), {}, location=Location("p.pipe"))
    assert len(sandbox._SHAPES) == 2  # other tags: another shape


def test_a_template_error_keeps_its_line_when_the_shape_is_shared() -> None:
    good = "%\nSELECT * FROM events_1\nWHERE a = {{ Int(a) }}\nAND b = {{ Int(b) }}\n"
    analyze(good, location=Location("p.pipe", 10))
    with pytest.raises(TemplateError) as err:
        render(good.replace("events_1", "events_2"), {"a": "1", "b": "x"}, location=Location("q.pipe", 10))
    assert (err.value.code, err.value.diagnostics[0].location.line) == ("PF202", 13)
