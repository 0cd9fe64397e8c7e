"""engine.jsonlines without a JVM: the lines it types itself (and what it leaves to Spark's conform) for the shapes
a review found typed otherwise than Spark types them. tests/spark/test_ingest_oneway.py compares both ways."""

from __future__ import annotations

from decimal import Decimal

from pipeframe.engine import jsonlines
from tests.conftest import datasource


def typed(lines: list[str], *columns: str) -> tuple[list[dict], list[str]] | None:
    """The rows and the misfits' reasons `type_lines` gives, or None (the batch goes Spark's way)."""
    found = jsonlines.type_lines(lines, datasource(list(columns)), "UTC")
    return None if found is None else (found.rows.to_pylist(), [reason for _, _, reason in found.misfits])


def test_a_key_given_twice_with_space_before_its_colon_goes_sparks_way():
    """Spark's reader takes the first of two copies of a key, the parsers here the last: a line that gives one twice
    is not typed here, whatever whitespace JSON allows before the colon."""
    columns = ("`a` Int32", "`b` Int32")
    assert typed(['{"a": 1, "b": 3}'], *columns) == ([{"a": 1, "b": 3}], [])
    for spacing in (" ", "\t", "\n", " \r\n "):
        twice = f'{{"a"{spacing}: 1, "a":2, "b":3}}'
        assert typed([twice, '{"a": 1, "b": 3}'], *columns) is None, repr(twice)  # typed column by column
        misfit = f'{{"a"{spacing}: 1, "a":2, "b":"x"}}'
        assert typed([misfit], *columns) is None, repr(misfit)  # typed line by line
    assert typed(['{"a": 1, "b": 3, "s": "\\":"}'], *columns) == ([{"a": 1, "b": 3}], []), \
        "a key token inside a string only sends the line to the exact check"


def test_integers_in_strings_of_any_length_are_read_as_sparks_cast_reads_them():
    rows, reasons = typed(['{"i": "1234567890123456789"}', '{"i": "0000000000000000000042"}',
                           '{"i": " -9223372036854775808 "}', '{"i": "9223372036854775808"}',
                           '{"u": "0000000000000000000255"}', '{"u": "00000000000000000000256"}'],
                          "`i` Int64", "`u` UInt8")
    assert [(r["i"], r["u"]) for r in rows] == [(1234567890123456789, 0), (42, 0), (-(2 ** 63), 0), (0, 255)]
    assert reasons == ['column `i`: cannot read "9223372036854775808" as Int64',
                       'column `u`: cannot read "00000000000000000000256" as UInt8']
    longest = "1" + "0" * jsonlines.LONGEST_INT_TEXT
    assert typed([f'{{"i": "{longest}"}}'], "`i` Int64") is None, "a longer integer text goes Spark's way"


def test_nullable_and_low_cardinality_unsigned_integers_keep_their_range():
    rows, reasons = typed(['{"n": -5}', '{"n": 300}', '{"n": null, "l": 70000}', '{"n": 255, "l": 65535}', '{}'],
                          "`n` Nullable(UInt8)", "`l` LowCardinality(Nullable(UInt16))")
    assert reasons == ['column `n`: cannot read "-5" as Nullable(UInt8)',
                       'column `n`: cannot read "300" as Nullable(UInt8)',
                       'column `l`: cannot read "70000" as LowCardinality(Nullable(UInt16))',
                       "object has none of the datasource's columns"]
    assert rows == [{"n": 255, "l": 65535}], "Nullable keeps NULL for what is missing"


def test_a_deep_line_read_exactly_does_not_fail_the_batch():
    """A line nested hundreds of levels deep whose number must be read as written (a fraction for an integer):
    quarantined with Spark's reason, or left to Spark, never an error that fails the whole group commit."""
    for depth in (500, 990):
        deep = '{"i": 1.5, "x": ' + "[" * depth + "]" * depth + "}"
        found = typed(['{"i": 2}', deep], "`i` Int32")
        assert found is None or found == ([{"i": 2}], ['column `i`: cannot read "1.5" as Int32']), depth
    assert typed(['{"i": 1.5, "x": ' + "[" * 500 + "]" * 500 + "}"], "`i` Int32") == \
        ([], ['column `i`: cannot read "1.5" as Int32'])


def test_an_integer_sent_for_a_string_is_its_text_as_written():
    """Spark keeps the text of a number sent for a String column: a tracker's numeric ids land without Spark."""
    rows, reasons = typed(['{"s": 12}', '{"s": -0}', '{"s": 123456789012345678901234567890}', '{"s": "x"}',
                           '{"s": true}'], "`s` String")
    assert [r["s"] for r in rows] == ["12", "-0", "123456789012345678901234567890", "x", "true"] and not reasons


def test_integers_wider_than_64_bits_are_read_exactly_within_what_their_decimal_holds():
    """Int128/UInt128/Int256/UInt256 are stored as DECIMAL(38,0): every digit of a value it holds lands, a value it
    does not hold (or a negative one for an unsigned type) is quarantined with the value as sent."""
    big = 10 ** 38 - 1
    rows, reasons = typed([f'{{"i": {big}, "u": 123456789012345678901234567890}}', f'{{"i": -{big}, "u": 0}}',
                           f'{{"i": {big + 1}}}', '{"u": -1}', '{"w": -1}'], "`i` Int128", "`u` UInt128",
                          "`w` UInt256")
    assert [(r["i"], r["u"], r["w"]) for r in rows] == [
        (Decimal(big), Decimal(123456789012345678901234567890), Decimal(0)), (Decimal(-big), Decimal(0), Decimal(0))]
    assert reasons == [f'column `i`: cannot read "{big + 1}" as Int128', 'column `u`: cannot read "-1" as UInt128',
                       'column `w`: cannot read "-1" as UInt256']
