"""Column types: Spark and ClickHouse spellings, canonical form, the safe-cast lattice, the sqlglot bridge."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sqlglot import exp

from pipeframe.compiler.types import from_sqlglot, is_safe_cast, to_sqlglot
from pipeframe.datafiles.types import ColumnType, TypeProblem, normalize_type, parse_column_type

GENERIC_HINT = (
    "Use a Spark SQL type such as STRING, BIGINT, DOUBLE, TIMESTAMP, "
    "or a ClickHouse type such as Int64, Float64, DateTime."
)

# --------------------------------------------------------------------------------------------------
# Spellings


SPARK_SPELLINGS = [
    ("TINYINT", "TINYINT"),
    ("BYTE", "TINYINT"),
    ("SMALLINT", "SMALLINT"),
    ("SHORT", "SMALLINT"),
    ("INT", "INT"),
    ("INTEGER", "INT"),
    ("BIGINT", "BIGINT"),
    ("LONG", "BIGINT"),
    ("FLOAT", "FLOAT"),
    ("REAL", "FLOAT"),
    ("FLOAT4", "FLOAT"),
    ("DOUBLE", "DOUBLE"),
    ("FLOAT8", "DOUBLE"),
    ("DECIMAL", "DECIMAL(10,0)"),
    ("DECIMAL(5)", "DECIMAL(5,0)"),
    ("DECIMAL(10,2)", "DECIMAL(10,2)"),
    ("DECIMAL( 38 , 38 )", "DECIMAL(38,38)"),
    ("DEC(7,3)", "DECIMAL(7,3)"),
    ("NUMERIC(12,4)", "DECIMAL(12,4)"),
    ("NUMERIC", "DECIMAL(10,0)"),
    ("STRING", "STRING"),
    ("VARCHAR(255)", "STRING"),
    ("CHAR(3)", "STRING"),
    ("TEXT", "STRING"),
    ("BOOLEAN", "BOOLEAN"),
    ("BOOL", "BOOLEAN"),
    ("DATE", "DATE"),
    ("TIMESTAMP", "TIMESTAMP"),
    ("TIMESTAMP_LTZ", "TIMESTAMP"),
    ("TIMESTAMP_NTZ", "TIMESTAMP_NTZ"),
    ("BINARY", "BINARY"),
    ("VARIANT", "VARIANT"),
    ("VOID", "VOID"),
    ("NULL", "VOID"),
    # keywords in any case, with any spacing
    ("bigint", "BIGINT"),
    ("  Double ", "DOUBLE"),
    ("timestamp_ntz", "TIMESTAMP_NTZ"),
    ("decimal(10, 2)", "DECIMAL(10,2)"),
]

CLICKHOUSE_SPELLINGS = [
    ("String", "STRING"),
    ("FixedString(16)", "STRING"),
    ("UUID", "STRING"),
    ("IPv4", "STRING"),
    ("IPv6", "STRING"),
    ("JSON", "STRING"),
    ("Enum8('a' = 1, 'b' = 2)", "STRING"),
    ("Enum16('neg' = -1, 'it''s' = 300)", "STRING"),
    ("Enum('x', 'y')", "STRING"),
    ("Int8", "TINYINT"),
    ("Int16", "SMALLINT"),
    ("Int32", "INT"),
    ("Int64", "BIGINT"),
    ("UInt8", "SMALLINT"),
    ("UInt16", "INT"),
    ("UInt32", "BIGINT"),
    ("UInt64", "DECIMAL(20,0)"),
    ("Int128", "DECIMAL(38,0)"),
    ("UInt128", "DECIMAL(38,0)"),
    ("Int256", "DECIMAL(38,0)"),
    ("UInt256", "DECIMAL(38,0)"),
    ("Float32", "FLOAT"),
    ("Float64", "DOUBLE"),
    ("Decimal(18, 4)", "DECIMAL(18,4)"),
    ("Decimal(9)", "DECIMAL(9,0)"),
    ("Decimal32(2)", "DECIMAL(9,2)"),
    ("Decimal64(4)", "DECIMAL(18,4)"),
    ("Decimal128(10)", "DECIMAL(38,10)"),
    ("Bool", "BOOLEAN"),
    ("Date", "DATE"),
    ("Date32", "DATE"),
    ("DateTime", "TIMESTAMP"),
    ("DateTime('Europe/Madrid')", "TIMESTAMP"),
    ("DateTime64(3)", "TIMESTAMP"),
    ("DateTime64(6, 'UTC')", "TIMESTAMP"),
    ("Nothing", "VOID"),
    ("Nullable(String)", "STRING"),
    ("Nullable(Int64)", "BIGINT"),
    ("LowCardinality(String)", "STRING"),
    ("LowCardinality(Nullable(String))", "STRING"),
    ("Array(String)", "ARRAY<STRING>"),
    ("Map(String, Int64)", "MAP<STRING,BIGINT>"),
    ("Tuple(a String, b Int64)", "STRUCT<a: STRING, b: BIGINT>"),
    ("Tuple(String, Int64)", "STRUCT<_1: STRING, _2: BIGINT>"),
    ("Tuple()", "STRUCT<>"),
    # ClickHouse names are case-sensitive in ClickHouse but accepted in any case here
    ("string", "STRING"),
    ("INT64", "BIGINT"),
    ("uint32", "BIGINT"),
    ("datetime64(3)", "TIMESTAMP"),
    ("nullable(float64)", "DOUBLE"),
]

NESTED_SPELLINGS = [
    ("Array(Nullable(String))", "ARRAY<STRING>"),
    ("Map(String, Array(Int32))", "MAP<STRING,ARRAY<INT>>"),
    ("Map(LowCardinality(String), UInt64)", "MAP<STRING,DECIMAL(20,0)>"),
    ("Array(Array(Float64))", "ARRAY<ARRAY<DOUBLE>>"),
    ("Array(Tuple(name String, at DateTime64(3, 'UTC')))", "ARRAY<STRUCT<name: STRING, at: TIMESTAMP>>"),
    ("Tuple(Array(Int8), Map(String, Date))", "STRUCT<_1: ARRAY<TINYINT>, _2: MAP<STRING,DATE>>"),
    ("Tuple(a Nullable(String), `b c` Int16)", "STRUCT<a: STRING, `b c`: SMALLINT>"),
    ("ARRAY<STRING>", "ARRAY<STRING>"),
    ("array < string >", "ARRAY<STRING>"),
    ("MAP<STRING, BIGINT>", "MAP<STRING,BIGINT>"),
    ("map<string,array<map<string,int>>>", "MAP<STRING,ARRAY<MAP<STRING,INT>>>"),
    ("STRUCT<sum: DOUBLE, count: BIGINT>", "STRUCT<sum: DOUBLE, count: BIGINT>"),
    ("struct<sum double,count bigint>", "STRUCT<sum: DOUBLE, count: BIGINT>"),
    ("STRUCT<a: INT NOT NULL, b: STRING COMMENT 'the b'>", "STRUCT<a: INT, b: STRING>"),
    ("STRUCT<`a b`: INT, `x``y`: STRING>", "STRUCT<`a b`: INT, `x``y`: STRING>"),
    ("STRUCT<CamelCase: INT>", "STRUCT<CamelCase: INT>"),
    ("STRUCT<>", "STRUCT<>"),
    ("STRUCT<a: STRUCT<b: ARRAY<DECIMAL(5,2)>>>", "STRUCT<a: STRUCT<b: ARRAY<DECIMAL(5,2)>>>"),
    ("Array(ARRAY<Int64>)", "ARRAY<ARRAY<BIGINT>>"),
    ("ARRAY<VOID>", "ARRAY<VOID>"),
]


@pytest.mark.parametrize(("written", "canonical"), SPARK_SPELLINGS + CLICKHOUSE_SPELLINGS + NESTED_SPELLINGS)
def test_spellings_normalize_to_canonical_spark_types(written: str, canonical: str) -> None:
    assert normalize_type(written) == canonical
    assert normalize_type(canonical) == canonical
    column = parse_column_type(written)
    assert column == ColumnType(canonical)
    assert column.nullable is True
    assert not column.is_aggregate_state


def test_column_type_is_frozen() -> None:
    column = parse_column_type("Int64")
    with pytest.raises(dataclasses.FrozenInstanceError):
        column.type = "INT"  # type: ignore[misc]


# --------------------------------------------------------------------------------------------------
# Aggregate-state columns


@pytest.mark.parametrize(
    ("written", "expected"),
    [
        (
            "AggregateFunction(uniq, String)",
            ColumnType("AggregateFunction(uniq, STRING)", aggregate_function="uniq", aggregate_args=("STRING",)),
        ),
        (
            "AggregateFunction(sum, DOUBLE)",
            ColumnType("AggregateFunction(sum, DOUBLE)", aggregate_function="sum", aggregate_args=("DOUBLE",)),
        ),
        (
            "AggregateFunction(quantiles(0.5, 0.9), Float64)",
            ColumnType(
                "AggregateFunction(quantiles(0.5, 0.9), DOUBLE)",
                aggregate_function="quantiles",
                aggregate_args=("DOUBLE",),
                aggregate_params=("0.5", "0.9"),
            ),
        ),
        (
            "AggregateFunction(argMax, Nullable(String), DateTime)",
            ColumnType(
                "AggregateFunction(argMax, STRING, TIMESTAMP)",
                aggregate_function="argMax",
                aggregate_args=("STRING", "TIMESTAMP"),
            ),
        ),
        (
            "AggregateFunction(count)",
            ColumnType("AggregateFunction(count)", aggregate_function="count"),
        ),
        (
            "AggregateFunction(sumIf, Int64, UInt8)",
            ColumnType(
                "AggregateFunction(sumIf, BIGINT, SMALLINT)",
                aggregate_function="sumIf",
                aggregate_args=("BIGINT", "SMALLINT"),
            ),
        ),
        (
            "AggregateFunction(groupUniqArray, Array(String))",
            ColumnType(
                "AggregateFunction(groupUniqArray, ARRAY<STRING>)",
                aggregate_function="groupUniqArray",
                aggregate_args=("ARRAY<STRING>",),
            ),
        ),
        (
            "aggregatefunction( quantile(-0.5e1) , float64 )",
            ColumnType(
                "AggregateFunction(quantile(-0.5e1), DOUBLE)",
                aggregate_function="quantile",
                aggregate_args=("DOUBLE",),
                aggregate_params=("-0.5e1",),
            ),
        ),
        (
            "AggregateFunction(sequenceMatch('(?1)(?2)'), DateTime, UInt8, UInt8)",
            ColumnType(
                "AggregateFunction(sequenceMatch('(?1)(?2)'), TIMESTAMP, SMALLINT, SMALLINT)",
                aggregate_function="sequenceMatch",
                aggregate_args=("TIMESTAMP", "SMALLINT", "SMALLINT"),
                aggregate_params=("'(?1)(?2)'",),
            ),
        ),
        (
            "SimpleAggregateFunction(sum, Float64)",
            ColumnType("DOUBLE", aggregate_function="sum", aggregate_args=("DOUBLE",), simple_aggregate=True),
        ),
        (
            "SimpleAggregateFunction(max, Nullable(DateTime64(3)))",
            ColumnType("TIMESTAMP", aggregate_function="max", aggregate_args=("TIMESTAMP",), simple_aggregate=True),
        ),
        (
            "SimpleAggregateFunction(groupArrayArray, Array(String))",
            ColumnType(
                "ARRAY<STRING>",
                aggregate_function="groupArrayArray",
                aggregate_args=("ARRAY<STRING>",),
                simple_aggregate=True,
            ),
        ),
    ],
)
def test_aggregate_function_columns(written: str, expected: ColumnType) -> None:
    column = parse_column_type(written)
    assert column == expected
    assert column.is_aggregate_state is not expected.simple_aggregate
    # the canonical written form reads back to the same column
    assert normalize_type(written) == expected.type
    assert normalize_type(expected.type) == expected.type
    if not expected.simple_aggregate:
        assert parse_column_type(expected.type) == expected


@pytest.mark.parametrize(
    "written",
    [
        "Array(AggregateFunction(uniq, String))",
        "Nullable(SimpleAggregateFunction(sum, Float64))",
        "Tuple(a AggregateFunction(sum, Int64))",
        "AggregateFunction",
        "AggregateFunction()",
        "AggregateFunction(uniq String)",
        "AggregateFunction(1, sum, Int64)",
        "AggregateFunction(uniq, Strng)",
        "SimpleAggregateFunction(sum)",
        "SimpleAggregateFunction(sum, Int64, Int64)",
        "AggregateFunction(quantiles(0.5, 0.9, Float64)",
    ],
)
def test_invalid_aggregate_function_columns(written: str) -> None:
    with pytest.raises(TypeProblem) as problem:
        parse_column_type(written)
    assert problem.value.message.startswith("Unknown column type `")
    assert problem.value.hint


# --------------------------------------------------------------------------------------------------
# Problems


@pytest.mark.parametrize(
    ("written", "message", "hint"),
    [
        ("Strng", "Unknown column type `Strng`.", "Did you mean `String`"),
        ("STRNG", "Unknown column type `STRNG`.", "Did you mean `STRING`"),
        ("Array(Strng)", "Unknown column type `Strng` in `Array(Strng)`.", "Did you mean `String`"),
        ("Int46", "Unknown column type `Int46`.", "`Int64`"),
        ("Flaot64", "Unknown column type `Flaot64`.", "Did you mean `Float64`"),
        ("DateTim", "Unknown column type `DateTim`.", "Did you mean `DateTime`"),
        ("TIMESTAMPNTZ", "Unknown column type `TIMESTAMPNTZ`.", "`TIMESTAMP_NTZ`"),
        ("Nulable(String)", "Unknown column type `Nulable` in `Nulable(String)`.", "Did you mean `Nullable`"),
        ("LowCardinalty(String)", "Unknown column type `LowCardinalty` in", "Did you mean `LowCardinality`"),
        ("Foo", "Unknown column type `Foo`.", GENERIC_HINT),
        ("Nested(a String, b Int64)", "Unknown column type `Nested` in", "Array(Tuple("),
        ("Object('json')", "Unknown column type `Object` in", "JSON"),
        ("INTERVAL", "Unknown column type `INTERVAL`.", "BIGINT"),
        ("INTERVAL DAY", "Unknown column type `INTERVAL` in", "BIGINT"),
    ],
)
def test_unknown_types_explain_and_suggest(written: str, message: str, hint: str) -> None:
    with pytest.raises(TypeProblem) as problem:
        parse_column_type(written)
    assert problem.value.message.startswith(message)
    assert hint in problem.value.hint
    assert str(problem.value) == problem.value.message


@pytest.mark.parametrize(
    ("written", "hint"),
    [
        ("Array(String", "add the missing `)`"),
        ("ARRAY<STRING", "add the missing `>`"),
        ("Array<String)", "Expected `>`"),
        ("String)", "Remove `)`"),
        ("Map(String, Int64))", "Remove `)`"),
        ("Array()", "Expected a type name"),
        ("Array(String, Int8)", "Array takes one element type"),
        ("Map(String)", "Map takes a key type and a value type"),
        ("MAP<STRING,INT,INT>", "MAP takes a key type and a value type"),
        ("Nullable(String, Int8)", "Nullable takes one type"),
        ("Array", "`Array` needs parameters"),
        ("FixedString", "`FixedString` needs parameters"),
        ("FixedString(0)", "positive length"),
        ("DateTime64", "`DateTime64` needs parameters"),
        ("DateTime64(12)", "from 0 to 9"),
        ("DateTime(UTC)", "quoted time zone"),
        ("DateTime('UTC", "Close the string"),
        ("Int64(8)", "takes no parameters"),
        ("STRING<INT>", "takes no parameters"),
        ("DECIMAL(39,2)", "precision from 1 to 38"),
        ("DECIMAL(0)", "precision from 1 to 38"),
        ("DECIMAL(5,6)", "scale no larger than the precision"),
        ("DECIMAL(5.5)", "Expected a precision"),
        ("Decimal256(10)", "precision from 1 to 38"),
        ("Enum8()", "quoted enum value"),
        ("Enum8(a = 1)", "quoted enum value"),
        ("STRUCT<a: INT, A: STRING>", "`A` appears twice"),
        ("STRUCT<INT>", "a field name"),
        ("STRUCT<a: INT,>", "Expected a field name"),
        ("STRUCT<a: INT b: STRING>", "missing comma"),
        ("Tuple(a String, Int8)", "Name every Tuple element or none"),
        ("Tuple<String>", "add `(`"),
        ("`String`", "Expected a type name"),
        ("Int64 Int64", "Remove `Int64`"),
        ("Array(String) extra", "Remove `extra`"),
        ("Array[String]", "Remove `[`"),
        ("BIGINT;DROP", "Remove `;`"),
        ("DECIMAL(1²)", "Remove `²`"),  # only ASCII digits are numbers
        ("DECIMAL(١٢)", "Remove `١`"),
        ("Array(" * 40 + "String" + ")" * 40, "at most 32 levels"),
    ],
)
def test_malformed_types_are_problems_with_a_fix(written: str, hint: str) -> None:
    with pytest.raises(TypeProblem) as problem:
        parse_column_type(written)
    assert problem.value.message == f"Unknown column type `{written.strip()}`."
    assert hint in problem.value.hint


@pytest.mark.parametrize("written", ["", "   ", "\n\t"])
def test_missing_type(written: str) -> None:
    with pytest.raises(TypeProblem) as problem:
        normalize_type(written)
    assert problem.value.message == "Missing column type."
    assert problem.value.hint == GENERIC_HINT


def test_deep_but_reasonable_nesting_is_fine() -> None:
    written = "Array(" * 30 + "String" + ")" * 30
    assert normalize_type(written) == "ARRAY<" * 30 + "STRING" + ">" * 30


# --------------------------------------------------------------------------------------------------
# The safe-cast lattice

# (narrower, wider): safe one way and never the other.
ONE_WAY = [
    ("TINYINT", "SMALLINT"),
    ("TINYINT", "INT"),
    ("TINYINT", "BIGINT"),
    ("SMALLINT", "INT"),
    ("SMALLINT", "BIGINT"),
    ("INT", "BIGINT"),
    ("TINYINT", "DECIMAL(3,0)"),
    ("TINYINT", "DECIMAL(5,2)"),
    ("SMALLINT", "DECIMAL(5,0)"),
    ("INT", "DECIMAL(10,0)"),
    ("INT", "DECIMAL(12,2)"),
    ("BIGINT", "DECIMAL(19,0)"),
    ("BIGINT", "DECIMAL(38,19)"),
    ("TINYINT", "DOUBLE"),
    ("SMALLINT", "DOUBLE"),
    ("INT", "DOUBLE"),
    ("FLOAT", "DOUBLE"),
    ("TINYINT", "FLOAT"),
    ("SMALLINT", "FLOAT"),
    ("DECIMAL(5,2)", "DECIMAL(6,2)"),
    ("DECIMAL(5,2)", "DECIMAL(6,3)"),
    ("DECIMAL(10,0)", "DECIMAL(20,0)"),
    ("DECIMAL(10,2)", "DECIMAL(38,10)"),
    ("DATE", "TIMESTAMP"),
    ("DATE", "TIMESTAMP_NTZ"),
    ("ARRAY<INT>", "ARRAY<BIGINT>"),
    ("ARRAY<DATE>", "ARRAY<TIMESTAMP>"),
    ("ARRAY<ARRAY<SMALLINT>>", "ARRAY<ARRAY<DOUBLE>>"),
    ("MAP<STRING,INT>", "MAP<STRING,BIGINT>"),
    ("MAP<STRING,ARRAY<INT>>", "MAP<STRING,ARRAY<BIGINT>>"),
    ("STRUCT<a: INT, b: DATE>", "STRUCT<a: BIGINT, b: TIMESTAMP>"),
    ("STRUCT<s: STRUCT<x: FLOAT>>", "STRUCT<s: STRUCT<x: DOUBLE>>"),
    ("VOID", "BIGINT"),
    ("VOID", "STRING"),
    ("NULL", "ARRAY<STRING>"),
    ("ARRAY<VOID>", "ARRAY<BIGINT>"),
    # ClickHouse spellings go through the same lattice
    ("Int32", "Int64"),
    ("UInt16", "Int64"),
    ("UInt64", "Decimal(22, 1)"),
    ("Date", "DateTime"),
    ("Array(Nullable(Int32))", "ARRAY<BIGINT>"),
    ("Tuple(a Int32)", "STRUCT<a: BIGINT>"),
]

# Unsafe in both directions.
NEITHER = [
    ("TIMESTAMP_NTZ", "TIMESTAMP"),
    ("STRING", "BINARY"),
    ("INT", "STRING"),
    ("BIGINT", "STRING"),
    ("DOUBLE", "STRING"),
    ("DATE", "STRING"),
    ("TIMESTAMP", "STRING"),
    ("BOOLEAN", "STRING"),
    ("ARRAY<STRING>", "STRING"),
    ("BOOLEAN", "INT"),
    ("BIGINT", "DOUBLE"),
    ("BIGINT", "FLOAT"),
    ("INT", "FLOAT"),
    ("DECIMAL(10,2)", "DOUBLE"),
    ("DECIMAL(5,0)", "FLOAT"),
    ("DECIMAL(10,0)", "BIGINT"),
    ("DECIMAL(6,2)", "DECIMAL(7,4)"),
    ("DECIMAL(10,2)", "DECIMAL(11,1)"),
    ("INT", "DECIMAL(9,0)"),
    ("BIGINT", "DECIMAL(20,2)"),
    ("TINYINT", "DECIMAL(4,2)"),
    ("ARRAY<INT>", "ARRAY<STRING>"),
    ("ARRAY<INT>", "INT"),
    ("MAP<INT,STRING>", "MAP<BIGINT,STRING>"),
    ("MAP<STRING,INT>", "MAP<STRING,STRING>"),
    ("MAP<STRING,INT>", "ARRAY<INT>"),
    ("STRUCT<a: INT, b: INT>", "STRUCT<b: INT, a: INT>"),
    ("STRUCT<a: INT>", "STRUCT<a: INT, b: INT>"),
    ("STRUCT<a: INT>", "STRUCT<A: INT>"),
    ("STRUCT<a: INT>", "STRUCT<b: INT>"),
    ("STRUCT<a: BIGINT, b: INT>", "STRUCT<a: INT, b: BIGINT>"),
    ("VARIANT", "STRING"),
    ("BINARY", "ARRAY<TINYINT>"),
    ("AggregateFunction(uniq, STRING)", "AggregateFunction(uniqExact, STRING)"),
    ("AggregateFunction(sum, INT)", "AggregateFunction(sum, BIGINT)"),
    ("AggregateFunction(sum, DOUBLE)", "DOUBLE"),
]


@pytest.mark.parametrize(("narrow", "wide"), ONE_WAY)
def test_widening_is_safe_and_narrowing_is_not(narrow: str, wide: str) -> None:
    assert is_safe_cast(narrow, wide)
    assert not is_safe_cast(wide, narrow)


@pytest.mark.parametrize(("a", "b"), NEITHER)
def test_unsafe_both_ways(a: str, b: str) -> None:
    assert not is_safe_cast(a, b)
    assert not is_safe_cast(b, a)


# The lattice's specific checks on specific rules from the product spec, spelled out.
@pytest.mark.parametrize(
    ("source", "target", "safe"),
    [
        ("INT", "BIGINT", True),
        ("DATE", "TIMESTAMP", True),
        ("BIGINT", "INT", False),
        ("DOUBLE", "FLOAT", False),
        ("DOUBLE", "BIGINT", False),
        ("TIMESTAMP", "DATE", False),
        ("TIMESTAMP_NTZ", "TIMESTAMP", False),
        ("STRING", "STRING", True),
        ("INT", "STRING", False),
        ("DECIMAL(10,2)", "DOUBLE", False),
        ("Nullable(String)", "STRING", True),  # T -> nullable T
        ("STRING", "Nullable(String)", True),
    ],
)
def test_product_spec_lattice_rules(source: str, target: str, safe: bool) -> None:
    assert is_safe_cast(source, target) is safe


ALL_CANONICAL = sorted(
    {canonical for _, canonical in SPARK_SPELLINGS + CLICKHOUSE_SPELLINGS + NESTED_SPELLINGS}
    | {
        "AggregateFunction(uniq, STRING)",
        "AggregateFunction(quantiles(0.5, 0.9), DOUBLE)",
    }
)


@pytest.mark.parametrize("canonical", ALL_CANONICAL)
def test_identity_is_safe(canonical: str) -> None:
    assert is_safe_cast(canonical, canonical)


@pytest.mark.parametrize(
    ("source", "target"),
    [("Strng", "STRING"), ("STRING", "Strng"), ("", ""), ("Array(", "Array("), ("INT", "DECIMAL(99,0)")],
)
def test_unreadable_types_are_never_safe(source: str, target: str) -> None:
    assert is_safe_cast(source, target) is False


SCALARS = [
    "TINYINT", "SMALLINT", "INT", "BIGINT", "FLOAT", "DOUBLE", "DECIMAL(3,0)", "DECIMAL(5,2)", "DECIMAL(10,0)",
    "DECIMAL(19,0)", "DECIMAL(20,1)", "DECIMAL(38,0)", "DECIMAL(38,18)", "STRING", "BOOLEAN", "BINARY", "DATE",
    "TIMESTAMP", "TIMESTAMP_NTZ", "VARIANT", "VOID",
]  # fmt: skip


@given(st.sampled_from(SCALARS), st.sampled_from(SCALARS), st.sampled_from(SCALARS))
def test_lattice_is_transitive(a: str, b: str, c: str) -> None:
    if is_safe_cast(a, b) and is_safe_cast(b, c):
        assert is_safe_cast(a, c)


@given(st.sampled_from(SCALARS), st.sampled_from(SCALARS))
def test_lattice_is_antisymmetric(a: str, b: str) -> None:
    if a != b and is_safe_cast(a, b):
        assert not is_safe_cast(b, a)


@given(st.sampled_from(SCALARS), st.sampled_from(SCALARS))
def test_lattice_lifts_through_containers(a: str, b: str) -> None:
    safe = is_safe_cast(a, b)
    assert is_safe_cast(f"ARRAY<{a}>", f"ARRAY<{b}>") is safe
    assert is_safe_cast(f"MAP<STRING,{a}>", f"MAP<STRING,{b}>") is safe
    assert is_safe_cast(f"STRUCT<x: {a}, y: INT>", f"STRUCT<x: {b}, y: BIGINT>") is safe
    assert is_safe_cast(f"Array(Nullable({a}))", f"Array({b})") is safe


# --------------------------------------------------------------------------------------------------
# The sqlglot bridge


@pytest.mark.parametrize("canonical", ALL_CANONICAL + ["AggregateFunction(argMax, MAP<STRING,BIGINT>, TIMESTAMP_NTZ)"])
def test_sqlglot_round_trip(canonical: str) -> None:
    dtype = to_sqlglot(canonical)
    assert isinstance(dtype, exp.DataType)
    assert from_sqlglot(dtype) == canonical


@pytest.mark.parametrize(
    ("written", "spark_sql"),
    [
        ("Int64", "BIGINT"),
        ("Array(Nullable(String))", "ARRAY<STRING>"),
        ("Map(String, Array(Int32))", "MAP<STRING, ARRAY<INT>>"),
        ("Tuple(a String, b Float64)", "STRUCT<a: STRING, b: DOUBLE>"),
        ("DECIMAL", "DECIMAL(10, 0)"),
        ("TIMESTAMP_NTZ", "TIMESTAMP_NTZ"),
        ("VOID", "NULL"),
    ],
)
def test_to_sqlglot_accepts_any_spelling(written: str, spark_sql: str) -> None:
    assert to_sqlglot(written).sql(dialect="spark") == spark_sql


def test_to_sqlglot_builds_aggregate_states_for_clickhouse() -> None:
    dtype = to_sqlglot("AggregateFunction(quantiles(0.5, 0.9), Float64)")
    assert dtype.this == exp.DataType.Type.AGGREGATEFUNCTION
    assert dtype.sql(dialect="clickhouse") == "AggregateFunction(quantiles(0.5, 0.9), Float64)"


def test_to_sqlglot_rejects_unknown_types() -> None:
    with pytest.raises(TypeProblem):
        to_sqlglot("Strng")


@pytest.mark.parametrize(
    ("sql_type", "dialect", "canonical"),
    [
        ("VARCHAR(10)", None, "STRING"),
        ("CHAR(2)", None, "STRING"),
        ("TEXT", None, "STRING"),
        ("DECIMAL", None, "DECIMAL(10,0)"),
        ("DECIMAL(5)", None, "DECIMAL(5,0)"),
        ("NUMERIC(12, 3)", None, "DECIMAL(12,3)"),
        ("TIMESTAMP", None, "TIMESTAMP"),
        ("TIMESTAMP", "spark", "TIMESTAMP"),
        ("TIMESTAMPTZ", "postgres", "TIMESTAMP"),
        ("TIMESTAMP_NTZ", "spark", "TIMESTAMP_NTZ"),
        ("VARBINARY", None, "BINARY"),
        ("INT UNSIGNED", "mysql", "BIGINT"),
        ("Nullable(String)", "clickhouse", "STRING"),
        ("LowCardinality(String)", "clickhouse", "STRING"),
        ("Tuple(String, Int64)", "clickhouse", "STRUCT<_1: STRING, _2: BIGINT>"),
        ("Tuple(a String, b Int64)", "clickhouse", "STRUCT<a: STRING, b: BIGINT>"),
        ("Map(String, Array(Int32))", "clickhouse", "MAP<STRING,ARRAY<INT>>"),
        ("DateTime64(3)", "clickhouse", "TIMESTAMP"),
        ("Date32", "clickhouse", "DATE"),
        ("Enum8('a' = 1)", "clickhouse", "STRING"),
        ("FixedString(4)", "clickhouse", "STRING"),
        ("UUID", "clickhouse", "STRING"),
        ("Decimal32(2)", "clickhouse", "DECIMAL(9,2)"),
        ("UInt8", "clickhouse", "SMALLINT"),
        ("UInt64", "clickhouse", "DECIMAL(20,0)"),
        ("UInt256", "clickhouse", "DECIMAL(38,0)"),
        ("SimpleAggregateFunction(sum, Float64)", "clickhouse", "DOUBLE"),
        ("AggregateFunction(uniq, String)", "clickhouse", "AggregateFunction(uniq, STRING)"),
        (
            "AggregateFunction(quantiles(0.5, 0.9), Float64)",
            "clickhouse",
            "AggregateFunction(quantiles(0.5, 0.9), DOUBLE)",
        ),
        ("NULL", None, "VOID"),
    ],
)
def test_from_sqlglot_maps_other_dialects(sql_type: str, dialect: str | None, canonical: str) -> None:
    assert from_sqlglot(exp.DataType.build(sql_type, dialect=dialect)) == canonical


@pytest.mark.parametrize(
    ("sql_type", "dialect"),
    [
        ("INTERVAL", None),
        ("TIME", None),
        ("GEOMETRY", None),
        ("Nested(a String)", "clickhouse"),
        ("Decimal256(2)", "clickhouse"),
        ("ARRAY<INTERVAL>", None),
        ("MAP<STRING, TIME>", None),
        ("STRUCT<a: TIME>", None),
    ],
)
def test_from_sqlglot_unknown_is_none(sql_type: str, dialect: str | None) -> None:
    assert from_sqlglot(exp.DataType.build(sql_type, dialect=dialect)) is None


def test_from_sqlglot_unknown_and_user_defined() -> None:
    assert from_sqlglot(exp.DataType(this=exp.DataType.Type.UNKNOWN)) is None
    assert from_sqlglot(exp.DataType.build("Foo", udt=True)) is None
    assert from_sqlglot(exp.DataType.build("my_type", udt=True)) is None


# --------------------------------------------------------------------------------------------------
# Properties over generated nested types: every spelling of a tree normalizes to the tree's canonical form.

LEAVES: list[tuple[list[str], str]] = [
    (["TINYINT", "BYTE", "Int8"], "TINYINT"),
    (["SMALLINT", "SHORT", "Int16", "UInt8"], "SMALLINT"),
    (["INT", "INTEGER", "Int32", "UInt16"], "INT"),
    (["BIGINT", "LONG", "Int64", "UInt32"], "BIGINT"),
    (["UInt64", "DECIMAL(20, 0)"], "DECIMAL(20,0)"),
    (["DECIMAL(10,2)", "Decimal(10, 2)", "NUMERIC(10,2)"], "DECIMAL(10,2)"),
    (["Decimal64(3)", "DEC(18,3)"], "DECIMAL(18,3)"),
    (["FLOAT", "REAL", "Float32"], "FLOAT"),
    (["DOUBLE", "FLOAT8", "Float64"], "DOUBLE"),
    (["BOOLEAN", "BOOL", "Bool"], "BOOLEAN"),
    (["STRING", "String", "VARCHAR(10)", "FixedString(3)", "UUID", "LowCardinality(String)", "JSON"], "STRING"),
    (["DATE", "Date", "Date32"], "DATE"),
    (["TIMESTAMP", "DateTime", "DateTime64(3, 'UTC')", "TIMESTAMP_LTZ"], "TIMESTAMP"),
    (["TIMESTAMP_NTZ"], "TIMESTAMP_NTZ"),
    (["BINARY"], "BINARY"),
]

FIELD_NAMES = ["a", "b", "sum", "count", "_x", "CamelCase", "a b", "x`y", "1st", "ünï"]


def _case(text: str) -> st.SearchStrategy[str]:
    # Only keyword casing changes; quoted strings and field names keep their case.
    return st.sampled_from([text, text.upper(), text.lower()]) if "'" not in text else st.just(text)


@st.composite
def _leaf(draw: st.DrawFn) -> tuple[str, str]:
    spellings, canonical = draw(st.sampled_from(LEAVES))
    return draw(_case(draw(st.sampled_from(spellings)))), canonical


def _quote(name: str) -> str:
    return name if name.isascii() and name.isidentifier() else "`" + name.replace("`", "``") + "`"


def _composites(children: st.SearchStrategy[tuple[str, str]]) -> st.SearchStrategy[tuple[str, str]]:
    array = st.builds(
        lambda c, form: (form.format(c[0]), f"ARRAY<{c[1]}>"),
        children,
        st.sampled_from(["ARRAY<{}>", "Array({})", "array( {} )"]),
    )
    map_ = st.builds(
        lambda k, v, form: (form.format(k[0], v[0]), f"MAP<{k[1]},{v[1]}>"),
        _leaf(),
        children,
        st.sampled_from(["MAP<{},{}>", "Map({}, {})", "map< {} , {} >"]),
    )
    wrapped = st.builds(
        lambda c, form: (form.format(c[0]), c[1]),
        children,
        st.sampled_from(["Nullable({})", "LowCardinality({})"]),
    )

    @st.composite
    def struct(draw: st.DrawFn) -> tuple[str, str]:
        names = draw(st.lists(st.sampled_from(FIELD_NAMES), max_size=3, unique_by=str.lower))
        fields = [draw(children) for _ in names]
        canonical = "STRUCT<" + ", ".join(f"{_quote(n)}: {c}" for n, (_, c) in zip(names, fields)) + ">"
        form = draw(st.sampled_from(["spark", "spark_no_colon", "tuple", "tuple_unnamed"]))
        if form == "tuple_unnamed":
            written = "Tuple(" + ", ".join(w for w, _ in fields) + ")"
            positional = ", ".join(f"_{i}: {c}" for i, (_, c) in enumerate(fields, start=1))
            return written, f"STRUCT<{positional}>"
        if form == "tuple":
            return "Tuple(" + ", ".join(f"`{n.replace('`', '``')}` {w}" for n, (w, _) in zip(names, fields)) + ")", (
                canonical
            )
        colon = ":" if form == "spark" else ""
        written = "STRUCT<" + ", ".join(f"{_quote(n)}{colon} {w}" for n, (w, _) in zip(names, fields)) + ">"
        return written, canonical

    return st.one_of(array, map_, wrapped, struct())


NESTED_TYPES = st.recursive(_leaf(), _composites, max_leaves=8)


@settings(max_examples=300)
@given(NESTED_TYPES)
def test_generated_types_normalize_idempotently(pair: tuple[str, str]) -> None:
    written, canonical = pair
    assert normalize_type(written) == canonical
    assert normalize_type(canonical) == canonical
    assert normalize_type(normalize_type(written)) == normalize_type(written)
    assert from_sqlglot(to_sqlglot(written)) == canonical
    assert is_safe_cast(written, canonical)
    assert is_safe_cast(canonical, written)


TYPE_ALPHABET = "abcdefgilmnorstuyABDEGIMNRSTU0123456789_()<>,:'` -="


@settings(max_examples=500)
@given(st.text(alphabet=TYPE_ALPHABET, max_size=40) | st.text(max_size=20))
def test_arbitrary_text_never_crashes(text: str) -> None:
    try:
        canonical = normalize_type(text)
    except TypeProblem as problem:
        assert problem.message
        assert problem.hint
    else:
        assert normalize_type(canonical) == canonical
    assert isinstance(is_safe_cast(text, "STRING"), bool)
    assert isinstance(is_safe_cast("STRING", text), bool)


# --------------------------------------------------------------------------------------------------
# What ClickHouse makes of a value at ingest


DECIMAL_38 = 10 ** 38 - 1  # what DECIMAL(38,0), the Spark type of 128- and 256-bit integers, holds either way


@pytest.mark.parametrize("written, bounds, element, missing", [
    ("UInt32", (0, 2 ** 32 - 1), None, "0"),
    ("UInt64", (0, 2 ** 64 - 1), None, "0"),  # DECIMAL(20,0) holds more
    ("Int8", None, None, "0"),  # TINYINT holds exactly Int8's range: no check beyond Spark's cast
    ("Int64", None, None, "0"),
    ("Int128", None, None, "0"),  # wider than DECIMAL(38,0): Spark's cast is the check
    ("Int256", None, None, "0"),
    ("UInt128", (0, DECIMAL_38), None, "0"),  # only the lower bound is narrower
    ("UInt256", (0, DECIMAL_38), None, "0"),
    ("LowCardinality(String)", None, None, "''"),
    ("Nullable(UInt8)", (0, 255), None, None),  # Nullable keeps NULL, and a value that is there keeps its range
    ("LowCardinality(Nullable(UInt16))", (0, 65535), None, None),
    ("LowCardinality(Nullable(String))", None, None, None),
    ("Array(UInt8)", None, (0, 255), "array()"),
    ("Array(Nullable(UInt8))", None, (0, 255), "array()"),
    ("Array(UInt128)", None, (0, DECIMAL_38), "array()"),
    ("Map(String, UInt16)", None, (0, 65535), "map()"),
    ("Map(LowCardinality(String), Nullable(UInt32))", None, (0, 2 ** 32 - 1), "map()"),
    ("Map(String, Array(UInt8))", None, None, "map()"),  # a map of arrays: no value is an integer
    ("Map(String, Map(String, UInt8))", None, None, "map()"),
    ("Array(Array(UInt8))", None, None, "array()"),
    ("DateTime64(3, 'UTC')", None, None, "TIMESTAMP'1970-01-01 00:00:00+00:00'"),
    ("Decimal(10, 2)", None, None, "0"),
    ("FixedString(4)", None, None, None),  # no default here: NULL, as for Enum8/16 and Tuple
    ("Enum8('a' = 1)", None, None, None),
    ("Tuple(a UInt8, b String)", None, None, None),
    ("BIGINT", None, None, None),  # Spark spellings keep Spark's meaning
    ("STRING", None, None, None),
])
def test_value_rules_follow_clickhouse(written, bounds, element, missing):
    from pipeframe.datafiles.types import value_rules

    rules = value_rules(written)
    assert (rules.bounds, rules.element_bounds, rules.missing_sql) == (bounds, element, missing)
    assert rules.takes_default is (missing is not None)


@pytest.mark.parametrize("spark_type, holds", [
    ("TINYINT", (-128, 127)), ("BIGINT", (-(2 ** 63), 2 ** 63 - 1)), ("DECIMAL(20,0)", (-(10 ** 20 - 1), 10 ** 20 - 1)),
    ("DECIMAL(10,2)", None), ("DOUBLE", None), ("STRING", None),
])
def test_integer_range_is_what_the_spark_type_holds(spark_type, holds):
    from pipeframe.datafiles.types import integer_range

    assert integer_range(spark_type) == holds
