"""Sinks on real parts: moto's S3 server (tests/cluster/s3server.py) on 127.0.0.1, the session's Kafka broker
(tests/kafka/broker.py), a deployed project on the shared Spark session.

S3: a scheduled sink run by the scheduler at its cron time writes the pipe's rows (read back: NDJSON gzip, one file
per day by the file template, the run's time in the names), the same run done again (a rerun after a crash) replaces
the same files instead of adding any, CSV and Parquet (split in `{2}` files) hold the pipe's answer, and a bucket that
does not exist is a PF118 naming the file and the fix. Kafka: a run's rows are one transaction of JSON messages, a run
done again after it committed writes nothing, and a crashed run's open transaction is never seen."""

from __future__ import annotations

import csv
import gzip
import io
import json
import time
from datetime import UTC, datetime

import pytest

from pipeframe.connectors.sink import SinkScheduler, run_sink
from pipeframe.errors import PipeframeError
from pipeframe.project import Project
from tests.cluster.s3server import ACCESS_KEY, REGION, SECRET_KEY, S3Server
from tests.kafka.broker import KafkaBroker
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
TO_KAFKA = TOTALS + "TYPE sink\nEXPORT_CONNECTION_NAME local_kafka\nEXPORT_KAFKA_TOPIC sales_out\n"
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


@pytest.fixture(scope="module")
def project(spark, spark_config, s3: S3Server) -> Project:
    connection = (f"TYPE s3\nS3_REGION {REGION}\nS3_ACCESS_KEY {ACCESS_KEY}\n"
                  f'S3_SECRET {{{{ tb_secret("LANDING_SECRET", "{SECRET_KEY}") }}}}\nS3_ENDPOINT {s3.endpoint}\n')
    # The broker's address is a secret read when the sink runs (the Kafka test writes it to .env): the S3 test, run
    # without `-m kafka`, starts no broker.
    kafka = 'TYPE kafka\nKAFKA_BOOTSTRAP_SERVERS {{ tb_secret("SINK_KAFKA") }}\nKAFKA_SECURITY_PROTOCOL PLAINTEXT\n'
    fixture = "".join(json.dumps({"day": d, "product": p, "amount": a}) + "\n" for d, p, a in ROWS)
    return deployed(spark, spark_config, "sinks", {
        "connections/landing.connection": connection, "connections/local_kafka.connection": kafka,
        "datasources/sales.datasource": SALES, "fixtures/sales.ndjson": fixture, "pipes/daily.pipe": DAILY,
        "pipes/whole.pipe": WHOLE, "pipes/parts.pipe": PARTS, "pipes/nowhere.pipe": NOWHERE,
        "pipes/to_kafka.pipe": TO_KAFKA})


def test_s3_sinks_write_the_pipes_rows_once_per_run(project: Project, s3: S3Server):
    import pyarrow as pa
    import pyarrow.parquet as pq

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


@pytest.mark.kafka
def test_a_kafka_sink_writes_each_run_once_in_one_transaction(project: Project, kafka_broker: KafkaBroker):
    from confluent_kafka import Consumer, Producer

    kafka_broker.create_topic("sales_out", 1)
    (project.root / ".env").write_text(f"SINK_KAFKA={kafka_broker.bootstrap}\n", encoding="utf-8")
    first = run_sink(project, "to_kafka", run_time=datetime(2024, 6, 3, 1, tzinfo=UTC))
    assert (first.rows, first.skipped, first.files[0].uri) == (4, False, "kafka://sales_out")
    again = run_sink(project, "to_kafka", run_time=datetime(2024, 6, 3, 1, tzinfo=UTC))
    assert (again.rows, again.skipped) == (0, True)  # committed before: nothing written twice
    # A run that crashed inside its transaction: messages sent, never committed.
    crashed = Producer({"bootstrap.servers": kafka_broker.bootstrap, "transactional.id": "pipeframe-sink-to_kafka"})
    crashed.init_transactions(30)
    crashed.begin_transaction()
    crashed.produce("sales_out", b'{"half": "a run"}')
    crashed.flush(30)
    second = run_sink(project, "to_kafka", run_time=datetime(2024, 6, 3, 2, tzinfo=UTC))  # fences it, aborts it
    assert second.rows == 4
    end = Producer({"bootstrap.servers": kafka_broker.bootstrap})
    end.produce("sales_out", b'{"end": true}')
    end.flush(30)
    reader = Consumer({"bootstrap.servers": kafka_broker.bootstrap, "group.id": "sink-reader", "log_level": 0,
                       "isolation.level": "read_committed", "auto.offset.reset": "earliest"})
    reader.subscribe(["sales_out"])
    seen: list[dict] = []
    deadline = time.monotonic() + 60
    while not (seen and seen[-1] == {"end": True}) and time.monotonic() < deadline:
        message = reader.poll(0.5)
        if message is not None and message.error() is None:
            seen.append(json.loads(message.value()))
    reader.close()
    assert seen[-1] == {"end": True}
    rows = sorted((r["day"], r["product"], r["revenue"]) for r in seen[:-1])
    assert rows == sorted(ANSWER + ANSWER)  # two runs, each once; nothing of the crashed one

