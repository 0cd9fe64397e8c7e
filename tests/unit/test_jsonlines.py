"""engine.jsonlines without a JVM: the lines it types itself (and what it leaves to Spark's conform) for the shapes
a review found typed otherwise than Spark types them. tests/spark/test_ingest_oneway.py compares both ways."""

from __future__ import annotations

import json
import re
from collections import Counter
from datetime import UTC, datetime
from decimal import Decimal

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

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


# ------------------------------------------------------------------------------------------------ keys only
_FLAT_COLUMNS = ["`s` String", "`n` Nullable(String)", "`b` Bool", "`i` Int64", "`u` UInt16", "`t` Int8 DEFAULT 7",
                 "`ts` DateTime", "`d` Date",
                 "`f` Float64", "`k` String `json:$.key`"]
# Nested keys, as real datasources declare them: two columns under one object, a key with a space, three levels.
_NESTED_COLUMNS = ["`path` String `json:$.req.path`", "`code` Nullable(UInt8) `json:$.req.code`",
                   "`country` LowCardinality(Nullable(String)) `json:$['geo info'].country`",
                   "`deep` Int32 `json:$.a.b.c` DEFAULT 3", "`when` DateTime `json:$.a.at`"]
_FLAT_VALUES = {
    "s": st.one_of(st.text(max_size=6), st.integers(-3, 3), st.none()),
    "n": st.one_of(st.text(alphabet="ab\"\\é\u2028{}:", max_size=4), st.none()),
    "b": st.one_of(st.booleans(), st.sampled_from(["true", 1, None])),
    "i": st.one_of(st.integers(-(2 ** 64), 2 ** 64), st.sampled_from([1.0, 1.5, "12", None])),
    "u": st.one_of(st.integers(-2, 70000), st.sampled_from([None, "5"])),
    "t": st.one_of(st.integers(-200, 200), st.none()),
    "ts": st.one_of(st.sampled_from(["2024-05-01 10:00:00", "2024-05-01T10:00:00.123Z", "2024-02-30 00:00:00",
                                     "yesterday", "2024-05-01", 1714557600, None])),
    "d": st.sampled_from(["2024-05-01", "2024-13-01", "2024-05-01 10:00:00", None]),
    "f": st.one_of(st.floats(allow_nan=False, allow_infinity=False), st.integers(-(2 ** 60), 2 ** 60),
                   st.sampled_from([-0.0, 1e-7, "2.5", True, None])),
    "key": st.one_of(st.text(max_size=3), st.none()),
}


def _object(fields: dict[str, st.SearchStrategy], odd: bool = True) -> st.SearchStrategy:
    """An object of some of `fields` (at least one unless `odd`), or at times (`odd`) what is no such object: null,
    a string, an array, an object with a key that is no column."""
    some = st.lists(st.sampled_from(sorted(fields)), unique=True, min_size=0 if odd else 1).flatmap(
        lambda keys: st.fixed_dictionaries({key: fields[key] for key in keys}))
    return st.one_of(*[some] * 8, st.none(), st.sampled_from(["x", [1], {"other": 1}])) if odd else some


def _nested_values(odd: bool) -> dict[str, st.SearchStrategy]:
    """The nested columns' objects, their values of their kind or another (`odd`), or only values that fit."""
    times = ["2024-05-01 10:00:00", "2024-05-01T10:00:00Z", None] + (["2024-02-30 00:00:00", "soon"] if odd else [])
    return {
        "req": _object({"path": st.one_of(st.text(max_size=4), *[st.integers(-3, 3)] * odd, st.none()),
                        "code": st.one_of(st.integers(-2, 300) if odd else st.integers(0, 255),
                                          st.sampled_from([None, "7", 1.5] if odd else [None]))}, odd),
        "geo info": _object({"country": st.one_of(st.sampled_from(["ES", "", "é"]), st.none(),
                                                  *[st.booleans()] * odd)}, odd),
        "a": _object({"b": _object({"c": st.one_of(st.integers(-(2 ** 33), 2 ** 33) if odd else
                                                   st.integers(-(2 ** 31), 2 ** 31 - 1), st.none())}, odd),
                      "at": st.sampled_from(times)}, odd),
    }


@st.composite
def _flat_line(draw: st.DrawFn, values: dict[str, st.SearchStrategy] = _FLAT_VALUES, odd: bool = True) -> str:
    """A line: some of the columns' keys (objects of nested keys too; all of them unless `odd`) with values of their
    kind or another (out of range, misfits), at times (`odd`) a key that is no column, a key given twice, text that
    is not JSON or not an object, two objects, a NaN or Infinity literal (no JSON: pyarrow's reader takes them)."""
    keys = draw(st.lists(st.sampled_from(sorted(values)), unique=True, min_size=0 if odd else len(values)))
    event = {key: draw(values[key]) for key in keys}
    line = json.dumps(event, ensure_ascii=draw(st.booleans()))
    oddity = draw(st.sampled_from(["", "", "", "", "", "", "extra", "twice", "not json", "array", "bom", "empty",
                                   "two values", "nan", "null"])) if odd else ""
    if oddity in ("extra", "nan"):
        other = '"other": 1' if oddity == "extra" else draw(st.sampled_from(['"z": NaN', '"z": [-Infinity]']))
        line = line[:-1] + (f", {other}}}" if event else f"{other}}}")
    elif oddity == "twice" and event:
        line = line[:-1] + f', "{keys[0]}": null}}'
    elif oddity == "not json":
        line = line[:-1]
    elif oddity == "array":
        line = f"[{line}]"
    elif oddity == "null":  # a value that is no object (at a block's start, pyarrow 26's reader crashes on it)
        line = draw(st.sampled_from(["null", " null", "5", '"x"', "true"]))
    elif oddity == "bom":
        line = "\ufeff" + line
    elif oddity == "empty":
        line = "{}"
    elif oddity == "two values":
        line = f"{line} {line}"
    return line


def _same_as_line_by_line(lines: list[str], columns: list[str], counts: Counter) -> None:
    """`type_lines` of batches pyarrow's reader may read equals the same lines typed without it (`_fast`/`_line`):
    the same table, the same kept lines, the same misfits and reasons, or both None. `counts` adds up the batches
    and lines typed, the rows pyarrow's reader typed, and the batches with misfits where it typed rows."""
    source = datasource(columns)
    readers = jsonlines._readers(source, True, datetime.now(UTC))
    assert jsonlines._arrow_readable(readers)
    found = jsonlines.type_lines(lines, source, "UTC")
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(jsonlines, "_arrow_readable", lambda readers: False)
        expected = jsonlines.type_lines(lines, source, "UTC")
    if expected is None:
        assert found is None
        counts["batches left to Spark"] += 1
        return
    assert found is not None
    assert found.rows.equals(expected.rows), (found.rows.to_pylist(), expected.rows.to_pylist())
    assert found.rows.schema == expected.rows.schema
    assert (found.kept, found.misfits) == (expected.kept, expected.misfits)
    read = jsonlines._arrow_read([line for line in lines if line.strip()], readers,
                                 all(r.column.default is not None for r in readers))
    by_arrow = len(read[0][1]) if read is not None and read[0] is not None else 0
    counts.update({"batches typed": 1, "lines typed": len(found.kept) + len(found.misfits),
                   "rows": len(found.kept), "rows typed by pyarrow's reader": by_arrow,
                   "batches with misfits and rows": bool(found.misfits and found.kept),
                   "batches with misfits, rows by pyarrow's reader": bool(found.misfits) and by_arrow > 0})


def _took_pyarrow(counts: Counter, name: str) -> None:
    """The reader took a real share: a third of the rows typed, and rows in a quarter of the batches with misfits
    and rows (other rows are typed by `_line` only: a number in a string for an integer...)."""
    print(name, dict(counts))
    assert counts["rows typed by pyarrow's reader"] >= counts["rows"] / 3
    assert counts["batches with misfits, rows by pyarrow's reader"] >= counts["batches with misfits and rows"] / 4


def test_flat_batches_read_by_pyarrow_are_typed_as_line_by_line():
    """Flat batches (every column a top-level key of a type pyarrow's JSON reader reads) typed by the one path
    `type_lines` picks for them are typed as line by line."""
    counts: Counter = Counter()

    @settings(max_examples=300, deadline=None, derandomize=True, database=None,
              suppress_health_check=[HealthCheck.too_slow])
    @given(st.lists(_flat_line(), min_size=1, max_size=8), st.integers(0, len(_FLAT_COLUMNS) - 1))
    def check(lines: list[str], first: int) -> None:
        _same_as_line_by_line(lines, _FLAT_COLUMNS[first:] + _FLAT_COLUMNS[:first], counts)
    check()
    _took_pyarrow(counts, "flat")


def test_nested_batches_read_by_pyarrow_are_typed_as_line_by_line():
    """Batches of nested keys (`$.req.path`, `$['geo info'].country`, `$.a.b.c`, beside some flat ones) read by
    pyarrow's reader as structs are typed as line by line: missing or null objects on the way, objects of other
    kinds, keys that are no column, misfits and DEFAULTs at any depth; half the batches (not `odd`) nested values
    that fit, so that many are read by pyarrow."""
    counts: Counter = Counter()

    @settings(max_examples=300, deadline=None, derandomize=True, database=None,
              suppress_health_check=[HealthCheck.too_slow])
    @given(st.lists(st.sampled_from(_FLAT_COLUMNS[:-1]), unique=True, max_size=4), st.booleans(), st.data())
    def check(flat: list[str], odd: bool, data: st.DataObject) -> None:
        flat = flat if odd else []  # the flat columns' values misfit often
        values = {**{column.split("`")[1]: _FLAT_VALUES[column.split("`")[1]] for column in flat},
                  **_nested_values(odd)}
        lines = data.draw(st.lists(_flat_line(values, odd), min_size=1, max_size=8))
        _same_as_line_by_line(lines, _NESTED_COLUMNS + flat, counts)
    check()
    _took_pyarrow(counts, "nested")


def test_a_flat_batch_is_read_by_pyarrow_and_its_misfits_alone_by_jsonlines():
    """The decision: a flat batch's lines are typed by pyarrow's reader; an out-of-range value, a line that is not
    JSON or not an object, a fraction for an integer send only their own lines to the line-by-line typing, which
    quarantines them with their reasons."""
    source = datasource(["`s` String", "`u` UInt8", "`ts` DateTime"])
    readers = jsonlines._readers(source, True, datetime.now(UTC))
    lines = ['{"s": "a", "u": 1, "ts": "2024-05-01 10:00:00"}', '{"s": "b", "u": 2, "ts": "2024-05-01T11:00:00Z"}']
    (read, kept), slow = jsonlines._arrow_read(lines, readers, False)
    assert (kept, slow) == ([0, 1], [])
    assert read.equals(jsonlines.type_lines(lines, source, "UTC").rows)
    assert [row["u"] for row in read.to_pylist()] == [1, 2]
    misfits = ['{"s": "c", "u": 256, "ts": "2024-05-01 12:00:00"}', '{not json', '[1]', '{"u": 1.5}',
               '{"s": "d", "ts": "2024-02-30 00:00:00"}', '{"s": NaN}', '{"s": "e", "z": Infinity}']
    batch = [lines[0], *misfits, lines[1]]
    (read, kept), slow = jsonlines._arrow_read(batch, readers, False)
    assert (kept, slow) == ([0, len(batch) - 1], list(range(1, len(batch) - 1)))
    typed_ = jsonlines.type_lines(batch[:-3] + batch[-1:], source, "UTC")  # NaN, Infinity: Spark's way (None)
    assert jsonlines.type_lines(batch, source, "UTC") is None
    assert typed_.kept == [0, 6]
    assert [reason for _, _, reason in typed_.misfits] == [
        'column `u`: cannot read "256" as UInt8', "line is not valid JSON", "line is JSON but not an object",
        'column `u`: cannot read "1.5" as UInt8', 'column `ts`: cannot read "2024-02-30 00:00:00" as DateTime']


def test_a_nested_batch_is_read_by_pyarrow_and_its_misfits_alone_by_jsonlines():
    """Nested keys are read by pyarrow's reader as structs: a missing or null object on the way is a missing value
    (its DEFAULT); a misfit at depth sends its own line to the line-by-line typing, which quarantines it."""
    source = datasource(["`path` String `json:$.req.path`", "`code` UInt8 `json:$.req.code`",
                         "`deep` Int32 `json:$.a.b.c` DEFAULT 3", "`country` String `json:$['geo info'].country`"])
    readers = jsonlines._readers(source, True, datetime.now(UTC))
    lines = ['{"req": {"path": "/a", "code": 1}, "a": {"b": {"c": 9}}, "geo info": {"country": "ES"}}',
             '{"req": {"path": "/b"}, "a": null, "geo info": {}}', '{"req": {"code": 2}, "a": {"b": {}}}']
    (read, kept), slow = jsonlines._arrow_read(lines, readers, False)
    assert (kept, slow) == ([0, 1, 2], [])
    assert read.to_pylist() == [
        {"path": "/a", "code": 1, "deep": 9, "country": "ES"}, {"path": "/b", "code": 0, "deep": 3, "country": ""},
        {"path": "", "code": 2, "deep": 3, "country": ""}]
    assert jsonlines.type_lines(lines, source, "UTC").rows.equals(read)
    misfit = [lines[0], '{"req": {"path": "/c", "code": 256}}', *lines[1:]]
    (read, kept), slow = jsonlines._arrow_read(misfit, readers, False)
    assert (kept, slow) == ([0, 2, 3], [1])
    typed_ = jsonlines.type_lines(misfit, source, "UTC")
    assert typed_.kept == [0, 2, 3]
    assert [reason for _, _, reason in typed_.misfits] == ['column `code`: cannot read "256" as UInt8']
    holding = datasource(["`req` String `json:$.req`", "`path` String `json:$.req.path`"])
    assert jsonlines._explicit_schema(jsonlines._readers(holding, True, datetime.now(UTC))) is None, \
        "a key that holds another column's is not read by pyarrow"


# A real tracker's datasource (bench/ingest_bench.py `weblogs`): Float32, Decimal, an array, a map, wrappers, UUID.
_WEBLOGS = ["`ts` DateTime64(3, 'UTC') `json:$.ts`", "`host` LowCardinality(String) `json:$.host`",
            "`path` String `json:$.req.path`", "`status` UInt16 `json:$.status`",
            "`latency_ms` Float32 `json:$.latency_ms`", "`bytes` UInt32 `json:$.bytes`",
            "`tags` Array(String) `json:$.tags[:]`", "`attrs` Map(String, String) `json:$.attrs`",
            "`user_id` Nullable(String) `json:$.user.id`", "`country` LowCardinality(Nullable(String)) `json:$['geo info'].country`",
            "`price` Decimal(10, 2) `json:$.price`", "`retries` UInt8 `json:$.retries` DEFAULT 0",
            "`session_id` UUID `json:$.session`"]


def test_lines_that_are_no_object_never_reach_pyarrows_reader():
    """pyarrow 26's JSON reader crashes the process (a segfault) on a block whose first value is `null`: a line that
    is no object is left to `_line` before any block is read (at the batch's start, and after a refused line)."""
    lines = ["null", '{"a": 1}', " null", "{not json", "null", '{"a": 2}', "7", '\t{"a": 3}']
    rows, reasons = typed(lines, "`a` Int32 `json:$.a`")
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(jsonlines, "_arrow_readable", lambda readers: False)
        assert typed(lines, "`a` Int32 `json:$.a`") == (rows, reasons)
    assert rows == [{"a": 1}, {"a": 2}, {"a": 3}] and len(reasons) == 5


def test_a_weblogs_batch_is_read_by_pyarrow_but_for_its_misfits():
    """Float32, Decimal(10, 2), Array(String) from `[:]`, Map(String, String), Nullable and LowCardinality columns,
    DateTime64(3, 'UTC'), UUID and UInt widths are read by pyarrow's reader: every line that fits is typed by it, as
    line by line; a negative UInt16, a time that is none, a line that is not JSON, a price off its grid (rounded
    from its text) go line by line."""
    source = datasource(_WEBLOGS)
    readers = jsonlines._readers(source, True, datetime.now(UTC))
    assert jsonlines._arrow_readable(readers)
    event = {"ts": "2024-05-01 10:00:00.123", "host": "a.example.com", "req": {"path": "/p/1", "method": "GET"},
             "status": 200, "latency_ms": 12.25, "bytes": 512, "tags": ["a", "mobile"],
             "attrs": {"ua": "Mozilla/5.0", "ref": "r1"}, "user": {"id": "u1"}, "geo info": {"country": "ES"},
             "price": 19.99, "session": "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0"}
    lines = [json.dumps(event), json.dumps({**event, "retries": 2, "user": {}, "price": 5, "tags": []}),
             json.dumps({**event, "status": -5}), json.dumps({**event, "ts": "yesterday"}), "{not json",
             json.dumps({**event, "price": 1.234}), json.dumps({**event, "latency_ms": 0.1, "attrs": {}})]
    (read, kept), slow = jsonlines._arrow_read(lines, readers, False)
    assert (kept, slow) == ([0, 1, 6], [2, 3, 4, 5])
    found = jsonlines.type_lines(lines, source, "UTC")
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(jsonlines, "_arrow_readable", lambda readers: False)
        expected = jsonlines.type_lines(lines, source, "UTC")
    assert found.rows.equals(expected.rows) and (found.kept, found.misfits) == (expected.kept, expected.misfits)
    assert found.kept == [0, 1, 5, 6] and found.rows.take([0, 1, 3]).equals(read)
    assert found.rows.column("price").to_pylist()[2] == Decimal("1.23"), "rounded from its text, line by line"
    assert [reason for _, _, reason in found.misfits] == [
        'column `status`: cannot read "-5" as UInt16', 'column `ts`: cannot read "yesterday" as DateTime64(3, UTC)',
        "line is not valid JSON"]
    first, second = read.to_pylist()[:2]
    assert (first["price"], second["price"], first["latency_ms"], second["tags"], second["retries"]) == \
        (Decimal("19.99"), Decimal("5.00"), 12.25, [], 2)
    assert first["attrs"] == [("ua", "Mozilla/5.0"), ("ref", "r1")] and second["user_id"] is None


# ------------------------------------------------------------------------------------------------ every type
_RAW = "@@"  # a value drawn as "@@<text>@@" lands in the line as the JSON number <text>, spelled as drawn
_NUMBERS = st.sampled_from(["1.005", "0.125", "2.675", "1e2", "1E-3", "-0", "-0.0", "0.1000000000000000055511151231",
                            "123456789012345678.25", "99999999.99", "100000000", "1.5e300", "4.9e-324", "1e400",
                            "9007199254740993", "18446744073709551616", "3.4028235677973366e38", "1.401298464e-45"])
_INTEGERS = st.one_of(st.integers(-(2 ** 65), 2 ** 65), st.integers(-300, 70000), st.sampled_from([True, "12", 1.5]))


def _floats(single: bool) -> st.SearchStrategy:
    return st.one_of(st.floats(width=32 if single else 64), st.integers(-(2 ** 60), 2 ** 60),
                     st.floats(allow_nan=False, allow_infinity=False), st.sampled_from(["2.5", True, [1.5]]))


def _decimals(precision: int, scale: int) -> st.SearchStrategy:
    grid = st.integers(-(10 ** min(precision, 17)), 10 ** min(precision, 17)).map(
        lambda units: units / 10 ** scale if scale else units)
    return st.one_of(grid, st.decimals(places=scale + 1, allow_nan=False, allow_infinity=False).map(float),
                     st.sampled_from(["12.5", " 3 ", "x", True]))


_TIMES = st.sampled_from(["2024-05-01 10:00:00", "2024-05-01 10:00:00.123", "2024-05-01T10:00:00.123456Z",
                          "2024-05-01T10:00:00.1234567", "2024-05-01 10:00:00+02:00", "2024-02-30 00:00:00",
                          "2024-05-01 24:00:00", "2024-05-01", "yesterday", 1714557600])
_ELEMENTS = {"String": st.one_of(st.text(max_size=3), st.none(), st.integers(0, 2)),
             "UInt8": st.one_of(st.integers(-2, 300), st.none()), "Int64": st.integers(-(2 ** 64), 2 ** 64),
             "Float64": st.one_of(st.floats(allow_nan=False, allow_infinity=False), st.integers(-3, 3)),
             "Bool": st.one_of(st.booleans(), st.sampled_from([1, "true"]))}


@st.composite
def _typed_column(draw: st.DrawFn, at: int) -> tuple[str, str, st.SearchStrategy]:
    """A column of any type pyarrow's reader takes (`_arrow_readable`): its type as written, the key its line holds
    it at, and its values (of its kind, of others, out of range, off their grid, raw number spellings)."""
    kind = draw(st.sampled_from(["int", "float32", "float64", "decimal", "time", "date", "uuid", "string", "bool",
                                 "array", "map"]))
    if kind == "int":
        written = draw(st.sampled_from([f"{sign}Int{bits}" for sign in ("", "U") for bits in (8, 16, 32, 64, 128)]))
        values = _INTEGERS
    elif kind in ("float32", "float64"):
        written, values = ("Float32", _floats(True)) if kind == "float32" else ("Float64", _floats(False))
    elif kind == "decimal":
        precision = draw(st.integers(1, 38))
        scale = draw(st.integers(0, min(precision - 1, 14)))
        written, values = f"Decimal({precision}, {scale})", _decimals(precision, scale)
    elif kind == "time":
        written = draw(st.sampled_from(["DateTime", "DateTime('UTC')", "DateTime64(3)", "DateTime64(3, 'UTC')",
                                        "DateTime64(6, 'Asia/Tokyo')"]))
        values = _TIMES
    elif kind == "date":
        written, values = draw(st.sampled_from(["Date", "Date32"])), \
            st.sampled_from(["2024-05-01", "2024-13-01", "0999-01-01", "2024-05-01 10:00:00", 20240501])
    elif kind == "uuid":
        written, values = "UUID", st.one_of(st.uuids().map(str), st.integers(0, 9))
    elif kind == "string":
        written, values = "String", st.one_of(st.text(max_size=5), st.integers(-3, 3), st.booleans(), st.floats())
    elif kind == "bool":
        written, values = "Bool", st.one_of(st.booleans(), st.sampled_from([0, 1, 2, "yes", "x"]))
    else:
        element = draw(st.sampled_from(sorted(_ELEMENTS)))
        if kind == "array":
            written = f"Array({element})"
            values = st.one_of(st.lists(_ELEMENTS[element], max_size=3), st.sampled_from(["x", {"a": 1}]))
        else:
            written = f"Map(String, {element})"
            values = st.one_of(st.dictionaries(st.sampled_from(["a", "b", "c d", "é"]), _ELEMENTS[element],
                                               max_size=3), st.sampled_from(["x", [1]]))
    values = st.one_of(values, st.none(), _NUMBERS.map(lambda text: f"{_RAW}{text}{_RAW}"))
    if kind not in ("array", "map") and draw(st.booleans()):
        written = draw(st.sampled_from([f"Nullable({written})", f"LowCardinality({written})",
                                        f"LowCardinality(Nullable({written}))"])) \
            if kind in ("string", "uuid", "int") else f"Nullable({written})"
    nested = draw(st.booleans())
    path = f"$.n.c{at}" if nested else f"$.c{at}[:]" if kind == "array" and draw(st.booleans()) else f"$.c{at}"
    default = " DEFAULT 7" if kind == "int" and "Nullable" not in written and draw(st.booleans()) else ""
    return f"`c{at}` {written} `json:{path}`{default}", ("n" if nested else f"c{at}"), values


@st.composite
def _typed_batch(draw: st.DrawFn) -> tuple[list[str], list[str]]:
    """Random columns of every type and wrapper (some under one object `n`), and lines of them (`_flat_line`: keys
    missing, values of other kinds, lines that are no JSON or no object, keys given twice...)."""
    columns = [draw(_typed_column(at)) for at in range(draw(st.integers(1, 5)))]
    nested = {f"c{at}": values for at, (_, key, values) in enumerate(columns) if key == "n"}
    values = {key: values for _, key, values in columns if key != "n"}
    if nested:
        values["n"] = _object(nested)
    lines = draw(st.lists(_flat_line(values), min_size=1, max_size=8))
    raw = re.compile(f'"{_RAW}(.*?){_RAW}"')
    return [column for column, _, _ in columns], [raw.sub(lambda found: found.group(1), line) for line in lines]


def test_batches_of_every_type_read_by_pyarrow_are_typed_as_line_by_line():
    """Random schemas of every type and wrapper pyarrow's reader takes (integers of every width, Float32/64,
    Decimal(P, S), times with a precision and a zone, dates, UUID, Bool, arrays (`[:]` too) and maps, Nullable,
    LowCardinality, DEFAULTs, nested keys) and random lines with misfits: the same rows, kept lines and quarantine
    reasons as line by line, and the reader types a real share of them."""
    counts: Counter = Counter()

    @settings(max_examples=400, deadline=None, derandomize=True, database=None,
              suppress_health_check=[HealthCheck.too_slow])
    @given(_typed_batch())
    def check(batch: tuple[list[str], list[str]]) -> None:
        columns, lines = batch
        _same_as_line_by_line(lines, columns, counts)
    check()
    _took_pyarrow(counts, "every type")
