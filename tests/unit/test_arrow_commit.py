"""What the pyarrow commit writes, without a JVM: generated partition values (engine/generated.py) for tables made
elsewhere and expressions it must leave to Spark, and the statistics' JSON (engine/deltaappend.py).
tests/spark/test_deltaappend.py reads such commits back with Spark."""

from __future__ import annotations

import json
from datetime import UTC, date, datetime
from decimal import Decimal

import pyarrow as pa

from pipeframe.engine import deltaappend, generated


def test_dates_and_hours_of_a_zoned_timestamp_are_taken_in_utc():
    """An Arrow timestamp may carry another zone than UTC (a table made elsewhere): Spark's TIMESTAMP is an instant,
    its date and hour in a UTC session are UTC's (20:00 UTC is 05:00 the next day in Tokyo)."""
    instants = [datetime(2024, 5, 16, 20, 30, tzinfo=UTC), datetime(2024, 12, 31, 23, 0, tzinfo=UTC)]
    rows = pa.table({"ts": pa.array(instants, pa.timestamp("us", "UTC")).cast(pa.timestamp("us", "Asia/Tokyo"))})
    assert generated.evaluate("to_date(ts)", rows).to_pylist() == [date(2024, 5, 16), date(2024, 12, 31)]
    assert generated.evaluate("CAST(ts AS DATE)", rows).to_pylist() == [date(2024, 5, 16), date(2024, 12, 31)]
    assert generated.evaluate("HOUR(ts)", rows).to_pylist() == [20, 23]
    assert generated.evaluate("(YEAR(ts) * 100 + MONTH(ts))", rows).to_pylist() == [202405, 202412]
    assert generated.evaluate("DATE_TRUNC('DAY', ts)", rows).to_pylist() == \
        [datetime(2024, 5, 16, tzinfo=UTC), datetime(2024, 12, 31, tzinfo=UTC)]


def test_an_expression_with_a_bigint_literal_is_left_to_spark():
    """A literal beyond INT makes Spark's arithmetic BIGINT: not computed here (None: Spark's writer appends), and no
    error escapes to fail the append."""
    rows = pa.table({"ts": pa.array([datetime(2024, 5, 16, tzinfo=UTC)], pa.timestamp("us", "UTC"))})
    days = "(YEAR(ts) * 10000 + MONTH(ts) * 100 + DAYOFMONTH(ts))"
    assert generated.evaluate(days, rows).to_pylist() == [20240516]
    for expression in (f"{days} * 10000000000", "YEAR(ts) + 2147483648", "YEAR(ts) - -2147483649"):
        assert generated.evaluate(expression, rows) is None, expression
    assert generated.evaluate("YEAR(ts) + 2147483647", rows) is None, "an INT overflow is Spark's to fail"


def test_statistics_json_keeps_every_value_as_it_is():
    """Decimals with every digit, and strings as themselves, whatever they hold."""
    stats = {"numRecords": 2, "minValues": {"s": "\x000\x00", "p": Decimal("123456789012345678.123456789"),
                                           "q": Decimal("100.00"), "t": '"\\u0000'},
             "maxValues": {"s": "\x001\x00", "p": Decimal("-0.000000001"), "q": Decimal("1E+2"), "t": "\U0010ffff"},
             "nullCount": {"s": 0, "p": 1}, "tightBounds": True}
    text = deltaappend._stats_json(stats)
    assert json.loads(text, parse_float=Decimal) == stats
    parsed = json.loads(text, parse_float=str, parse_int=str)
    assert (parsed["minValues"]["p"], parsed["minValues"]["q"], parsed["maxValues"]["q"]) == \
        ("123456789012345678.123456789", "100.00", "100")
    assert (parsed["minValues"]["s"], parsed["maxValues"]["s"]) == ("\x000\x00", "\x001\x00")
