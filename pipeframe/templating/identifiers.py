"""Identifiers from request values: `column(x, 'default')`, `columns(x, 'a,b')`, `sql_and(col__eq=v, ...)`.

Names are checked against a strict pattern and backquoted; values are literals; anything else is PF203.
"""

from __future__ import annotations

from typing import Any

from jinja2 import Undefined, pass_context
from jinja2.runtime import Context

from pipeframe.sqltext import quote_qualified
from pipeframe.templating.errors import TemplateError, missing_parameter, shown
from pipeframe.templating.literals import SqlFragment, TypedValue, is_identifier, sql_literal
from pipeframe.templating.parameters import (
    MissingParam,
    Parameter,
    ParamRef,
    argument,
    param_name,
    passed_value,
    state_of,
)

PLACEHOLDER_COLUMN = "placeholder_column"
OPERATORS = {
    "eq": "=",
    "neq": "!=",
    "gt": ">",
    "lt": "<",
    "gte": ">=",
    "lte": "<=",
    "in": "IN",
    "not_in": "NOT IN",
}


def _bad_identifier(name: str | None, raw: Any, what: str = "a column name") -> TemplateError:
    subject = f"Parameter `{name}`" if name else "The value"
    example = f"{name}=amount" if name else "column(x, 'amount')"
    return TemplateError(
        "PF203",
        f"{subject} must be {what}, got {shown(raw)}.",
        f"Use letters, digits and underscores, optionally as table.column, e.g. {example}.",
        parameter=name,
    )


def _chosen(context: Context, x: Any, default: Any) -> tuple[Any, str | None]:
    """The raw value column()/columns() render: the request value, else the default (analysis: a stand-in)."""
    state = state_of(context)
    name = param_name(x)
    default = argument(default)
    if name is not None:
        state.declare(Parameter(name, "String", default))
        if state.analyzing:
            return (PLACEHOLDER_COLUMN if default is None else default), name
    raw, passed = passed_value(x)
    if passed:
        return raw, name
    if default is None:
        if state.analyzing:
            return PLACEHOLDER_COLUMN, name
        raise missing_parameter(name, required=False)
    return default, name


@pass_context
def column(context: Context, x: Any, default: str | None = None) -> SqlFragment:
    """`column(sort_by, 'revenue')`: a backquoted column name chosen by the request."""
    raw, name = _chosen(context, x, default)
    if not is_identifier(raw):
        raise _bad_identifier(name, raw)
    return SqlFragment(quote_qualified(raw))


@pass_context
def columns(context: Context, x: Any, default: str | None = None) -> SqlFragment:
    """`columns(cols, 'a,b')`: a comma-separated list of backquoted column names."""
    raw, name = _chosen(context, x, default)
    if isinstance(raw, str):
        names: list = [part.strip() for part in raw.split(",")]
    elif isinstance(raw, (list, tuple)):
        names = list(raw)
    else:
        names = [raw]
    if not names or not all(is_identifier(part) for part in names):
        raise _bad_identifier(name, raw, "a comma-separated list of column names")
    return SqlFragment(", ".join(quote_qualified(part) for part in names))


def _operand_sql(value: Any, many: bool) -> str:
    if isinstance(value, TypedValue):
        return value.sql if not many or isinstance(value.value, list) else f"({value.sql})"
    if isinstance(value, (list, tuple)):
        return sql_literal(value)
    return f"({sql_literal(value)})" if many else sql_literal(value)


def sql_and(**conditions: Any) -> SqlFragment:
    """`sql_and(product__eq=p, id__in=Array(ids, 'Int'))`: conditions joined by AND, None/missing skipped."""
    parts = []
    for key, value in conditions.items():
        target, separator, op = key.rpartition("__")
        if not separator:
            target, op = key, "eq"
        if op not in OPERATORS:
            raise TemplateError(
                "PF201",
                f"sql_and() argument `{key}` has an unknown operator `{op}`.",
                "End each argument with one of " + ", ".join(f"__{name}" for name in OPERATORS) + ".",
            )
        if not is_identifier(target):
            raise TemplateError(
                "PF203",
                f"sql_and() argument `{key}` must start with a column name.",
                "Name arguments column__operator, e.g. sql_and(product__eq=String(product)).",
            )
        if isinstance(value, MissingParam):
            value.state.use(value.name)
            continue
        if isinstance(value, Undefined):
            continue
        if isinstance(value, ParamRef):
            value = value.operand()
        if value is None:
            continue
        parts.append(f"{quote_qualified(target)} {OPERATORS[op]} {_operand_sql(value, op in ('in', 'not_in'))}")
    return SqlFragment(" AND ".join(parts) if parts else "1 = 1")


sql_and.takes_param_refs = True  # type: ignore[attr-defined]
column.takes_param_refs = True  # type: ignore[attr-defined]
columns.takes_param_refs = True  # type: ignore[attr-defined]
