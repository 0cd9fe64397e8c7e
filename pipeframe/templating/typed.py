"""Tinybird's typed parameter functions: `String(x)`, `Int(limit, 10)`, `Array(ids, 'Int')`, ...

Each declares a parameter (for analysis) and turns its request value into a checked SQL literal.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from jinja2 import pass_context
from jinja2.runtime import Context

from pipeframe.templating.errors import TemplateError, missing_parameter, shown
from pipeframe.templating.literals import TypedValue
from pipeframe.templating.parameters import (
    Mode,
    Parameter,
    RenderState,
    argument,
    marker,
    param_name,
    passed_value,
    state_of,
)
from pipeframe.templating.values import SCALAR_TYPES, InvalidValue, literal, parse, placeholder
from pipeframe.templating.values import example as example_of


def _invalid(
    name: str | None, raw: Any, problem: InvalidValue, *, default: bool = False, item: str = ""
) -> TemplateError:
    subject = f"Parameter `{name}`" if name else "The value"
    if default:
        subject = f"The default of parameter `{name}`" if name else "The default"
    hint = f"{problem.hint.rstrip('.')}, e.g. {name}={problem.example}." if name else problem.hint
    message = f"{subject} must be {problem.expected}, got {shown(raw)}{item}."
    return TemplateError("PF202", message, hint, parameter=name)


def _enum_items(enum: Any) -> tuple:
    if enum is None:
        return ()
    if isinstance(enum, str):
        return tuple(item.strip() for item in enum.split(","))
    return tuple(enum)


def _check_enum(kind: str, value: Any, enum: tuple, name: str | None) -> None:
    if not enum:
        return
    allowed = []
    for item in enum:
        try:
            allowed.append(parse(kind, item))
        except InvalidValue:
            allowed.append(item)
    if value not in allowed:
        choices = ", ".join(str(item) for item in enum)
        subject = f"Parameter `{name}`" if name else "The value"
        raise TemplateError(
            "PF202",
            f"{subject} must be one of {choices}, got {shown(value)}.",
            f"Pass one of: {choices}.",
            parameter=name,
        )


def _scalar(kind: str, raw: Any, enum: tuple, name: str | None, default: bool) -> Any:
    try:
        value = parse(kind, raw)
    except InvalidValue as problem:
        raise _invalid(name, raw, problem, default=default) from None
    _check_enum(kind, value, enum, name)
    return value


def _items(item_type: str, raw: Any, enum: tuple, name: str | None, default: bool) -> list:
    if isinstance(raw, str):
        pieces: list = raw.split(",")
    elif isinstance(raw, (list, tuple)):
        pieces = list(raw)
    else:
        pieces = [raw]
    values = []
    for piece in pieces:
        try:
            value = parse(item_type, piece)
        except InvalidValue as problem:
            described = InvalidValue(
                f"an Array of {item_type}",
                f"{example_of(item_type)},{example_of(item_type)}",
                f"Pass comma-separated {item_type} values ({problem.hint.rstrip('.').lower()}).",
            )
            raise _invalid(name, raw, described, default=default, item=f" (bad item {shown(piece)})") from None
        _check_enum(item_type, value, enum, name)
        values.append(value)
    return values


def _array_value(item_type: str, values: list) -> TypedValue:
    if not values:
        return TypedValue("(NULL)", [])
    return TypedValue("(" + ", ".join(literal(item_type, value) for value in values) + ")", values)


def _resolve(
    state: RenderState,
    kind: str,
    x: Any,
    default: Any,
    required: bool,
    enum: tuple,
    item_type: str | None = None,
) -> TypedValue:
    name = param_name(x)

    def checked(raw: Any, *, is_default: bool) -> TypedValue:
        if item_type is None:
            value = _scalar(kind, raw, enum, name, is_default)
            rendered = TypedValue(literal(kind, value), value)
        else:
            rendered = _array_value(item_type, _items(item_type, raw, enum, name, is_default))
        if state.mode is Mode.TRACE and name is not None:  # template logic keeps the value, the SQL shows the name
            return TypedValue(marker(name) if item_type is None else f"({marker(name)})", rendered.value)
        return rendered

    if state.analyzing:
        if name is None:  # a literal or computed value: check it if it is valid, else stand in for it
            raw, passed = passed_value(x)
            if passed:
                try:
                    return checked(raw, is_default=False)
                except TemplateError:
                    pass
        if default is not None:
            return checked(default, is_default=True)
        sample = enum[0] if enum else placeholder(item_type or kind)
        return checked([sample] if item_type else sample, is_default=True)
    raw, passed = passed_value(x)
    if passed:
        return checked(raw, is_default=False)
    if required or default is None:
        raise missing_parameter(name, required=bool(required))
    return checked(default, is_default=True)


def _frozen(value: Any) -> Any:
    return tuple(value) if isinstance(value, list) else value


def _typed_function(kind: str) -> Callable[..., TypedValue]:
    @pass_context
    def typed(
        context: Context,
        x: Any,
        default: Any = None,
        description: str | None = None,
        required: bool = False,
        enum: Any = None,
        example: Any = None,
        format: str | None = None,
    ) -> TypedValue:
        state = state_of(context)
        default, description, required = argument(default), argument(description), argument(required)
        allowed = _enum_items(argument(enum))
        if (name := param_name(x)) is not None:
            state.declare(Parameter(name, kind, _frozen(default), str(description or ""), bool(required), allowed))
        return _resolve(state, kind, x, default, required, allowed)

    typed.__name__ = typed.__qualname__ = kind
    typed.takes_param_refs = True  # type: ignore[attr-defined]
    return typed


@pass_context
def Array(
    context: Context,
    x: Any,
    _type: str = "String",
    default: Any = None,
    description: str | None = None,
    required: bool = False,
    enum: Any = None,
    example: Any = None,
    format: str | None = None,
) -> TypedValue:
    """`Array(ids, 'Int', default='1,2')`: a comma-separated list (or a Python list) of checked items."""
    _type = argument(_type)
    if callable(_type) and getattr(_type, "__name__", None) in SCALAR_TYPES:
        _type = _type.__name__  # `Array(ids, String)`: the type named by its function, as Tinybird accepts
    if not isinstance(_type, str) or _type not in SCALAR_TYPES:
        raise TemplateError(
            "PF201",
            f"Array item type {shown(_type)} is unknown.",
            "Use one of " + ", ".join(sorted(SCALAR_TYPES)) + ", e.g. Array(ids, 'Int').",
        )
    state = state_of(context)
    default, description, required = argument(default), argument(description), argument(required)
    allowed = _enum_items(argument(enum))
    if (name := param_name(x)) is not None:
        state.declare(
            Parameter(name, "Array", _frozen(default), str(description or ""), bool(required), allowed, _type)
        )
    return _resolve(state, "Array", x, default, required, allowed, item_type=_type)


Array.takes_param_refs = True  # type: ignore[attr-defined]

@pass_context
def JSON(context: Context, x: Any, default: Any = None, description: str | None = None,
         required: bool = False) -> Any:
    """`{% for f in JSON(filters, '[]') %}`: a request value that is JSON text, as the lists and objects it holds,
    for the template's own logic (each value still reaches the SQL through a typed function). Analysis reads the
    default."""
    state = state_of(context)
    default, description, required = argument(default), argument(description), argument(required)
    name = param_name(x)
    if name is not None:
        state.declare(Parameter(name, "String", _frozen(default), str(description or ""), bool(required)))
    raw, passed = passed_value(x)
    if state.mode is not Mode.RENDER:  # analysis: the default (a passed value there is only a stand-in)
        raw = default
    elif not passed:
        if required:
            raise missing_parameter(name, required=True)
        raw = default
    if raw is None:
        return None
    if not isinstance(raw, str):
        return raw
    try:
        return json.loads(raw)
    except ValueError:
        subject = f"Parameter `{name}`" if name else "The value"
        raise TemplateError("PF202", f"{subject} must be JSON, got {shown(raw)}.",
                            f"Pass JSON text, e.g. {name or 'x'}=[{{\"field\": \"country\"}}].",
                            parameter=name) from None


JSON.takes_param_refs = True  # type: ignore[attr-defined]

TYPED_FUNCTIONS: dict[str, Callable[..., Any]] = {kind: _typed_function(kind) for kind in sorted(SCALAR_TYPES)}
TYPED_FUNCTIONS["Array"] = Array
TYPED_FUNCTIONS["JSON"] = JSON
