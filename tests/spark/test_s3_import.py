"""S3 imports on real parts: moto's S3 server (tests/cluster/s3server.py) on 127.0.0.1, a served project on the shared
Spark session, and Delta. An `@auto` datasource declared as in Tinybird (a `TYPE s3` connection, `IMPORT_*` settings)
takes each file added to its bucket once while the server runs (CSV, gzipped NDJSON, Parquet), quarantines a file
that cannot be read with its name without stopping the others, and a new server (a restart, also after a pass killed
between a file's commit and its ledger row) takes nothing twice. An `@on-demand` datasource is imported by
`pipeframe import`: new files once, a second call nothing."""

from __future__ import annotations

import gzip
import io
import json
from pathlib import Path

import httpx
import pytest

from pipeframe.project import Project
from pipeframe.server import Service, start_server
from tests.cluster.s3server import ACCESS_KEY, REGION, SECRET_KEY, S3Server
from tests.spark.conftest import deployed, until

BUCKET = "landing"
ORDERS = """\
SCHEMA >
    `id` Int64 `json:$.id`,
    `product` String `json:$.product`,
    `amount` Float64 `json:$.amount`

IMPORT_CONNECTION_NAME landing
IMPORT_BUCKET_URI s3://landing/orders/**
IMPORT_SCHEDULE @auto
"""
RETURNS = ORDERS.replace("orders/**", "returns/*.csv").replace("@auto", "@on-demand")
BY_PRODUCT = """\
NODE by_product
SQL >
    SELECT product, count() AS orders, sum(amount) AS revenue
    FROM orders
    GROUP BY product
TYPE materialized
DATASOURCE orders_by_product
"""


@pytest.fixture(scope="module")
def s3(tmp_path_factory: pytest.TempPathFactory):
    with S3Server(tmp_path_factory.mktemp("moto") / "moto.log") as server:
        server.create_bucket(BUCKET)
        yield server


@pytest.fixture(scope="module")
def project(spark, spark_config, s3: S3Server) -> Project:
    connection = (f"TYPE s3\nS3_REGION {REGION}\nS3_ACCESS_KEY {ACCESS_KEY}\n"
                  f'S3_SECRET {{{{ tb_secret("LANDING_SECRET", "{SECRET_KEY}") }}}}\nS3_ENDPOINT {s3.endpoint}\n')
    return deployed(spark, spark_config, "s3_import", {
        "connections/landing.connection": connection, "datasources/orders.datasource": ORDERS,
        "datasources/returns.datasource": RETURNS, "pipes/by_product.pipe": BY_PRODUCT},
        config_extra="ingest:\n  import_poll_ms: 200\n")


def csv(rows: list[tuple[int, str, float]]) -> bytes:
    return ("id,product,amount\n" + "".join(f"{i},{p},{a}\n" for i, p, a in rows)).encode()


def ndjson(rows: list[tuple[int, str, float]]) -> bytes:
    return "".join(json.dumps({"id": i, "product": p, "amount": a}) + "\n" for i, p, a in rows).encode()


def parquet(rows: list[tuple[int, str, float]]) -> bytes:
    import pyarrow as pa
    import pyarrow.parquet as pq

    out = io.BytesIO()
    pq.write_table(pa.table({"id": [r[0] for r in rows], "product": [r[1] for r in rows],
                             "amount": [r[2] for r in rows]}), out)
    return out.getvalue()


def put(s3: S3Server, key: str, body: bytes) -> None:
    s3.client().put_object(Bucket=BUCKET, Key=key, Body=body)


def landed(project: Project, table: str = "orders") -> list[tuple]:
    path = project.warehouse.snapshot(fresh=True).table(table).path
    return sorted(tuple(r) for r in project.spark.sql(f"SELECT id, product, amount FROM delta.`{path}`").collect())


def quarantined(project: Project, table: str = "orders") -> list[tuple]:
    """(source, reason, raw) of each quarantined entry (none while the quarantine table does not exist)."""
    try:
        frame = project.spark.read.format("delta").load(project.warehouse.quarantine_path(table))
    except Exception:  # noqa: BLE001 — not created before its first entry
        return []
    return sorted(tuple(r) for r in frame.select("source", "reason", "raw").collect())


def ledger(project: Project, table: str = "orders") -> dict[str, tuple]:
    return {r.uri.rsplit("/", 1)[1]: (r.status, r.rows) for r in project.warehouse.imports(table)}


def serving(project: Project):
    return start_server(Service(Project(project.root, spark=project.spark, environ={})), "127.0.0.1", 0)


def test_files_added_while_serving_land_once_a_bad_file_is_quarantined_and_restarts_take_nothing_twice(project, s3):
    first = [(1, "apple", 1.5), (2, "pear", 2.0), (3, "apple", 3.0)]
    second = [(4, "plum", 4.0), (5, "pear", 5.0)]
    put(s3, "orders/a.csv", csv(first))
    put(s3, "orders/b.ndjson.gz", gzip.compress(ndjson(second) + b'{"id": "six", "product": "x"}\n'))
    put(s3, "returns/early.csv", csv([(90, "kiwi", 9.0)]))  # @on-demand: serve leaves it alone
    running = serving(project)
    try:
        assert until(lambda: landed(project), sorted(first + second)) == sorted(first + second)
        third = [(7, "apple", 7.0), (8, "fig", 8.0)]
        put(s3, "orders/2024/11/c.parquet", parquet(third))
        whole = gzip.compress(csv([(100 + i, f"lost-{i * 7919 % 1000}", i / 3) for i in range(200)]))
        put(s3, "orders/bad.csv.gz", whole[:len(whole) // 2])  # ends early: none of its rows may land
        put(s3, "orders/broken.parquet", b"PAR1 this is not a parquet file")
        put(s3, "orders/readme.txt", b"not data")  # matched by the glob, not a format: skipped
        every = sorted(first + second + third)
        assert until(lambda: landed(project), every) == every
        want = {"a.csv": ("ingested", 3), "b.ndjson.gz": ("ingested", 2), "c.parquet": ("ingested", 2),
                "bad.csv.gz": ("failed", 0), "broken.parquet": ("failed", 0)}
        assert until(lambda: ledger(project), want) == want
        counts = {"uri": "s3://landing/orders/", "files_ingested": 3, "files_failed": 2, "rows": 7, "last_error": None}
        # counted just after each file's ledger row
        assert until(lambda: {k: v for k, v in httpx.get(f"{running.url}/v0/ingest", timeout=30).json()["s3"]
                              ["orders"].items() if k != "last_poll"}, counts) == counts
        shown = httpx.get(f"{running.url}/v0/ingest", timeout=30).json()["s3"]
        assert shown["orders"]["last_poll"] and "returns" not in shown
    finally:
        running.stop()
    entries = quarantined(project)
    assert [(source, raw) for source, _, raw in entries] == [
        ("b.ndjson.gz".removesuffix(".gz"), '{"id": "six", "product": "x"}'),  # a row that does not fit: its file's
        ("s3://landing/orders/bad.csv.gz", ""), ("s3://landing/orders/broken.parquet", "")]
    assert entries[1][1].startswith("s3://landing/orders/bad.csv.gz cannot be read: it is not a complete gzip file")
    assert entries[2][1].startswith("s3://landing/orders/broken.parquet cannot be read: it is not a Parquet file")
    assert landed(project, "returns") == []
    # A pass killed after a file's commit and before its ledger row: the rows landed with the file's key, the ledger
    # does not list it. Another file is added while nothing runs. A new server records the first without appending it
    # again, and takes the second once.
    fourth, fifth = [(10, "date", 1.0), (11, "date", 2.0)], [(12, "lime", 3.0)]
    put(s3, "orders/d.csv", csv(fourth))
    etag = s3.client().head_object(Bucket=BUCKET, Key="orders/d.csv")["ETag"].strip('"')
    local = Path(project.root) / "d.csv"
    local.write_bytes(csv(fourth))
    Project(project.root, spark=project.spark, environ={}).append(
        "orders", str(local), idempotency_key=f"s3://landing/orders/d.csv#{etag}", views=False)
    put(s3, "orders/e.csv", csv(fifth))
    running = serving(project)
    try:
        every = sorted(first + second + third + fourth + fifth)
        assert until(lambda: landed(project), every) == every
        want |= {"d.csv": ("ingested", 2), "e.csv": ("ingested", 1)}
        assert until(lambda: ledger(project), want) == want
        assert len(project.warehouse.imports("orders")) == len(want)  # one ledger row per file
        expected: dict[str, tuple[int, float]] = {}
        for _, product, amount in every:
            n, r = expected.get(product, (0, 0.0))
            expected[product] = (n + 1, r + amount)
        assert until(lambda: {p: (n, r) for p, n, r in (tuple(row) for row in project.query(
            "SELECT product, orders, revenue FROM orders_by_product").collect())}, expected) == expected
    finally:
        running.stop()
    assert landed(project) == every  # nothing more after the restart's passes
    assert len(quarantined(project)) == 3  # the failed files are not tried again


def test_pipeframe_import_takes_the_new_files_of_an_on_demand_datasource_once(project, s3, monkeypatch):
    from click.testing import CliRunner

    from pipeframe.cli import imports, main

    monkeypatch.setattr(imports, "load_project", lambda root, env: Project(root, spark=project.spark, environ={}))

    def imported() -> dict:
        result = CliRunner().invoke(main, ["import", "returns", "-p", str(project.root), "--json"])
        assert result.exit_code == 0, result.output
        return json.loads(result.output)

    present = {k for k in s3.keys(BUCKET, "returns/")}
    put(s3, "returns/r1.csv", csv([(20, "kiwi", 1.0), (21, "kiwi", 2.0)]))
    put(s3, "returns/notes.ndjson", ndjson([(99, "x", 0.0)]))  # not matched by returns/*.csv
    first = imported()
    assert (first["ingested"], first["failed"], first["already_imported"]) == (len(present) + 1, 0, 0)
    assert {f["uri"] for f in first["files"]} == {f"s3://{BUCKET}/{k}" for k in present | {"returns/r1.csv"}}
    assert (20, "kiwi", 1.0) in landed(project, "returns")
    before = landed(project, "returns")
    second = imported()
    assert (second["ingested"], second["already_imported"], second["files"]) == (0, len(present) + 1, [])
    assert landed(project, "returns") == before
    put(s3, "returns/r2.csv", csv([(22, "lime", 3.0)]))
    result = CliRunner().invoke(main, ["import", "returns", "-p", str(project.root)])
    assert result.exit_code == 0, result.output
    assert "s3://landing/returns/r2.csv: 1 row(s)" in result.output
    assert f"returns: 1 file(s) imported from s3://landing/returns/ (1 row(s), 0 quarantined), 0 failed, " \
        f"{len(present) + 1} already imported, 0 skipped" in result.output
    assert landed(project, "returns") == sorted([*before, (22, "lime", 3.0)])
