"""A Delta generated column's value computed over Arrow rows, as Spark computes it: how `deltaappend` writes the
generated partition column of an `ENGINE_PARTITION_KEY` expression (`to_date(ts)`, `toYYYYMM(ts)`...) itself.

Delta's writers must store exactly `<generation expression>` in a generated column (PROTOCOL.md, "Generated
Columns"); readers trust it, and Spark derives partition filters from it. So only expressions whose meaning in Spark
is certain are computed here: a column, integer literals within INT, `+ - *` over integers, a timestamp or date's
`CAST(... AS DATE)`/`to_date`, `YEAR`, `MONTH`, `DAYOFMONTH`, `HOUR` and `DATE_TRUNC` to a year, quarter, month,
week, day or hour, in a UTC session. Anything else answers None, and the append is left to Spark's writer."""

from __future__ import annotations

from functools import lru_cache
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pyarrow as pa
    from sqlglot import exp

UTC_ZONES = ("UTC", "Etc/UTC", "GMT", "Z", "+00:00")
# DATE_TRUNC units (Spark's spellings) → pyarrow's floor_temporal unit; a week starts on Monday in Spark.
_TRUNC = {"YEAR": "year", "YYYY": "year", "YY": "year", "QUARTER": "quarter", "MONTH": "month", "MM": "month",
          "MON": "month", "WEEK": "week", "DAY": "day", "DD": "day", "HOUR": "hour"}
_INT32 = (-(2 ** 31), 2 ** 31 - 1)


class _Unsure(Exception):
    """An expression (or a value) this module does not compute exactly as Spark does."""


@lru_cache(maxsize=256)
def _parsed(expression: str) -> exp.Expression | None:
    import sqlglot
    from sqlglot.errors import ParseError, TokenError

    try:
        return sqlglot.parse_one(expression, read="spark")
    except (ParseError, TokenError):
        return None


def evaluate(expression: str, rows: pa.Table, time_zone: str = "UTC") -> pa.Array | None:
    """`expression` (Spark SQL over `rows`' columns) for every row, of the type Spark gives it (date32, int32 or a
    UTC timestamp); None when this module cannot compute it exactly (see the module's docstring)."""
    import pyarrow as pa

    tree = _parsed(expression)
    if tree is None:
        return None
    try:
        return _value(tree, rows, time_zone in UTC_ZONES)
    except (_Unsure, pa.ArrowInvalid):  # e.g. a time pyarrow cannot floor: Spark's writer computes it
        return None


def _value(node: exp.Expression, rows: pa.Table, utc: bool) -> pa.Array:
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.types as t
    from sqlglot import exp

    if isinstance(node, exp.Paren):
        return _value(node.this, rows, utc)
    if isinstance(node, exp.Column) and not node.table:
        if node.name not in rows.column_names:
            raise _Unsure(node.name)
        column = rows.column(node.name)
        return column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    if isinstance(node, exp.Literal) and not node.is_string and node.this.lstrip("-").isdigit():
        if not _INT32[0] <= int(node.this) <= _INT32[1]:
            raise _Unsure("a BIGINT literal (Spark's arithmetic is then BIGINT)")
        return pa.scalar(int(node.this), pa.int32())
    if isinstance(node, exp.Cast | exp.TryCast | exp.TsOrDsToDate) and \
            (isinstance(node, exp.TsOrDsToDate) and not node.args.get("format")
             or isinstance(node, exp.Cast | exp.TryCast) and node.to.is_type("date")):
        return _date(_value(node.this, rows, utc), utc)
    if isinstance(node, exp.Year | exp.Month | exp.DayOfMonth | exp.Day):
        part = {exp.Year: pc.year, exp.Month: pc.month, exp.DayOfMonth: pc.day, exp.Day: pc.day}[type(node)]
        return part(_date(_value(node.this, rows, utc), utc)).cast(pa.int32())
    if isinstance(node, exp.Hour):
        value = _value(node.this, rows, utc)
        if not (t.is_timestamp(value.type) and (utc or value.type.tz is None)):
            raise _Unsure("HOUR of a non-timestamp, or in a session time zone other than UTC")
        return pc.hour(_in_utc(value)).cast(pa.int32())
    if isinstance(node, exp.TimestampTrunc | exp.DateTrunc):
        unit = _TRUNC.get(node.text("unit").upper())
        value = _value(node.this, rows, utc)
        if unit is None or not utc:
            raise _Unsure(f"DATE_TRUNC to {node.text('unit')}")
        if t.is_date32(value.type):  # Spark truncates the date's midnight
            value = value.cast(pa.timestamp("us", "UTC"))
        if not t.is_timestamp(value.type):
            raise _Unsure("DATE_TRUNC of a non-timestamp")
        return pc.floor_temporal(value.cast(pa.timestamp("us", "UTC")), unit=unit, week_starts_monday=True)
    if isinstance(node, exp.Add | exp.Sub | exp.Mul):
        left, right = _value(node.this, rows, utc), _value(node.expression, rows, utc)
        if not (t.is_integer(left.type) and t.is_integer(right.type)):
            raise _Unsure("arithmetic over other than integers")
        compute = {exp.Add: pc.add, exp.Sub: pc.subtract, exp.Mul: pc.multiply}[type(node)]
        result = compute(left.cast(pa.int64()), right.cast(pa.int64()))
        low, high = pc.min_max(result).as_py().values()
        if low is not None and not (_INT32[0] <= low and high <= _INT32[1]):
            raise _Unsure("an INT overflow (Spark fails the write)")
        return result.cast(pa.int32())
    raise _Unsure(node.sql("spark"))


def _date(value: pa.Array, utc: bool) -> pa.Array:
    """A date or timestamp as Spark's `CAST(x AS DATE)`: the day in the session's time zone (UTC here)."""
    import pyarrow as pa
    import pyarrow.types as t

    if t.is_date32(value.type):
        return value
    if t.is_timestamp(value.type) and (utc or value.type.tz is None):  # TIMESTAMP_NTZ: its wall clock's day
        return _in_utc(value).cast(pa.date32())
    raise _Unsure("a date of other than a date or a timestamp in a UTC session")


def _in_utc(value: pa.Array) -> pa.Array:
    """A TIMESTAMP column's instants in UTC (pyarrow takes dates and hours of a zoned timestamp in its zone, which
    an Arrow table made elsewhere may carry); a TIMESTAMP_NTZ's wall clock as it is."""
    import pyarrow as pa

    return value if value.type.tz is None else value.cast(pa.timestamp(value.type.unit, "UTC"))
