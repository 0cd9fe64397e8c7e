"""One meaning for NDJSON lines: typed without Spark (`jsonlines.type_lines`, a group commit's way) they land as
Spark's conform (`ingest.conform_lines`) lands them, row for row and reason for reason. Hypothesis draws random
schemas (every type and wrapper a datafile accepts: integers of every width up to 256 bits with ClickHouse's ranges,
floats, decimals, booleans, UUIDs, dates and times, arrays, maps, arrays and maps of them, Nullable,
LowCardinality; nested `json:` paths, keys with spaces, array elements; DEFAULTs) and random lines (valid, invalid,
out of range, missing fields, wrong JSON types, integers for strings, integers in long strings, unicode, huge
numbers, numbers as written, keys given twice, deep nesting, odd lines); where `type_lines` answers, Spark's conform
of the same lines must give the same values of the same types, the same misfits with the same raw text and reasons;
where it leaves a schema to Spark, Spark's conform must still answer every line. Run with -s to see how many
schemas, lines and rows were compared."""

from __future__ import annotations

import json
import re
import time
from decimal import Decimal

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pipeframe.engine import jsonlines
from pipeframe.engine.ingest import RAW, REASON, conform_lines
from tests.conftest import datasource

COMPARED = {"schemas": 0, "typed without Spark": 0, "lines": 0, "rows": 0, "misfits": 0, "integers as strings": 0,
            "schemas only Spark reads": 0}

TEXT = st.text(st.characters(blacklist_categories=("Cs",)), max_size=8)
INTEGERS = {f"{sign}Int{bits}": bits for sign in ("", "U") for bits in (8, 16, 32, 64, 128, 256)}
DECIMAL_38 = 10 ** 38 - 1  # what DECIMAL(38,0), the Spark type of 128- and 256-bit integers, holds


def integers(name: str) -> tuple[st.SearchStrategy, st.SearchStrategy]:
    bits = INTEGERS[name]
    low, high = (0, 2 ** bits - 1) if name.startswith("U") else (-(2 ** (bits - 1)), 2 ** (bits - 1) - 1)
    return st.integers(max(low, -DECIMAL_38), min(high, DECIMAL_38)), st.sampled_from(
        [low, high, low - 1, high + 1, -5, "12", " 7 ", "x", "1.5", "+3", "#1e2", "#12.7", "#-0",
         "#99999999999999999999999", "1234567890123456789", "0000000000000000000042", " -00000000000000000000007 ",
         DECIMAL_38, -DECIMAL_38 - 1])


TIMES = st.sampled_from(["2024-05-16 18:00:00", "2024-05-16T18:00:00Z", "2024-05-16T18:00:00.123456",
                         "2024-05-16 18:00:00.5+02:00", "2024-05-16", "1970-01-01 00:00:00"])
ODD_TIMES = st.sampled_from(["2024-02-30 00:00:00", "yesterday", "", "2024-5-6 1:2:3", "1715882400",
                             "0999-01-01 00:00:00", "2024-13-01 00:00:00", "2024-05-16 24:00:00", 5])
# Per ClickHouse type: values of its kind, and odd ones (other JSON types, out of range, other spellings, numbers
# as written: `#1e2` is put into the line as the number 1e2).
SCALARS = {
    **{name: integers(name) for name in INTEGERS},
    "Float64": (st.floats(allow_nan=False, allow_infinity=False) | st.integers(-(2 ** 60), 2 ** 60),
                st.sampled_from(["NaN", "-Infinity", "1.5", "abc", "#1e400", "#1E+2", "#-0.0", True])),
    "Float32": (st.floats(width=32, allow_nan=False, allow_infinity=False), st.sampled_from([0.1, 1e39, "#1e39", "x"])),
    "Decimal(10, 2)": (st.decimals(-(10 ** 7), 10 ** 7, places=2).map(lambda d: f"#{d}") | st.sampled_from([12.34, 7]),
                       st.sampled_from([0.125, 1.005, 99999999.995, "12.5", "x", "#1e2", "#1e9"])),
    "Decimal(38, 9)": (st.sampled_from(["#0.1000000000000000055511151231257827", "#123456789012345678.123456789", 1.5]),
                       st.sampled_from(["#1e30", "#-1e-12"])),
    "Bool": (st.booleans(), st.sampled_from([0, 1, 2, "true", " yes ", "T", "nope", "#1.0"])),
    "String": (TEXT | st.integers(), st.sampled_from(["#12.70", "#-0", True, {"a": 1}])),  # integers: ids as sent
    "UUID": (st.uuids().map(str), st.just("not-a-uuid")),
    "Date": (st.sampled_from(["2024-05-16", "2024-02-29", "1970-01-01"]),
             st.sampled_from(["2023-02-29", "2024-5-6", "nope", "2024-05-16T10:00:00", "0000-01-01", 3])),
    "DateTime": (TIMES, ODD_TIMES), "DateTime64(3)": (TIMES, ODD_TIMES), "DateTime64(6, 'UTC')": (TIMES, ODD_TIMES),
    # Spark spellings: NULL when missing, no ClickHouse range.
    "BIGINT": integers("Int64"), "STRING": (TEXT | st.integers(), st.just("#-0")),
    "timestamp_ntz": (st.sampled_from(["2024-05-16 18:00:00", "2024-05-16T18:00:00.25"]),
                      st.sampled_from(["2024-05-16T18:00:00Z", "2024-05-16 18:00:00+02:00", "soon"])),
}
COMPLEX = {
    "Array(String)": (st.lists(TEXT | st.none(), max_size=3), st.sampled_from([[1, "a"], "x"])),
    "Array(UInt8)": (st.lists(st.integers(0, 255) | st.none(), max_size=3), st.sampled_from([[300], [1.5], ["1"]])),
    "Array(Float64)": (st.lists(st.floats(allow_nan=False, allow_infinity=False) | st.integers(-100, 100),
                                max_size=3), st.just(["x"])),
    "Map(String, String)": (st.dictionaries(TEXT, TEXT | st.none(), max_size=3), st.sampled_from([{"a": 1}, []])),
    "Map(String, UInt16)": (st.dictionaries(TEXT, st.integers(0, 65_535), max_size=3), st.just({"a": 70_000})),
}
# Arrays and maps of arrays and maps: Spark's conform alone reads them (no ClickHouse range of their integers).
NESTED = {
    "Map(String, Array(UInt8))": (st.dictionaries(TEXT, st.lists(st.integers(0, 255), max_size=2), max_size=2),
                                  st.sampled_from([{"a": [300]}, {"a": 1}])),
    "Map(String, Map(String, UInt8))": (st.dictionaries(TEXT, st.dictionaries(TEXT, st.integers(0, 255), max_size=2),
                                                        max_size=2), st.just({"a": [1]})),
    "Array(Array(Int8))": (st.lists(st.lists(st.integers(-128, 127), max_size=2), max_size=2), st.just([1])),
}
WRAPPED = {"Nullable": list(SCALARS), "LowCardinality": ["String", "Nullable(String)", "Nullable(UInt16)"]}
DEFAULTS = {"String": "'none'", "UInt8": "3", "Float64": "1.5", "Int32": "-1", "Decimal(10, 2)": "0"}
PATHS = ["$.{name}", "$.req.{name}", "$['key {name}']", "$.list[1]", "$.deep.a.b.{name}"]


@st.composite
def schema(draw, with_nested: bool = False) -> list[tuple[str, str, str, str | None]]:
    """Columns as (name, written type, json path, default); `with_nested`: one of them NESTED."""
    kinds = list(SCALARS) + list(COMPLEX) + [f"{w}({t})" for w, ts in WRAPPED.items() for t in ts]
    nested = draw(st.integers(0, 4)) if with_nested else -1
    columns, used_paths = [], set()
    for index in range(max(draw(st.integers(1, 5)), nested + 1)):
        written = draw(st.sampled_from(list(NESTED) if index == nested else kinds))
        name = f"c{index}"
        path = draw(st.sampled_from(PATHS)).format(name=name)
        if path in used_paths or (written in COMPLEX or written in NESTED) and "[1]" in path:
            path = f"$.{name}"
        used_paths.add(path)
        if written.startswith("Array") and draw(st.booleans()):
            path += "[:]"
        default = DEFAULTS.get(written) if draw(st.integers(0, 3)) == 0 else None
        columns.append((name, written, path, default))
    return columns


def base(written: str) -> str:
    return written.split("(", 1)[1].rsplit(")", 1)[0] if written.startswith(("Nullable(", "LowCardinality(")) \
        else written


def value_of(draw, written: str, clean: bool = False) -> object:
    valid, odd = {**SCALARS, **COMPLEX, **NESTED}[base(base(written))]
    choice = 19 if clean else draw(st.integers(0, 19))
    if choice == 0:  # a value of any JSON type now and then
        return draw(st.sampled_from(["text", 5, 2.5, True, [1], {"k": "v"}, "💥 ünï"]))
    return draw(odd if choice < 3 else valid)


def put(target: dict, path: str, value: object) -> None:
    """`value` placed where `path` reads it ($.a.b, $['k'], $.list[1]), beside what is there."""
    path = path.removesuffix("[:]")
    if path.startswith("$['"):
        target[path[3:-2]] = value
        return
    steps = path[2:].split(".")
    if steps[0] == "list[1]":
        target["list"] = [target.get("list", [0, None])[0], value]
        return
    for step in steps[:-1]:
        target = target.setdefault(step, {}) if isinstance(target.get(step, {}), dict) else {}
    target[steps[-1]] = value


@st.composite
def line(draw, columns: list, clean: bool = False) -> str:
    obj: dict = {}
    numbers: dict[str, str] = {}
    for name, written, path, _default in columns:
        choice = draw(st.integers(0, 19))
        if choice < 2:
            continue  # missing
        value = None if choice == 2 else value_of(draw, written, clean)
        if isinstance(value, str) and value.startswith("#"):  # a number as written (json.dumps would change it)
            marker = f"@@{len(numbers)}@@"
            numbers[marker] = value[1:]
            value = marker
        put(obj, path, value)
    if draw(st.integers(0, 5)) == 0:
        obj["other"] = draw(st.integers() | TEXT)
    text = json.dumps(obj, ensure_ascii=draw(st.booleans()))
    for marker, number in numbers.items():
        text = text.replace(f'"{marker}"', number)
    odd = 99 if clean else draw(st.integers(0, 60))
    if odd == 0:
        deep = "[" * 600 + "]" * 600
        return draw(st.sampled_from(["not json", "null", "[1, 2]", "5", '"x"', "{}", text[:-1], text + " trailing",
                                     "\ufeff" + text, "{'c0': 1}", text.replace("{", '{"c0": 1, "c0": 2, ', 1),
                                     text.replace("{", '{"c0" : 1, "c0":2, ', 1), '{"c0" : 1, "c0":2}',
                                     text.replace("{", f'{{"deep": {deep}, ', 1)]))
    if odd == 1:
        return "  " + text + "\t"
    return text


def spark_outcome(spark, lines: list[str], ds) -> tuple[list, list, pa.Schema]:
    """Spark's conform of the lines: the rows that fit (as Arrow values) and the misfits' (raw, reason), in order."""
    frame = conform_lines(spark, lines, ds)
    columns = [c.name for c in ds.columns]
    table = frame.select(*columns, RAW, REASON).toArrow()
    rows, misfits = [], []
    for row in table.to_pylist():
        if row[REASON] is None:
            rows.append(tuple(row[c] for c in columns))
        else:
            misfits.append((row[RAW], row[REASON]))
    return rows, misfits, frame.select(*columns).toArrow().schema


def comparable(value: object) -> object:
    return repr(value) if isinstance(value, float) else value  # NaN equals NaN; -0.0 is not 0.0


@pytest.fixture(scope="module", autouse=True)
def report_compared():
    start = time.monotonic()
    yield
    print(f"\none meaning, compared: {COMPARED} in {time.monotonic() - start:.0f} s")


def drawn(data, with_nested: bool = False, clean: bool = False) -> tuple[list, list[str], list[str]]:
    """A drawn schema (its columns, and as written in a datafile) and a batch of lines for it."""
    columns = data.draw(schema(with_nested))
    texts = [f"`{name}` {written} `json:{path}`" + (f" DEFAULT {default}" if default else "")
             for name, written, path, default in columns]
    return columns, texts, data.draw(st.lists(line(columns, clean), min_size=3, max_size=12))


def compare(spark, data, clean: bool) -> None:
    """One drawn schema and batch: where `type_lines` answers, Spark's conform of the lines answers the same."""
    columns, texts, lines = drawn(data, clean=clean)
    ds = datasource(texts)
    COMPARED["schemas"] += 1
    typed = jsonlines.type_lines(lines, ds, "UTC")
    if typed is None:
        return
    COMPARED["typed without Spark"] += 1
    rows, misfits, arrow_schema = spark_outcome(spark, lines, ds)
    mine = [tuple(comparable(v) for v in row.values()) for row in typed.rows.to_pylist()]
    assert mine == [tuple(comparable(v) for v in row) for row in rows], (texts, lines)
    assert [(raw, reason) for _, raw, reason in typed.misfits] == misfits, (texts, lines)
    assert typed.rows.schema.types == arrow_schema.types, texts
    strings = [name for name, written, _, _ in columns if base(base(written)) in ("String", "STRING")]
    COMPARED["integers as strings"] += sum(1 for row in typed.rows.to_pylist() for name in strings
                                           if isinstance(row[name], str) and re.fullmatch(r"-?[0-9]+", row[name]))
    COMPARED["lines"] += len(lines)
    COMPARED["rows"] += len(rows)
    COMPARED["misfits"] += len(misfits)


def examples(count: int) -> settings:
    return settings(max_examples=count, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def test_lines_typed_without_spark_land_as_sparks_conform(spark):
    examples(50)(given(data=st.data())(lambda data: compare(spark, data, clean=False)))()
    # Most drawn batches are typed without Spark: if few were, the comparison proves little.
    assert COMPARED["typed without Spark"] >= COMPARED["schemas"] // 3, COMPARED
    assert COMPARED["misfits"] >= 10 and COMPARED["rows"] >= 50, COMPARED
    assert COMPARED["integers as strings"] >= 3, COMPARED  # integers sent for strings are typed (and compared)


def test_batches_that_all_fit_are_typed_column_by_column_as_spark(spark, monkeypatch):
    """Batches of plain values take a column-at-a-time way (pyarrow's JSON reader, `jsonlines._arrow_read`, or
    orjson's parse, `jsonlines._fast`; the lines they cannot type left to `_line`): the same rows as Spark's."""
    taken = []
    for name in ("_arrow_read", "_fast"):
        way = getattr(jsonlines, name)
        monkeypatch.setattr(jsonlines, name, lambda *args, way=way: taken.append(way(*args)) or taken[-1])

    examples(30)(given(data=st.data())(lambda data: compare(spark, data, clean=True)))()
    assert sum(found is not None and found[0] is not None for found in taken) >= 10, \
        "the column-at-a-time ways were hardly taken"


def test_schemas_only_spark_reads_answer_every_line(spark):
    """A schema with a type `type_lines` never reads (an array or a map of arrays or maps) goes Spark's way, whose
    conform lands or quarantines every line."""
    def answered(data) -> None:
        _columns, texts, lines = drawn(data, with_nested=True)
        ds = datasource(texts)
        assert jsonlines.type_lines(lines, ds, "UTC") is None
        rows, misfits, _ = spark_outcome(spark, lines, ds)
        assert len(rows) + len(misfits) == sum(1 for text in lines if text.strip()), (texts, lines)
        COMPARED["schemas only Spark reads"] += 1

    examples(5)(given(data=st.data())(answered))()


def test_what_is_left_to_spark():
    """Lines whose fate in Spark is not certain here go Spark's way (the whole batch)."""
    ds = datasource(["`s` String", "`n` UInt8 `json:$.a.n`", "`t` DateTime"])
    plain = '{"s": "x", "a": {"n": 1}, "t": "2024-05-16 18:00:00"}'
    assert jsonlines.type_lines([plain], ds, "UTC") is not None
    for odd in ['{"s": "x", "s": "y"}', "{'s': 'x'}", plain + " more", '{"t": "2024-05-16 18:00"}',
                '{"s": {"a": 1}}', '{"s": "\\ud800"}']:
        assert jsonlines.type_lines([plain, odd], ds, "UTC") is None, odd
    assert jsonlines.type_lines([plain], ds, "Europe/Madrid") is None  # a time without a zone, read elsewhere
    through = datasource(["`ids` Array(Int32) `json:$.items[:].id`"])
    assert jsonlines.type_lines(['{"items": [{"id": 1}]}'], through, "UTC") is None


def test_clickhouse_ranges_defaults_and_reasons(spark):
    """UInt ranges enforced (the value as sent in the reason), a missing non-Nullable field takes its type's default
    (a DEFAULT still wins; Nullable stays NULL), and every misfit line has its own reason: both ways."""
    ds = datasource(["`u` UInt32", "`small` UInt8 DEFAULT 3", "`n` Nullable(Int32)", "`s` String",
                     "`tags` Array(String) `json:$.tags[:]`", "`price` Decimal(10, 2)"])
    lines = ['{"u": -5}', '{"u": 12.7}', '{"u": 4294967296}', '{"small": 300}', '{"u": 7}', '{"s": "only"}']
    typed = jsonlines.type_lines(lines, ds, "UTC")
    assert [reason for _, _, reason in typed.misfits] == [
        'column `u`: cannot read "-5" as UInt32', 'column `u`: cannot read "12.7" as UInt32',
        'column `u`: cannot read "4294967296" as UInt32', 'column `small`: cannot read "300" as UInt8']
    assert typed.rows.to_pylist() == [
        {"u": 7, "small": 3, "n": None, "s": "", "tags": [], "price": pa.scalar(0, pa.decimal128(10, 2)).as_py()},
        {"u": 0, "small": 3, "n": None, "s": "only", "tags": [], "price": pa.scalar(0, pa.decimal128(10, 2)).as_py()}]
    rows, misfits, _ = spark_outcome(spark, lines, ds)
    assert misfits == [(raw, reason) for _, raw, reason in typed.misfits]
    assert rows == [tuple(row.values()) for row in typed.rows.to_pylist()]


def test_wide_integers_nullable_unsigned_integers_and_integers_for_strings_land_alike(spark):
    """Int128/UInt256 (DECIMAL(38,0): a range check with a literal wider than that would fail Spark's conform),
    Nullable(UInt8) (its range too), integers in strings of 19 characters and more, integers sent for a String:
    typed without Spark and by Spark's conform alike, as ClickHouse's ranges and Spark's casts say."""
    ds = datasource(["`i` Int128", "`u` Nullable(UInt256)", "`n` Nullable(UInt8)", "`s` String", "`l` Int64"])
    lines = [json.dumps({"i": DECIMAL_38, "u": 5, "n": 255, "s": 12, "l": "1234567890123456789"}),
             '{"i": -7, "u": -1}', '{"n": 300}', '{"n": -5}', f'{{"i": {DECIMAL_38 + 1}}}',
             '{"l": "0000000000000000000042", "s": -0}']
    typed = jsonlines.type_lines(lines, ds, "UTC")
    rows, misfits, _ = spark_outcome(spark, lines, ds)
    assert [reason for _, reason in misfits] == [
        'column `u`: cannot read "-1" as Nullable(UInt256)', 'column `n`: cannot read "300" as Nullable(UInt8)',
        'column `n`: cannot read "-5" as Nullable(UInt8)', f'column `i`: cannot read "{DECIMAL_38 + 1}" as Int128']
    assert rows == [(Decimal(DECIMAL_38), Decimal(5), 255, "12", 1234567890123456789),
                    (0, None, None, "-0", 42)]
    assert typed is not None and [(raw, reason) for _, raw, reason in typed.misfits] == misfits
    assert [tuple(row.values()) for row in typed.rows.to_pylist()] == rows


def test_arrays_and_maps_of_arrays_maps_and_wide_integers_land_through_sparks_conform(spark):
    """A map of arrays or of maps, an array of arrays (no range is checked over a value that is no integer), an array
    of UInt128 (DECIMAL(38,0) elements, 0 the least): Spark's conform reads them, and `type_lines` leaves them to
    it."""
    ds = datasource(["`m` Map(String, Array(UInt8))", "`mm` Map(String, Map(String, UInt8))",
                     "`aa` Array(Array(Int8)) `json:$.aa[:]`", "`big` Array(UInt128) `json:$.big[:]`"])
    lines = [json.dumps({"m": {"a": [1, 2]}, "mm": {"x": {"y": 3}}, "aa": [[1], [-2, 3]], "big": [0, DECIMAL_38]}),
             '{"m": {"b": [300]}}', '{"aa": [[1000]]}', '{"big": [5, -1]}']
    assert jsonlines.type_lines(lines, ds, "UTC") is None
    rows, misfits, _ = spark_outcome(spark, lines, ds)
    assert rows == [([("a", [1, 2])], [("x", [("y", 3)])], [[1], [-2, 3]], [0, DECIMAL_38]),
                    ([("b", [300])], [], [], [])]
    assert misfits == [('{"aa": [[1000]]}', 'column `aa`: cannot read "[[1000]]" as Array(Array(Int8))'),
                       ('{"big": [5, -1]}', 'column `big`: cannot read "[5,-1]" as Array(UInt128)')]
