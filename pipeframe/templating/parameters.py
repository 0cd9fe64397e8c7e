"""Request parameters: the declared Parameter, and what a template sees for a name nobody defined.

An unknown name resolves to a ParamRef (passed) or MissingParam (not passed) that remembers the name.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Mapping
from typing import Any

from jinja2 import Undefined
from jinja2.runtime import Context

from pipeframe.templating.declared import Parameter
from pipeframe.templating.errors import missing_parameter
from pipeframe.templating.literals import ValueOperators, sql_literal

STATE_KEY = "pipeframe:state"  # not an identifier, so no template can name it


class Mode(enum.Enum):
    RENDER = "render"
    ALL_DEFINED = "analysis, every parameter passed"
    NONE_DEFINED = "analysis, no parameter passed"
    TRACE = "analysis, every parameter passed and rendered as its marker"


PARAMETER_MARKER = "pf-parameter:"


def marker(name: str) -> str:
    """What a parameter renders as when tracing: a string literal naming it, valid SQL wherever a literal is."""
    return sql_literal(PARAMETER_MARKER + name)


def is_passed(value: Any) -> bool:
    """An empty query-string value counts as not passed."""
    return value is not None and not (isinstance(value, str) and value == "")


class RenderState:
    """One rendering: its mode, the request values, and the parameters the template used (in analysis)."""

    def __init__(self, mode: Mode, params: Mapping[str, Any]) -> None:
        self.mode = mode
        self.params = params
        self.found: dict[str, tuple[Parameter, bool]] = {}

    @property
    def analyzing(self) -> bool:
        return self.mode is not Mode.RENDER

    def ref(self, name: str) -> ParamRef | MissingParam:
        if self.mode in (Mode.ALL_DEFINED, Mode.TRACE):
            return ParamRef(name, "placeholder", self)
        if self.mode is Mode.RENDER and is_passed(value := self.params.get(name)):
            return ParamRef(name, value, self)
        return MissingParam(name, self)

    def use(self, name: str) -> None:
        """A bare use (`{{ x }}`, `x == 'a'`, `defined(x)`): a String parameter with no declared details."""
        if self.analyzing:
            record(self.found, Parameter(name, "String"), typed=False)

    def declare(self, parameter: Parameter) -> None:
        if self.analyzing:
            record(self.found, parameter, typed=True)


def record(found: dict[str, tuple[Parameter, bool]], parameter: Parameter, *, typed: bool) -> None:
    """Typed declarations win over bare uses; the first declaration wins, later ones only fill blanks."""
    previous = found.get(parameter.name)
    if previous is None or (typed and not previous[1]):
        found[parameter.name] = (parameter, typed)
    elif typed:
        first = previous[0]
        found[parameter.name] = (
            dataclasses.replace(
                first,
                default=parameter.default if first.default is None else first.default,
                description=first.description or parameter.description,
                enum=first.enum or parameter.enum,
            ),
            True,
        )


def state_of(context: Context) -> RenderState:
    state = context.get(STATE_KEY)
    if not isinstance(state, RenderState):
        raise TypeError("pipeframe template functions only run inside render() or analyze()")
    return state


class ParamRef(ValueOperators):
    """A passed request parameter: its name and value; using it as a value records the use."""

    __slots__ = ("name", "state", "value")

    def __init__(self, name: str, value: Any, state: RenderState) -> None:
        self.name = name
        self.value = value
        self.state = state

    def operand(self) -> Any:
        self.state.use(self.name)
        return self.value

    def render_bare(self) -> str:
        if self.state.mode is Mode.TRACE:
            return marker(self.name)
        return sql_literal(self.operand())

    def __str__(self) -> str:
        return str(self.operand())

    def __repr__(self) -> str:
        return f"ParamRef({self.name!r}, {self.value!r})"


class MissingParam(Undefined):
    """A request parameter that was not passed: falsy and empty, an error once its value is needed."""

    def __init__(self, name: str, state: RenderState) -> None:
        super().__init__(name=name, exc=lambda _message: missing_parameter(name, required=True))  # type: ignore[arg-type]
        self.name = name
        self.state = state

    def operand(self) -> Any:
        self.state.use(self.name)
        raise missing_parameter(self.name, required=True)

    def render_bare(self) -> str:
        if self.state.analyzing:
            self.state.use(self.name)
            return "NULL"
        raise missing_parameter(self.name, required=True)

    def __str__(self) -> str:
        if self.state.analyzing:
            return ""
        raise missing_parameter(self.name, required=True)

    def __repr__(self) -> str:
        return f"MissingParam({self.name!r})"


def param_name(value: Any) -> str | None:
    return value.name if isinstance(value, (ParamRef, MissingParam)) else None


def argument(value: Any) -> Any:
    """A typed function's non-first argument (default, enum, ...) as a plain value; a missing parameter is None."""
    if isinstance(value, MissingParam):
        value.state.use(value.name)
        return None
    return value.operand() if isinstance(value, ValueOperators) else value


def passed_value(value: Any) -> tuple[Any, bool]:
    """The raw value a typed function was given, and whether it counts as passed."""
    if isinstance(value, ParamRef):
        return value.value, True
    if isinstance(value, Undefined):
        return None, False
    if isinstance(value, ValueOperators):
        value = value.operand()
    return value, is_passed(value)
