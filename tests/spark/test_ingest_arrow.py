"""NDJSON lines parsed by pyarrow (`ingest._parsed`, how lines reach Spark's conform when they are plain objects) land
exactly as Spark's column-by-column read of the same lines (`_conform_json`) lands them: the same values, raw text and
reasons, row for row (lines typed without Spark at all: tests/spark/test_ingest_oneway.py). Hypothesis draws batches of lines of every JSON type for a schema the fast path takes; a
batch it cannot read exactly (a top-level non-object, NaN, a key twice, a number where a string is declared...)
goes the other way, and the answers must still be equal."""

from __future__ import annotations

import json

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pipeframe.engine import ingest
from pipeframe.engine.ingest import conform_lines
from tests.conftest import datasource

DS = datasource(["`s` String", "`i` Int64", "`n` Int32", "`small` UInt8 DEFAULT 3", "`d` Float64",
                 "`b` Bool `json:$.flag`", "`t` DateTime", "`day` Date `json:$.when`", "`who` String `json:$.user`"])

# Per column: values of its own JSON type (which pyarrow reads), and values of other types or ranges.
TEXT = st.text(st.characters(blacklist_categories=("Cs",)), max_size=12)
VALUES = {
    "s": (TEXT | st.none(), st.integers() | st.booleans()),
    "i": (st.integers(-(2 ** 63), 2 ** 63 - 1) | st.none(), st.integers(2 ** 63, 2 ** 70) | st.floats()),
    "n": (st.integers(-(2 ** 33), 2 ** 33) | st.sampled_from([2 ** 31 - 1, -(2 ** 31), 2 ** 31]), st.booleans()),
    "small": (st.integers(-300, 70_000) | st.none(), TEXT),
    "d": (st.floats(allow_nan=False, allow_infinity=False) | st.integers(-(2 ** 63), 2 ** 63 - 1)
          | st.sampled_from([5e-324, 1.7976931348623157e308, -0.0, 0.1]), TEXT | st.integers(2 ** 64, 2 ** 80)),
    "flag": (st.booleans() | st.none(), st.sampled_from(["true", 0])),
    "t": (st.sampled_from(["2024-05-16 18:00:00", "2024-05-16T18:00:00Z", "2024-02-30 00:00:00", "yesterday", "",
                           "2024-05-16 18:00:00.123456", None]), st.integers()),
    "when": (st.sampled_from(["2024-05-16", "2024-5-6", "16/05/2024", None]), st.floats()),
    "user": (TEXT | st.none(), st.integers() | st.booleans()),
}
# Number spellings written into the line as they are (json.dumps would normalize them).
NUMBER_TEXTS = st.sampled_from(["1e2", "1E+2", "-0", "-0.0", "0.5", "1.5e7", "12345678901234567890", "1e400", "NaN",
                                "Infinity", "01"])


@st.composite
def line(draw) -> str:
    keys = draw(st.lists(st.sampled_from(list(VALUES) + ["other"]), max_size=9, unique=True))
    wrong = draw(st.sampled_from(keys)) if keys and draw(st.integers(0, 9)) == 0 else None  # one value of another type
    parts = []
    for key in keys:
        if key == "other":
            value = json.dumps(draw(st.lists(st.integers(), max_size=2) | st.dictionaries(st.text(max_size=2),
                                                                                         st.integers(), max_size=2)))
        elif key == wrong:
            value = draw(NUMBER_TEXTS) if key in ("i", "n", "d") else json.dumps(draw(VALUES[key][1]))
        else:
            value = json.dumps(draw(VALUES[key][0]), ensure_ascii=draw(st.booleans()))
        parts.append(f'"{key}": {value}')
    text = "{" + ", ".join(parts) + "}"
    odd = draw(st.integers(0, 60))
    if odd == 0:
        return draw(st.sampled_from(["null", "[1]", "5", '"x"', text + " " + text, text[:-1], '{"s": "a", "s": "b"}',
                                     "\ufeff" + text]))
    if odd == 1:
        return " " + text + "\r"
    return text


def rows(frame) -> list[dict]:
    """Every column as Spark's text of it: exact, and a timestamp outside Python's years can be compared too."""
    return [r.asDict() for r in frame.selectExpr(*[f"CAST(`{c}` AS STRING) AS `{c}`" for c in frame.columns]).collect()]


def test_lines_parsed_by_pyarrow_land_as_sparks_reading_of_them(spark, monkeypatch):
    taken = {"fast": 0, "other": 0}

    @settings(max_examples=60, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
    @given(lines=st.lists(line(), min_size=1, max_size=6))
    def check(lines: list[str]) -> None:
        taken["fast" if ingest._parsed([x for x in lines if x.strip()], DS) is not None else "other"] += 1
        fast = rows(conform_lines(spark, lines, DS))
        with monkeypatch.context() as patch:
            patch.setattr(ingest, "_parsed", lambda _lines, _ds: None)
            spark_read = rows(conform_lines(spark, lines, DS))
        assert fast == spark_read

    check()
    # Most drawn batches are plain objects of the declared columns: if none went the fast way, it is broken.
    assert taken["fast"] >= 20, taken


def test_what_the_fast_path_leaves_to_spark():
    plain = '{"s": "a", "i": 1, "d": 1.5, "t": "2024-05-16 18:00:00"}'
    assert ingest._parsed([plain, plain], DS) is not None
    for odd in ["null", "[1]", '{"s": 1}', '{"i": 1.0}', '{"d": NaN}', '{"d": Infinity}', '{"d": 1e400}',
                '{"s": "a", "s": "b"}', plain + " " + plain, '{"flag": "true"}', '{"i": 99999999999999999999}',
                '{"x": ' + "[" * 1001 + "]" * 1001 + "}"]:
        assert ingest._parsed([plain, odd], DS) is None, odd
    # Types pyarrow would read differently from Spark, and columns read from a JSON path.
    for columns in (["`f` Float32"], ["`x` Decimal(10, 2)"], ["`a` Array(String)"], ["`s` String `json:$.a.s`"],
                    ["`s` String `json:$.x`", "`t` String `json:$.x`"]):
        assert ingest._parsed(['{"f": 1, "x": 1, "a": [], "s": "y"}'], datasource(columns)) is None, columns
