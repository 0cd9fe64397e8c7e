"""Shared test helpers: build small projects on disk from a dict of files, or a datasource from its columns."""

from __future__ import annotations

import os
import textwrap
from pathlib import Path

import pytest

from pipeframe.datafiles.model import Datasource
from pipeframe.datafiles.parser import parse_column
from pipeframe.errors import DiagnosticSink, Location

# The short-lived JVMs the tests start (worker processes, CLI subprocesses, servers) compile with C1 only and
# collect with the serial collector: test data is tiny, so the C2 compiler's and the parallel collector's threads
# only compete with the other test worker for this machine's two cores. Measured side by side on a loaded machine,
# the README's main job took ~40% less time this way. Semantics do not change. The shared session of tests/spark,
# which lives for the whole run, keeps the JVM's defaults (tests/spark/conftest.py).
os.environ.setdefault("JAVA_TOOL_OPTIONS", "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC")
# The servers tests start (`serve`, `dev`, `run` subprocesses) keep their JVM at their own priority: niced
# (`ingest.spark_nice`), it would wait behind the other test worker's JVM. tests/e2e/test_serve_cli.py checks the
# default without this.
os.environ.setdefault("PIPEFRAME_SPARK_NICE", "0")

SALES = """\
SCHEMA >
    `ts` TIMESTAMP `json:$.ts`,
    `order_id` STRING,
    `product` STRING,
    `amount` DOUBLE DEFAULT 0,
    `quantity` INT
"""

PRODUCTS = """\
SCHEMA >
    `product` String,
    `category` LowCardinality(String)
"""

# A small events → hourly view → daily cascading view project, shared by the plan and deploy tests.
EVENTS = """\
DESCRIPTION >
    Raw events
SCHEMA >
    `ts` TIMESTAMP,
    `user_id` STRING,
    `amount` INT
ENGINE_SORTING_KEY user_id
"""
HOURLY = """\
NODE hourly
SQL >
    SELECT date_trunc('hour', ts) AS hour, count(*) AS n, sum(amount) AS total
    FROM events
    GROUP BY 1
TYPE materialized
DATASOURCE hourly
"""
DAILY = """\
NODE daily
SQL >
    SELECT date_trunc('day', hour) AS day, sum(n) AS n
    FROM hourly
    GROUP BY 1
TYPE materialized
DATASOURCE daily
"""


def write_project(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text) if text.startswith("\n") else text, encoding="utf-8")
    return root


def answered(project, sql: str) -> list[dict]:
    """The rows of ad-hoc SQL over a project's tables as users read them (`Project.read`, every row): by DuckDB over
    the tables' current snapshots, or by Spark where the read path cannot answer with Spark's meaning
    (tests/spark/test_read_path.py proves the two equal). The Spark tests compare views with their recomputation
    this way: milliseconds a read, where a Spark query took ~0.5 s of the suite's time."""
    return project.read(sql, limit=10**9).data


def answered_tuples(project, sql: str) -> list[tuple]:
    """`answered`, each row a tuple in the query's column order."""
    return [tuple(row.values()) for row in answered(project, sql)]


def datasource(columns: list[str], name: str = "t") -> Datasource:
    """A datasource of columns written as in a .datasource's SCHEMA (`` `name` Type `json:$.path` DEFAULT x ``)."""
    sink = DiagnosticSink()
    parsed = tuple(parse_column(text, Location(f"{name}.datasource"), sink) for text in columns)
    assert not sink.errors and all(parsed)
    return Datasource(name, f"{name}.datasource", Location(f"{name}.datasource"), parsed)  # type: ignore[arg-type]


@pytest.fixture
def make_project(tmp_path: Path):
    """make_project({"pipes/x.pipe": "..."}) → a project folder with `sales` and `products` datasources."""

    def make(files: dict[str, str], with_sources: bool = True) -> Path:
        base = {"datasources/sales.datasource": SALES, "datasources/products.datasource": PRODUCTS} \
            if with_sources else {}
        return write_project(tmp_path / "proj", {**base, **files})

    return make


@pytest.fixture(scope="session")
def kafka_broker(tmp_path_factory: pytest.TempPathFactory):
    """A real Apache Kafka broker (tests/kafka/broker.py: one KRaft node, jars from Maven Central, cached), started
    once per test session (so once per pytest-xdist worker that runs a test using it) on free ports on 127.0.0.1 and
    stopped when the session ends. Tests use topics and groups of their own."""
    from tests.kafka.broker import KafkaBroker

    with KafkaBroker(tmp_path_factory.mktemp("kafka")) as broker:
        yield broker
