"""Request values per parameter type: parse what HTTP (strings) or Python passed, check it, render it.

One table of types; `parse` raises InvalidValue with the words an error message and its hint need.
"""

from __future__ import annotations

import math
import re
from datetime import date, datetime
from typing import Any

from pipeframe.sqltext import quote_string

INT_RANGES: dict[str, tuple[int, int]] = {
    "Int": (-(2**63), 2**63 - 1),
    "Int8": (-(2**7), 2**7 - 1),
    "Int16": (-(2**15), 2**15 - 1),
    "Int32": (-(2**31), 2**31 - 1),
    "Int64": (-(2**63), 2**63 - 1),
    "UInt8": (0, 2**8 - 1),
    "UInt16": (0, 2**16 - 1),
    "UInt32": (0, 2**32 - 1),
    "UInt64": (0, 2**64 - 1),
}
FLOAT_TYPES = frozenset({"Float", "Float32", "Float64"})
DATETIME_TYPES = frozenset({"DateTime", "DateTime64"})
SCALAR_TYPES = frozenset({"String", "Boolean", "Date"} | set(INT_RANGES) | FLOAT_TYPES | DATETIME_TYPES)

_INT = re.compile(r"[+-]?[0-9]+")
_FLOAT = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")
_DATE = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}")
_DATETIME = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}[ T][0-9]{2}:[0-9]{2}:[0-9]{2}(?:\.[0-9]{1,6})?")
_FLOAT32_MAX = 3.4028234663852886e38

_EXAMPLES = {"String": "text", "Boolean": "true", "Date": "2024-01-01", "DateTime": "2024-01-01 00:00:00"}
_PLACEHOLDERS: dict[str, Any] = {"String": "placeholder", "Boolean": True, "Date": "2000-01-01"}


class InvalidValue(Exception):
    """A value that does not fit its type: `expected` reads "an Int", `example` is a valid value."""

    def __init__(self, expected: str, example: str, hint: str = "") -> None:
        super().__init__(expected)
        self.expected = expected
        self.example = example
        self.hint = hint


def family(kind: str) -> str:
    """The base type of a sized type: Int8 -> Int, Float32 -> Float, DateTime64 -> DateTime."""
    if kind in INT_RANGES:
        return "Int"
    if kind in FLOAT_TYPES:
        return "Float"
    if kind in DATETIME_TYPES:
        return "DateTime"
    return kind


def expected(kind: str) -> str:
    """How a message names the type: 'an Int', 'a UInt8 (0 to 255)'."""
    article = "an" if kind[0] in "AEIOU" and not kind.startswith("U") else "a"
    if kind in INT_RANGES and kind not in ("Int", "Int64"):
        low, high = INT_RANGES[kind]
        return f"{article} {kind} ({low} to {high})"
    return f"{article} {kind}"


def example(kind: str) -> str:
    if kind in INT_RANGES:
        return "10"
    if kind in FLOAT_TYPES:
        return "1.5"
    return _EXAMPLES[family(kind)]


def placeholder(kind: str) -> Any:
    """The value analysis renders for a parameter that has no default."""
    if kind in INT_RANGES:
        return 0
    if kind in FLOAT_TYPES:
        return 0.0
    if kind in DATETIME_TYPES:
        return "2000-01-01 00:00:00"
    return _PLACEHOLDERS[kind]


def parse(kind: str, raw: Any) -> Any:
    """The checked Python value of `raw` for a scalar type; dates and timestamps stay ISO strings."""
    if kind in INT_RANGES:
        return _parse_int(kind, raw)
    if kind in FLOAT_TYPES:
        return _parse_float(kind, raw)
    if kind in DATETIME_TYPES:
        return _parse_datetime(kind, raw)
    if kind == "String":
        if isinstance(raw, str):
            return raw
        if isinstance(raw, (int, float)) and not isinstance(raw, bool):
            return str(raw)
        raise InvalidValue(expected(kind), example(kind), "Pass text.")
    if kind == "Boolean":
        return _parse_bool(raw)
    if kind == "Date":
        return _parse_date(raw)
    raise ValueError(f"unknown parameter type {kind!r}")


def literal(kind: str, value: Any) -> str:
    """The SQL literal of a value `parse` returned."""
    base = family(kind)
    if base == "String":
        return quote_string(value)
    if base == "Int":
        return str(value)
    if base == "Float":
        return repr(value)
    if base == "Boolean":
        return "true" if value else "false"
    if base == "Date":
        return f"DATE '{value}'"
    return f"TIMESTAMP '{value}'"


def _parse_int(kind: str, raw: Any) -> int:
    low, high = INT_RANGES[kind]
    fail = InvalidValue(expected(kind), example(kind), "Pass a whole number.")
    if isinstance(raw, bool):
        raise fail
    if isinstance(raw, int):
        value = int(raw)
    elif isinstance(raw, str) and _INT.fullmatch(raw.strip()):
        try:
            value = int(raw.strip())
        except ValueError:  # more digits than Python converts
            raise fail from None
    else:
        raise fail
    if not low <= value <= high:
        raise InvalidValue(expected(kind), example(kind), f"Pass a whole number from {low} to {high}.")
    return value


def _parse_float(kind: str, raw: Any) -> float:
    fail = InvalidValue(expected(kind), example(kind), "Pass a finite number.")
    if isinstance(raw, bool):
        raise fail
    if isinstance(raw, (int, float)):
        try:
            value = float(raw)
        except OverflowError:
            raise fail from None
    elif isinstance(raw, str) and _FLOAT.fullmatch(raw.strip()):
        value = float(raw.strip())
    else:
        raise fail
    if not math.isfinite(value) or (kind == "Float32" and abs(value) > _FLOAT32_MAX):
        raise fail
    return value


def _parse_bool(raw: Any) -> bool:
    if isinstance(raw, bool):
        return raw
    if isinstance(raw, int) and raw in (0, 1):
        return bool(raw)
    if isinstance(raw, str):
        text = raw.strip().lower()
        if text in ("true", "1"):
            return True
        if text in ("false", "0"):
            return False
    raise InvalidValue(expected("Boolean"), "true", "Pass true, false, 1 or 0.")


def _parse_date(raw: Any) -> str:
    fail = InvalidValue(expected("Date"), example("Date"), "Pass a date as YYYY-MM-DD.")
    if isinstance(raw, datetime):
        if raw.time() != datetime.min.time():
            raise fail
        return raw.date().isoformat()
    if isinstance(raw, date):
        return raw.isoformat()
    if isinstance(raw, str) and _DATE.fullmatch(raw.strip()):
        try:
            return date.fromisoformat(raw.strip()).isoformat()
        except ValueError:
            raise fail from None
    raise fail


def _parse_datetime(kind: str, raw: Any) -> str:
    fail = InvalidValue(expected(kind), example(kind), "Pass a timestamp as YYYY-MM-DD HH:MM:SS.")
    if isinstance(raw, datetime):
        return raw.isoformat(sep=" ")
    if isinstance(raw, date):
        return datetime(raw.year, raw.month, raw.day).isoformat(sep=" ")
    if isinstance(raw, str) and _DATETIME.fullmatch(raw.strip()):
        try:
            return datetime.fromisoformat(raw.strip()).isoformat(sep=" ")
        except ValueError:
            raise fail from None
    raise fail
