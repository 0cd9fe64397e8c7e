"""Column types: the one place that reads Spark SQL and ClickHouse type spellings into canonical Spark SQL.

Also owns the safe-cast lattice (is an MV's output column storable in its target column?) and the sqlglot bridge.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache

from sqlglot import exp, parse_one

__all__ = [
    "ColumnType",
    "TypeProblem",
    "from_sqlglot",
    "is_safe_cast",
    "normalize_type",
    "parse_column_type",
    "to_sqlglot",
]


class TypeProblem(Exception):
    """A column type that cannot be read; the caller turns it into a located diagnostic."""

    def __init__(self, message: str, hint: str) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint


@dataclass(frozen=True)
class ColumnType:
    """A column's declared type in canonical form, plus the aggregate state it holds, if any.

    ``type`` is a canonical Spark SQL type (``BIGINT``, ``ARRAY<STRING>``, ``DECIMAL(10,2)``,
    ``MAP<STRING,BIGINT>``, ``STRUCT<sum: DOUBLE, count: BIGINT>``), except for ``AggregateFunction``
    columns, where it is the canonical written form ``AggregateFunction(uniq, STRING)``; the compiler maps
    that to a physical state type. ``nullable`` is always True today (Spark columns are nullable; a
    ``Nullable(T)`` wrapper changes nothing) and is kept for the lattice.
    """

    type: str
    nullable: bool = True
    aggregate_function: str | None = None
    aggregate_args: tuple[str, ...] = ()
    aggregate_params: tuple[str, ...] = ()
    simple_aggregate: bool = False

    @property
    def is_aggregate_state(self) -> bool:
        """True for ``AggregateFunction(...)`` columns, which hold partial states rather than values."""
        return self.aggregate_function is not None and not self.simple_aggregate


# --------------------------------------------------------------------------------------------------
# The canonical type tree. Strings are the public currency; the tree exists so that rendering and the
# lattice never have to take strings apart again.


@dataclass(frozen=True)
class _Type:
    name: str  # canonical keyword: BIGINT, DECIMAL, ARRAY, MAP, STRUCT, ...
    params: tuple[int, ...] = ()  # DECIMAL precision and scale
    children: tuple[_Type, ...] = ()  # ARRAY element, MAP key and value, STRUCT field types
    fields: tuple[str, ...] = ()  # STRUCT field names, parallel to children

    def render(self) -> str:
        if self.name == "DECIMAL":
            return f"DECIMAL({self.params[0]},{self.params[1]})"
        if self.name == "ARRAY":
            return f"ARRAY<{self.children[0].render()}>"
        if self.name == "MAP":
            return f"MAP<{self.children[0].render()},{self.children[1].render()}>"
        if self.name == "STRUCT":
            inner = ", ".join(f"{_field_name(n)}: {t.render()}" for n, t in zip(self.fields, self.children))
            return f"STRUCT<{inner}>"
        return self.name


def _field_name(name: str) -> str:
    """A struct field name as written in canonical form: bare when it is a plain identifier."""
    if name.isascii() and name.isidentifier():
        return name
    return "`" + name.replace("`", "``") + "`"


def _decimal(precision: int, scale: int) -> _Type:
    return _Type("DECIMAL", (precision, scale))


_MAX_DECIMAL_PRECISION = 38
_MAX_DEPTH = 32
_GENERIC_HINT = (
    "Use a Spark SQL type such as STRING, BIGINT, DOUBLE, TIMESTAMP, "
    "or a ClickHouse type such as Int64, Float64, DateTime."
)

# Names that take no parameters, keyed by lower case (ClickHouse spellings are accepted in any case).
# Unsigned ClickHouse integers go to the next signed type that holds every value.
_SCALARS: dict[str, _Type] = {
    **dict.fromkeys(["tinyint", "byte", "int8"], _Type("TINYINT")),
    **dict.fromkeys(["smallint", "short", "int16", "uint8"], _Type("SMALLINT")),
    **dict.fromkeys(["int", "integer", "int32", "uint16"], _Type("INT")),
    **dict.fromkeys(["bigint", "long", "int64", "uint32"], _Type("BIGINT")),
    "uint64": _decimal(20, 0),
    **dict.fromkeys(["int128", "uint128", "int256", "uint256"], _decimal(38, 0)),
    **dict.fromkeys(["float", "real", "float4", "float32"], _Type("FLOAT")),
    **dict.fromkeys(["double", "float8", "float64"], _Type("DOUBLE")),
    **dict.fromkeys(["boolean", "bool"], _Type("BOOLEAN")),
    **dict.fromkeys(["string", "text", "uuid", "ipv4", "ipv6", "json"], _Type("STRING")),
    **dict.fromkeys(["date", "date32"], _Type("DATE")),
    **dict.fromkeys(["timestamp", "timestamp_ltz"], _Type("TIMESTAMP")),
    "timestamp_ntz": _Type("TIMESTAMP_NTZ"),
    "binary": _Type("BINARY"),
    "variant": _Type("VARIANT"),
    **dict.fromkeys(["void", "null", "nothing"], _Type("VOID")),
}

# Names that are recognised but deliberately unsupported, with the fix to suggest.
_UNSUPPORTED: dict[str, str] = {
    "interval": "Store a duration as BIGINT seconds (or milliseconds) instead of an INTERVAL.",
    "nested": "Use Array(Tuple(name Type, ...)) instead of Nested(...).",
    "object": "Use JSON (stored as STRING) or a STRUCT<...> with the fields you need.",
}

_AGGREGATE_KEYWORDS = ("aggregatefunction", "simpleaggregatefunction")

# Every accepted spelling, as documented, for "did you mean" hints.
_SPELLINGS: tuple[str, ...] = (
    "TINYINT", "BYTE", "SMALLINT", "SHORT", "INT", "INTEGER", "BIGINT", "LONG", "FLOAT", "REAL", "DOUBLE",
    "DECIMAL", "NUMERIC", "DEC", "STRING", "VARCHAR", "CHAR", "TEXT", "BOOLEAN", "BINARY", "DATE",
    "TIMESTAMP", "TIMESTAMP_NTZ", "TIMESTAMP_LTZ", "VARIANT", "VOID", "ARRAY", "MAP", "STRUCT",
    "String", "FixedString", "UUID", "IPv4", "IPv6", "Enum8", "Enum16", "JSON", "Int8", "Int16", "Int32",
    "Int64", "Int128", "Int256", "UInt8", "UInt16", "UInt32", "UInt64", "UInt128", "UInt256", "Float32",
    "Float64", "Decimal", "Decimal32", "Decimal64", "Decimal128", "Bool", "Date", "Date32", "DateTime",
    "DateTime64", "Nullable", "LowCardinality", "Array", "Map", "Tuple", "Nothing", "AggregateFunction",
    "SimpleAggregateFunction",
)  # fmt: skip


_SPELLINGS_BY_LOWER: dict[str, list[str]] = {}
for _spelling in _SPELLINGS:
    _SPELLINGS_BY_LOWER.setdefault(_spelling.lower(), []).append(_spelling)


def _suggest(name: str) -> str:
    """A hint naming the nearest supported spellings, in the style (Spark upper case or ClickHouse) used."""
    matches = difflib.get_close_matches(name.lower(), list(_SPELLINGS_BY_LOWER), n=3, cutoff=0.6)
    if not matches:
        return _GENERIC_HINT
    wants_upper = name.isupper()
    picked = []
    for match in matches:
        options = _SPELLINGS_BY_LOWER[match]
        preferred = [s for s in options if s.isupper() == wants_upper]
        picked.append(f"`{(preferred or options)[0]}`")
    listed = picked[0] if len(picked) == 1 else ", ".join(picked[:-1]) + " or " + picked[-1]
    return f"Did you mean {listed}?"


# --------------------------------------------------------------------------------------------------
# Tokenizer and recursive-descent parser over the written type text.


@dataclass(frozen=True)
class _Token:
    kind: str  # name | quoted (a `backquoted` name) | number | string | punct | end
    text: str  # the token as written
    value: str  # names and numbers as written; quoted names and strings unescaped
    pos: int


_PUNCTUATION = "<>(),:=-"
_DIGITS = "0123456789"  # not str.isdigit(): that accepts '²', which int() rejects


def _tokenize(text: str) -> list[_Token]:
    tokens: list[_Token] = []
    i, n = 0, len(text)
    while i < n:
        ch = text[i]
        if ch.isspace():
            i += 1
        elif ch.isalpha() or ch == "_":  # names may hold any letters; canonical form quotes the non-ASCII ones
            j = i + 1
            while j < n and (text[j].isalnum() or text[j] == "_"):
                j += 1
            tokens.append(_Token("name", text[i:j], text[i:j], i))
            i = j
        elif ch in _DIGITS or (ch == "." and i + 1 < n and text[i + 1] in _DIGITS):
            j = i
            while j < n and (text[j] in _DIGITS or text[j] == "."):
                j += 1
            if j < n and text[j] in "eE":
                k = j + 1
                if k < n and text[k] in "+-":
                    k += 1
                if k < n and text[k] in _DIGITS:
                    j = k
                    while j < n and text[j] in _DIGITS:
                        j += 1
            tokens.append(_Token("number", text[i:j], text[i:j], i))
            i = j
        elif ch in "'`":
            j, chars = i + 1, []
            while True:
                if j >= n:
                    what = "string" if ch == "'" else "quoted name"
                    raise _problem(text, f"Close the {what} opened with {ch} at position {i + 1}.")
                if text[j] == "\\" and ch == "'" and j + 1 < n:
                    chars.append(text[j + 1])
                    j += 2
                elif text[j] == ch and j + 1 < n and text[j + 1] == ch:
                    chars.append(ch)
                    j += 2
                elif text[j] == ch:
                    j += 1
                    break
                else:
                    chars.append(text[j])
                    j += 1
            kind = "string" if ch == "'" else "quoted"
            tokens.append(_Token(kind, text[i:j], "".join(chars), i))
            i = j
        elif ch in _PUNCTUATION:
            tokens.append(_Token("punct", ch, ch, i))
            i += 1
        else:
            raise _problem(
                text, f"Remove `{ch}`: a type holds only names, numbers, quotes and the characters < > ( ) , and :."
            )
    tokens.append(_Token("end", "", "", n))
    return tokens


def _problem(text: str, hint: str) -> TypeProblem:
    return TypeProblem(f"Unknown column type `{text.strip()}`.", hint)


_CLOSERS = {"(": ")", "<": ">"}


class _Parser:
    def __init__(self, text: str) -> None:
        self.text = text
        self.tokens = _tokenize(text)
        self.pos = 0
        self.depth = 0

    # -- token helpers ------------------------------------------------------------------------------

    def peek(self, ahead: int = 0) -> _Token:
        return self.tokens[min(self.pos + ahead, len(self.tokens) - 1)]

    def advance(self) -> _Token:
        token = self.peek()
        self.pos = min(self.pos + 1, len(self.tokens) - 1)
        return token

    def at(self, punct: str) -> bool:
        token = self.peek()
        return token.kind == "punct" and token.text == punct

    def accept(self, punct: str) -> bool:
        if self.at(punct):
            self.advance()
            return True
        return False

    def expect(self, punct: str) -> None:
        if not self.accept(punct):
            raise self.fail(self.unexpected(f"`{punct}`"))

    def unexpected(self, wanted: str) -> str:
        token = self.peek()
        if token.kind == "end":
            return f"The type ends too early: add the missing {wanted} and close every bracket."
        return f"Expected {wanted} at `{token.text}` (position {token.pos + 1}); check the brackets and commas."

    def fail(self, hint: str) -> TypeProblem:
        return _problem(self.text, hint)

    def unknown(self, token: _Token, hint: str | None = None) -> TypeProblem:
        whole = self.text.strip()
        if token.text == whole:
            message = f"Unknown column type `{whole}`."
        else:
            message = f"Unknown column type `{token.text}` in `{whole}`."
        return TypeProblem(message, hint or _suggest(token.text))

    def open(self, name: _Token, allowed: str = "(") -> str:
        """Consume an opening bracket of an allowed kind and return the matching closer."""
        token = self.peek()
        if token.kind == "punct" and token.text in allowed:
            self.advance()
            return _CLOSERS[token.text]
        spelling = " or ".join(f"`{b}`" for b in allowed)
        example = _EXAMPLES.get(name.value.lower(), f"{name.text}(...)")
        raise self.fail(f"`{name.text}` needs parameters: add {spelling} after it, e.g. {example}.")

    def close(self, name: _Token, closer: str, takes: str) -> None:
        """Consume `closer`, explaining the arity when another parameter follows instead."""
        if self.at(","):
            example = _EXAMPLES.get(name.value.lower(), f"{name.text}(...)")
            raise self.fail(f"{name.text} takes {takes}, e.g. {example}.")
        self.expect(closer)

    def integer(self, what: str) -> int:
        token = self.peek()
        if token.kind != "number" or not all(c in _DIGITS for c in token.text):
            raise self.fail(self.unexpected(what))
        self.advance()
        return int(token.text)

    def literal(self) -> str:
        """A number (optionally negative) or a quoted string, in canonical written form."""
        sign = "-" if self.accept("-") else ""
        token = self.peek()
        if token.kind == "number":
            self.advance()
            return sign + token.text
        if token.kind == "string" and not sign:
            self.advance()
            return "'" + token.value.replace("\\", "\\\\").replace("'", "\\'") + "'"
        raise self.fail(self.unexpected("a number or a quoted string"))

    # -- grammar ------------------------------------------------------------------------------------

    def column(self) -> tuple[ColumnType, _Type | None]:
        """column := AggregateFunction(...) | SimpleAggregateFunction(...) | type"""
        if not self.tokens[:-1]:
            raise TypeProblem("Missing column type.", _GENERIC_HINT)
        head = self.peek()
        if head.kind == "name" and head.value.lower() in _AGGREGATE_KEYWORDS:
            self.advance()
            result = self.aggregate(head)
        else:
            tree = self.type()
            result = (ColumnType(tree.render()), tree)
        if self.peek().kind != "end":
            raise self.fail(f"Remove `{self.text[self.peek().pos :].strip()}` after the type, or fix the brackets.")
        return result

    def aggregate(self, head: _Token) -> tuple[ColumnType, _Type | None]:
        """AggregateFunction(fn[(params)], T, ...) and SimpleAggregateFunction(fn[(params)], T)."""
        closer = self.open(head)
        fn = self.advance()
        if fn.kind != "name":
            raise self.fail("Start with the aggregate function's name, e.g. AggregateFunction(sum, Float64).")
        params: list[str] = []
        if self.accept("("):
            if not self.at(")"):
                params.append(self.literal())
                while self.accept(","):
                    params.append(self.literal())
            self.expect(")")
        args: list[_Type] = []
        while self.accept(","):
            args.append(self.type())
        self.expect(closer)
        if head.value.lower() == "simpleaggregatefunction":
            if len(args) != 1:
                raise self.fail(
                    "SimpleAggregateFunction takes a function and one type, e.g. SimpleAggregateFunction(sum, Float64)."
                )
            column = ColumnType(
                args[0].render(),
                aggregate_function=fn.value,
                aggregate_args=(args[0].render(),),
                aggregate_params=tuple(params),
                simple_aggregate=True,
            )
            return column, args[0]
        rendered = tuple(a.render() for a in args)
        written = fn.value + (f"({', '.join(params)})" if params else "")
        column = ColumnType(
            f"AggregateFunction({', '.join((written, *rendered))})",
            aggregate_function=fn.value,
            aggregate_args=rendered,
            aggregate_params=tuple(params),
        )
        return column, None

    def type(self) -> _Type:
        self.depth += 1
        if self.depth > _MAX_DEPTH:
            raise self.fail(f"Nest types at most {_MAX_DEPTH} levels deep.")
        try:
            return self.type_body()
        finally:
            self.depth -= 1

    def type_body(self) -> _Type:
        token = self.peek()
        if token.kind != "name":
            raise self.fail(self.unexpected("a type name"))
        self.advance()
        key = token.value.lower()
        if key in _SCALARS:
            if self.at("(") or self.at("<"):
                raise self.fail(f"`{token.text}` takes no parameters: remove the brackets after it.")
            return _SCALARS[key]
        if key in _CONSTRUCTORS:
            return _CONSTRUCTORS[key](self, token)
        if key in _AGGREGATE_KEYWORDS:
            raise self.fail(f"{token.text}(...) must be a column's whole type, not part of another type.")
        raise self.unknown(token, _UNSUPPORTED.get(key))

    def text_type(self, name: _Token) -> _Type:
        """CHAR(n), VARCHAR(n), FixedString(n): Spark stores them all as STRING."""
        required = name.value.lower() == "fixedstring"
        if required or self.at("("):
            self.open(name)
            if self.integer("a length") < 1:
                raise self.fail(f"Give `{name.text}` a positive length.")
            self.expect(")")
        return _Type("STRING")

    def decimal(self, name: _Token) -> _Type:
        """DECIMAL, DECIMAL(p), DECIMAL(p, s) and ClickHouse's Decimal32/64/128/256(s)."""
        key = name.value.lower()
        fixed = {"decimal32": 9, "decimal64": 18, "decimal128": 38, "decimal256": 76}.get(key)
        if fixed is not None:
            self.open(name)
            precision, scale = fixed, self.integer("a scale")
            self.expect(")")
        elif self.accept("("):
            precision = self.integer("a precision")
            scale = self.integer("a scale") if self.accept(",") else 0
            self.expect(")")
        else:
            precision, scale = 10, 0
        if not 1 <= precision <= _MAX_DECIMAL_PRECISION or scale > precision:
            raise self.fail(
                f"Spark decimals have a precision from 1 to {_MAX_DECIMAL_PRECISION} and a scale no "
                "larger than the precision, e.g. DECIMAL(18,2)."
            )
        return _decimal(precision, scale)

    def datetime(self, name: _Token) -> _Type:
        """DateTime, DateTime('tz'), DateTime64(p), DateTime64(p, 'tz'): the time zone is display-only."""
        if name.value.lower() == "datetime64":
            self.open(name)
            if self.integer("a precision") > 9:
                raise self.fail("DateTime64 precision goes from 0 to 9, e.g. DateTime64(3).")
            if self.accept(","):
                self.time_zone()
            self.expect(")")
        elif self.accept("("):
            self.time_zone()
            self.expect(")")
        return _Type("TIMESTAMP")

    def time_zone(self) -> None:
        if self.peek().kind != "string":
            raise self.fail(self.unexpected("a quoted time zone such as 'UTC'"))
        self.advance()

    def enum(self, name: _Token) -> _Type:
        """Enum8('a' = 1, 'b' = 2): the values are stored as their names."""
        self.open(name)
        while True:
            if self.peek().kind != "string":
                raise self.fail(self.unexpected("a quoted enum value such as 'a' = 1"))
            self.advance()
            if self.accept("="):
                self.accept("-")
                self.integer("an enum number")
            if not self.accept(","):
                break
        self.expect(")")
        return _Type("STRING")

    def wrapper(self, name: _Token) -> _Type:
        """Nullable(T) and LowCardinality(T) store exactly T in Spark."""
        self.open(name)
        inner = self.type()
        self.close(name, ")", "one type")
        return inner

    def array(self, name: _Token) -> _Type:
        closer = self.open(name, "<(")
        element = self.type()
        self.close(name, closer, "one element type")
        return _Type("ARRAY", children=(element,))

    def map(self, name: _Token) -> _Type:
        closer = self.open(name, "<(")
        key = self.type()
        if not self.accept(","):
            raise self.fail(f"{name.text} takes a key type and a value type, e.g. {_EXAMPLES['map']}.")
        value = self.type()
        self.close(name, closer, "a key type and a value type")
        return _Type("MAP", children=(key, value))

    def struct(self, name: _Token) -> _Type:
        """STRUCT<a: T, b U> (Spark) and Tuple(a T, b U) or Tuple(T, U) (ClickHouse, fields named _1, _2)."""
        is_tuple = name.value.lower() == "tuple"
        closer = self.open(name, "(" if is_tuple else "<(")
        names: list[str | None] = []
        types: list[_Type] = []
        if not self.at(closer):
            while True:
                names.append(self.field_name(required=not is_tuple))
                types.append(self.type())
                self.field_options()
                if not self.accept(","):
                    break
        self.expect(closer)
        if is_tuple and any(n is None for n in names):
            if any(n is not None for n in names):
                raise self.fail("Name every Tuple element or none of them, e.g. Tuple(a String, b Int64).")
            names = [f"_{i}" for i in range(1, len(types) + 1)]
        fields = tuple(n for n in names if n is not None)
        seen: set[str] = set()
        for field in fields:
            if field.lower() in seen:
                raise self.fail(f"Give each field a different name; `{field}` appears twice.")
            seen.add(field.lower())
        return _Type("STRUCT", children=tuple(types), fields=fields)

    def field_name(self, required: bool) -> str | None:
        token, following = self.peek(), self.peek(1)
        if token.kind == "quoted":
            self.advance()
            self.accept(":")
            return token.value
        named = token.kind == "name" and (
            (following.kind == "punct" and following.text == ":") or following.kind in ("name", "quoted")
        )
        if named:
            self.advance()
            self.accept(":")
            return token.value
        if required:
            raise self.fail(self.unexpected("a field name, as in STRUCT<name: STRING>"))
        return None

    def field_options(self) -> None:
        """Spark allows NOT NULL and COMMENT '...' on struct fields; neither changes the stored type."""
        while self.peek().kind == "name":
            word, following = self.peek().value.lower(), self.peek(1)
            not_null = word == "not" and following.kind == "name" and following.value.lower() == "null"
            comment = word == "comment" and following.kind == "string"
            if not_null or comment:
                self.advance()
                self.advance()
            else:
                raise self.fail(f"Remove `{self.peek().text}` or add the missing comma before it.")


_CONSTRUCTORS: dict[str, Callable[[_Parser, _Token], _Type]] = {
    **dict.fromkeys(["char", "varchar", "fixedstring"], _Parser.text_type),
    **dict.fromkeys(
        ["decimal", "dec", "numeric", "decimal32", "decimal64", "decimal128", "decimal256"], _Parser.decimal
    ),
    **dict.fromkeys(["datetime", "datetime64"], _Parser.datetime),
    **dict.fromkeys(["enum", "enum8", "enum16"], _Parser.enum),
    **dict.fromkeys(["nullable", "lowcardinality"], _Parser.wrapper),
    "array": _Parser.array,
    "map": _Parser.map,
    **dict.fromkeys(["struct", "tuple"], _Parser.struct),
}

_EXAMPLES: dict[str, str] = {
    "fixedstring": "FixedString(16)",
    "decimal32": "Decimal32(2)",
    "decimal64": "Decimal64(4)",
    "decimal128": "Decimal128(8)",
    "decimal256": "Decimal256(8)",
    "datetime64": "DateTime64(3)",
    "enum": "Enum('a' = 1, 'b' = 2)",
    "enum8": "Enum8('a' = 1, 'b' = 2)",
    "enum16": "Enum16('a' = 1, 'b' = 2)",
    "nullable": "Nullable(String)",
    "lowcardinality": "LowCardinality(String)",
    "array": "ARRAY<STRING> or Array(String)",
    "map": "MAP<STRING,BIGINT> or Map(String, Int64)",
    "struct": "STRUCT<a: STRING, b: BIGINT>",
    "tuple": "Tuple(a String, b Int64)",
    "aggregatefunction": "AggregateFunction(uniq, String)",
    "simpleaggregatefunction": "SimpleAggregateFunction(sum, Float64)",
}


def _parse(written: str) -> tuple[ColumnType, _Type | None]:
    return _Parser(written).column()


# --------------------------------------------------------------------------------------------------
# Public parsing API.


@lru_cache(maxsize=8192)
def parse_column_type(written: str) -> ColumnType:
    """Read a column type as written in a .datasource file (Spark SQL or ClickHouse spelling)."""
    return _parse(written)[0]


@lru_cache(maxsize=8192)
def normalize_type(written: str) -> str:
    """The canonical Spark SQL spelling of a type; normalize_type(normalize_type(x)) == normalize_type(x)."""
    return _parse(written)[0].type


# --------------------------------------------------------------------------------------------------
# The safe-cast lattice: can every value of `source` be stored in `target` without loss?

_INTEGER_DIGITS = {"TINYINT": 3, "SMALLINT": 5, "INT": 10, "BIGINT": 19}
_EXACT_IN_DOUBLE = {"TINYINT", "SMALLINT", "INT", "FLOAT"}
_EXACT_IN_FLOAT = {"TINYINT", "SMALLINT"}


def _safe(source: _Type, target: _Type) -> bool:
    if source == target or source.name == "VOID":
        return True
    s, t = source.name, target.name
    if s in _INTEGER_DIGITS and t in _INTEGER_DIGITS:
        return _INTEGER_DIGITS[s] <= _INTEGER_DIGITS[t]
    if s in _INTEGER_DIGITS and t == "DECIMAL":
        return target.params[0] - target.params[1] >= _INTEGER_DIGITS[s]
    if t == "DOUBLE":
        return s in _EXACT_IN_DOUBLE
    if t == "FLOAT":
        return s in _EXACT_IN_FLOAT
    if s == "DECIMAL" and t == "DECIMAL":
        (p1, s1), (p2, s2) = source.params, target.params
        return s2 >= s1 and p2 - s2 >= p1 - s1
    if s == "DATE":
        return t in ("TIMESTAMP", "TIMESTAMP_NTZ")
    if s == t == "ARRAY":
        return _safe(source.children[0], target.children[0])
    if s == t == "MAP":
        return source.children[0] == target.children[0] and _safe(source.children[1], target.children[1])
    if s == t == "STRUCT":
        return source.fields == target.fields and all(map(_safe, source.children, target.children))
    return False


def is_safe_cast(source: str, target: str) -> bool:
    """True when a `source` value always fits a `target` column (widening only); False for anything else.

    Integers widen, DATE becomes a timestamp, decimals gain digits, containers follow their elements;
    narrowing, precision loss, anything to STRING and TIMESTAMP_NTZ -> TIMESTAMP are not safe. Unreadable
    input is never safe. Aggregate-state columns only accept the identical state type.
    """
    try:
        (source_column, source_tree), (target_column, target_tree) = _parse(source), _parse(target)
    except TypeProblem:
        return False
    if source_tree is None or target_tree is None:
        return source_column.type == target_column.type
    return _safe(source_tree, target_tree)


# --------------------------------------------------------------------------------------------------
# The sqlglot bridge.

_T = exp.DataType.Type

# Text-like types (including ClickHouse's UUID, IP addresses, enums and JSON) are all stored as STRING.
_SQLGLOT_STRINGS = (
    _T.TEXT, _T.VARCHAR, _T.CHAR, _T.NCHAR, _T.NVARCHAR, _T.BPCHAR, _T.NAME, _T.TINYTEXT, _T.MEDIUMTEXT,
    _T.LONGTEXT, _T.FIXEDSTRING, _T.UUID, _T.IPV4, _T.IPV6, _T.ENUM, _T.ENUM8, _T.ENUM16, _T.JSON,
)  # fmt: skip

_FROM_SQLGLOT: dict[exp.DataType.Type, str] = {
    _T.TINYINT: "TINYINT",
    **dict.fromkeys([_T.SMALLINT, _T.UTINYINT], "SMALLINT"),
    **dict.fromkeys([_T.INT, _T.USMALLINT, _T.MEDIUMINT, _T.UMEDIUMINT], "INT"),
    **dict.fromkeys([_T.BIGINT, _T.UINT], "BIGINT"),
    _T.UBIGINT: "DECIMAL(20,0)",
    **dict.fromkeys([_T.INT128, _T.UINT128, _T.INT256, _T.UINT256], "DECIMAL(38,0)"),
    _T.FLOAT: "FLOAT",
    _T.DOUBLE: "DOUBLE",
    _T.BOOLEAN: "BOOLEAN",
    **dict.fromkeys(_SQLGLOT_STRINGS, "STRING"),
    **dict.fromkeys([_T.DATE, _T.DATE32], "DATE"),
    **dict.fromkeys([_T.TIMESTAMP, _T.TIMESTAMPTZ, _T.TIMESTAMPLTZ, _T.DATETIME, _T.DATETIME64], "TIMESTAMP"),
    _T.TIMESTAMPNTZ: "TIMESTAMP_NTZ",
    **dict.fromkeys([_T.BINARY, _T.VARBINARY, _T.BLOB], "BINARY"),
    _T.VARIANT: "VARIANT",
    **dict.fromkeys([_T.NULL, _T.NOTHING], "VOID"),
}

_SQLGLOT_DECIMAL_PRECISION = {_T.DECIMAL32: 9, _T.DECIMAL64: 18, _T.DECIMAL128: 38}


def _int_params(dtype: exp.DataType) -> list[int] | None:
    values = []
    for param in dtype.expressions:
        text = param.name
        if not text or not all(c in _DIGITS for c in text):
            return None
        values.append(int(text))
    return values


def from_sqlglot(dtype: exp.DataType) -> str | None:
    """The canonical Spark type for a sqlglot DataType, or None when it has no Spark equivalent (or is UNKNOWN)."""
    kind = dtype.this
    if kind in _FROM_SQLGLOT:
        return _FROM_SQLGLOT[kind]
    if kind == _T.DECIMAL:
        params = _int_params(dtype)
        if params is None or len(params) > 2:
            return None
        precision = params[0] if params else 10
        scale = params[1] if len(params) > 1 else 0
        if not 1 <= precision <= _MAX_DECIMAL_PRECISION or scale > precision:
            return None
        return _decimal(precision, scale).render()
    if kind in _SQLGLOT_DECIMAL_PRECISION:
        params = _int_params(dtype)
        if not params or len(params) != 1 or params[0] > _SQLGLOT_DECIMAL_PRECISION[kind]:
            return None
        return _decimal(_SQLGLOT_DECIMAL_PRECISION[kind], params[0]).render()
    if kind == _T.LOWCARDINALITY:
        return _child(dtype, 0) if len(dtype.expressions) == 1 else None
    if kind in (_T.ARRAY, _T.LIST):
        element = _child(dtype, 0) if len(dtype.expressions) == 1 else None
        return None if element is None else f"ARRAY<{element}>"
    if kind == _T.MAP:
        if len(dtype.expressions) != 2:
            return None
        key, value = _child(dtype, 0), _child(dtype, 1)
        return None if key is None or value is None else f"MAP<{key},{value}>"
    if kind == _T.STRUCT:
        return _struct_from_sqlglot(dtype)
    if kind in (_T.AGGREGATEFUNCTION, _T.SIMPLEAGGREGATEFUNCTION):
        return _aggregate_from_sqlglot(dtype)
    if kind == _T.USERDEFINED:
        # sqlglot keeps names it does not know (e.g. some ClickHouse spellings) as user-defined types.
        try:
            return normalize_type(str(dtype.args.get("kind") or ""))
        except TypeProblem:
            return None
    return None


def _child(dtype: exp.DataType, index: int) -> str | None:
    child = dtype.expressions[index]
    return from_sqlglot(child) if isinstance(child, exp.DataType) else None


def _struct_from_sqlglot(dtype: exp.DataType) -> str | None:
    names: list[str] = []
    types: list[str] = []
    for position, field in enumerate(dtype.expressions, start=1):
        if isinstance(field, exp.ColumnDef) and isinstance(field.args.get("kind"), exp.DataType):
            names.append(field.name)
            rendered = from_sqlglot(field.args["kind"])
        elif isinstance(field, exp.DataType):
            names.append(f"_{position}")
            rendered = from_sqlglot(field)
        else:
            return None
        if rendered is None:
            return None
        types.append(rendered)
    text = "STRUCT<" + ", ".join(f"{_field_name(n)}: {t}" for n, t in zip(names, types)) + ">"
    try:
        return normalize_type(text)  # rejects duplicate field names, like a written STRUCT would be
    except TypeProblem:
        return None


def _aggregate_from_sqlglot(dtype: exp.DataType) -> str | None:
    if not dtype.expressions:
        return None
    function, *args = dtype.expressions
    if isinstance(function, exp.Identifier):
        written = function.name
    elif isinstance(function, (exp.AnonymousAggFunc, exp.Anonymous)):
        params = ", ".join(p.sql(dialect="clickhouse") for p in function.expressions)
        written = f"{function.name}({params})"
    else:
        return None
    parts = [written]
    for arg in args:
        rendered = from_sqlglot(arg) if isinstance(arg, exp.DataType) else None
        if rendered is None:
            return None
        parts.append(rendered)
    keyword = "AggregateFunction" if dtype.this == _T.AGGREGATEFUNCTION else "SimpleAggregateFunction"
    try:
        return normalize_type(f"{keyword}({', '.join(parts)})")
    except TypeProblem:
        return None


def to_sqlglot(type_str: str) -> exp.DataType:
    """A sqlglot DataType for a type in any accepted spelling (Spark dialect); raises TypeProblem."""
    column, tree = _parse(type_str)
    if tree is None:
        return _aggregate_to_sqlglot(column)
    return _tree_to_sqlglot(tree)


def _tree_to_sqlglot(tree: _Type) -> exp.DataType:
    # Built node by node: sqlglot's Spark parser does not read VOID, neither alone nor nested (ARRAY<VOID>).
    if tree.name == "VOID":
        return exp.DataType(this=_T.NULL)
    if tree.name in ("ARRAY", "MAP"):
        children = [_tree_to_sqlglot(c) for c in tree.children]
        return exp.DataType(this=_T[tree.name], expressions=children, nested=True)
    if tree.name == "STRUCT":
        fields = [
            exp.ColumnDef(this=exp.to_identifier(name), kind=_tree_to_sqlglot(child))
            for name, child in zip(tree.fields, tree.children)
        ]
        return exp.DataType(this=_T.STRUCT, expressions=fields, nested=True)
    return exp.DataType.build(tree.render(), dialect="spark")


def _aggregate_to_sqlglot(column: ColumnType) -> exp.DataType:
    # Built by hand: the canonical Spark argument types (MAP<...>, TIMESTAMP_NTZ) are not ClickHouse syntax.
    name = column.aggregate_function or ""
    function: exp.Expression
    if column.aggregate_params:
        params = [parse_one(p, dialect="clickhouse") for p in column.aggregate_params]
        function = exp.AnonymousAggFunc(this=name, expressions=params)
    else:
        function = exp.to_identifier(name)
    args = [to_sqlglot(a) for a in column.aggregate_args]
    for arg in args:
        for node in arg.find_all(exp.DataType):
            node.set("nullable", False)  # or sqlglot's ClickHouse output wraps every argument in Nullable(...)
    return exp.DataType(this=_T.AGGREGATEFUNCTION, expressions=[function, *args], nested=False, nullable=False)
