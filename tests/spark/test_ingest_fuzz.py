"""Ingest hardening on real Spark + Delta: lines that are JSON but not objects, RFC 4180 CSV (quoted line breaks,
doubled quotes), numbers beyond their column's range (quarantined, shown as sent), encodings; then a hypothesis
fuzz of whole NDJSON and CSV batches: nothing escapes but a PipeframeError, every line or row sent is landed or
quarantined, and simple values land unchanged. Each example is one batch conformed in one Spark job; a few go
through a real append to the source and quarantine tables. Run with -s to see how many lines/rows were tried."""

from __future__ import annotations

import csv
import io
import json
import math
import shutil
import struct
import time
from decimal import Decimal
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pipeframe.datafiles.model import Datasource
from pipeframe.engine.ingest import RAW, REASON, conform_lines, read_file
from pipeframe.errors import PipeframeError
from pipeframe.project import Project
from tests.conftest import datasource

SCHEMA = ["`s` String `json:$.s`", "`i` Int64 `json:$.i`", "`f` Float32 `json:$.f`", "`d` Float64 `json:$.n.d`",
          "`dec` Decimal(38, 9) `json:$.dec`", "`b` Bool `json:$.b`", "`tags` Array(Float64) `json:$.tags[:]`",
          "`u` UInt64 `json:$.u` DEFAULT 7"]
CSV_SCHEMA = ["`s` String", "`i` Int64", "`f` Float32", "`d` Float64"]
TRIED = {"ndjson examples": 0, "ndjson lines": 0, "csv examples": 0, "csv rows": 0, "quarantined": 0,
         "delta appends": 0}
FUZZ = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                     HealthCheck.function_scoped_fixture])


DS, CSV_DS = datasource(SCHEMA), datasource(CSV_SCHEMA)


@pytest.fixture(scope="module", autouse=True)
def report_tried():
    start = time.monotonic()
    yield
    print(f"\ningest fuzz tried: {TRIED} in {time.monotonic() - start:.0f} s")


def results(frame) -> list[dict]:
    """Every conformed row (one Spark job): its columns, raw text and reason."""
    return [row.asDict() for row in frame.collect()]


def lines_in(spark, lines: list[str], ds: Datasource = DS) -> list[dict]:
    return results(conform_lines(spark, lines, ds))


def csv_in(spark, tmp_path: Path, data: bytes, ds: Datasource = CSV_DS) -> list[dict]:
    path = tmp_path / f"in_{time.monotonic_ns()}.csv"
    path.write_bytes(data)
    return results(read_file(spark, str(path), "csv", ds).frame)


# ------------------------------------------------------------------------------------------ regressions

def test_json_lines_that_are_not_objects_are_quarantined(spark):
    sent = ["42", '"str"', "null", "[1,2]", "true", "{}", '{"other": 1}', '{"s": "kept"}']
    rows = {r[RAW]: r for r in lines_in(spark, sent)}
    for line in ["42", '"str"', "null", "[1,2]", "true"]:
        assert rows[line][REASON] == "line is JSON but not an object"
    for line in ["{}", '{"other": 1}']:  # no value for any column: not a row of NULLs that views would count
        assert rows[line][REASON] == "object has none of the datasource's columns"
    assert rows['{"s": "kept"}'][REASON] is None and rows['{"s": "kept"}']["u"] == 7
    # When every column has a DEFAULT, an empty object is a row of defaults.
    defaults = datasource(["`n` Int32 DEFAULT 1", "`s` String DEFAULT 'x'"])
    [row] = lines_in(spark, ["{}"], defaults)
    assert (row[REASON], row["n"], row["s"]) == (None, 1, "x")


def test_csv_quoted_line_breaks_and_doubled_quotes_are_one_row(spark, tmp_path):
    data = b's,i,f,d\r\n"two\r\nlines",1,1.5,2\r\n"say ""hi"", ok",2,0,0\r\n"a,b",3,,\r\nshort,4\r\n'
    rows = csv_in(spark, tmp_path, data)
    landed = [(r["s"], r["i"]) for r in rows if r[REASON] is None]
    assert landed == [("two\nlines", 1), ('say "hi", ok', 2), ("a,b", 3)]
    [bad] = [r for r in rows if r[REASON]]
    assert (bad[RAW], bad[REASON]) == ("short,4", "row does not have the header's columns")


def test_numbers_beyond_a_float_column_are_quarantined_as_sent(spark, tmp_path):
    sent = ['{"f": 1e39}', '{"n": {"d": 1e400}}', '{"n": {"d": -1E+400}}', '{"f": "Infinity"}', '{"n": {"d": "-inf"}}',
            '{"f": "NaN"}', '{"dec": 12345678901234567890.123456789}', '{"dec": 8388608.000000101}',
            '{"i": 9223372036854775808}', '{"f": NaN}']
    rows = {r[RAW]: r for r in lines_in(spark, sent)}
    assert rows['{"f": 1e39}'][REASON] == 'column `f`: cannot read "1e39" as Float32'
    assert rows['{"n": {"d": 1e400}}'][REASON] == 'column `d`: cannot read "1e400" as Float64'
    assert rows['{"n": {"d": -1E+400}}'][REASON] == 'column `d`: cannot read "-1E+400" as Float64'
    assert rows['{"i": 9223372036854775808}'][REASON] == 'column `i`: cannot read "9223372036854775808" as Int64'
    assert rows['{"f": NaN}'][REASON] == "line is not valid JSON"
    # An infinity or NaN spelled out is what was sent, and a decimal keeps every digit.
    assert rows['{"f": "Infinity"}']["f"] == math.inf and rows['{"n": {"d": "-inf"}}']["d"] == -math.inf
    assert math.isnan(rows['{"f": "NaN"}']["f"])
    assert rows['{"dec": 12345678901234567890.123456789}']["dec"] == Decimal("12345678901234567890.123456789")
    # 16 digits whose double Java writes back shorter (8388608.0000001): read as sent too (found by the fuzz test)
    assert rows['{"dec": 8388608.000000101}']["dec"] == Decimal("8388608.000000101")
    csv_rows = csv_in(spark, tmp_path, b"s,i,f,d\nx,1,1e39,1e400\n")
    assert csv_rows[0][REASON] == ('column `f`: cannot read "1e39" as Float32; '
                                   'column `d`: cannot read "1e400" as Float64')


def test_encodings(spark, tmp_path):
    ndjson = tmp_path / "bom.ndjson"
    ndjson.write_bytes(b'\xef\xbb\xbf{"s": "first"}\n{"s": "caf\xc3\xa9"}\n{"s": "bad \xff\xfe"}\n')
    rows = results(read_file(spark, str(ndjson), "ndjson", DS).frame)
    assert [r[REASON] for r in rows] == [None, None, "line is not valid UTF-8"]
    assert [r["s"] for r in rows[:2]] == ["first", "café"]
    assert rows[2][RAW] == '{"s": "bad \ufffd\ufffd"}'
    assert [r["s"] for r in csv_in(spark, tmp_path, b"\xef\xbb\xbfs,i\ncaf\xc3\xa9,1\n")] == ["café"]
    with pytest.raises(PipeframeError, match="not valid UTF-8") as err:
        csv_in(spark, tmp_path, b"s,i\ncaf\xe9,1\n")
    assert err.value.diagnostics[0].code == "PF712"


# ------------------------------------------------------------------------------------------ fuzz: NDJSON

NO_SURROGATES = st.characters(blacklist_categories=("Cs",))
INT64 = st.integers(-(2 ** 63), 2 ** 63 - 1)
FLOAT32 = st.floats(width=32, allow_nan=False, allow_infinity=False)
FLOAT64 = st.floats(allow_nan=False, allow_infinity=False)
DECIMAL = st.tuples(st.integers(-(10 ** 29) + 1, 10 ** 29 - 1), st.integers(0, 10 ** 9 - 1)).map(
    lambda p: f"{'-' if p[0] < 0 else ''}{abs(p[0])}.{p[1]:09d}")
NUMBER_TEXTS = st.sampled_from(["1e39", "-1e39", "3.5e38", "1e400", "-1e400", "1e-400", "-0", "-0.0", "0e0", "1E+2",
                                "9223372036854775807", "9223372036854775808", "-9223372036854775809", "1" * 60,
                                "18446744073709551616", "NaN", "Infinity", "-Infinity", '"NaN"', '"inf"', '"-Infinity"',
                                "01", ".5", "1.", "+1", "0x10", '"1e39"', '" 12 "', "true", "null", "[]", "{}"])
JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=5), inner, max_size=4), max_leaves=12)
KEYS = st.sampled_from(["s", "i", "f", "n", "dec", "b", "tags", "u", "other", ""]) | st.text(max_size=4)


@st.composite
def simple_line(draw) -> tuple[str, dict]:
    """An object of well-typed values, and the row it must land as."""
    s, i, f, d = draw(st.text(NO_SURROGATES, min_size=1, max_size=30)), draw(INT64), draw(FLOAT32), draw(FLOAT64)
    dec, b = draw(DECIMAL), draw(st.booleans())
    tags = draw(st.lists(FLOAT64, max_size=3))
    text = (f'{{"s": {json.dumps(s, ensure_ascii=draw(st.booleans()))}, "i": {i}, "f": {json.dumps(f)}, '
            f'"n": {{"d": {json.dumps(d)}}}, "dec": {dec}, "b": {json.dumps(b)}, "tags": {json.dumps(tags)}}}')
    return text, {"s": s, "i": i, "f": struct.unpack("f", struct.pack("f", f))[0], "d": d, "dec": Decimal(dec),
                  "b": b, "tags": tags, "u": 7}


@st.composite
def edge_line(draw) -> str:
    kind = draw(st.sampled_from(["any", "object", "number", "invalid", "long", "surrogate"]))
    if kind == "any":  # any JSON value at all, objects with random keys included
        return json.dumps(draw(JSON_VALUES), ensure_ascii=draw(st.booleans()))
    if kind == "object":
        return json.dumps(draw(st.dictionaries(KEYS, JSON_VALUES, max_size=6)), ensure_ascii=draw(st.booleans()))
    if kind == "number":
        template = draw(st.sampled_from(['{"i": %s}', '{"f": %s}', '{"dec": %s}', '{"u": %s}', '{"n": {"d": %s}}',
                                         '{"tags": [1, %s]}', '{"s": %s}', '{"b": %s}']))
        return template % draw(NUMBER_TEXTS)
    if kind == "invalid":
        good = json.dumps(draw(st.dictionaries(KEYS, JSON_VALUES, max_size=3)))
        return draw(st.sampled_from([good[: max(1, len(good) // 2)], good + " x", good.replace('"', "'"),
                                     "\ufeff" + good, draw(st.text(min_size=1, max_size=20))]))
    if kind == "long":
        return json.dumps({"s": draw(st.sampled_from(["x", "é", "😀", '\\"', "\n"])) * draw(st.integers(1, 200_000)),
                          "i": 1})
    return '{"s": "' + draw(st.sampled_from(["\ud800", "\\ud800", "\\udc00x", "😀", "\\ud83d\\ude00"])) + '"}'


@FUZZ
@given(batch=st.lists(st.one_of(simple_line(), edge_line().map(lambda line: (line, None))), min_size=10, max_size=50))
def test_fuzz_ndjson_batches(spark, batch):
    lines = [line for line, _ in batch]
    TRIED["ndjson examples"] += 1
    TRIED["ndjson lines"] += len(lines)
    try:
        rows = lines_in(spark, lines)
    except PipeframeError as exc:
        assert exc.diagnostics[0].code
        return
    assert len(rows) == sum(1 for line in lines if line.strip())  # landed + quarantined = sent
    TRIED["quarantined"] += sum(1 for r in rows if r[REASON])
    assert all(r[REASON] is None or r[REASON].strip() for r in rows)
    for (line, expected), row in zip([b for b in batch if b[0].strip()], rows, strict=True):
        assert row[RAW] == line.removeprefix("\ufeff") or not line.isascii()
        if expected is not None:
            assert row[REASON] is None, (line, row[REASON])
            assert {k: row[k] for k in expected} == expected, line


# ------------------------------------------------------------------------------------------ fuzz: CSV

CSV_TEXT = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\r\x00"), min_size=1,
                   max_size=20).filter(lambda s: s.strip() == s)  # Spark reads an unquoted blank field as NULL
CSV_EDGE = st.sampled_from(['"', '""', ",", "\n", "\r\n", " , ", "1e39", "1e400", "-0", "NaN", "inf", "99" * 12,
                            "9223372036854775808", "", "é😀", "\ufeff", "#x", "a\"b", "\\", "\\\""])


@st.composite
def csv_batch(draw) -> tuple[bytes, list[dict | None]]:
    """A CSV file (header s,i,f,d) and, per data row, the row it must land as (None: anything goes)."""
    out = io.StringIO()
    eol = draw(st.sampled_from(["\n", "\r\n"]))
    writer = csv.writer(out, lineterminator=eol, quoting=draw(st.sampled_from([csv.QUOTE_MINIMAL, csv.QUOTE_ALL])))
    writer.writerow(["s", "i", "f", "d"])
    expected: list[dict | None] = []
    for _ in range(draw(st.integers(10, 40))):
        kind = draw(st.sampled_from(["simple", "simple", "edge", "short", "long"]))
        if kind == "simple":
            s, i, f, d = draw(CSV_TEXT), draw(INT64), draw(FLOAT32), draw(FLOAT64)
            writer.writerow([s, i, repr(f), repr(d)])
            expected.append({"s": s, "i": i, "f": struct.unpack("f", struct.pack("f", f))[0], "d": d})
            continue
        size = {"edge": 4, "short": draw(st.integers(1, 3)), "long": draw(st.integers(5, 7))}[kind]
        fields = draw(st.lists(CSV_EDGE | CSV_TEXT, min_size=size, max_size=size))
        if size == 1 and fields[0] in ("", "\ufeff"):
            fields[0] = "x"  # an empty line is no row at all
        writer.writerow(fields)
        expected.append(None)
    bom = draw(st.sampled_from([b"", b"\xef\xbb\xbf"]))
    return bom + out.getvalue().encode("utf-8"), expected


@FUZZ
@given(batch=csv_batch())
def test_fuzz_csv_batches(spark, tmp_path, batch):
    data, expected = batch
    TRIED["csv examples"] += 1
    TRIED["csv rows"] += len(expected)
    try:
        rows = csv_in(spark, tmp_path, data)
    except PipeframeError as exc:
        assert exc.diagnostics[0].code
        return
    assert len(rows) == len(expected), data  # landed + quarantined = sent
    TRIED["quarantined"] += sum(1 for r in rows if r[REASON])
    for row, want in zip(rows, expected, strict=True):
        if want is not None:
            assert row[REASON] is None, (row, data)
            assert {k: row[k] for k in want} == want, data
        assert row[REASON] is None or row[REASON].strip()


# ------------------------------------------------------------------------------------------ real appends

@pytest.fixture(scope="module")
def project(spark, spark_config) -> Project:
    root = Path(spark_config.root) / "ingest_fuzz"
    shutil.rmtree(root, ignore_errors=True)
    (root / "datasources").mkdir(parents=True)
    (root / "datasources" / "t.datasource").write_text("SCHEMA >\n    " + ",\n    ".join(SCHEMA) + "\n")
    (root / "datasources" / "c.datasource").write_text("SCHEMA >\n    " + ",\n    ".join(CSV_SCHEMA) + "\n")
    (root / "pipeframe.yaml").write_text("name: ingestfuzz\n")
    p = Project(root, spark=spark, environ={})
    p.deploy()
    return p


def counts(p: Project, name: str) -> tuple[int, int]:
    quarantine = p.warehouse.quarantine_path(name)
    landed = p.query(f"SELECT count(*) FROM {name}").collect()[0][0]
    held = p.spark.read.format("delta").load(quarantine).count() if Path(quarantine).exists() else 0
    return landed, held


@settings(max_examples=1, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(batch=st.lists(st.one_of(simple_line().map(lambda p: p[0]), edge_line()), min_size=5, max_size=30),
       csv_file=csv_batch())
def test_fuzz_appends_reach_the_source_and_quarantine_tables(project, tmp_path_factory, batch, csv_file):
    folder = tmp_path_factory.mktemp("appends")
    for name, file, sent in [("t", folder / "in.ndjson", sum(1 for line in batch if line.strip())),
                             ("c", folder / "in.csv", len(csv_file[1]))]:
        if name == "t":
            file.write_text("\n".join(batch) + "\n", encoding="utf-8", errors="surrogatepass")
        else:
            file.write_bytes(csv_file[0])
        before = counts(project, name)
        result = project.append(name, str(file))
        TRIED["delta appends"] += 1
        after = counts(project, name)
        assert result.accepted + result.quarantined == sent
        assert (after[0] - before[0], after[1] - before[1]) == (result.accepted, result.quarantined)
