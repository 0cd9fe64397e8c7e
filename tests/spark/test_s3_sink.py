"""S3 sinks on real parts: moto's S3 server (tests/cluster/s3server.py) on 127.0.0.1, a deployed project on the shared
Spark session. A scheduled sink run by the scheduler at its cron time writes the pipe's rows (read back: NDJSON gzip,
one file per day by the file template, the run's time in the names), the same run done again (a rerun after a crash)
replaces the same files instead of adding any, CSV and Parquet (split in `{2}` files) hold the pipe's answer, and a
bucket that does not exist is a PF118 naming the file and the fix."""

from __future__ import annotations

import csv
import gzip
import io
import json
from datetime import UTC, datetime

import pytest

from pipeframe.connectors.sink import SinkScheduler, run_sink
from pipeframe.errors import PipeframeError
from tests.cluster.s3server import ACCESS_KEY, REGION, SECRET_KEY, S3Server
from tests.spark.conftest import deployed

BUCKET = "exports"
SALES = "SCHEMA >\n    `day` Date,\n    `product` String,\n    `amount` Float64\n"
ROWS = [("2024-06-01", "apple", 1.5), ("2024-06-01", "pear", 2.0), ("2024-06-01", "apple", 3.0),
        ("2024-06-02", "plum", 4.0), ("2024-06-02", "pear", 5.0)]
TOTALS = "NODE totals\nSQL >\n    SELECT day, product, sum(amount) AS revenue FROM sales GROUP BY day, product\n\n"
DAILY = TOTALS + """TYPE sink
EXPORT_CONNECTION_NAME landing
EXPORT_BUCKET_URI s3://exports/daily/
EXPORT_FILE_TEMPLATE "sales_{day, '%Y%m%d'}"
EXPORT_FORMAT ndjson
EXPORT_COMPRESSION gz
EXPORT_SCHEDULE "0 * * * *"
"""
WHOLE = TOTALS + """TYPE sink
EXPORT_CONNECTION_NAME landing
EXPORT_BUCKET_URI s3://exports/whole
EXPORT_FILE_TEMPLATE "totals.csv"
EXPORT_FORMAT csv
EXPORT_WRITE_STRATEGY truncate
"""
PARTS = TOTALS.replace("totals", "parts") + """TYPE sink
EXPORT_CONNECTION_NAME landing
EXPORT_BUCKET_URI s3://exports/parts/
EXPORT_FILE_TEMPLATE "part_{2}"
EXPORT_FORMAT parquet
"""
NOWHERE = WHOLE.replace("s3://exports/whole", "s3://no-such-bucket/x/")
ANSWER = sorted([("2024-06-01", "apple", 4.5), ("2024-06-01", "pear", 2.0), ("2024-06-02", "pear", 5.0),
                 ("2024-06-02", "plum", 4.0)])


@pytest.fixture(scope="module")
def s3(tmp_path_factory: pytest.TempPathFactory):
    with S3Server(tmp_path_factory.mktemp("moto") / "moto.log") as server:
        server.create_bucket(BUCKET)
        yield server


def objects(s3: S3Server, prefix: str) -> dict[str, bytes]:
    client = s3.client()
    listed = client.list_objects_v2(Bucket=BUCKET, Prefix=prefix).get("Contents", [])
    return {o["Key"]: client.get_object(Bucket=BUCKET, Key=o["Key"])["Body"].read() for o in listed}


def test_sinks_write_the_pipes_rows_once_per_run(spark, spark_config, s3: S3Server):
    import pyarrow as pa
    import pyarrow.parquet as pq

    connection = (f"TYPE s3\nS3_REGION {REGION}\nS3_ACCESS_KEY {ACCESS_KEY}\n"
                  f'S3_SECRET {{{{ tb_secret("LANDING_SECRET", "{SECRET_KEY}") }}}}\nS3_ENDPOINT {s3.endpoint}\n')
    fixture = "".join(json.dumps({"day": d, "product": p, "amount": a}) + "\n" for d, p, a in ROWS)
    project = deployed(spark, spark_config, "s3_sink", {
        "connections/landing.connection": connection, "datasources/sales.datasource": SALES,
        "fixtures/sales.ndjson": fixture, "pipes/daily.pipe": DAILY, "pipes/whole.pipe": WHOLE,
        "pipes/parts.pipe": PARTS, "pipes/nowhere.pipe": NOWHERE})
    assert project.check().diagnostics == ()

    # Scheduled: nothing before the cron time, then the run of 01:00 (UTC), named by that time.
    runs = []
    scheduler = SinkScheduler(lambda: project, on_run=lambda name, outcome: runs.append(outcome))
    assert scheduler.tick(datetime(2024, 6, 3, 0, 30, tzinfo=UTC)) == []
    assert scheduler.tick(datetime(2024, 6, 3, 1, 0, 5, tzinfo=UTC)) == ["daily"]
    first = objects(s3, "daily/")
    assert sorted(first) == ["daily/sales_20240601_20240603010000.ndjson.gz",
                             "daily/sales_20240602_20240603010000.ndjson.gz"]
    read = sorted((r["day"], r["product"], r["revenue"]) for body in first.values()
                  for r in map(json.loads, gzip.decompress(body).decode().splitlines()))
    assert read == ANSWER and runs[0].rows == 4
    # The same run again (a crash after its files, before anyone knew): the same keys, replaced, none added.
    again = run_sink(project, "daily", run_time=datetime(2024, 6, 3, 1, 0, tzinfo=UTC))
    assert [f.uri for f in again.files] == [f.uri for f in runs[0].files]
    assert {k: gzip.decompress(v) for k, v in objects(s3, "daily/").items()} == \
        {k: gzip.decompress(v) for k, v in first.items()}
    # The next scheduled run writes its own files beside them.
    assert scheduler.tick(datetime(2024, 6, 3, 2, 0, tzinfo=UTC)) == ["daily"]
    assert len(objects(s3, "daily/")) == 4

    # CSV with a header, truncate: the template's name, replaced by each run.
    for hour in (1, 2):
        run_sink(project, "whole", run_time=datetime(2024, 6, 3, hour, tzinfo=UTC))
    whole = objects(s3, "whole/")
    assert list(whole) == ["whole/totals.csv"]
    rows = list(csv.DictReader(io.StringIO(whole["whole/totals.csv"].decode())))
    assert sorted((r["day"], r["product"], float(r["revenue"])) for r in rows) == ANSWER

    # Parquet split in two files, together the pipe's answer.
    parts = run_sink(project, "parts", run_time=datetime(2024, 6, 3, 1, tzinfo=UTC))
    bodies = objects(s3, "parts/")
    assert sorted(bodies) == ["parts/part_0_20240603010000.parquet", "parts/part_1_20240603010000.parquet"]
    table = pa.concat_tables(pq.read_table(io.BytesIO(b)) for b in bodies.values())
    assert sorted((str(d), p, r) for d, p, r in zip(*table.to_pydict().values(), strict=True)) == ANSWER
    assert parts.rows == 4

    with pytest.raises(PipeframeError) as err:
        run_sink(project, "nowhere", run_time=datetime(2024, 6, 3, 1, tzinfo=UTC))
    diagnostic = err.value.diagnostics[0]
    assert diagnostic.code == "PF118" and "s3://no-such-bucket/x/totals.csv" in diagnostic.message
    assert "NoSuchBucket" in diagnostic.message and "--run-time 2024-06-03T01:00:00+00:00" in diagnostic.hint
