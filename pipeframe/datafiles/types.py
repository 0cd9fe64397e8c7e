"""Column types as written: the one place that reads Spark SQL and ClickHouse type spellings into canonical
Spark SQL (`ColumnType`), for the datafile parser; the compiler's lattice and sqlglot bridge read `TypeTree`."""

from __future__ import annotations

import difflib
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache

from pipeframe.sqltext import quote_identifier

__all__ = [
    "MAX_DECIMAL_PRECISION",
    "ColumnType",
    "TypeProblem",
    "TypeTree",
    "field_name",
    "normalize_type",
    "parse_column_type",
    "parse_type_tree",
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
class TypeTree:
    """A type in canonical form, as a tree: `render()` spells it; the lattice compares trees, not strings."""

    name: str  # canonical keyword: BIGINT, DECIMAL, ARRAY, MAP, STRUCT, ...
    params: tuple[int, ...] = ()  # DECIMAL precision and scale
    children: tuple[TypeTree, ...] = ()  # ARRAY element, MAP key and value, STRUCT field types
    fields: tuple[str, ...] = ()  # STRUCT field names, parallel to children

    def render(self) -> str:
        if self.name == "DECIMAL":
            return f"DECIMAL({self.params[0]},{self.params[1]})"
        if self.name == "ARRAY":
            return f"ARRAY<{self.children[0].render()}>"
        if self.name == "MAP":
            return f"MAP<{self.children[0].render()},{self.children[1].render()}>"
        if self.name == "STRUCT":
            inner = ", ".join(f"{field_name(n)}: {t.render()}" for n, t in zip(self.fields, self.children))
            return f"STRUCT<{inner}>"
        return self.name


def field_name(name: str) -> str:
    """A struct field name as written in canonical form: bare when it is a plain identifier."""
    if name.isascii() and name.isidentifier():
        return name
    return quote_identifier(name)


def _decimal(precision: int, scale: int) -> TypeTree:
    return TypeTree("DECIMAL", (precision, scale))


MAX_DECIMAL_PRECISION = 38
_MAX_DEPTH = 32
_GENERIC_HINT = (
    "Use a Spark SQL type such as STRING, BIGINT, DOUBLE, TIMESTAMP, "
    "or a ClickHouse type such as Int64, Float64, DateTime."
)

# Names that take no parameters, keyed by lower case (ClickHouse spellings are accepted in any case).
# Unsigned ClickHouse integers go to the next signed type that holds every value.
_SCALARS: dict[str, TypeTree] = {
    **dict.fromkeys(["tinyint", "byte", "int8"], TypeTree("TINYINT")),
    **dict.fromkeys(["smallint", "short", "int16", "uint8"], TypeTree("SMALLINT")),
    **dict.fromkeys(["int", "integer", "int32", "uint16"], TypeTree("INT")),
    **dict.fromkeys(["bigint", "long", "int64", "uint32"], TypeTree("BIGINT")),
    "uint64": _decimal(20, 0),
    **dict.fromkeys(["int128", "uint128", "int256", "uint256"], _decimal(38, 0)),
    **dict.fromkeys(["float", "real", "float4", "float32"], TypeTree("FLOAT")),
    **dict.fromkeys(["double", "float8", "float64"], TypeTree("DOUBLE")),
    **dict.fromkeys(["boolean", "bool"], TypeTree("BOOLEAN")),
    **dict.fromkeys(["string", "text", "uuid", "ipv4", "ipv6"], TypeTree("STRING")),
    **dict.fromkeys(["date", "date32"], TypeTree("DATE")),
    **dict.fromkeys(["timestamp", "timestamp_ltz"], TypeTree("TIMESTAMP")),
    "timestamp_ntz": TypeTree("TIMESTAMP_NTZ"),
    "binary": TypeTree("BINARY"),
    "variant": TypeTree("VARIANT"),
    **dict.fromkeys(["void", "null", "nothing"], TypeTree("VOID")),
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

    def column(self) -> tuple[ColumnType, TypeTree | None]:
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

    def aggregate(self, head: _Token) -> tuple[ColumnType, TypeTree | None]:
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
        args: list[TypeTree] = []
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

    def type(self) -> TypeTree:
        self.depth += 1
        if self.depth > _MAX_DEPTH:
            raise self.fail(f"Nest types at most {_MAX_DEPTH} levels deep.")
        try:
            return self.type_body()
        finally:
            self.depth -= 1

    def type_body(self) -> TypeTree:
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

    def text_type(self, name: _Token) -> TypeTree:
        """CHAR(n), VARCHAR(n), FixedString(n): Spark stores them all as STRING."""
        required = name.value.lower() == "fixedstring"
        if required or self.at("("):
            self.open(name)
            if self.integer("a length") < 1:
                raise self.fail(f"Give `{name.text}` a positive length.")
            self.expect(")")
        return TypeTree("STRING")

    def decimal(self, name: _Token) -> TypeTree:
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
        if not 1 <= precision <= MAX_DECIMAL_PRECISION or scale > precision:
            raise self.fail(
                f"Spark decimals have a precision from 1 to {MAX_DECIMAL_PRECISION} and a scale no "
                "larger than the precision, e.g. DECIMAL(18,2)."
            )
        return _decimal(precision, scale)

    def datetime(self, name: _Token) -> TypeTree:
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
        return TypeTree("TIMESTAMP")

    def json(self, name: _Token) -> TypeTree:
        """JSON, JSON(max_dynamic_paths=16, ...): stored as its text; the settings tune ClickHouse's storage only."""
        if self.accept("("):
            depth = 1
            while depth:
                token = self.peek()
                if token.kind == "end":
                    raise self.fail(self.unexpected("`)` closing JSON(...)"))
                if token.kind == "punct" and token.text in "()":
                    depth += 1 if token.text == "(" else -1
                self.advance()
        return TypeTree("STRING")

    def time_zone(self) -> None:
        if self.peek().kind != "string":
            raise self.fail(self.unexpected("a quoted time zone such as 'UTC'"))
        self.advance()

    def enum(self, name: _Token) -> TypeTree:
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
        return TypeTree("STRING")

    def wrapper(self, name: _Token) -> TypeTree:
        """Nullable(T) and LowCardinality(T) store exactly T in Spark."""
        self.open(name)
        inner = self.type()
        self.close(name, ")", "one type")
        return inner

    def array(self, name: _Token) -> TypeTree:
        closer = self.open(name, "<(")
        element = self.type()
        self.close(name, closer, "one element type")
        return TypeTree("ARRAY", children=(element,))

    def map(self, name: _Token) -> TypeTree:
        closer = self.open(name, "<(")
        key = self.type()
        if not self.accept(","):
            raise self.fail(f"{name.text} takes a key type and a value type, e.g. {_EXAMPLES['map']}.")
        value = self.type()
        self.close(name, closer, "a key type and a value type")
        return TypeTree("MAP", children=(key, value))

    def struct(self, name: _Token) -> TypeTree:
        """STRUCT<a: T, b U> (Spark) and Tuple(a T, b U) or Tuple(T, U) (ClickHouse, fields named _1, _2)."""
        is_tuple = name.value.lower() == "tuple"
        closer = self.open(name, "(" if is_tuple else "<(")
        names: list[str | None] = []
        types: list[TypeTree] = []
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
        return TypeTree("STRUCT", children=tuple(types), fields=fields)

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


_CONSTRUCTORS: dict[str, Callable[[_Parser, _Token], TypeTree]] = {
    **dict.fromkeys(["char", "varchar", "fixedstring"], _Parser.text_type),
    **dict.fromkeys(
        ["decimal", "dec", "numeric", "decimal32", "decimal64", "decimal128", "decimal256"], _Parser.decimal
    ),
    **dict.fromkeys(["datetime", "datetime64"], _Parser.datetime),
    "json": _Parser.json,
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


def parse_type_tree(written: str) -> tuple[ColumnType, TypeTree | None]:
    """The column type and its canonical tree (None for aggregate-state columns); raises TypeProblem."""
    return _Parser(written).column()


# --------------------------------------------------------------------------------------------------
# Public parsing API.


@lru_cache(maxsize=8192)
def parse_column_type(written: str) -> ColumnType:
    """Read a column type as written in a .datasource file (Spark SQL or ClickHouse spelling)."""
    return parse_type_tree(written)[0]


@lru_cache(maxsize=8192)
def normalize_type(written: str) -> str:
    """The canonical Spark SQL spelling of a type; normalize_type(normalize_type(x)) == normalize_type(x)."""
    return parse_type_tree(written)[0].type


# --------------------------------------------------------------------------------------------------
# What ClickHouse makes of a value at ingest: integer ranges and the defaults of missing fields.


@dataclass(frozen=True)
class ValueRules:
    """What a column written in a ClickHouse type enforces of each value it takes (pipeframe's ingest does the
    same): the range of an integer type where it is narrower than the Spark type storing it holds (of the value, or
    of a plain array's elements and a map's values), and what a missing field (or a JSON null) becomes in a column
    that is not `Nullable`: its type's default, as ClickHouse stores it. Spark-spelled types (`BIGINT`, `STRING`...),
    `Nullable(T)` and the types without a default here (FixedString, Enum8/16, Tuple, JSON) keep NULL."""

    bounds: tuple[int, int] | None = None
    element_bounds: tuple[int, int] | None = None  # Array(T) elements, Map(K, V) values, T a plain integer type
    missing_sql: str | None = None  # the type's default as a Spark SQL literal
    missing_value: object = None  # the same as a Python value (arrays and maps as empty tuples)

    @property
    def takes_default(self) -> bool:
        return self.missing_sql is not None


_WIDTHS = {f"{sign}int{bits}": (0, 2 ** bits - 1) if sign == "u" else (-(2 ** (bits - 1)), 2 ** (bits - 1) - 1)
           for sign in ("", "u") for bits in (8, 16, 32, 64, 128, 256)}
_SPARK_BITS = {"TINYINT": 8, "SMALLINT": 16, "INT": 32, "BIGINT": 64}
# ClickHouse's names exactly as ClickHouse spells them (its type names are case-sensitive), with their defaults.
_EPOCH_DATE, _EPOCH = "DATE'1970-01-01'", "TIMESTAMP'1970-01-01 00:00:00+00:00'"
_DEFAULTS: dict[str, tuple[str, object]] = {
    "String": ("''", ""), "UUID": ("'00000000-0000-0000-0000-000000000000'", "00000000-0000-0000-0000-000000000000"),
    "IPv4": ("'0.0.0.0'", "0.0.0.0"), "IPv6": ("'::'", "::"), "Bool": ("false", False),
    "Float32": ("0.0", 0.0), "Float64": ("0.0", 0.0), "Date": (_EPOCH_DATE, "1970-01-01"),
    "Date32": (_EPOCH_DATE, "1970-01-01"), "DateTime": (_EPOCH, "1970-01-01 00:00:00"),
    "DateTime64": (_EPOCH, "1970-01-01 00:00:00"), "Array": ("array()", ()), "Map": ("map()", ()),
    **{name: ("0", 0) for name in ("Decimal", "Decimal32", "Decimal64", "Decimal128", "Decimal256")},
    **{f"{sign}Int{bits}": ("0", 0) for sign in ("", "U") for bits in (8, 16, 32, 64, 128, 256)},
}
_WRAPPERS = ("nullable", "lowcardinality")
_TYPE_ARGUMENTS = ("array", "map", *_WRAPPERS)  # the types whose parameters ValueRules reads as types


@lru_cache(maxsize=256)
def integer_range(spark_type: str) -> tuple[int, int] | None:
    """The values a Spark integer type holds (TINYINT to BIGINT, DECIMAL(p, 0)); None for any other type."""
    try:
        tree = parse_type_tree(spark_type)[1]
    except TypeProblem:
        return None
    return None if tree is None else _spark_range(tree)


def _spark_range(tree: TypeTree) -> tuple[int, int] | None:
    if tree.name in _SPARK_BITS:
        half = 2 ** (_SPARK_BITS[tree.name] - 1)
        return -half, half - 1
    if tree.name == "DECIMAL" and tree.params[1] == 0:
        return -(10 ** tree.params[0] - 1), 10 ** tree.params[0] - 1
    return None


@dataclass(frozen=True)
class _Written:
    """A type as written, as far as ValueRules reads it: its name, and the types it takes if it is one of
    _TYPE_ARGUMENTS (the parameters of any other are skipped)."""

    name: str
    arguments: tuple[_Written, ...] = ()

    def unwrapped(self) -> tuple[_Written, bool]:
        """The type inside its Nullable and LowCardinality wrappers, and whether one of them is Nullable."""
        node, nullable = self, False
        while node.name.lower() in _WRAPPERS and node.arguments:
            nullable = nullable or node.name.lower() == "nullable"
            node = node.arguments[0]
        return node, nullable


def _written(tokens: list[_Token], at: int) -> tuple[_Written, int]:
    """The type written from `tokens[at]` (a type the parser accepted) and where it ends."""
    name, at = tokens[at].value, at + 1
    if not (tokens[at].kind == "punct" and tokens[at].text in _CLOSERS):
        return _Written(name), at
    if name.lower() not in _TYPE_ARGUMENTS:
        depth = 0
        while True:
            token = tokens[at]
            at += 1
            if token.kind == "punct" and token.text in "(<)>":
                depth += 1 if token.text in "(<" else -1
                if depth == 0:
                    return _Written(name), at
    arguments = []
    while True:
        argument, at = _written(tokens, at + 1)  # past the opening bracket or the comma
        arguments.append(argument)
        if tokens[at].text != ",":
            return _Written(name, tuple(arguments)), at + 1  # past the closing bracket


def _narrower(written: _Written, tree: TypeTree) -> tuple[int, int] | None:
    """The ClickHouse range of an integer type written so, where narrower than what its Spark type holds."""
    clickhouse, spark = _WIDTHS.get(written.name.lower()), _spark_range(tree)
    if clickhouse is None or spark is None:
        return None
    bounds = max(clickhouse[0], spark[0]), min(clickhouse[1], spark[1])
    return None if bounds == spark else bounds


@lru_cache(maxsize=8192)
def value_rules(written: str) -> ValueRules:
    """The ValueRules of a column type as written (see ValueRules); no rules for what cannot be read."""
    try:
        tree = parse_type_tree(written)[1]
        tokens = _tokenize(written)
    except TypeProblem:
        return ValueRules()
    if tree is None or tokens[0].kind != "name":
        return ValueRules()
    node, nullable = _written(tokens, 0)[0].unwrapped()
    element = None
    kind = node.name.lower()
    if kind in ("array", "map") and tree.name in ("ARRAY", "MAP"):
        # Array(T): T's range; Map(K, V): V's, where T or V is an integer type (not an array or a map of them).
        inner, _ = node.arguments[0 if kind == "array" else 1].unwrapped()
        element = _narrower(inner, tree.children[0 if kind == "array" else 1])
    default = _DEFAULTS.get(node.name)
    if nullable or default is None:
        return ValueRules(_narrower(node, tree), element)
    return ValueRules(_narrower(node, tree), element, *default)
