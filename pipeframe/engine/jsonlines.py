"""NDJSON lines typed in Python and pyarrow as Spark's conform (`ingest._conform_json`) types them: every row that
fits, as Arrow columns of the table's types, and every line that does not, with the reason Spark gives it.

A group commit typed here needs no Spark job at all. Lines are parsed by orjson (the standard library's `json` for
the few whose numbers must be read as written); each column's `json:` path is followed (keys at any depth,
`$['key with spaces']`, array elements `[n]`, a whole array `[:]`); each value is read as Spark's
`get_json_object` + `try_cast` would read it, with ClickHouse's ranges and defaults (`datafiles.types.ValueRules`).
A batch of keys only (every column a key at any depth, `$.a.b` too, or a whole array `[:]`; of a type read as here:
`_arrow_readable`) is read by pyarrow's reader (`_arrow_read`; a map's values from orjson): the lines it refuses,
and those with a value that does not fit or that might be read otherwise, are left out of the read and typed one by
one (`_line`); any other batch as follows.
The lines whose values are all of their columns' plain kinds are checked and converted column by column by pyarrow
(`_fast`); the others one by one (`_line`). Whatever is not certain to be what Spark makes of a line answers None for
the whole batch, which then takes Spark's way: a key given twice, single quotes or text after the object (Spark's
JSON reader is lenient there), a number sent for an array's string, an integer in a string longer than
LONGEST_INT_TEXT, a number longer than Jackson reads, a date or time in other than the ISO forms, a Float32 on a
rounding tie, a path through an array (`[:].field`), an array or a map of arrays or maps, a DEFAULT other than a
constant or `now()`, an object sent for a scalar, a line nested too deeply for the standard library's parser, a
session time zone other than UTC... tests/spark/test_ingest_oneway.py proves it, row for row."""

from __future__ import annotations

import itertools
import json
import math
import re
import struct
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from decimal import ROUND_HALF_UP, Context, Decimal, InvalidOperation
from functools import lru_cache
from typing import TYPE_CHECKING

import orjson

from pipeframe.datafiles.types import MAX_DECIMAL_PRECISION, ValueRules, integer_range, value_rules
from pipeframe.engine.generated import UTC_ZONES  # session time zones that read a time without a zone as UTC
from pipeframe.engine.ingest import DECIMAL_TEXT, MAX_NESTING

if TYPE_CHECKING:
    import numpy as np
    import pyarrow as pa

    from pipeframe.datafiles.model import Column, Datasource

SHOWN = 80  # characters of a value a reason shows, as Spark's `substr(..., 1, 80)`
_JAVA_SPACE = "".join(chr(c) for c in range(33))  # what Java's String.trim() removes (Spark's casts trim so)
_INT_TEXT = re.compile(r"[+-]?[0-9]+")
LONGEST_INT_TEXT = 100  # characters of an integer in a string read here; a longer one goes Spark's way
LONGEST_NUMBER = 1000  # digits of a JSON integer read here (Jackson refuses longer numbers)
# Where a key ends: its closing quote, then the colon (JSON allows whitespace between them). Counted, it is at least
# the number of keys of a line (a string value may hold it too): more sends the line to the exact check.
_KEY_TOKEN = re.compile(r'"[ \t\n\r]*:')
# A key token with whitespace before its colon (no common JSON encoder writes one): such a line is typed by `_line`,
# which counts them all (`_duplicated_keys`); `_fast` counts `":`, several times quicker.
SPACED_KEY_TOKEN = r'"[ \t\n\r]+:'
_DECIMAL_TEXT = re.compile(r"[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]{1,4})?")
_FLOAT_TEXT = _DECIMAL_TEXT
_SPECIAL_FLOATS = {"nan": math.nan, "inf": math.inf, "+inf": math.inf, "infinity": math.inf, "+infinity": math.inf,
                   "-inf": -math.inf, "-infinity": -math.inf}
_TRUE, _FALSE = ("t", "true", "y", "yes", "1"), ("f", "false", "n", "no", "0")
_DATE = re.compile(r"([0-9]{4})-([0-9]{2})-([0-9]{2})")
_TIME = re.compile(r"([0-9]{4})-([0-9]{2})-([0-9]{2})([T ]([0-9]{2}):([0-9]{2}):([0-9]{2})(\.[0-9]{1,6})?"
                   r"(Z|[+-][0-9]{2}:[0-9]{2})?)?")
_NOW = re.compile(r"(?i)(now|current_timestamp)\(\s*\)")
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
# Room for every digit of a DECIMAL(38, s) (the default context keeps 28): a value needing more does not fit anyway.
_DIGITS = Context(prec=2 * MAX_DECIMAL_PRECISION)
_F32 = struct.Struct("f")  # packing a double as a float32 rounds it (to nearest, ties to even)


class Unsure(Exception):
    """A line (or a value) whose fate in Spark's conform is not certain here: the batch takes Spark's way."""


class _NeedsText(Unsure):
    """A decimal whose value depends on the number's text as written (near a rounding boundary)."""


_SPARK_READS_TEXT = re.compile(DECIMAL_TEXT)  # ingest._needs_text of a decimal column


class _Number(str):
    """A JSON number as written (the standard library's parser with `parse_float`/`parse_int`)."""


@dataclass(frozen=True)
class Typed:
    """Non-blank lines typed: the rows that fit (the datasource's columns, in line order), which line each came
    from, and each misfit line's index, raw text (as Spark keeps it: without a byte order mark) and reason."""

    rows: pa.Table
    kept: list[int]
    misfits: list[tuple[int, str, str]]


# ------------------------------------------------------------------------------------------------ paths
@dataclass(frozen=True)
class _Path:
    steps: tuple[str | int, ...]  # object keys and array indexes, from the line's root
    whole_array: bool  # `[:]`/`[*]` at the end: the array itself, read as the column's ARRAY type


@lru_cache(maxsize=4096)
def _path(text: str | None, name: str) -> _Path | None:
    """A `json:` path in Spark's `get_json_object` grammar (`.key`, `['key']`, `[n]`), or None for one this module
    does not follow (a wildcard before the end)."""
    text = text or f"$.{name}"
    whole = text.endswith(("[:]", "[*]"))
    if whole:
        text = text[:-3]
    if not text.startswith("$"):
        return None
    steps: list[str | int] = []
    rest = text[1:]
    pattern = re.compile(r"\.([^.\[]+)|\['([^'?]+)'\]|\[([0-9]+)\]")
    while rest:
        match = pattern.match(rest)
        if match is None or match.group(1) == "*":
            return None
        key, quoted, index = match.groups()
        steps.append(int(index) if index is not None else (key if key is not None else quoted))
        rest = rest[match.end():]
    return _Path(tuple(steps), whole)


def _follow(value: object, path: _Path) -> object:
    """The value at `path`: None when missing or null (`get_json_object` matches no key whose value is null), but a
    null array element it does match, as the text "null"."""
    for number, step in enumerate(path.steps):
        if isinstance(step, int):
            if not isinstance(value, list) or step >= len(value):
                return None
        elif not isinstance(value, dict):
            return None
        value = value[step] if isinstance(step, int) else value.get(step)
        if value is None:
            return "null" if isinstance(step, int) and number == len(path.steps) - 1 else None
    return value


# ------------------------------------------------------------------------------------------------ values
def _text(value: object) -> str:
    """A scalar as `get_json_object` returns it: a string as itself, a number as written, a boolean as Jackson."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return value
    if isinstance(value, int):
        return str(value)
    raise Unsure("the text of a number as it was sent")


def _shown(value: object) -> str:
    return _text(value)[:SHOWN]


def _integer(value: object, low: int, high: int) -> int | None:
    """An integer column's value (None: Spark's try_cast fails), or Unsure."""
    if isinstance(value, bool):
        return None  # "true" is no integer
    if isinstance(value, int):
        number = value
    elif isinstance(value, str):  # a JSON string, or a fraction as written (`_Number`)
        text = value.strip(_JAVA_SPACE)
        if _INT_TEXT.fullmatch(text):
            if len(text) > LONGEST_INT_TEXT:
                raise Unsure("a long integer text")
            number = int(text)
        elif _DECIMAL_TEXT.fullmatch(text) or not any(c.isdigit() for c in value):
            return None  # a fraction or an exponent (Spark's ANSI cast refuses them), or no number at all
        else:
            raise Unsure(f"integer text {value!r}")
    else:
        raise Unsure("a fraction for an integer")
    return number if low <= number <= high else None


def _floating(value: object, single: bool) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        number = float(value) if abs(value) < 2 ** 53 else None
        if number is None:
            raise Unsure("a large integer as a float")
    elif isinstance(value, float):
        number = value
    elif isinstance(value, str):
        text = value.strip(_JAVA_SPACE)
        if text.lower() in _SPECIAL_FLOATS:
            return _SPECIAL_FLOATS[text.lower()]
        if not _FLOAT_TEXT.fullmatch(text):
            if any(c.isdigit() for c in value) or text[:1].lower() in "in+-":
                raise Unsure(f"float text {value!r}")
            return None
        number = float(text)
    else:
        raise Unsure("a float of another JSON type")
    if single and number != 0 and math.isfinite(number):
        if abs(number) < 1.2e-38:
            raise Unsure("a Float32 below the normal range")
        try:
            narrow = _F32.unpack(_F32.pack(number))[0]
        except OverflowError:
            narrow = math.copysign(math.inf, number)
        if narrow != number and math.isfinite(narrow):
            # A float32 tie is a double of exactly 25 significant bits: rounding it twice may differ from Java's once.
            scaled = math.frexp(number)[0] * 33554432.0
            if scaled.is_integer() and int(scaled) & 1:
                raise Unsure("a Float32 on a rounding tie")
        number = narrow
    if math.isinf(number) and not (isinstance(value, str) and value.strip(_JAVA_SPACE).lower() in _SPECIAL_FLOATS):
        return None  # a number beyond the type's range: quarantined, not infinity
    return number


def _decimal(value: object, precision: int, scale: int) -> Decimal | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, str):
        text = value.strip(_JAVA_SPACE)
        if not _DECIMAL_TEXT.fullmatch(text):
            if any(c.isdigit() for c in value):
                raise Unsure(f"decimal text {value!r}")
            return None
        exact = Decimal(text)
    elif isinstance(value, int):
        exact = Decimal(value)
    elif isinstance(value, float):
        if not math.isfinite(value):
            raise Unsure("an infinite decimal")
        text = repr(value)
        whole, _, fraction = text.partition(".")
        if "e" not in text and len(fraction) <= scale and abs(value) < 10.0 ** (14 - scale):
            # On the grid already and far from a rounding boundary: the number as sent rounds to exactly this.
            return Decimal(text) if len(whole.lstrip("-")) <= precision - scale else None
        exact = Decimal(text)
        # The number as sent and this shortest spelling of its double differ by less than half its ulp: they round
        # alike unless a rounding boundary (or the precision's limit) lies that close.
        slack = Decimal(abs(value)) * Decimal("2.3e-16")
        step = Decimal(1).scaleb(-scale)
        boundary = (exact / step).to_integral_value(ROUND_HALF_UP)
        if abs(abs(exact / step - boundary) - Decimal("0.5")) * step <= slack or \
                abs(abs(exact) - Decimal(10) ** (precision - scale)) <= slack:
            raise _NeedsText("a decimal too close to a rounding boundary")
    else:
        raise Unsure("a decimal of another JSON type")
    try:
        rounded = exact.quantize(Decimal(1).scaleb(-scale), ROUND_HALF_UP, _DIGITS)
    except InvalidOperation:
        return None
    return rounded if len(rounded.as_tuple().digits) <= precision or rounded == 0 else None


def _boolean(value: object) -> bool | None:
    if isinstance(value, bool):
        return value
    if isinstance(value, int):
        return {0: False, 1: True}.get(value)
    if isinstance(value, str):
        text = value.strip(" \t\n\r").lower()
        if not text.isascii() or any(ord(c) < 33 for c in text):
            raise Unsure(f"boolean text {value!r}")
        return True if text in _TRUE else False if text in _FALSE else None
    raise Unsure("a fraction for a boolean")


def _date(value: object) -> date | None:
    if not isinstance(value, str):
        if isinstance(value, bool):
            return None
        raise Unsure("a number for a date")
    match = _DATE.fullmatch(value)
    if match is None:
        if any(c.isdigit() for c in value):
            raise Unsure(f"date text {value!r}")
        return None
    if int(match.group(1)) < 1000:
        raise Unsure("a year before 1000")  # Spark reads year 0 too; Python does not
    try:
        return date(*(int(g) for g in match.groups()))
    except ValueError:
        return None  # a 30th of February


def _timestamp(value: object, utc: bool) -> datetime | None:
    if not isinstance(value, str):
        if isinstance(value, bool):
            return None
        raise Unsure("a number for a time")
    match = _TIME.fullmatch(value)
    if match is None:
        if any(c.isdigit() for c in value):
            raise Unsure(f"time text {value!r}")
        return None
    year, month, day, _, hour, minute, second, fraction, zone = match.groups()
    if int(year) < 1000 or (zone is None and not utc):
        raise Unsure("a year before 1000, or a time without a zone read in another session time zone")
    try:
        moment = datetime(int(year), int(month), int(day), int(hour or 0), int(minute or 0), int(second or 0),
                          int((fraction or ".0")[1:].ljust(6, "0")), tzinfo=UTC)
    except ValueError:
        return None  # a month 13, an hour 24, a 30th of February
    if zone not in (None, "Z"):
        sign = 1 if zone[0] == "+" else -1
        hours, minutes = int(zone[1:3]), int(zone[4:6])
        if hours > 18 or minutes > 59:
            raise Unsure(f"zone offset {zone}")
        moment -= sign * timedelta(hours=hours, minutes=minutes)
    return moment


def _wall_clock(value: object) -> datetime | None:
    """A TIMESTAMP_NTZ's value: a time without a zone (one with a zone or an offset is not certain here)."""
    if isinstance(value, str) and value.endswith("Z") or isinstance(value, str) and _TIME.fullmatch(value) and \
            _TIME.fullmatch(value).group(9):
        raise Unsure("a zone for a time without one")
    moment = _timestamp(value, True)
    return None if moment is None else moment.replace(tzinfo=None)


def _string(value: object) -> str:
    """A string column's value: a JSON string, or a number's text as written (`_Number`, or an integer of `_exact`,
    whose text is its own), or a boolean as Jackson writes it."""
    if isinstance(value, str):
        return str(value)
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    raise Unsure("a fraction or an object for a string")


# ------------------------------------------------------------------------------------------------ columns
@dataclass(frozen=True)
class _Reader:
    """How one column's value becomes its Arrow value: `read(value)` answers the value, or None (Spark's cast
    fails: a misfit), or raises Unsure."""

    column: Column
    path: _Path
    read: Callable[[object], object]
    arrow: pa.DataType
    rules: ValueRules
    default: object  # the value a missing field takes (an explicit DEFAULT or the type's), or None
    get: Callable[[dict], object]  # the value at `path` in a parsed line (`_follow`)
    text_of: tuple[type, ...]  # the JSON values whose text as written Spark reads for this column (`_needs_text`)
    complex: bool  # ARRAY or MAP
    shown_type: str  # the type as a reason names it


def _getter(path: _Path) -> Callable[[dict], object]:
    """`_follow` of a path of keys, without its loop (the common case: one or two keys)."""
    steps = path.steps
    if len(steps) == 1 and isinstance(steps[0], str):
        return lambda v, key=steps[0]: v.get(key)
    if len(steps) == 2 and all(isinstance(step, str) for step in steps):
        def get(v: dict, outer: str = steps[0], inner: str = steps[1]) -> object:
            found = v.get(outer)
            return found.get(inner) if type(found) is dict else None
        return get
    return lambda v: _follow(v, path)


def _scalar(spark_type: str, rules: ValueRules, utc: bool) -> tuple[Callable[[object], object], pa.DataType] | None:
    import pyarrow as pa

    type_ = spark_type.upper()
    kind = _arrow_integer(type_)
    if kind is not None:
        low, high = rules.bounds or integer_range(type_)
        return (lambda v: _integer(v, low, high)), kind
    decimal = re.fullmatch(r"DECIMAL\((\d+),(\d+)\)", type_)
    if decimal:
        precision, scale = int(decimal.group(1)), int(decimal.group(2))
        low, high = rules.bounds or (None, None)

        def read(v: object) -> Decimal | None:
            number = _decimal(v, precision, scale)
            if number is not None and low is not None and not low <= number <= high:
                return None
            return number
        return read, pa.decimal128(precision, scale)
    simple = {"DOUBLE": (lambda v: _floating(v, False), pa.float64()),
              "FLOAT": (lambda v: _floating(v, True), pa.float32()), "BOOLEAN": (_boolean, pa.bool_()),
              "STRING": (_string, pa.string()), "DATE": (_date, pa.date32()),
              "TIMESTAMP": (lambda v: _timestamp(v, utc), pa.timestamp("us", "UTC")),
              "TIMESTAMP_NTZ": (_wall_clock, pa.timestamp("us"))}
    return simple.get(type_)


def _arrow_integer(spark_type: str) -> pa.DataType | None:
    """The Arrow type of a Spark integer type (TINYINT to BIGINT), else None."""
    import pyarrow as pa

    return {"TINYINT": pa.int8(), "SMALLINT": pa.int16(), "INT": pa.int32(), "BIGINT": pa.int64()}.get(spark_type)


def _element(spark_type: str, bounds: tuple[int, int] | None) -> tuple[Callable[[object], object], pa.DataType] | None:
    """How `from_json` reads an array element or a map value of a scalar type, where that is certain: strings from
    JSON strings, integers from JSON integers (within the type's and ClickHouse's range), floats from numbers,
    booleans from booleans; anything else is Unsure."""
    import pyarrow as pa

    type_ = spark_type.upper()

    def strict(kinds: tuple[type, ...], convert: Callable[[object], object] = lambda v: v):
        def read(v: object) -> object:
            if v is None:
                return None
            if not isinstance(v, kinds) or isinstance(v, bool) != (bool in kinds) or isinstance(v, _Number):
                raise Unsure("an element of another JSON type")
            return convert(v)
        return read

    kind = _arrow_integer(type_)
    if kind is not None:
        low, high = bounds or integer_range(type_)

        def in_range(v: object) -> object:
            if not low <= v <= high:  # type: ignore[operator]
                raise Unsure("an element out of range")  # the reason shows Jackson's text of the whole array
            return v
        return strict((int,), in_range), kind
    if type_ == "DOUBLE":
        return strict((int, float), float), pa.float64()
    if type_ == "BOOLEAN":
        return strict((bool,)), pa.bool_()
    if type_ == "STRING":
        return strict((str,)), pa.string()
    return None


def _complex(spark_type: str, rules: ValueRules) -> tuple[Callable[[object], object], pa.DataType] | None:
    """How `from_json` reads an ARRAY<T> (from a JSON array) or a MAP<STRING,T> (from an object), where certain."""
    import pyarrow as pa

    shape = re.fullmatch(r"(ARRAY<|MAP<STRING,)(.+)>", spark_type.upper())
    found = _element(shape.group(2), rules.element_bounds) if shape else None
    if found is None:
        return None
    item, kind = found
    is_array = shape.group(1) == "ARRAY<"

    def read(v: object) -> list:
        if not isinstance(v, list if is_array else dict):
            raise Unsure("an array or a map given another JSON type")
        return [item(e) for e in v] if is_array else [(k, item(e)) for k, e in v.items()]
    return read, pa.list_(kind) if is_array else pa.map_(pa.string(), kind)


def _default(column: Column, rules: ValueRules, read: Callable[[object], object], now: datetime) -> object:
    """The value a missing field takes: the column's DEFAULT (a constant, or `now()`), else its type's (a
    non-Nullable ClickHouse type), else None; Unsure for a DEFAULT whose value is not certain here."""
    if column.default is None:
        if not rules.takes_default:
            return None
        if column.type.upper() in ("DATE", "TIMESTAMP"):
            return date(1970, 1, 1) if column.type.upper() == "DATE" else _EPOCH
        return [] if isinstance(rules.missing_value, tuple) else read(rules.missing_value)
    text = column.default.strip()
    if _NOW.fullmatch(text) and column.type.upper() == "TIMESTAMP":
        return now
    try:
        constant = json.loads(text)
    except ValueError:
        if len(text) >= 2 and text[0] == text[-1] == "'" and "\\" not in text and "'" not in text[1:-1]:
            constant = text[1:-1]
        else:
            raise Unsure(f"DEFAULT {text}") from None
    if not isinstance(constant, int | float | str) or isinstance(constant, bool):
        raise Unsure(f"DEFAULT {text}")
    if isinstance(constant, str) != (column.type.upper() == "STRING"):
        raise Unsure(f"DEFAULT {text} of another type than the column's")  # Spark's CAST of it: not guessed
    value = read(constant)
    if value is None:
        raise Unsure(f"DEFAULT {text} that does not fit the column")
    return value


def _readers(datasource: Datasource, utc: bool, now: datetime) -> list[_Reader]:
    readers = []
    for column in datasource.columns:
        path = _path(column.json_path, column.name)
        rules = value_rules(column.written_type)
        found = _complex(column.type, rules) if column.type.upper().startswith(("ARRAY<", "MAP<")) else \
            _scalar(column.type, rules, utc)
        if path is None or found is None or (path.whole_array and not column.type.upper().startswith("ARRAY<")):
            raise Unsure(f"column `{column.name}`: {column.written_type} from {column.json_path}")
        read, arrow = found
        type_ = column.type.upper()
        text_of = (int, float) if type_ == "STRING" else () if type_ in ("DOUBLE", "FLOAT") or \
            type_.startswith("DECIMAL") else (float,)
        readers.append(_Reader(column, path, read, arrow, rules, _default(column, rules, read, now), _getter(path),
                               text_of, type_.startswith(("ARRAY<", "MAP<")), column.written_type.replace("'", "")))
    return readers


# ------------------------------------------------------------------------------------------------ lines
def _exact(line: str) -> object:
    """A line parsed by the standard library with its fractions as written (`_Number`), its integers as Python ints
    (`_whole`) and Jackson's leniencies (control characters in strings, text after the first value); Unsure where
    Jackson would differ."""
    text = line.lstrip(" \t\n\r")
    try:
        value, end = _EXACT.raw_decode(text)
    except json.JSONDecodeError:
        if "'" in line:
            raise Unsure("single quotes (Spark's reader takes them)") from None
        return _NOT_JSON
    except (ValueError, RecursionError):
        raise Unsure("a constant or a number Jackson reads otherwise") from None
    if text[end:].strip(" \t\n\r"):
        raise Unsure("text after the first JSON value")  # Spark reads the first value; pyarrow and orjson refuse
    return value


def _whole(text: str) -> int | _Number:
    """A JSON integer of `_exact`'s line: a Python int (its text is its own), but `-0` as written."""
    if len(text) > LONGEST_NUMBER:
        raise Unsure("a number longer than Jackson reads")
    return int(text) if text != "-0" else _Number(text)


def _no_constant(name: str) -> object:
    raise ValueError(name)  # NaN, Infinity: not JSON to Jackson


_EXACT = json.JSONDecoder(strict=False, parse_float=_Number, parse_int=_whole, parse_constant=_no_constant)


_NOT_JSON = object()


def _duplicated_keys(line: str, parsed: dict) -> bool:
    """Whether an object of the line gives a key twice (Spark's reader takes the first non-null, the parsers here
    the last): the parsed objects hold every key token of the line (`_KEY_TOKEN`) unless one was given twice, else
    (a key token inside a string) the standard library's parser tells."""
    if len(_KEY_TOKEN.findall(line)) == _key_count(parsed):
        return False
    try:
        _PAIRS.raw_decode(line.lstrip(" \t\n\r"))
    except _Duplicate:
        return True
    except (ValueError, RecursionError):
        raise Unsure("a line the standard library reads otherwise") from None
    return False


def _key_count(value: object) -> int:
    """How many keys the objects of a parsed value hold, nested ones included (a loop, not recursion: it runs for
    every line)."""
    count, stack = 0, [value]
    while stack:
        current = stack.pop()
        if type(current) is dict:
            count += len(current)
            current = current.values()
        for item in current:
            kind = type(item)
            if kind is dict or kind is list:
                stack.append(item)
    return count


class _Duplicate(ValueError):
    pass


def _unique_pairs(pairs: list[tuple[str, object]]) -> dict:
    found = dict(pairs)
    if len(found) != len(pairs):
        raise _Duplicate
    return found


_PAIRS = json.JSONDecoder(strict=False, object_pairs_hook=_unique_pairs)


def type_lines(lines: list[str], datasource: Datasource, time_zone: str) -> Typed | None:
    """Non-blank NDJSON `lines` typed as Spark's conform types them (see the module's docstring); None whenever
    that is not certain for one of them. The lines whose values are all of their columns' plain kinds are typed
    column by column (`_fast`); the others line by line (`_line`: misfits, reasons, the rare cases)."""
    import pyarrow as pa

    texts = [line for line in lines if line.strip()]
    names = [column.name for column in datasource.columns]
    try:
        readers = _readers(datasource, time_zone in UTC_ZONES, datetime.now(UTC))
        every_default = all(r.column.default is not None for r in readers)
        # Plain times are read in UTC: in another session time zone every line is read by `_line`.
        read = _arrow_read(texts, readers, every_default) if time_zone in UTC_ZONES and _arrow_readable(readers) \
            else None  # the one place that picks pyarrow's JSON reader
        fast, slow = read if read is not None else _fast(texts, readers, every_default) \
            if time_zone in UTC_ZONES else (None, range(len(texts)))
        columns: list[list] = [[] for _ in readers]
        kept, misfits = [], []
        for index in slow:
            raw = texts[index].removeprefix("\ufeff")
            values, reason = _line(raw, readers, every_default)
            if reason is not None:
                misfits.append((index, raw, reason))
                continue
            kept.append(index)
            for column, value in zip(columns, values, strict=True):
                column.append(value)
        rows = pa.table([pa.array(column, reader.arrow) for column, reader in zip(columns, readers, strict=True)],
                        names=names)
    except Unsure:
        return None
    except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError, UnicodeEncodeError):
        return None
    if fast is not None:
        fast_rows, fast_kept = fast
        order = sorted(range(len(fast_kept) + len(kept)), key=(fast_kept + kept).__getitem__)
        rows = pa.concat_tables([fast_rows, rows]).take(pa.array(order, pa.int64())) if kept else fast_rows
        kept = sorted(fast_kept + kept)
    return Typed(rows, kept, misfits)


# ------------------------------------------------------------------------------------------------ keys only
# Spark types pyarrow's JSON reader reads as jsonlines does where it reads them at all: a value of another JSON kind,
# a key given twice (at any depth, unknown keys too), a line that is not one object, a lone surrogate each make it
# raise, naming the line (tests/unit/test_jsonlines.py compares both ways). Times and dates are read as strings,
# integers as int64, floats and decimals as doubles, then checked and converted column by column (`_arrow_column`).
_ARROW_READS = ("STRING", "BOOLEAN", "BIGINT", "INT", "SMALLINT", "TINYINT", "DOUBLE", "FLOAT", "TIMESTAMP", "DATE")
_ARROW_ELEMENTS = ("STRING", "BOOLEAN", "BIGINT", "INT", "SMALLINT", "TINYINT", "DOUBLE")  # of arrays, of maps' values
JSON_SPACE = " \t\r\n"  # the whitespace JSON allows around a value
_ERROR_ROW = re.compile(r" in row ([0-9]+)$")  # where pyarrow's reader says which line it could not read
READ_LINES = 1000  # lines pyarrow's reader reads at once (`_segments`)
# `_decimal` reads a double on a decimal's grid below 10**(_DOUBLE_DIGITS - scale) as its shortest spelling.
_DOUBLE_DIGITS = 14


def _arrow_readable(readers: list[_Reader]) -> bool:
    """Whether every column is a key (at any depth: `$.a`, `$.a.b`, `$['a b'].c`; a whole array `[:]`) of a type
    pyarrow's JSON reader and `_arrow_column` type as `_line` does: String, Bool, integers, Float32/64, Decimal(P, S)
    of a scale up to _DOUBLE_DIGITS, below its precision, times and dates, arrays of and maps (String keys) to Strings,
    Bools, integers and Float64s."""
    def readable(spark_type: str) -> bool:
        decimal = re.fullmatch(r"DECIMAL\((\d+),(\d+)\)", spark_type)
        if decimal:
            return int(decimal.group(2)) < int(decimal.group(1)) and int(decimal.group(2)) <= _DOUBLE_DIGITS
        shape = re.fullmatch(r"(ARRAY<|MAP<STRING,)(.+)>", spark_type)
        return spark_type in _ARROW_READS or shape is not None and shape.group(2) in _ARROW_ELEMENTS
    return all(r.path.steps and all(isinstance(step, str) for step in r.path.steps) and
               readable(r.column.type.upper()) for r in readers)


def _read_as(reader: _Reader) -> pa.DataType:
    """The type pyarrow's reader reads a column's value as (`_arrow_column` converts it to the column's): times and
    dates as strings, integers as int64, Float32 and decimals as doubles (`_decimal` reads a JSON number from its
    double too), a map as an object of any keys (its values come from orjson: `_arrow_read`)."""
    import pyarrow as pa

    type_ = reader.column.type.upper()
    if type_ in ("TIMESTAMP", "DATE"):
        return pa.string()
    if type_ == "FLOAT" or type_.startswith("DECIMAL"):
        return pa.float64()
    if type_.startswith("MAP<"):
        return pa.struct([])
    if type_.startswith("ARRAY<") and pa.types.is_integer(reader.arrow.value_type):
        return pa.list_(pa.int64())
    return pa.int64() if pa.types.is_integer(reader.arrow) else reader.arrow


def _explicit_schema(readers: list[_Reader]) -> pa.Schema | None:
    """The schema pyarrow's reader reads the lines with: each column's keys as nested structs down to its value
    (`_read_as`); None when two columns read one key, or one column's key holds another's (`$.a` and `$.a.b`)."""
    import pyarrow as pa

    tree: dict = {}
    for reader in readers:
        *outer, last = reader.path.steps
        node = tree
        for step in outer:
            node = node.setdefault(step, {})
            if not isinstance(node, dict):
                return None
        if last in node:
            return None
        node[last] = _read_as(reader)

    def fields(node: dict) -> list[pa.Field]:
        return [pa.field(key, pa.struct(fields(value)) if isinstance(value, dict) else value)
                for key, value in node.items()]
    return pa.schema(fields(tree))


def _arrow_read(texts: list[str], readers: list[_Reader],
                every_default: bool) -> tuple[tuple[pa.Table, list[int]] | None, list[int]] | None:
    """Lines of keys only (`_arrow_readable`) read by pyarrow's JSON reader, as `_fast` answers: the rows of the
    lines that fit with their indexes, and the indexes of the others, left to `_line` (misfits, their reasons, the
    rare spellings); None when the batch cannot be read so (then `_fast` types it). A line the reader refuses is
    left out and the lines around it read again (`_segments`); a value that does not fit, or that `_line` might read
    otherwise, leaves its own line to `_line` (`_arrow_column`)."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    schema = _explicit_schema(readers)
    if schema is None or not texts:
        return None
    try:
        encoded = [text.encode("utf-8") for text in texts]
    except UnicodeEncodeError:
        return None  # a lone surrogate: `_line` tells
    # A line that is no object (pyarrow 26's reader crashes the process on a block whose first value is `null`;
    # `_line` reads them all), a byte order mark (Spark's reader keeps the line without it), a line nested deeper
    # than Jackson reads.
    unread = np.array([not text.lstrip(JSON_SPACE).startswith("{") or len(text) > MAX_NESTING and
                       text.count("{") + text.count("[") > MAX_NESTING for text in texts], bool)
    maps = [at for at, r in enumerate(readers) if r.column.type.upper().startswith("MAP<")]
    # Map columns are read from orjson's parse of each line, which also leaves out the lines that are no JSON
    # object before pyarrow's reader meets them.
    values = dict(zip(maps, _map_values(encoded, [readers[at] for at in maps], unread) if maps else [],
                      strict=True))
    slow = np.flatnonzero(unread).tolist()
    segments, refused = _segments(encoded, slow, schema)
    slow += refused
    if not segments:
        return None, sorted(slow)
    rows = np.concatenate([np.arange(start, start + table.num_rows) for start, table in segments])  # their lines
    bad = np.concatenate([_odd_numbers(table) for _, table in segments])
    arrays = []
    for at, reader in enumerate(readers):
        if at in values:
            found = _fast_column([values[at][row] for row in rows], reader)
            if found is None:
                return None
            array, odd = found
            bad[odd] = True
        else:
            # Each run's own: the structs on the way hold the unknown keys of that run's lines.
            first, *inner = reader.path.steps
            found = [table.column(first).combine_chunks() for _, table in segments]
            array = pa.concat_arrays([pc.struct_field(part, inner) for part in found] if inner else found)
            array, odd = _arrow_column(array, reader)
            bad |= odd
        arrays.append(array)
    if not every_default:  # `_line` gives the reason: none of the datasource's columns
        bad |= np.logical_and.reduce([array.is_null().to_numpy(zero_copy_only=False) for array in arrays])
    slow += rows[bad].tolist()
    kept = rows[~bad].tolist()
    if not kept:
        return None, sorted(slow)
    keep = pa.array(~bad)
    # Rows with none of the columns were left to `_line` above: every row kept takes its DEFAULTs.
    return (_table(readers, [array.filter(keep) for array in arrays], True), kept), sorted(slow)


def _segments(encoded: list[bytes], slow: list[int], schema: pa.Schema) -> tuple[list[tuple[int, pa.Table]], list[int]]:
    """The lines read by pyarrow's reader in runs between those in `slow`: each run read at once, one row per line,
    with its first line's index; and the lines the reader refused. A run the reader refuses is read again without
    the line its error names, or (an error naming none: a fraction for an integer...) in halves, down to the line."""
    import io

    import pyarrow as pa
    import pyarrow.json as pj

    bounds = [-1, *sorted(slow), len(encoded)]
    # Runs of at most READ_LINES: the reader scans all its input again after each line it refuses.
    pending = [(start, min(start + READ_LINES, high)) for low, high in itertools.pairwise(bounds)
               for start in range(low + 1, high, READ_LINES)]
    read, refused = [], []
    while pending:
        low, high = pending.pop()
        if low >= high:
            continue
        data = b"\n".join(encoded[low:high])
        table, row = None, None
        try:
            table = pj.read_json(io.BytesIO(data), read_options=pj.ReadOptions(use_threads=False,
                                                                               block_size=len(data) + 1),
                                 parse_options=pj.ParseOptions(explicit_schema=schema,
                                                               unexpected_field_behavior="infer"))
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as error:
            named = _ERROR_ROW.search(str(error))
            row = int(named.group(1)) if named else None
        if table is not None and table.num_rows == high - low:
            read.append((low, table))
            continue
        # A line of two values (Spark reads the first) counts two rows: the error's row may be off, which only
        # sends a line that fits to `_line` as well.
        if row is not None and row < high - low:
            refused.append(low + row)
            pending += [(low, low + row), (low + row + 1, high)]
        elif high - low == 1:
            refused.append(low)
        else:
            middle = (low + high) // 2
            pending += [(low, middle), (middle, high)]
    return [(low, table) for low, table in sorted(read, key=lambda found: found[0])], refused


def _map_values(encoded: list[bytes], readers: list[_Reader], bad: np.ndarray) -> list[list]:
    """The values of map columns, from the lines parsed by orjson (pyarrow's reader reads an object as a struct of
    the keys of every line, not in each line's order), one list per reader: a line orjson refuses, or that is no
    object, marked in `bad`. Only the maps are kept: the lines' other objects are freed as soon as read."""
    found: list[list] = [[] for _ in readers]
    for index, line in enumerate(encoded):
        try:
            value = orjson.loads(line)
        except orjson.JSONDecodeError:
            value = None
        if type(value) is not dict:
            bad[index] = True
            value = {}
        for values, reader in zip(found, readers, strict=True):
            values.append(reader.get(value))
    return found


def _odd_numbers(table: pa.Table) -> np.ndarray:
    """The rows holding a NaN or an infinity at any depth, in any key (unknown ones too): pyarrow's reader takes
    the literals NaN and Infinity, which are no JSON (`_line` leaves such a line to Spark); a JSON number never reads
    as either (one too large for a double is refused)."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    def odd(array: pa.Array) -> np.ndarray | None:
        kind = array.type
        if pa.types.is_floating(kind):
            return pc.invert(pc.is_finite(array)).fill_null(False).to_numpy(zero_copy_only=False)
        if pa.types.is_struct(kind):
            found = [odd(pc.struct_field(array, [i])) for i in range(kind.num_fields)]
            found = [f for f in found if f is not None]
            return np.logical_or.reduce(found) if found else None
        if pa.types.is_list(kind) or pa.types.is_large_list(kind) or pa.types.is_map(kind):
            inner = odd(array.flatten())
            if inner is None or not inner.any():
                return None
            rows = np.zeros(len(array), bool)
            rows[pc.list_parent_indices(array).to_numpy()[inner]] = True
            return rows
        return None

    rows = np.zeros(table.num_rows, bool)
    for column in table.columns:
        found = odd(column.combine_chunks())
        if found is not None:
            rows |= found
    return rows


def _arrow_column(array: pa.Array, reader: _Reader) -> tuple[pa.Array, np.ndarray]:
    """A column as pyarrow's reader read it (`_read_as`) converted to the column's type, and the rows whose value
    does not fit or might be read otherwise by `_line` (left to it): an integer out of the type's or ClickHouse's
    range, a time or date not in the plain ISO form, a Float64 sent as an integer of 2**53 or more or as -0 (`_line`
    reads `0.0`), a Float32 `_line` leaves to Spark, a decimal off its grid or too large for its double to be exact,
    an array's integer out of range or Float64 -0."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    type_ = reader.column.type.upper()
    none = np.zeros(len(array), bool)
    if type_ in ("STRING", "BOOLEAN"):
        return array, none
    if pa.types.is_integer(reader.arrow):
        out = _out_of_range(array, reader.rules.bounds or integer_range(type_))
        return pc.if_else(out, pa.scalar(None, pa.int64()), array).cast(reader.arrow), \
            out.to_numpy(zero_copy_only=False)
    if type_.startswith("ARRAY<"):
        elements, rows = array.flatten(), pc.list_parent_indices(array).to_numpy()
        if pa.types.is_integer(reader.arrow.value_type):
            out = _out_of_range(elements, reader.rules.element_bounds or integer_range(type_[6:-1]))
            odd = out.to_numpy(zero_copy_only=False)
        else:
            odd = _not_as_sent(elements.to_numpy(zero_copy_only=False)) if type_ == "ARRAY<DOUBLE>" else \
                np.zeros(len(elements), bool)
        bad = none.copy()
        bad[rows[odd]] = True
        return array.cast(reader.arrow, safe=False), bad  # an element out of range: its row is left to `_line`
    if type_ in ("DOUBLE", "FLOAT") or type_.startswith("DECIMAL"):
        doubles = array.to_numpy(zero_copy_only=False)  # NULL as NaN
        valid = ~np.isnan(doubles)
        odd = _not_as_sent(doubles)
        if type_ == "DOUBLE":
            return array, odd & valid
        if type_ == "FLOAT":
            return array.cast(pa.float32(), safe=False), (odd | _float32_unsure(doubles)) & valid
        return _decimal_column(doubles, valid, reader)
    # TIMESTAMP, DATE: strings in the plain ISO form, others left to `_line`.
    plain = pc.match_substring_regex(array, _PLAIN_TIME if type_ == "TIMESTAMP" else _PLAIN_DATE)
    odd = pc.invert(plain.fill_null(True))
    texts = pc.if_else(odd, pa.scalar(None, pa.string()), array)
    try:
        converted = texts.cast(pa.date32()) if type_ == "DATE" else \
            pc.utf8_rtrim(texts, "Z").cast(pa.timestamp("us")).cast(pa.timestamp("us", "UTC"))
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        # A plain spelling of no day (a 30th of February, an hour 24): pyarrow does not say which, `_line` does.
        converted = pa.array([None if text is None else reader.read(text) for text in texts.to_pylist()],
                             reader.arrow)
        odd = pc.or_(odd, pc.and_(pc.is_valid(texts), pc.is_null(converted)))
    return converted, odd.to_numpy(zero_copy_only=False)


def _out_of_range(array: pa.Array, bounds: tuple[int, int]) -> pa.BooleanArray:
    import pyarrow.compute as pc

    return pc.or_(pc.less(array, bounds[0]), pc.greater(array, bounds[1])).fill_null(False)


def _not_as_sent(doubles: np.ndarray) -> np.ndarray:
    """Doubles pyarrow read that `_line` may read otherwise: an integer of 2**53 or more (`_floating` leaves it to
    Spark; orjson and pyarrow read a fraction alike) and -0 (orjson's integer 0)."""
    import numpy as np

    with np.errstate(invalid="ignore"):
        return (np.abs(doubles) >= 2.0 ** 53) | ((doubles == 0) & np.signbit(doubles))


def _float32_unsure(doubles: np.ndarray) -> np.ndarray:
    """Doubles whose Float32 `_floating` does not give (a misfit, or Spark's way): beyond Float32's range, below its
    normal range, or on a rounding tie (rounding twice may differ from Java's once)."""
    import numpy as np

    with np.errstate(over="ignore", invalid="ignore"):
        narrow = doubles.astype(np.float32)
        scaled = np.frexp(doubles)[0] * 33554432.0
        return (np.isinf(narrow) & np.isfinite(doubles)) | ((doubles != 0) & (np.abs(doubles) < 1.2e-38)) | \
            ((narrow != doubles) & (scaled == np.floor(scaled)) & (np.mod(scaled, 2) == 1))


def _decimal_column(doubles: np.ndarray, valid: np.ndarray, reader: _Reader) -> tuple[pa.Array, np.ndarray]:
    """A Decimal(P, S) column from the doubles of its JSON numbers, as `_decimal` reads one: a double that is the
    nearest to a value on the grid (k / 10**S) below 10**(14 - S) is exactly that value (its shortest spelling has
    at most 15 digits); any other (off the grid: rounded by Spark from the text; larger: the text may hold more
    digits than the double; beyond P digits or the type's range: a misfit) is left to `_line`."""
    import numpy as np
    import pyarrow as pa

    precision, scale = reader.arrow.precision, reader.arrow.scale
    with np.errstate(invalid="ignore", over="ignore"):
        units = np.rint(doubles * 10.0 ** scale)
        fits = (units / 10.0 ** scale == doubles) & (np.abs(doubles) < 10.0 ** (_DOUBLE_DIGITS - scale)) & \
            (np.abs(units) < 10.0 ** precision)
        if reader.rules.bounds is not None:
            fits &= (doubles >= reader.rules.bounds[0]) & (doubles <= reader.rules.bounds[1])
    fits &= valid
    whole = np.where(fits, units, 0).astype(np.int64)
    # The units as a Decimal(38, 0), seen as Decimal(P, S): the same 128-bit integers, S digits after the point.
    array = pa.array(whole, pa.int64(), mask=~fits).cast(pa.decimal128(38, 0)).view(reader.arrow)
    return array, valid & ~fits


def _table(readers: list[_Reader], arrays: list[pa.Array], every_default: bool) -> pa.Table | None:
    """The typed columns as a table, each missing value given its column's DEFAULT; None when a line has none of
    the columns (`_line` says so)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    missing, columns = None, []
    for reader, array in zip(readers, arrays, strict=True):
        none = pc.is_null(array)
        missing = none if missing is None else pc.and_(missing, none)
        if reader.default is not None and array.null_count:
            array = pc.if_else(none, pa.scalar(reader.default, reader.arrow), array)
        columns.append(array)
    if not every_default and pc.any(missing).as_py():
        return None
    return pa.table(columns, names=[r.column.name for r in readers])


# ------------------------------------------------------------------------------------------------ the fast way
_PLAIN_TIME = r"^[1-9][0-9]{3}-[0-9]{2}-[0-9]{2}([T ][0-9]{2}:[0-9]{2}:[0-9]{2}(\.[0-9]{1,6})?Z?)?$"
_PLAIN_DATE = r"^[1-9][0-9]{3}-[0-9]{2}-[0-9]{2}$"


def _fast(texts: list[str], readers: list[_Reader],
          every_default: bool) -> tuple[tuple[pa.Table, list[int]] | None, list[int]]:
    """The lines typed column by column where each is a plain object (no byte order mark, no key given twice) whose
    every value is of its column's plain kind and fits (in range, a time in the plain ISO form...): the rows of
    those lines with their indexes, and the indexes of the others, left to `_line`. Each column is checked and
    converted by pyarrow at once; a check that cannot tell which line failed leaves every line to `_line`."""
    import pyarrow as pa
    import pyarrow.compute as pc

    slow: set[int] = set()
    parsed: list[object] = []
    for index, text in enumerate(texts):
        try:
            parsed.append(orjson.loads(text))
        except orjson.JSONDecodeError:
            parsed.append(None)
            slow.add(index)
    raw = pa.array(texts, pa.string())
    keys = pc.count_substring(raw, '":').to_pylist()
    spaced = pc.match_substring_regex(raw, SPACED_KEY_TOKEN).to_pylist()
    for index, (text, value, count, odd) in enumerate(zip(texts, parsed, keys, spaced, strict=True)):
        if type(value) is not dict or odd or _key_count(value) != count or text.startswith("\ufeff") or \
                len(text) > MAX_NESTING and text.count("{") + text.count("[") > MAX_NESTING:
            slow.add(index)
            parsed[index] = {}
    arrays = []
    for reader in readers:
        values = [reader.get(p) for p in parsed]
        found = _fast_column(values, reader)
        if found is None:
            return None, list(range(len(texts)))
        array, bad = found
        slow.update(bad)
        arrays.append(array)
    if len(slow) == len(texts):
        return None, list(range(len(texts)))
    keep = pa.array([index not in slow for index in range(len(texts))])
    table = _table(readers, [array.filter(keep) if slow else array for array in arrays], every_default)
    if table is None:
        return None, list(range(len(texts)))
    fast = [index for index in range(len(texts)) if index not in slow]
    return (table, fast), sorted(slow)


def _fast_column(values: list, reader: _Reader) -> tuple[pa.Array, list[int]] | None:
    """A column's values converted at once: the array (its values of other kinds, or that do not fit, as NULL) and
    the indexes of those lines; None when which lines failed cannot be told."""
    import numpy as np
    import pyarrow as pa

    type_ = reader.column.type.upper()
    integer = pa.types.is_integer(reader.arrow)
    kinds = {"STRING": (str,), "BOOLEAN": (bool,), "DOUBLE": (int, float), "FLOAT": (int, float),
             "TIMESTAMP": (str,), "DATE": (str,)}.get(type_, (int,) if integer else None)
    try:
        if type_ in ("ARRAY<STRING>", "MAP<STRING,STRING>", "ARRAY<BOOLEAN>") and \
                {type(v) for v in values} <= {type(None), list if type_.startswith("ARRAY") else dict}:
            try:  # pyarrow takes strings (and booleans) only as themselves: another element kind raises
                return pa.array(values, reader.arrow), []
            except (pa.ArrowInvalid, pa.ArrowTypeError):
                pass  # each value read by itself below
        if kinds is None:  # decimals, arrays and maps: each value read as `_line` reads it
            read, bad = [], []
            for index, value in enumerate(values):
                try:
                    converted = None if value is None else reader.read(value)
                except Unsure:
                    converted = None
                if value is not None and converted is None:
                    bad.append(index)
                read.append(converted)
            return pa.array(read, reader.arrow), bad
        bad = [i for i, v in enumerate(values) if v is not None and type(v) not in kinds]
        if type_ in ("DOUBLE", "FLOAT"):
            bad += [i for i, v in enumerate(values) if type(v) is int and abs(v) >= 2 ** 53]
        odd_lines = set(bad)
        clean = [None if i in odd_lines else v for i, v in enumerate(values)] if bad else values
        if type_ in ("STRING", "BOOLEAN"):
            return pa.array(clean, reader.arrow), bad
        array, odd = _arrow_column(pa.array(clean, _read_as(reader)), reader)
        return array, bad + np.flatnonzero(odd).tolist()
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError, OverflowError):
        return None  # e.g. an integer beyond 64 bits: which line, pyarrow does not say


def _line(raw: str, readers: list[_Reader], every_default: bool) -> tuple[list, str | None]:
    """One line's values, or the reason it does not fit (Spark's words, in its order)."""
    if raw.count("{") + raw.count("[") > MAX_NESTING:
        raise Unsure("nested deeper than Jackson reads")
    try:
        parsed = orjson.loads(raw)
    except orjson.JSONDecodeError:
        try:
            raw.encode("utf-8")
        except UnicodeEncodeError:
            raise Unsure("a lone surrogate: Spark's line is not UTF-8") from None
        parsed = _exact(raw)
        if parsed is _NOT_JSON:
            return [], "line is not valid JSON"
    if type(parsed) is not dict:
        if isinstance(parsed, str | int | float | list | bool) or parsed is None:
            try:
                orjson.loads(raw)
            except orjson.JSONDecodeError:
                raise Unsure("a line that is not one JSON value") from None
            return [], "line is JSON but not an object"
        raise Unsure("an unexpected JSON value")
    if _duplicated_keys(raw, parsed):
        raise Unsure("a key given twice")
    found = [r.get(parsed) for r in readers]
    exact = None
    for i, (value, reader) in enumerate(zip(found, readers, strict=True)):
        # A fraction read by an integer or string column, a number by a string column: Spark reads its text.
        if reader.text_of and type(value) in reader.text_of:
            exact = exact if exact is not None else _exact(raw)
            found[i] = _follow(exact, reader.path)
    if not every_default and found.count(None) == len(found):
        return [], "object has none of the datasource's columns"
    values, reasons = [], []
    for value, reader in zip(found, readers, strict=True):
        if value is None:
            values.append(reader.default)
            continue
        if not reader.complex and type(value) in (dict, list):
            raise Unsure("an object or array for a scalar column")  # shown as Jackson writes it
        try:
            converted = reader.read(value)
        except _NeedsText:
            # Spark reads the number's text where it is long or has an exponent, else Java's text of its double.
            exact = exact if exact is not None else _exact(raw)
            text = _follow(exact, reader.path)
            # An integer past orjson's 64 bits (read as a float there): `get_json_object` keeps its digits.
            if not (isinstance(text, _Number) and _SPARK_READS_TEXT.search(text) or type(text) is int):
                raise
            value, converted = text, reader.read(text)
        if converted is None:
            if isinstance(value, dict | list):
                raise Unsure("a complex value that does not fit")  # shown as Jackson writes it
            if isinstance(value, float):  # a float column's misfit: Spark shows the text of one with an exponent
                exact = exact if exact is not None else _exact(raw)
                value = _follow(exact, reader.path)
                if not (isinstance(value, _Number) and _SPARK_READS_TEXT.search(value)):
                    raise Unsure("a float misfit shown as Java writes its double")
            reasons.append(f"column `{reader.column.name}`: cannot read \"{_shown(value)}\" as {reader.shown_type}")
        values.append(converted)
    return values, ("; ".join(reasons) if reasons else None)
