"""The datafile parser as a user sees it: what .datasource/.pipe/.incl files turn into, and every error it reports.

Projects are parsed with ``load_resources`` (no templating, no compiler), the same entry point the project uses.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from pipeframe.datafiles.loader import load_resources
from pipeframe.datafiles.model import Datasource, Pipe, Resources
from pipeframe.errors import Diagnostic, Location
from tests.conftest import write_project

EXAMPLE = Path(__file__).resolve().parents[2] / "example_project"


def load(root: Path, files: dict[str, str], environ: dict[str, str] | None = None,
         ignore: tuple[str, ...] = ()) -> tuple[Resources, list[Diagnostic]]:
    write_project(root, files)
    return load_resources(root, ignore, {} if environ is None else environ)


def datasource(resources: Resources, name: str) -> Datasource:
    return next(d for d in resources.datasources if d.name == name)


def pipe(resources: Resources, name: str) -> Pipe:
    return next(p for p in resources.pipes if p.name == name)


def found(diags: list[Diagnostic]) -> set[tuple[str, str, int]]:
    """(code, path, line) of every diagnostic."""
    return {(d.code, d.location.path, d.location.line) for d in diags if d.location}


def only(diags: list[Diagnostic], code: str) -> Diagnostic:
    assert [d.code for d in diags] == [code], [d.format() for d in diags]
    return diags[0]


# ------------------------------------------------------------------------------------------ datasources

SCHEMA_FILE = """\
DESCRIPTION >
    Raw sales events,
    one per order line

TOKEN "ingest" APPEND
TOKEN reader READ
TOKEN "backfill"

SCHEMA >
    `ts` DateTime `json:$.timestamp`,
    `order_id` String `json:$.order.id`,
    `brand` LowCardinality(Nullable(String)) `json:$.product.brand`,
    `amount` Float64 `json:$.amount` DEFAULT 0,
    `qty` UInt32,
    `customers` Int64,
    `day` Date,
    `tags` Array(String) `json:$.tags[:]`,
    `attrs` Map(String, Int64),
    `price` Decimal(10, 2),
    `labels` ARRAY<STRING>,
    `nested` MAP<STRING, ARRAY<INT>> DEFAULT map(),
    plain INT

ENGINE "MergeTree"
ENGINE_PARTITION_KEY toYYYYMM(ts)
ENGINE_SORTING_KEY (order_id, `ts`)
ENGINE_TTL ts + INTERVAL 90 DAYS
ENGINE_SETTINGS index_granularity=8192
"""


def test_schema_columns_have_canonical_spark_types(tmp_path):
    resources, diags = load(tmp_path, {"datasources/sales.datasource": SCHEMA_FILE})
    assert diags == []
    ds = datasource(resources, "sales")
    assert [(c.name, c.type) for c in ds.columns] == [
        ("ts", "TIMESTAMP"),
        ("order_id", "STRING"),
        ("brand", "STRING"),
        ("amount", "DOUBLE"),
        ("qty", "BIGINT"),
        ("customers", "BIGINT"),
        ("day", "DATE"),
        ("tags", "ARRAY<STRING>"),
        ("attrs", "MAP<STRING,BIGINT>"),
        ("price", "DECIMAL(10,2)"),
        ("labels", "ARRAY<STRING>"),
        ("nested", "MAP<STRING,ARRAY<INT>>"),
        ("plain", "INT"),
    ]
    assert ds.column("brand").written_type == "LowCardinality(Nullable(String))"
    assert ds.column("nested").written_type == "MAP<STRING, ARRAY<INT>>"
    assert ds.column("missing") is None


def test_schema_json_paths_defaults_and_locations(tmp_path):
    resources, _ = load(tmp_path, {"datasources/sales.datasource": SCHEMA_FILE})
    ds = datasource(resources, "sales")
    assert {c.name: c.json_path for c in ds.columns if c.json_path} == {
        "ts": "$.timestamp",
        "order_id": "$.order.id",
        "brand": "$.product.brand",
        "amount": "$.amount",
        "tags": "$.tags[:]",
    }
    assert {c.name: c.default for c in ds.columns if c.default is not None} == {"amount": "0", "nested": "map()"}
    # Each column points at its own line, at the column where its definition starts.
    assert ds.column("ts").location == Location("datasources/sales.datasource", 10, 5)
    assert ds.column("plain").location == Location("datasources/sales.datasource", 22, 5)


def test_description_tokens_and_engine_settings(tmp_path):
    resources, _ = load(tmp_path, {"datasources/sales.datasource": SCHEMA_FILE})
    ds = datasource(resources, "sales")
    assert ds.path == "datasources/sales.datasource"
    assert ds.description == "Raw sales events,\none per order line"
    assert [(t.name, t.scope, t.location.line) for t in ds.tokens] == [
        ("ingest", "APPEND", 5), ("reader", "READ", 6), ("backfill", "APPEND", 7)]
    assert ds.engine == "MergeTree"
    assert ds.partition_key == "toYYYYMM(ts)"
    assert ds.sorting_key == ("order_id", "ts")
    assert ds.ttl == "ts + INTERVAL 90 DAYS"
    assert ds.engine_settings == (("ENGINE_SETTINGS", "index_granularity=8192"),)
    assert ds.where("ENGINE_TTL") == Location("datasources/sales.datasource", 27, 1)
    assert ds.where("SCHEMA") == Location("datasources/sales.datasource", 9, 1)
    assert ds.where("FORWARD_QUERY") == ds.location == Location("datasources/sales.datasource")


def test_aggregate_function_columns(tmp_path):
    resources, diags = load(tmp_path, {"datasources/states.datasource": """\
SCHEMA >
    `country` String,
    `revenue` AggregateFunction(sum, Float64),
    `buyers` AggregateFunction(uniq, String),
    `latest` AggregateFunction(argMax, String, DateTime),
    `p` AggregateFunction(quantiles(0.5, 0.9), Float64),
    `top` SimpleAggregateFunction(max, Int64)
ENGINE AggregatingMergeTree
ENGINE_SORTING_KEY country
"""})
    assert diags == []
    ds = datasource(resources, "states")
    assert [(c.name, c.type, c.aggregate_function, c.aggregate_args, c.aggregate_params, c.simple_aggregate)
            for c in ds.columns] == [
        ("country", "STRING", None, (), (), False),
        ("revenue", "AggregateFunction(sum, DOUBLE)", "sum", ("DOUBLE",), (), False),
        ("buyers", "AggregateFunction(uniq, STRING)", "uniq", ("STRING",), (), False),
        ("latest", "AggregateFunction(argMax, STRING, TIMESTAMP)", "argMax", ("STRING", "TIMESTAMP"), (), False),
        ("p", "AggregateFunction(quantiles(0.5, 0.9), DOUBLE)", "quantiles", ("DOUBLE",), ("0.5", "0.9"), False),
        ("top", "BIGINT", "max", ("BIGINT",), (), True),
    ]
    assert ds.engine == "AggregatingMergeTree"
    assert ds.sorting_key == ("country",)


def test_forward_query_backfill_and_empty_keys(tmp_path):
    resources, diags = load(tmp_path, {
        "a.datasource": """\
SCHEMA >
    `id` BIGINT,
    `name` STRING
ENGINE_PARTITION_KEY tuple()
ENGINE_SORTING_KEY tuple()
FORWARD_QUERY >
    SELECT id,
           coalesce(name, '') AS name
BACKFILL skip
""",
        "b.datasource": "SCHEMA >\n    `id` BIGINT\nBACKFILL auto\n",
    })
    assert diags == []
    a, b = datasource(resources, "a"), datasource(resources, "b")
    assert a.forward_query == "SELECT id,\n       coalesce(name, '') AS name"
    assert a.backfill == "skip"
    assert a.partition_key is None
    assert a.sorting_key == ()
    assert (b.backfill, b.forward_query, b.engine, b.ttl, b.tokens) == (None, None, None, None, ())


def test_default_expressions_with_commas_comparisons_and_codecs(tmp_path):
    resources, diags = load(tmp_path, {"a.datasource": """\
SCHEMA >
    `x` Int32 `json:$.x` DEFAULT 0 CODEC(ZSTD(1)),
    `y` Int32 CODEC(Delta, ZSTD(1)) DEFAULT 3,
    `z` Int32 DEFAULT if(1 > 0, 1, 2),
    `w` Array(Int32) DEFAULT arrayMap(v -> v * 2, [1, 2]),
    `s` String DEFAULT 'a, b'
"""})
    assert diags == []
    ds = datasource(resources, "a")
    assert [(c.name, c.type, c.default) for c in ds.columns] == [
        ("x", "INT", "0"),
        ("y", "INT", "3"),
        ("z", "INT", "if(1 > 0, 1, 2)"),
        ("w", "ARRAY<INT>", "arrayMap(v -> v * 2, [1, 2])"),
        ("s", "STRING", "'a, b'"),
    ]
    assert ds.column("x").json_path == "$.x"


# ------------------------------------------------------------------------------------------------ pipes

PIPE_FILE = """\
TOKEN "dashboard"
TOKEN "admin" READ
DESCRIPTION >
    Hourly sales per product

NODE hourly
SQL >
    SELECT date_trunc('hour', ts) AS hour, product,
           count(*) AS orders
    FROM sales
    GROUP BY 1, 2
DESCRIPTION >
    the aggregation

NODE endpoint
SQL >
    %
    SELECT * FROM hourly
    WHERE product = {{ String(product) }}
TYPE endpoint
"""


def test_pipe_with_several_nodes(tmp_path):
    resources, diags = load(tmp_path, {"pipes/sales.pipe": PIPE_FILE})
    assert diags == []
    p = pipe(resources, "sales")
    assert (p.path, p.description) == ("pipes/sales.pipe", "Hourly sales per product")
    assert [(t.name, t.scope) for t in p.tokens] == [("dashboard", "READ"), ("admin", "READ")]
    assert [n.name for n in p.nodes] == ["hourly", "endpoint"]
    hourly, endpoint = p.nodes
    assert hourly.sql == ("SELECT date_trunc('hour', ts) AS hour, product,\n       count(*) AS orders\n"
                          "FROM sales\nGROUP BY 1, 2")
    assert hourly.description == "the aggregation"
    assert (hourly.type, hourly.templated) == (None, False)
    assert hourly.location == Location("pipes/sales.pipe", 6, 1)
    assert hourly.sql_location == Location("pipes/sales.pipe", 8, 5)
    assert endpoint.sql == "%\nSELECT * FROM hourly\nWHERE product = {{ String(product) }}"
    assert (endpoint.type, endpoint.templated, endpoint.description) == ("endpoint", True, "")
    assert endpoint.sql_location == Location("pipes/sales.pipe", 17, 5)
    assert endpoint.where("TYPE") == Location("pipes/sales.pipe", 20, 1)
    assert (p.type, p.typed_node, p.output_node) == ("endpoint", endpoint, endpoint)
    assert p.node("hourly") is hourly and p.node("nope") is None


def test_untyped_pipe_outputs_its_last_node(tmp_path):
    resources, diags = load(tmp_path, {"p.pipe": "NODE a\nSQL >\n    SELECT 1\nNODE b\nSQL SELECT 2\n"})
    assert diags == []
    p = pipe(resources, "p")
    assert (p.type, p.typed_node, p.output_node.name) == (None, None, "b")
    assert p.nodes[1].sql == "SELECT 2"
    assert p.nodes[1].sql_location == Location("p.pipe", 5, 5)


def test_keywords_are_case_insensitive(tmp_path):
    resources, diags = load(tmp_path, {"p.pipe": "node a\nsql >\n    SELECT 1\nType Endpoint\n"})
    assert diags == []
    assert [(n.name, n.sql, n.type) for n in pipe(resources, "p").nodes] == [("a", "SELECT 1", "endpoint")]


def test_materialized_and_copy_node_settings(tmp_path):
    resources, diags = load(tmp_path, {
        "mv.pipe": """\
NODE agg
SQL >
    SELECT product, count(DISTINCT customer) AS buyers FROM sales JOIN products USING (product)
    GROUP BY product
TYPE Materialized
DATASOURCE sales_by_product
DIMENSIONS products, `users`
COUNT_DISTINCT Sketch
FOLLOW_TTL True
""",
        "snap.pipe": """\
NODE snapshot
SQL >
    SELECT * FROM sales_by_product
TYPE copy
TARGET_DATASOURCE snapshot_table
COPY_MODE Replace
COPY_SCHEDULE 0 1 * * *
""",
        "ondemand.pipe": "NODE s\nSQL >\n    SELECT 1\nTYPE COPY\nTARGET_DATASOURCE t\nCOPY_SCHEDULE @on-demand\n",
    })
    assert diags == []
    mv = pipe(resources, "mv").nodes[0]
    assert (mv.type, mv.datasource, mv.target_datasource) == ("materialized", "sales_by_product", None)
    assert mv.dimensions == ("products", "users")  # backticks dropped, as in ENGINE_SORTING_KEY
    assert mv.count_distinct == "sketch" and mv.follow_ttl is True
    assert mv.where("DATASOURCE") == Location("mv.pipe", 6, 1)
    snap = pipe(resources, "snap").nodes[0]
    assert (snap.type, snap.target_datasource, snap.copy_mode, snap.copy_schedule, snap.datasource) == (
        "copy", "snapshot_table", "replace", "0 1 * * *", None)
    ondemand = pipe(resources, "ondemand").nodes[0]
    assert (ondemand.type, ondemand.copy_mode, ondemand.copy_schedule) == ("copy", None, "@on-demand")


def test_a_lowercase_node_setting_after_the_sql_ends_the_sql_block(tmp_path):
    resources, diags = load(tmp_path, {"p.pipe": "NODE a\nSQL >\n    SELECT 1\nfollow_ttl true\n"
                                                 "type materialized\ndatasource t\n"})
    node = pipe(resources, "p").nodes[0]
    assert diags == [] and node.sql.strip() == "SELECT 1" and node.follow_ttl is True


@pytest.mark.parametrize("line, message, hint", [
    ("TYPE materialised", "TYPE `materialised` is not a node type.", "Did you mean materialized?"),
    ("TYPE table", "TYPE `table` is not a node type.", "Use endpoint, materialized, copy or sink."),
    ("COPY_MODE upsert", "COPY_MODE `upsert` is not understood.", "Use append or replace."),
    ("COUNT_DISTINCT fuzzy", "COUNT_DISTINCT `fuzzy` is not understood.",
     "Use exact (a set state) or sketch (an HLL state)."),
    ("FOLLOW_TTL yes", "FOLLOW_TTL `yes` is not understood.",
     ("Write `FOLLOW_TTL true` (the view forgets the rows its source's ENGINE_TTL deletes) or `FOLLOW_TTL false` "
      "(the default: it keeps their aggregates).")),
])
def test_bad_node_setting_values(tmp_path, line, message, hint):
    _, diags = load(tmp_path, {"p.pipe": f"NODE a\nSQL >\n    SELECT 1\n{line}\n"})
    d = only(diags, "PF101")
    assert (d.message, d.hint, d.location) == (message, hint, Location("p.pipe", 4, 1))


# ----------------------------------------------------------------------------------- INCLUDE, variables

def test_include_splices_nodes_with_variables_and_keeps_their_origin(tmp_path):
    resources, diags = load(tmp_path, {
        "pipes/p.pipe": """\
DESCRIPTION >
    uses an include
INCLUDE "includes/range.incl" "SOURCE=sales" "COLUMN=ts"

NODE endpoint
SQL >
    SELECT * FROM in_range
TYPE endpoint
""",
        "includes/range.incl": """\
# a comment that is dropped
NODE in_range
SQL >
    SELECT *
    FROM $SOURCE
    WHERE ${COLUMN} >= '2024-01-01'
""",
    })
    assert diags == []
    p = pipe(resources, "p")
    assert [n.name for n in p.nodes] == ["in_range", "endpoint"]
    in_range, endpoint = p.nodes
    assert in_range.sql == "SELECT *\nFROM sales\nWHERE ts >= '2024-01-01'"
    assert in_range.location == Location("includes/range.incl", 2, 1)
    assert in_range.sql_location == Location("includes/range.incl", 4, 5)
    # Lines after the INCLUDE keep their own file and line numbers.
    assert endpoint.location == Location("pipes/p.pipe", 5, 1)
    assert endpoint.sql_location == Location("pipes/p.pipe", 7, 5)
    # .incl files are not resources.
    assert resources.files == ("pipes/p.pipe",)


def test_nested_include_relative_to_includer_and_inherited_variables(tmp_path):
    resources, diags = load(tmp_path, {
        "pipes/p.pipe": 'INCLUDE "inc/outer.incl" "T=sales"\n',
        "pipes/inc/outer.incl": 'INCLUDE "inner.incl" "C=amount"\nNODE b\nSQL >\n    SELECT $T FROM a\n',
        "pipes/inc/inner.incl": "NODE a\nSQL >\n    SELECT $C FROM $T\n",
    })
    assert diags == []
    assert [(n.name, n.sql, n.location) for n in pipe(resources, "p").nodes] == [
        ("a", "SELECT amount FROM sales", Location("pipes/inc/inner.incl", 1, 1)),
        ("b", "SELECT sales FROM a", Location("pipes/inc/outer.incl", 2, 1)),
    ]


def test_include_variables_only_reach_the_included_file(tmp_path):
    # `C` is passed to inner.incl only, so outer.incl's own `$C` is unset.
    _, diags = load(tmp_path, {
        "pipes/p.pipe": 'INCLUDE "inc/outer.incl" "T=sales"\n',
        "pipes/inc/outer.incl": 'INCLUDE "inner.incl" "C=amount"\nNODE b\nSQL >\n    SELECT $C FROM a\n',
        "pipes/inc/inner.incl": "NODE a\nSQL >\n    SELECT $C FROM $T\n",
    })
    d = only(diags, "PF107")
    assert d.location == Location("pipes/inc/outer.incl", 4, 12)


def test_environment_variables_are_substituted(tmp_path):
    resources, diags = load(tmp_path, {
        "p.pipe": "NODE a\nSQL >\n    SELECT * FROM $TABLE WHERE tenant = '${TENANT}_x' AND price > 0\n",
        "i.incl": "NODE b\nSQL >\n    SELECT '$TENANT'\n",
        "q.pipe": 'INCLUDE "i.incl" "TENANT=override"\n',
    }, environ={"TABLE": "sales", "TENANT": "acme"})
    assert diags == []
    assert pipe(resources, "p").nodes[0].sql == "SELECT * FROM sales WHERE tenant = 'acme_x' AND price > 0"
    assert pipe(resources, "q").nodes[0].sql == "SELECT 'override'"


def test_unset_variable_is_reported_where_it_is_written(tmp_path):
    _, diags = load(tmp_path, {
        "p.pipe": "NODE a\nSQL >\n    SELECT 1\n    FROM t WHERE x = ${MISSING}\n",
    }, environ={"OTHER": "1"})
    d = only(diags, "PF107")
    assert d.location == Location("p.pipe", 4, 22)
    assert d.message == "Variable `$MISSING` is not set."
    assert "MISSING" in d.hint


def test_unset_variable_inside_an_include_is_reported_in_the_include(tmp_path):
    _, diags = load(tmp_path, {"p.pipe": 'INCLUDE "x.incl"\n', "x.incl": "NODE a\nSQL >\n    SELECT $NOPE\n"})
    assert only(diags, "PF107").location == Location("x.incl", 3, 12)


@pytest.mark.parametrize("include, message", [
    ('INCLUDE "nope.incl"', "Included file `nope.incl` does not exist."),
    ("INCLUDE", "INCLUDE needs a file path."),
    ('INCLUDE "x.incl" "no-equals"', "INCLUDE argument `no-equals` is not of the form NAME=value."),
    ('INCLUDE "x.incl', "INCLUDE line cannot be read: No closing quotation."),
    ('INCLUDE "' + "a" * 300 + '.incl"', "Included file `" + "a" * 300 + ".incl` does not exist."),
    ('INCLUDE "x\x00.incl"', "The INCLUDE path contains a NUL character."),
])
def test_include_errors(tmp_path, include, message):
    resources, diags = load(tmp_path, {"p.pipe": f"{include}\nNODE a\nSQL >\n    SELECT 1\n", "x.incl": ""})
    d = only(diags, "PF106")
    assert (d.message, d.location) == (message, Location("p.pipe", 1, 1))
    assert [n.name for n in pipe(resources, "p").nodes] == ["a"]


@pytest.mark.parametrize("how", ["dotdot", "absolute", "symlink", "symlinked folder"])
def test_include_is_confined_to_the_project_folder(tmp_path, how):
    secret = tmp_path / "outside" / "secret.incl"
    secret.parent.mkdir()
    secret.write_text("NODE leaked\nSQL >\n    SELECT 'password' AS secret\n")
    root = tmp_path / "proj"
    (root / "pipes").mkdir(parents=True)
    if how == "symlink":
        (root / "pipes" / "link.incl").symlink_to(secret)
    if how == "symlinked folder":
        (root / "shared").symlink_to(secret.parent, target_is_directory=True)
    path = {"dotdot": "../../outside/secret.incl", "absolute": str(secret), "symlink": "link.incl",
            "symlinked folder": "shared/secret.incl"}[how]
    resources, diags = load(root, {"pipes/p.pipe": f'NODE a\nSQL >\n    SELECT 1\nINCLUDE "{path}"\n'})
    d = only(diags, "PF106")
    assert d.message == f"Included file `{path}` is outside the project folder."
    assert d.location == Location("pipes/p.pipe", 4, 1)
    assert "inside the project folder" in d.hint or "into the project folder" in d.hint
    assert [n.name for n in pipe(resources, "p").nodes] == ["a"]


def test_include_inside_the_project_through_dotdot_and_symlinks_is_allowed(tmp_path):
    root = tmp_path / "proj"
    write_project(root, {"includes/n.incl": "NODE shared\nSQL >\n    SELECT 1\n"})
    (root / "pipes").mkdir()
    (root / "pipes" / "link.incl").symlink_to(root / "includes" / "n.incl")
    resources, diags = load(root, {"pipes/p.pipe": 'INCLUDE "../includes/n.incl"\n',
                                   "pipes/q.pipe": 'INCLUDE "link.incl"\n'})
    assert not diags, diags
    assert [n.name for n in pipe(resources, "p").nodes] == ["shared"]
    assert [n.name for n in pipe(resources, "q").nodes] == ["shared"]


def test_include_loops_are_reported_once_per_include_line(tmp_path):
    resources, diags = load(tmp_path, {
        "p.pipe": 'INCLUDE "x.incl"\n',
        "x.incl": 'INCLUDE "y.incl"\n',
        "y.incl": 'NODE n\nSQL >\n    SELECT 1\nINCLUDE "x.incl"\n',
    })
    d = only(diags, "PF106")
    assert d.message == "INCLUDE loop: p.pipe -> x.incl -> y.incl -> x.incl."
    assert d.location == Location("y.incl", 4, 1)
    assert [n.name for n in pipe(resources, "p").nodes] == ["n"]


def test_a_file_including_itself_is_expanded_once(tmp_path):
    resources, diags = load(tmp_path, {
        "p.pipe": 'INCLUDE "x.incl"\n',
        "x.incl": 'NODE n\nSQL >\n    SELECT 1\nINCLUDE "x.incl"\nINCLUDE "./x.incl"\n',
    })
    assert found(diags) == {("PF106", "x.incl", 4), ("PF106", "x.incl", 5)}
    assert [n.name for n in pipe(resources, "p").nodes] == ["n"]


def test_a_file_including_itself_many_times_stops_quickly(tmp_path):
    # Stopping only at the depth limit would expand this 6**8 times.
    started = time.monotonic()
    _, diags = load(tmp_path, {"p.pipe": 'INCLUDE "x.incl"\n', "x.incl": 'INCLUDE "x.incl"\n' * 6})
    assert found(diags) == {("PF106", "x.incl", line) for line in range(1, 7)}
    assert time.monotonic() - started < 5


# ------------------------------------------------------------------------------------------------ errors

def test_unknown_keyword_suggests_the_nearest(tmp_path):
    _, diags = load(tmp_path, {
        "a.datasource": "DESCRIPTON >\n    typo\nSCHEMA >\n    `x` INT\n",
        "p.pipe": "NODEE a\nNODE b\nSQL >\n    SELECT 1\nTYPPE endpoint\n",
    })
    by_path = {d.location.path: d for d in diags}
    assert [d.code for d in diags] == ["PF102", "PF102", "PF102"]
    ds = by_path["a.datasource"]
    assert (ds.message, ds.hint, ds.location) == (
        "Unknown keyword DESCRIPTON in a datasource file.", "Did you mean DESCRIPTION?", Location("a.datasource"))
    pipe_problems = sorted((d.location.line, d.hint) for d in diags if d.location.path == "p.pipe")
    assert pipe_problems == [(1, "Did you mean NODE?"), (5, "Did you mean TYPE?")]


def test_block_lines_indented_by_fewer_than_four_spaces_belong_to_the_block(tmp_path):
    # Tinybird accepts any indentation, even none: the block ends at the next keyword line.
    resources, diags = load(tmp_path, {"a.datasource": "SCHEMA >\n    `x` INT,\n  `y` STRING,\n`z` INT\n\n"
                                                        "ENGINE_SORTING_KEY x\n"})
    assert diags == []
    ds = datasource(resources, "a")
    assert [(c.name, c.location) for c in ds.columns] == [
        ("x", Location("a.datasource", 2, 5)), ("y", Location("a.datasource", 3, 3)),
        ("z", Location("a.datasource", 4, 1))]
    assert ds.sorting_key == ("x",)


def test_unindented_sql_lines_stay_in_the_query(tmp_path):
    resources, diags = load(tmp_path, {"p.pipe": (
        "NODE a\nSQL >\n%\n    SELECT day, count() AS n\n    FROM t\n    GROUP BY day\nORDER BY day ASC\n"
        "{% if defined(x) %}\nLIMIT 1\n{% end %}\n\nTYPE ENDPOINT\n")})
    assert diags == []
    node = pipe(resources, "p").nodes[0]
    assert node.templated and node.type == "endpoint"
    assert node.sql == ("%\nSELECT day, count() AS n\nFROM t\nGROUP BY day\nORDER BY day ASC\n"
                        "{% if defined(x) %}\nLIMIT 1\n{% end %}")
    assert node.sql_location == Location("p.pipe", 3, 1)


def test_a_misspelt_keyword_after_a_block_is_reported_not_swallowed(tmp_path):
    _, diags = load(tmp_path, {"p.pipe": "NODE a\nSQL >\n    SELECT 1\nTYPPE endpoint\n"})
    d = only(diags, "PF102")
    assert (d.location, d.hint) == (Location("p.pipe", 4, 1), "Did you mean TYPE?")


def test_quoted_engine_values(tmp_path):
    resources, diags = load(tmp_path, {"a.datasource": (
        'SCHEMA >\n    `hour` DateTime,\n    `name` String\nENGINE "MergeTree"\n'
        'ENGINE_PARTITION_KEY "toYYYYMM(hour)"\nENGINE_SORTING_KEY "hour, name"\n'
        "ENGINE_TTL 'hour + INTERVAL 1 DAY'\nENGINE_VER \"hour\"\n")})
    assert diags == []
    ds = datasource(resources, "a")
    assert (ds.engine, ds.partition_key, ds.sorting_key, ds.ttl) == (
        "MergeTree", "toYYYYMM(hour)", ("hour", "name"), "hour + INTERVAL 1 DAY")
    assert ("ENGINE_VER", "hour") in ds.engine_settings


def test_connector_settings_are_warnings_not_parse_errors(tmp_path):
    resources, diags = load(tmp_path, {
        "a.datasource": ("SCHEMA >\n    `x` INT\nKAFKA_CONNECTION_NAME 'c'\nKAFKA_TOPIC 't'\n"
                         "IMPORT_SERVICE 'snowflake'\nIMPORT_SCHEDULE '@on-demand'\n"),
        "p.pipe": "NODE a\nSQL >\n    SELECT 1\nEXPORT_SERVICE 's3'\n",
    })
    # The Kafka settings pipeframe acts on are kept (checked against the connection by `check`), the rest warned of;
    # a pipe's EXPORT_* lines are kept for `check` to judge against TYPE sink (connectors/export.py).
    assert [(d.code, d.severity, d.location.line) for d in diags] == [("PF110", "warning", 5), ("PF110", "warning", 6)]
    assert [(s.keyword, s.value) for s in resources.pipes[0].nodes[0].export] == [("EXPORT_SERVICE", "s3")]
    assert diags[0].message == "The Import connector is not supported yet; `IMPORT_SERVICE` is ignored."
    assert [(s.keyword, s.value, s.location.line) for s in datasource(resources, "a").connector] == [
        ("KAFKA_CONNECTION_NAME", "c", 3), ("KAFKA_TOPIC", "t", 4)]
    # A Kafka datasource has the columns Tinybird adds (pipes and keys read them) unless SCHEMA declares them.
    assert [(c.name, c.type) for c in datasource(resources, "a").columns] == [
        ("x", "INT"), ("__value", "STRING"), ("__topic", "STRING"), ("__partition", "SMALLINT"),
        ("__offset", "BIGINT"), ("__timestamp", "TIMESTAMP"), ("__key", "STRING")]
    resources, diags = load(tmp_path / "declared", {"b.datasource": (
        "SCHEMA >\n    `__value` String,\n    `__timestamp` DateTime64(3)\nKAFKA_TOPIC 't'\n"
        'ENGINE_SORTING_KEY "__timestamp, __offset"\n')})
    columns = [(c.name, c.type) for c in datasource(resources, "b").columns]
    assert columns[:2] == [("__value", "STRING"), ("__timestamp", "TIMESTAMP")] and len(columns) == 6
    assert diags == []


def test_a_token_scope_pipeframe_lacks_is_a_warning(tmp_path):
    resources, diags = load(tmp_path, {"a.datasource": "TOKEN app CREATE\nTOKEN w APPEND\nSCHEMA >\n    `x` INT\n"})
    d = only(diags, "PF110")
    assert (d.severity, d.message) == ("warning", "Token scope CREATE is not supported yet; `TOKEN` is ignored.")
    assert [t.name for t in datasource(resources, "a").tokens] == ["w"]


def test_indented_line_outside_a_block(tmp_path):
    _, diags = load(tmp_path, {"a.datasource": "SCHEMA >\n    `x` INT\nENGINE MergeTree\n  oops\n"})
    d = only(diags, "PF103")
    assert (d.location, d.message) == (Location("a.datasource", 4, 3), "Indented line outside a block (indent 2).")


def test_tabs_count_as_four_spaces(tmp_path):
    resources, diags = load(tmp_path, {"a.datasource": "SCHEMA >\n\t`x` INT,\n\t`y` STRING\n"})
    assert diags == []
    assert [c.name for c in datasource(resources, "a").columns] == ["x", "y"]


def test_duplicate_column(tmp_path):
    resources, diags = load(tmp_path, {"a.datasource": "SCHEMA >\n    `x` INT,\n    `y` INT,\n    `x` STRING\n"})
    d = only(diags, "PF105")
    assert (d.message, d.location) == ("Column `x` is declared twice.", Location("a.datasource", 4, 5))
    assert [(c.name, c.type) for c in datasource(resources, "a").columns] == [("x", "INT"), ("y", "INT")]


def test_unknown_type_names_the_column(tmp_path):
    _, diags = load(tmp_path, {"a.datasource": "SCHEMA >\n    `id` INT,\n    `amount` Float65\n"})
    d = only(diags, "PF109")
    assert d.message == "Column `amount`: Unknown column type `Float65`."
    assert d.hint.startswith("Did you mean `Float64`")
    assert d.location == Location("a.datasource", 3, 5)


@pytest.mark.parametrize("column, code, message", [
    ("`2x` INT", "PF104", "Column name `2x` is not a valid identifier."),
    ("`my col` INT", "PF104", "Column name `my col` is not a valid identifier."),
    ("2x INT", "PF108", "Column definition `2x INT` is not understood."),
    ("`x`", "PF108", "Column definition ``x`` is not understood."),
    ("`x` `json:$.x`", "PF108", "Column `x` has no type."),
    ("`x` INT `json:x`", "PF108", "JSON path `x` of column `x` must start with `$`."),
])
def test_bad_column_definitions(tmp_path, column, code, message):
    _, diags = load(tmp_path, {"a.datasource": f"SCHEMA >\n    `ok` INT,\n    {column}\n"})
    d = only(diags, code)
    assert (d.message, d.location) == (message, Location("a.datasource", 3, 5))


def test_empty_column_between_commas(tmp_path):
    _, diags = load(tmp_path, {"a.datasource": "SCHEMA >\n    `x` INT,,\n    `y` INT,\n"})
    d = only(diags, "PF108")
    assert d.message == "Empty column definition (two commas in a row?)."
    assert d.location.line == 2


def test_missing_and_empty_schema(tmp_path):
    _, diags = load(tmp_path, {
        "a.datasource": "DESCRIPTION >\n    no schema\n",
        "b.datasource": "SCHEMA >\n\nENGINE MergeTree\n",
        "c.datasource": "SCHEMA `x` INT\n",
    })
    assert sorted((d.code, str(d.location), d.message) for d in diags) == [
        ("PF101", "c.datasource:1:1", "SCHEMA must be a block."),
        ("PF108", "a.datasource:1:1", "Datasource `a` has no SCHEMA."),
        ("PF108", "b.datasource:1:1", "SCHEMA is empty."),
    ]


def test_keyword_twice(tmp_path):
    _, diags = load(tmp_path, {
        "a.datasource": "SCHEMA >\n    `x` INT\nENGINE MergeTree\nENGINE ReplacingMergeTree\n",
        "p.pipe": "NODE a\nSQL >\n    SELECT 1\nSQL >\n    SELECT 2\n",
    })
    assert sorted((d.code, str(d.location), d.message) for d in diags) == [
        ("PF101", "a.datasource:4:1", "ENGINE appears twice."),
        ("PF101", "p.pipe:4:1", "SQL appears twice in node `a`."),
    ]


def test_two_typed_nodes(tmp_path):
    resources, diags = load(tmp_path, {"p.pipe": """\
NODE a
SQL >
    SELECT 1
TYPE endpoint
NODE b
SQL >
    SELECT 2
TYPE materialized
DATASOURCE t
"""})
    d = only(diags, "PF304")
    assert d.message == "Node `b` has a TYPE, but node `a` already has one."
    assert d.location == Location("p.pipe", 8, 1)
    assert pipe(resources, "p").type == "endpoint"


def test_node_problems(tmp_path):
    _, diags = load(tmp_path, {"p.pipe": """\
SQL >
    SELECT 0
NODE a
DESCRIPTION >
    no sql here
NODE 1bad
SQL >
    SELECT 1
NODE c
SQL >
    SELECT 2
NODE c
SQL >
NODE d
SQL >
    SELECT 3
"""})
    assert sorted((d.code, d.location.line, d.message) for d in diags) == [
        ("PF101", 1, "SQL appears before any NODE."),
        ("PF101", 3, "Node `a` has no SQL."),
        ("PF101", 12, "Node `c` has no SQL."),
        ("PF101", 13, "SQL block of node `c` is empty."),
        ("PF104", 6, "Node name `1bad` is not a valid identifier."),
        ("PF105", 12, "Node `c` is defined twice in this pipe."),
    ]


def test_pipe_without_nodes_is_reported_even_when_other_files_have_errors(tmp_path):
    _, diags = load(tmp_path, {
        "datasources/a.datasource": "SCHEMAX >\n    `x` INT\n",
        "pipes/empty.pipe": "# nothing yet\nDESCRIPTION >\n    todo\n",
    })
    assert found(diags) == {
        ("PF102", "datasources/a.datasource", 1),
        ("PF108", "datasources/a.datasource", 1),
        ("PF101", "pipes/empty.pipe", 1),
    }
    assert next(d for d in diags if d.location.path == "pipes/empty.pipe").message == "Pipe `empty` has no nodes."


def test_bad_token_and_backfill_lines(tmp_path):
    _, diags = load(tmp_path, {
        "a.datasource": 'SCHEMA >\n    `x` INT\nTOKEN "a b" READ now\nBACKFILL sometimes\nTOKEN "c d" APPEND\n',
    })
    assert sorted((d.code, d.location.line, d.message) for d in diags) == [
        ("PF101", 3, 'TOKEN line `"a b" READ now` is not understood.'),
        ("PF101", 4, "BACKFILL `sometimes` is not understood."),
    ]
    resources, _ = load(tmp_path / "quoted", {"a.pipe": 'TOKEN "read pipes token" READ\nNODE "n"\nSQL >\n    SELECT 1\n'})
    assert [(t.name, t.scope) for t in pipe(resources, "a").tokens] == [("read pipes token", "READ")]
    assert [n.name for n in pipe(resources, "a").nodes] == ["n"]  # a quoted node name is the name


def test_line_that_is_not_a_keyword(tmp_path):
    # After a one-line keyword (no block to continue), a line that starts with no keyword is an error.
    _, diags = load(tmp_path, {"a.datasource": "SCHEMA >\n    `x` INT\nENGINE MergeTree\n`y` INT\n"})
    d = only(diags, "PF101")
    assert (d.message, d.location) == ("Expected a KEYWORD at the start of the line, found ``y` INT`.",
                                       Location("a.datasource", 4, 1))


def test_invalid_resource_file_name(tmp_path):
    resources, diags = load(tmp_path, {"pipes/2fast.pipe": "NODE a\nSQL >\n    SELECT 1\n"})
    d = only(diags, "PF104")
    assert d.message == "Resource name `2fast` (from the file name) is not a valid identifier."
    assert d.location == Location("pipes/2fast.pipe")
    assert resources.pipes == ()


def test_duplicate_resource_names_across_folders(tmp_path):
    resources, diags = load(tmp_path, {
        "a/sales.datasource": "SCHEMA >\n    `x` INT\n",
        "b/sales.datasource": "SCHEMA >\n    `y` INT\n",
        # A materialized pipe may share its target datasource's name.
        "pipes/sales.pipe": "NODE a\nSQL >\n    SELECT 1\n",
    })
    d = only(diags, "PF105")
    assert d.message == "Resource name `sales` is already used by a/sales.datasource."
    assert d.location == Location("b/sales.datasource")
    assert [(ds.name, ds.path) for ds in resources.datasources] == [("sales", "a/sales.datasource")]
    assert [p.name for p in resources.pipes] == ["sales"]


def test_non_utf8_file(tmp_path):
    (tmp_path / "p.pipe").write_bytes(b"NODE a\nSQL >\n    SELECT '\xff\xfe'\n")
    _, diags = load(tmp_path, {})
    d = only(diags, "PF101")
    assert d.location == Location("p.pipe")
    assert d.message.startswith("File is not UTF-8 text")
    assert d.hint == "Save the file as UTF-8."


def test_non_utf8_include(tmp_path):
    (tmp_path / "x.incl").write_bytes(b"NODE a\nSQL >\n    SELECT '\xff'\n")
    _, diags = load(tmp_path, {"p.pipe": 'INCLUDE "x.incl"\n'})
    assert found(diags) == {("PF101", "x.incl", 1)}


def test_utf8_byte_order_mark_and_crlf_are_accepted(tmp_path):
    (tmp_path / "a.datasource").write_bytes("\ufeffSCHEMA >\r\n    `x` INT,\r\n    `é` STRING\r\n".encode())
    resources, diags = load(tmp_path, {})
    # `é` is not an identifier; the BOM and the CRLF line ends are no problem.
    assert found(diags) == {("PF104", "a.datasource", 3)}
    assert [c.name for c in datasource(resources, "a").columns] == ["x"]


def test_every_problem_in_a_file_is_reported_at_once(tmp_path):
    _, diags = load(tmp_path, {
        "datasources/bad.datasource": """\
DESCRIPTON >
    typo
SCHEMA >
    `x` INT,
    `x` STRING,
    `y` Int33,
  `z` INT
ENGINE_TTL
""",
        "pipes/bad.pipe": """\
NODE a
SQL >
    SELECT $UNSET
TYPE endpoint
FOO bar
NODE b
SQL >
    SELECT 1
TYPE copy
""",
    })
    assert found(diags) == {
        ("PF102", "datasources/bad.datasource", 1),
        ("PF105", "datasources/bad.datasource", 5),
        ("PF109", "datasources/bad.datasource", 6),
        ("PF101", "datasources/bad.datasource", 8),
        ("PF107", "pipes/bad.pipe", 3),
        ("PF102", "pipes/bad.pipe", 5),
        ("PF304", "pipes/bad.pipe", 9),
    }
    assert all(d.is_error and d.message and d.hint for d in diags)


# --------------------------------------------------------------------------------------------- discovery

def test_discovery_by_extension_skipping_state_git_and_ignored_paths(tmp_path):
    ok = "NODE a\nSQL >\n    SELECT 1\n"
    resources, diags = load(tmp_path, {
        "deep/er/folder/first.pipe": ok,
        "second.pipe": ok,
        "sources/s.datasource": "SCHEMA >\n    `x` INT\n",
        ".pipeframe/warehouse/junk.pipe": "garbage",
        ".git/hooks/x.pipe": "garbage",
        "scratch/draft.pipe": "garbage",
        "pipes/old.pipe": "garbage",
        "pipes/keep.pipe": ok,
        "fixtures/sales.ndjson": "{}\n",
        "data/products.csv": "a\n",
        "more/p.parquet": "",
        "tests/keep.yaml": "- {}\n",
        "tests/nested/also.yml": "- {}\n",
        "other/not_a_test.yaml": "x: 1\n",
        "pipeframe.yaml": "name: x\n",
        "notes.txt": "hello",
        "includes/x.incl": "",
    }, ignore=("scratch/", "pipes/old.pipe"))
    assert diags == []
    # os.walk order, sorted: a folder's own files, then its subfolders by name.
    assert resources.files == ("second.pipe", "deep/er/folder/first.pipe", "pipes/keep.pipe",
                               "sources/s.datasource")
    assert [p.name for p in resources.pipes] == ["second", "first", "keep"]
    assert [d.name for d in resources.datasources] == ["s"]
    assert resources.fixtures == ("data/products.csv", "fixtures/sales.ndjson", "more/p.parquet")
    assert resources.tests == ("tests/keep.yaml", "tests/nested/also.yml")


def test_ignore_glob_patterns(tmp_path):
    resources, diags = load(tmp_path, {
        "pipes/a.pipe": "NODE a\nSQL >\n    SELECT 1\n",
        "pipes/wip/b.pipe": "garbage",
        "fixtures/big.parquet": "",
    }, ignore=("pipes/wip/*", "*.parquet"))
    assert diags == []
    assert (resources.files, resources.fixtures) == (("pipes/a.pipe",), ())


def test_empty_folder(tmp_path):
    resources, diags = load(tmp_path, {})
    assert (resources, diags) == (Resources(), [])


# --------------------------------------------------------------------------------------- example project

def test_example_project_parses_cleanly():
    resources, diags = load_resources(EXAMPLE, (), {})
    assert diags == []
    assert [d.name for d in resources.datasources] == [
        "customers_by_country", "page_views", "products", "sales", "sales_by_day", "sales_daily_snapshot"]
    assert {p.name: (p.type, p.output_node.name) for p in resources.pipes} == {
        "country_customers": ("endpoint", "endpoint"),
        "customers_by_country": ("materialized", "country_states"),
        "daily_snapshot": ("copy", "snapshot"),
        "endpoint_health": ("endpoint", "endpoint"),
        "latency_by_path": ("materialized", "daily_latency"),
        "product_hours": ("endpoint", "endpoint"),
        "sales_by_category": ("materialized", "category_sales"),
        "sales_by_day": ("materialized", "daily_rollup"),
        "sales_by_hour": ("materialized", "hourly_sales"),
        "sales_timeseries": ("endpoint", "endpoint"),
        "slow_pages": ("endpoint", "endpoint"),
        "top_products": ("endpoint", "endpoint"),
    }
    assert resources.fixtures == ("fixtures/page_views.ndjson", "fixtures/products.csv", "fixtures/sales.ndjson")
    assert resources.tests == tuple(f"tests/{n}.yaml" for n in (
        "country_customers", "product_hours", "sales_timeseries", "slow_pages", "top_products"))


def test_example_project_targets_and_node_settings():
    resources, _ = load_resources(EXAMPLE, (), {})
    mv_targets = {p.name: p.typed_node.datasource for p in resources.pipes if p.type == "materialized"}
    assert mv_targets == {
        "customers_by_country": "customers_by_country",
        "latency_by_path": "latency_by_path",
        "sales_by_category": "sales_by_category",
        "sales_by_day": "sales_by_day",
        "sales_by_hour": "sales_by_hour",
    }
    snapshot = pipe(resources, "daily_snapshot").typed_node
    assert (snapshot.target_datasource, snapshot.copy_mode, snapshot.copy_schedule) == (
        "sales_daily_snapshot", "replace", "0 1 * * *")
    assert pipe(resources, "sales_by_category").typed_node.dimensions == ("products",)
    assert {p.name: [(t.name, t.scope) for t in p.tokens] for p in resources.pipes if p.tokens} == {
        name: [("dashboard", "READ")]
        for name in ("country_customers", "product_hours", "sales_timeseries", "slow_pages", "top_products")}
    top = pipe(resources, "top_products")
    assert [(n.name, n.templated, n.description) for n in top.nodes] == [
        ("filtered", True, "Hourly rows in the requested range"),
        ("endpoint", True, "Products ranked by revenue, in the project currency"),
    ]
    assert top.nodes[0].sql_location == Location("pipes/top_products.pipe", 11, 5)
    assert top.description == ("Best-selling products by revenue since a given hour, optionally for a single "
                               "product.\nBacks the \"Top products\" tile of the sales dashboard.")


def test_example_project_includes_are_spliced_with_their_variables():
    resources, _ = load_resources(EXAMPLE, (), {})
    for name, source, column in (("product_hours", "sales_by_hour", "hour"), ("slow_pages", "latency_by_path", "day")):
        p = pipe(resources, name)
        assert [n.name for n in p.nodes] == ["in_range", "endpoint"]
        in_range = p.nodes[0]
        assert in_range.location == Location("includes/date_filter.incl", 6, 1)
        assert in_range.sql_location == Location("includes/date_filter.incl", 8, 5)
        assert in_range.templated
        lines = in_range.sql.splitlines()
        assert lines[:3] == ["%", "SELECT *", f"FROM {source}"]
        assert lines[3].startswith(f"WHERE {column} >= {{{{ DateTime(start, ")
        assert lines[4].startswith(f"  AND {column} < {{{{ DateTime(end, ")
        assert in_range.description == f"Rows of {source} whose {column} falls in the requested time window"


def test_example_project_datasources():
    resources, _ = load_resources(EXAMPLE, (), {})
    sales = datasource(resources, "sales")
    assert [(c.name, c.type, c.json_path) for c in sales.columns] == [
        ("ts", "TIMESTAMP", "$.timestamp"),
        ("order_id", "STRING", "$.order.id"),
        ("customer_id", "STRING", "$.customer.id"),
        ("product", "STRING", "$.order.product"),
        ("country", "STRING", "$.customer.country"),
        ("amount", "DOUBLE", "$.order.amount"),
        ("quantity", "INT", "$.order.quantity"),
        ("tags", "ARRAY<STRING>", "$.tags[:]"),
    ]
    assert sales.column("amount").default == "0"
    assert (sales.engine, sales.partition_key, sales.sorting_key, sales.ttl) == (
        "MergeTree", "to_date(ts)", ("product", "ts"), None)
    assert [(t.name, t.scope) for t in sales.tokens] == [("ingest", "APPEND")]
    page_views = datasource(resources, "page_views")
    assert [c.type for c in page_views.columns] == ["TIMESTAMP", "STRING", "STRING", "STRING", "STRING", "INT"]
    assert page_views.ttl == "ts + INTERVAL 3650 DAYS"
    assert page_views.description == ("Storefront page views, one row per request, with the server-side latency.\n"
                                      "`customer_id` is null for anonymous visitors.")
    products = datasource(resources, "products")
    assert [(c.name, c.type, c.written_type) for c in products.columns] == [
        ("product", "STRING", "String"),
        ("category", "STRING", "LowCardinality(String)"),
        ("price", "DOUBLE", "Float64"),
        ("brand", "STRING", "LowCardinality(Nullable(String))"),
    ]
    states = datasource(resources, "customers_by_country")
    assert [(c.name, c.aggregate_function, c.aggregate_args) for c in states.columns] == [
        ("country", None, ()), ("customers", "uniq", ("STRING",)), ("revenue", "sum", ("DOUBLE",))]
    assert states.engine == "AggregatingMergeTree"


def test_json_columns_with_clickhouse_settings_are_stored_as_text(tmp_path):
    resources, diags = load(tmp_path, {"a.datasource": (
        "SCHEMA >\n    `event` JSON(max_dynamic_types=2, max_dynamic_paths=16) `json:$` DEFAULT '{}',\n"
        "    `raw` JSON\n")})
    assert diags == []
    assert [(c.name, c.type, c.written_type) for c in datasource(resources, "a").columns] == [
        ("event", "STRING", "JSON(max_dynamic_types=2, max_dynamic_paths=16)"), ("raw", "STRING", "JSON")]


def test_version_names_the_resource_and_schema_comment_lines(tmp_path):
    resources, diags = load(tmp_path, {
        "datasources/page_views.datasource": "VERSION 3\nSCHEMA >\n    `id` String,\n    # unix time\n"
                                             "    `time` Int64\n",
        "pipes/api.pipe": "VERSION 1\nNODE n\nSQL >\n    SELECT id FROM page_views\n",
        "pipes/bad.pipe": "VERSION one\nNODE n\nSQL >\n    SELECT 1\n"})
    assert [(c.name, c.type) for c in datasource(resources, "page_views__v3").columns] == [
        ("id", "STRING"), ("time", "BIGINT")]
    assert {p.name for p in resources.pipes} == {"api__v1", "bad"}
    assert found(diags) == {("PF101", "pipes/bad.pipe", 1)}
