"""The templating entry points: is_templated(), render() for requests, analyze() for the compiler.

Every failure leaves here as a TemplateError placed at its line in the datafile; nothing else escapes.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import TracebackType
from typing import Any, TypeVar

from jinja2.exceptions import SecurityError, TemplateSyntaxError, UndefinedError

from pipeframe.errors import Location
from pipeframe.templating.blocks import has_percent_line, strip_percent_line
from pipeframe.templating.errors import MissingParameterError, TemplateError
from pipeframe.templating.parameters import Mode, Parameter, RenderState, record
from pipeframe.templating.sandbox import compile_template, render_with

_T = TypeVar("_T")
_TEMPLATE_FILENAME = "<template>"  # what Jinja names code compiled by from_string()
_TAG_TEXT = re.compile(r"\{\{.*?\}\}|\{%.*?%\}", re.DOTALL)


@dataclass(frozen=True)
class Analysis:
    """A template rendered for static analysis, and the request parameters it declares or uses."""

    sql: str
    parameters: tuple[Parameter, ...]


def is_templated(sql: str) -> bool:
    """Whether `sql` is a template: it has `{{`, `{%` or `{#`, or its first non-blank line is `%`."""
    return "{{" in sql or "{%" in sql or "{#" in sql or has_percent_line(sql)


def render(
    sql: str,
    params: Mapping[str, Any],
    *,
    variables: Mapping[str, Any] = {},
    location: Location,
) -> str:
    """The SQL for one request: parameters checked and rendered as literals. Raises TemplateError."""
    if not is_templated(sql):
        return sql
    source = strip_percent_line(sql)
    template = _guarded(lambda: compile_template(source), location)
    state = RenderState(Mode.RENDER, params)
    return _guarded(lambda: render_with(template, state, dict(variables)), location)


def analyze(sql: str, *, variables: Mapping[str, Any] = {}, location: Location) -> Analysis:
    """Render without a request, once with every parameter passed and once with none, to find them all."""
    if not is_templated(sql):
        return Analysis(sql, ())
    source = strip_percent_line(sql)
    template = _guarded(lambda: compile_template(source), location)
    scope = dict(variables)
    all_passed = RenderState(Mode.ALL_DEFINED, {})
    rendered = _guarded(lambda: render_with(template, all_passed, scope), location)
    none_passed = RenderState(Mode.NONE_DEFINED, {})
    try:
        _guarded(lambda: render_with(template, none_passed, scope), location)
    except MissingParameterError:
        pass  # a template may need a parameter outside any defined() guard; requests then get PF202
    found = dict(all_passed.found)
    for parameter, typed in none_passed.found.values():
        record(found, parameter, typed=typed)
    return Analysis(rendered, _in_text_order(source, [parameter for parameter, _ in found.values()]))


def trace(sql: str, *, variables: Mapping[str, Any] = {}, location: Location) -> str:
    """The template rendered as analysis renders it with every parameter passed, but with each parameter's value
    written as its marker literal (`'pf-parameter:<name>'`), so the SQL shows where each parameter lands."""
    if not is_templated(sql):
        return sql
    template = _guarded(lambda: compile_template(strip_percent_line(sql)), location)
    return _guarded(lambda: render_with(template, RenderState(Mode.TRACE, {}), dict(variables)), location)


def _in_text_order(source: str, parameters: list[Parameter]) -> tuple[Parameter, ...]:
    tags = " ".join(match.group(0) for match in _TAG_TEXT.finditer(source))

    def first_mention(parameter: Parameter) -> int:
        mention = re.search(rf"(?<![A-Za-z0-9_.]){re.escape(parameter.name)}(?![A-Za-z0-9_])", tags)
        return mention.start() if mention else len(tags)

    return tuple(sorted(parameters, key=first_mention))


def _guarded(step: Callable[[], _T], location: Location) -> _T:
    try:
        return step()
    except TemplateError as exc:
        line = exc.line if exc.line is not None else _template_line(exc.__traceback__)
        raise exc.located(_place(location, line, exc.col)) from None
    except TemplateSyntaxError as exc:
        raise TemplateError(
            "PF201",
            f"Template syntax error: {(exc.message or '').rstrip('.')}.",
            "Check the {{ }} and {% %} tags on this line; close blocks with {% end %} (or endif/endfor).",
            _place(location, exc.lineno, None),
            line=exc.lineno,
        ) from exc
    except SecurityError as exc:
        line = _template_line(exc.__traceback__)
        raise TemplateError(
            "PF201",
            f"Template is not allowed to do this: {str(exc).rstrip('.')}.",
            "Templates run in a sandbox: use the template functions and plain values only.",
            _place(location, line, None),
            line=line,
        ) from exc
    except Exception as exc:  # a template bug (wrong call, bad expression): reported, never raised raw
        line = _template_line(exc.__traceback__)
        detail = str(exc) if isinstance(exc, UndefinedError) else f"{type(exc).__name__}: {exc}"
        raise TemplateError(
            "PF201",
            f"Template failed: {detail[:200].rstrip('.')}.",
            "Check the function calls and expressions on this line.",
            _place(location, line, None),
            line=line,
        ) from exc


def _template_line(tb: TracebackType | None) -> int | None:
    """The innermost template line in a traceback Jinja rewrote to point at the template."""
    line = None
    while tb is not None:
        if tb.tb_frame.f_code.co_filename == _TEMPLATE_FILENAME:
            line = tb.tb_lineno
        tb = tb.tb_next
    return line


def _place(location: Location, line: int | None, col: int | None) -> Location:
    return location.shifted((line or 1) - 1, None if col is None else location.col + col - 1)
