"""Spark SQL column types spelled as the Delta log's schema JSON (engine/deltaschema.py), JVM-free: each answer read
back by pyspark's own JSON schema reader gives the type Spark names for the DDL (its `simpleString`)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pyspark.sql.types import StructType, _parse_datatype_json_value

from pipeframe.engine import deltaschema

SIMPLE = [("STRING", "string"), ("BIGINT", "bigint"), ("long", "bigint"), ("INT", "int"), ("Integer", "int"),
          ("SMALLINT", "smallint"), ("TINYINT", "tinyint"), ("BOOLEAN", "boolean"), ("DOUBLE", "double"),
          ("FLOAT", "float"), ("REAL", "float"), ("DATE", "date"), ("TIMESTAMP", "timestamp"),
          ("TIMESTAMP_NTZ", "timestamp_ntz"), ("BINARY", "binary"), ("DECIMAL(10,2)", "decimal(10,2)"),
          ("decimal( 38 , 0 )", "decimal(38,0)"), ("DECIMAL", "decimal(10,0)"), ("DECIMAL(5)", "decimal(5,0)")]


def spark_name(kind: object) -> str:
    return _parse_datatype_json_value(kind).simpleString()


@pytest.mark.parametrize("ddl, name", SIMPLE)
def test_each_simple_type_is_the_one_spark_names(ddl, name):
    assert spark_name(deltaschema.delta_type(ddl)) == name


@pytest.mark.parametrize("ddl, name", [
    ("ARRAY<STRING>", "array<string>"),
    ("MAP<STRING,BIGINT>", "map<string,bigint>"),
    ("STRUCT<sum: DOUBLE, count: BIGINT>", "struct<sum:double,count:bigint>"),
    ("STRUCT<t: TIMESTAMP, v: STRING>", "struct<t:timestamp,v:string>"),
    ("STRUCT<`start`: TIMESTAMP, `end` TIMESTAMP>", "struct<start:timestamp,end:timestamp>"),
    ("ARRAY<STRUCT<a: ARRAY<DECIMAL(12,3)>, b: MAP<STRING, ARRAY<DOUBLE>>>>",
     "array<struct<a:array<decimal(12,3)>,b:map<string,array<double>>>>"),
])
def test_nested_types_are_the_ones_spark_names(ddl, name):
    assert spark_name(deltaschema.delta_type(ddl)) == name


@pytest.mark.parametrize("ddl", ["VARCHAR(10)", "CHAR(3)", "INTERVAL DAY", "VARIANT", "STRING NOT NULL",
                                 "ARRAY<STRING", "MAP<STRING>", "STRUCT<a INT,>", "DECIMAL(39,0)", "DECIMAL(3,4)",
                                 "STRUCT<a: VARCHAR(3)>", "ARRAY<>", "", "BIGINT COMMENT 'x'"])
def test_what_it_cannot_spell_exactly_is_left_to_spark(ddl):
    assert deltaschema.delta_type(ddl) is None
    assert deltaschema.struct([("a", "BIGINT"), ("b", ddl)]) is None


def test_a_schema_of_columns_reads_back_as_sparks_struct():
    schema = deltaschema.struct([("hour", "TIMESTAMP"), ("n", "BIGINT"), ("users", "BINARY"),
                                 ("avg", "STRUCT<sum: DOUBLE, count: BIGINT>")])
    assert StructType.fromJson(schema).simpleString() == \
        "struct<hour:timestamp,n:bigint,users:binary,avg:struct<sum:double,count:bigint>>"
    assert all(f["nullable"] is True for f in schema["fields"])


_SPELLINGS = {"string": ["STRING", "string"], "bigint": ["BIGINT", "LONG"], "int": ["INT", "INTEGER"],
              "smallint": ["SMALLINT", "SHORT"], "tinyint": ["TINYINT", "BYTE"], "double": ["DOUBLE"],
              "float": ["FLOAT", "REAL"], "date": ["DATE"], "timestamp": ["TIMESTAMP", "TIMESTAMP_LTZ"],
              "boolean": ["BOOLEAN"], "binary": ["BINARY"]}


@st.composite
def types(draw, depth: int = 3) -> tuple[str, str]:
    """(a Spark SQL spelling, the name Spark gives the type) of a random type, nested up to `depth`."""
    space = draw(st.sampled_from(["", " ", "  "]))
    choice = draw(st.sampled_from(["simple", "decimal"] + (["array", "map", "struct"] if depth else [])))
    if choice == "simple":
        name = draw(st.sampled_from(sorted(_SPELLINGS)))
        spelling = draw(st.sampled_from(_SPELLINGS[name]))
        return (spelling.lower() if draw(st.booleans()) else spelling), name
    if choice == "decimal":
        precision = draw(st.integers(1, 38))
        scale = draw(st.integers(0, precision))
        return f"DECIMAL({precision},{space}{scale})", f"decimal({precision},{scale})"
    if choice == "array":
        ddl, name = draw(types(depth - 1))
        return f"ARRAY<{space}{ddl}{space}>", f"array<{name}>"
    if choice == "map":
        key, key_name = draw(types(0))
        value, value_name = draw(types(depth - 1))
        return f"MAP<{key},{space}{value}>", f"map<{key_name},{value_name}>"
    names = draw(st.lists(st.from_regex(r"[a-z_][a-z0-9_]{0,6}", fullmatch=True), min_size=1, max_size=4,
                          unique=True))
    fields = [(n, draw(types(depth - 1)), draw(st.sampled_from([": ", " ", ":"]))) for n in names]
    return ("STRUCT<" + f",{space}".join(f"{n}{sep}{ddl}" for n, (ddl, _), sep in fields) + ">",
            "struct<" + ",".join(f"{n}:{name}" for n, (_, name), _ in fields) + ">")


@settings(max_examples=300, deadline=None)
@given(types())
def test_random_nested_types_read_back_as_the_type_spark_names(case):
    ddl, name = case
    assert spark_name(deltaschema.delta_type(ddl)) == name
