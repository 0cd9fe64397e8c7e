"""SQL literals and identifiers: how a template value becomes inert SQL text.

SqlFragment marks SQL that pipeframe produced itself; every other value renders as a quoted, escaped literal.
"""

from __future__ import annotations

import math
import operator
import re
from collections.abc import Callable
from datetime import date, datetime
from typing import Any, Self

from pipeframe.sqltext import quote_string

IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*")


class SqlFragment(str):
    """Trusted SQL (typed functions, column(), project variables, macro output): rendered verbatim."""

    __slots__ = ()

    @property
    def sql(self) -> str:
        return str.__str__(self)


def _operand(value: Any) -> Any:
    return value.operand() if isinstance(value, ValueOperators) else value


def _binary(op: Callable[[Any, Any], Any]) -> Callable[[Any, Any], Any]:
    def method(self: ValueOperators, other: Any) -> Any:
        return op(self.operand(), _operand(other))

    return method


def _reflected(op: Callable[[Any, Any], Any]) -> Callable[[Any, Any], Any]:
    def method(self: ValueOperators, other: Any) -> Any:
        return op(_operand(other), self.operand())

    return method


class ValueOperators:
    """Makes template logic (`==`, `>`, `+`, `if`, `for`) see a wrapper's Python value, not its SQL text."""

    __slots__ = ()

    def operand(self) -> Any:
        raise NotImplementedError

    __eq__ = _binary(operator.eq)  # type: ignore[assignment]
    __ne__ = _binary(operator.ne)  # type: ignore[assignment]
    __lt__ = _binary(operator.lt)
    __le__ = _binary(operator.le)
    __gt__ = _binary(operator.gt)
    __ge__ = _binary(operator.ge)
    __add__ = _binary(operator.add)
    __radd__ = _reflected(operator.add)
    __sub__ = _binary(operator.sub)
    __rsub__ = _reflected(operator.sub)
    __mul__ = _binary(operator.mul)
    __rmul__ = _reflected(operator.mul)
    __truediv__ = _binary(operator.truediv)
    __rtruediv__ = _reflected(operator.truediv)
    __floordiv__ = _binary(operator.floordiv)
    __rfloordiv__ = _reflected(operator.floordiv)
    __mod__ = _binary(operator.mod)
    __rmod__ = _reflected(operator.mod)

    def __hash__(self) -> int:
        value = self.operand()
        return hash(tuple(value) if isinstance(value, list) else value)

    def __bool__(self) -> bool:
        return bool(self.operand())

    def __neg__(self) -> Any:
        return -self.operand()

    def __pos__(self) -> Any:
        return +self.operand()

    def __abs__(self) -> Any:
        return abs(self.operand())

    def __int__(self) -> int:
        return int(self.operand())

    def __float__(self) -> float:
        return float(self.operand())

    def __index__(self) -> int:
        return operator.index(self.operand())

    def __len__(self) -> int:
        return len(self.operand())

    def __iter__(self) -> Any:
        return iter(self.operand())

    def __contains__(self, item: Any) -> bool:
        return _operand(item) in self.operand()

    def __getitem__(self, key: Any) -> Any:
        return self.operand()[_operand(key)]


class TypedValue(ValueOperators, SqlFragment):
    """What a typed function returns: its SQL literal as text, its Python value for template logic."""

    def __new__(cls, sql: str, value: Any) -> Self:
        self = super().__new__(cls, sql)
        # str subclasses cannot have slots, so the value lives in the instance dict.
        self.__dict__["value"] = value
        return self

    @property
    def value(self) -> Any:
        return self.__dict__["value"]

    def operand(self) -> Any:
        return self.value

    def __repr__(self) -> str:
        return f"TypedValue({self.sql!r}, {self.value!r})"


def is_identifier(name: Any) -> bool:
    return isinstance(name, str) and IDENTIFIER.fullmatch(name) is not None


def sql_literal(value: Any) -> str:
    """The SQL text for a value a template outputs; only SqlFragment is trusted as SQL."""
    if isinstance(value, SqlFragment):
        return value.sql
    if value is None:
        return "NULL"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(int(value))
    if isinstance(value, float) and math.isfinite(value):
        return repr(float(value))
    if isinstance(value, (list, tuple)):
        return "(" + ", ".join(sql_literal(item) for item in value) + ")" if value else "(NULL)"
    if isinstance(value, datetime):
        return f"TIMESTAMP '{value.isoformat(sep=' ')}'"
    if isinstance(value, date):
        return f"DATE '{value.isoformat()}'"
    if isinstance(value, str):
        return quote_string(value)
    return quote_string(str(value))
