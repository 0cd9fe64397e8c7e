"""Kafka ingest on real parts: a Kafka broker (KRaft, jars from Maven Central: tests/kafka/broker.py), a served
project on the shared Spark session, and Delta. A Kafka datasource declared as in Tinybird (a `.connection` file, a
secret for its servers, `KAFKA_CONNECTION_NAME`/`KAFKA_TOPIC` in the datasource) is consumed by the runtime into the
group-commit path: every message lands once in the datasource and in its view, with Tinybird's metadata columns;
a server stopped and started again resumes where the table's commits say (not where the broker's group offsets
say), the broker restarted under a running consumer is waited for, and a message that is not JSON is quarantined."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest

from pipeframe.engine.localserver import free_port
from pipeframe.project import Project
from pipeframe.server import Service, start_server
from tests.kafka.broker import KafkaBroker
from tests.spark.conftest import deployed, until
from tests.unit.test_connections import CLICKS as KAFKA_CLICKS

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.kafka

# The unit tests' Kafka datasource, with its consumer group from a secret's default.
CLICKS = KAFKA_CLICKS + 'KAFKA_GROUP_ID {{ tb_secret("CLICKS_GROUP", "pipeframe-clicks") }}\n'
BY_USER = """\
NODE by_user
SQL >
    SELECT user, count() AS clicks, sum(n) AS total
    FROM clicks
    GROUP BY user
TYPE materialized
DATASOURCE by_user
"""
# The crash test's datasource: another topic, read by the same servers.
CRASHES = CLICKS.replace("KAFKA_TOPIC clicks", "KAFKA_TOPIC crashes").replace(
    'tb_secret("CLICKS_GROUP", "pipeframe-clicks")', "pipeframe-crashes")
BY_USER_CRASHES = BY_USER.replace("by_user", "crashes_by_user").replace("FROM clicks", "FROM crashes")
# The fence test's datasource: its consumer group from a secret, so that two servers read it as two groups.
SHARED = CLICKS.replace("KAFKA_TOPIC clicks", "KAFKA_TOPIC shared").replace(
    'tb_secret("CLICKS_GROUP", "pipeframe-clicks")', 'tb_secret("SHARED_GROUP", "pipeframe-shared")')
PARTITIONS = 4
DEADLINE_S = 120
KILLS = int(os.environ.get("PIPEFRAME_KAFKA_KILLS") or 2)  # SIGKILLs of `pipeframe serve` in the crash test


@pytest.fixture(scope="module")
def broker(kafka_broker: KafkaBroker) -> KafkaBroker:
    """The session's broker (tests/conftest.py) with this module's topics."""
    kafka_broker.create_topic("clicks", PARTITIONS)
    kafka_broker.create_topic("crashes", PARTITIONS)
    kafka_broker.create_topic("shared", PARTITIONS)
    return kafka_broker


@pytest.fixture(scope="module")
def project(spark, spark_config, broker) -> Project:
    connection = ("TYPE kafka\nKAFKA_BOOTSTRAP_SERVERS {{ tb_secret(\"KAFKA_SERVERS\", \"" + broker.bootstrap +
                  "\") }}\nKAFKA_SECURITY_PROTOCOL PLAINTEXT\n")
    return deployed(spark, spark_config, "kafka_ingest", {
        "connections/local_kafka.connection": connection, "datasources/clicks.datasource": CLICKS,
        "pipes/by_user.pipe": BY_USER, "datasources/crashes.datasource": CRASHES,
        "pipes/crashes_by_user.pipe": BY_USER_CRASHES, "datasources/shared.datasource": SHARED})


def produce(broker: KafkaBroker, values: list[bytes], start: int = 0, topic: str = "clicks") -> None:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": broker.bootstrap, "enable.idempotence": True})
    for i, value in enumerate(values, start):
        producer.produce(topic, value=value, key=f"u{i % 7}".encode(), partition=i % PARTITIONS)
    assert producer.flush(30) == 0


def rewind(broker: KafkaBroker, group: str, topic: str) -> None:
    """Commit offset 0 for every partition of `topic` as consumer group `group` (which has no member now). The
    stopped server's consumer left the group on close, but a LeaveGroup the coordinator missed (the broker restarted
    under it) keeps it a member until its session ends: the broker refuses a commit from outside the group until
    then (UNKNOWN_MEMBER_ID), so the commit is sent again until that session has ended."""
    from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                consumer.commit(offsets=[TopicPartition(topic, p, 0) for p in range(PARTITIONS)], asynchronous=False)
                break
            except KafkaException as exc:
                member = exc.args[0].code() in (KafkaError.UNKNOWN_MEMBER_ID, KafkaError.REBALANCE_IN_PROGRESS,
                                                KafkaError.ILLEGAL_GENERATION)
                if not member or time.monotonic() > deadline:
                    raise
                time.sleep(0.5)
        assert [tp.offset for tp in consumer.committed(
            [TopicPartition(topic, p) for p in range(PARTITIONS)], timeout=30)] == [0] * PARTITIONS
    finally:
        consumer.close()


def clicks(user: int, n: int) -> bytes:
    return json.dumps({"user": f"u{user}", "n": n}).encode()


def landed(project: Project, table: str = "clicks") -> list[tuple]:
    path = project.warehouse.snapshot(fresh=True).table(table).path
    return [tuple(r) for r in project.spark.sql(
        f"SELECT __partition, __offset, user, n FROM delta.`{path}` ORDER BY 1, 2").collect()]


def view(project: Project, name: str = "by_user") -> dict[str, tuple]:
    return {r[0]: (r[1], r[2]) for r in project.query(f"SELECT user, clicks, total FROM {name}").collect()}


def quarantined(project: Project) -> list[str]:
    """The quarantined lines (none while the quarantine table does not exist yet)."""
    try:
        return [r[0] for r in project.query("SELECT * FROM clicks_quarantine").collect()]
    except Exception:  # noqa: BLE001 — not created before its first row
        return []


def expected_view(values: list[bytes]) -> dict[str, tuple]:
    out: dict[str, list[int]] = {}
    for value in values:
        row = json.loads(value)
        got = out.setdefault(row["user"], [0, 0])
        got[0] += 1
        got[1] += row["n"]
    return {user: tuple(v) for user, v in out.items()}


def serving(project: Project, environ: dict[str, str] | None = None):
    return start_server(Service(Project(project.root, spark=project.spark, environ=environ or {})), "127.0.0.1", 0)


def test_messages_land_once_in_the_datasource_and_its_view_across_restarts_of_the_server_and_the_broker(
        project, broker):
    first = [clicks(i % 5, i) for i in range(200)]
    produce(broker, first)
    running = serving(project)
    try:
        assert until(lambda: len(landed(project)), 200) == 200
        assert until(lambda: view(project), expected_view(first)) == expected_view(first)
        # The lag holds the broker's high watermarks as last read (at assignment, then each second).
        lags = until(lambda: [p["lag"] for p in running.service.ingest_stats()["kafka"]["clicks"]["partitions"]
                              .values()], [0] * PARTITIONS)
        assert lags == [0] * PARTITIONS and running.service.ingest_stats()["kafka"]["clicks"]["topic"] == "clicks"
        broker.restart()  # the consumer waits for it
        second = [clicks(i % 3, 1000 + i) for i in range(120)]
        produce(broker, second, start=200)
        assert until(lambda: len(landed(project)), 320) == 320
    finally:
        running.stop()
    # Messages produced while nothing consumes, the group's offsets at the broker set back to 0 (as a tool, or a
    # crash between the Delta commit and the broker's, could leave them), then a new server: it resumes from what the
    # table holds, not from the broker.
    third = [clicks(9, i) for i in range(80)] + [b"not json at all"]
    produce(broker, third, start=320)
    rewind(broker, "pipeframe-clicks", "clicks")
    # `status` of the view over the topic, with nothing consuming: per partition, what the table holds against the
    # broker's high watermark (produce() puts message i in partition i % 4).
    [status] = Project(project.root, spark=project.spark, environ={}).status("by_user")
    assert status.kafka == {"datasource": "clicks", "topic": "clicks", "error": None, "partitions": {
        str(p): {"committed": len(range(p, 320, PARTITIONS)), "high": len(range(p, 401, PARTITIONS)),
                 "lag": len(range(p, 401, PARTITIONS)) - len(range(p, 320, PARTITIONS))} for p in range(PARTITIONS)}}
    running = serving(project)
    try:
        assert until(lambda: len(landed(project)), 400) == 400
        every_partition_read = {"committed": "high", "lag": 0}
        shown = until(lambda: [{"committed": "high" if p["committed"] == p["high"] else p["committed"], "lag": p["lag"]}
                               for p in httpx.get(f"{running.url}/v0/views/by_user", timeout=30).json()["kafka"]
                               ["partitions"].values()], [every_partition_read] * PARTITIONS)
        assert shown == [every_partition_read] * PARTITIONS  # the views API, quarantined message included
        rows = landed(project)
        assert len({(p, o) for p, o, _, _ in rows}) == 400  # no (partition, offset) twice
        every = first + second + third[:-1]
        assert sorted((u, n) for _, _, u, n in rows) == sorted((json.loads(v)["user"], json.loads(v)["n"]) for v in every)
        assert until(lambda: view(project), expected_view(every)) == expected_view(every)
        kept = until(lambda: len(quarantined(project)), 1)
        assert kept == 1 and "not json at all" in str(quarantined(project))
    finally:
        running.stop()


def test_two_consumer_groups_reading_one_topic_into_one_table_land_each_message_once(project, broker):
    """Two servers consume one topic into one datasource as two consumer groups (a second deployment pointed at the
    same warehouse; or, alike, a consumer stalled past its session while its partitions' next owner starts): each
    batch commits with its partition's offsets as a Delta `txn`, and a batch reaching into offsets the table holds
    is refused (PF719) and its consumer goes on after them. Each message lands once."""
    first = [clicks(i % 13, i) for i in range(3000)]
    produce(broker, first, topic="shared")
    servers = [serving(project), serving(project, {"SHARED_GROUP": "pipeframe-shared-2"})]
    try:
        assert until(lambda: len(landed(project, "shared")), 3000) == 3000
        second = [clicks(i % 13, i) for i in range(3000, 4000)]
        produce(broker, second, start=3000, topic="shared")
        caught_up = [{"lag": 0}] * PARTITIONS * 2  # both groups, every partition: the table holds what they read

        def lags() -> list[dict]:
            return [{"lag": p["lag"]} for server in servers
                    for p in server.service.ingest_stats()["kafka"]["shared"]["partitions"].values()]

        assert until(lags, caught_up) == caught_up
    finally:
        for server in servers:
            server.stop()
    rows = landed(project, "shared")
    assert len(rows) == 4000 and len({(p, o) for p, o, _, _ in rows}) == 4000
    assert sorted((u, n) for _, _, u, n in rows) == sorted((json.loads(v)["user"], json.loads(v)["n"])
                                                           for v in first + second)


def worker(command: str, root: Path, log: Path) -> subprocess.Popen:
    """`pipeframe serve` or `pipeframe run` of the project in its own process group (with its JVM), once it is up:
    the server answers, or the worker says it runs."""
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIPEFRAME_") or k == "PIPEFRAME_SPARK_JARS"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    started = log.read_text().count("kept up to date (Ctrl-C to stop)") if log.exists() else 0
    with log.open("a") as out:
        process = subprocess.Popen([sys.executable, "-m", "pipeframe.cli", command, "-p", str(root),
                                    *(["--port", str(port)] if command == "serve" else [])], env=env, cwd=ROOT,
                                   stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                   start_new_session=True)
    deadline = time.monotonic() + DEADLINE_S
    while time.monotonic() < deadline and process.poll() is None:
        if command == "run":
            if log.read_text().count("kept up to date (Ctrl-C to stop)") > started:
                return process
            time.sleep(0.2)  # polling for the worker to start
            continue
        try:
            if httpx.get(f"http://127.0.0.1:{port}/v0/ingest", timeout=30).status_code == 200:
                return process
        except httpx.TransportError:
            time.sleep(0.2)  # polling for the server to listen
    os.killpg(process.pid, signal.SIGKILL)
    pytest.fail(f"{command} never came up:\n{log.read_text()[-3000:]}")


def test_a_process_killed_at_random_moments_while_messages_flow_lands_each_message_once(project, broker, tmp_path):
    """Messages produced steadily while the process consuming them — `pipeframe serve` and `pipeframe run` in turn —
    is SIGKILLed KILLS times at random moments after it made progress (its JVM with it), then run again and stopped
    with Ctrl-C: each message is in the datasource and its view exactly once."""
    total = 600 * KILLS  # produced at 40 a second: about 15 s of messages flowing per kill
    values = [clicks(i % 11, i % 97) for i in range(total)]
    stop = threading.Event()

    def producer() -> None:
        for start in range(0, total, 40):
            produce(broker, values[start:start + 40], start, topic="crashes")
            if stop.wait(1.0):
                return

    thread = threading.Thread(target=producer, daemon=True)
    thread.start()
    rng = random.Random(int(os.environ.get("PIPEFRAME_CRASH_SEED") or time.time_ns() % 1_000_000))
    log = tmp_path / "worker.log"
    seen = 0
    try:
        for kill in range(KILLS):
            process = worker(("serve", "run")[kill % 2], project.root, log)
            try:
                grew = until(lambda before=seen: len(landed(project, "crashes")) in range(before + 1, total + 1)
                             or before == total, True)
                assert grew, f"no progress before kill {kill}: {log.read_text()[-3000:]}"
                time.sleep(rng.uniform(0, 1.5))  # a random moment to kill it at, after it made progress
            finally:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
            seen = len(landed(project, "crashes"))
        thread.join()
    finally:
        stop.set()
    process = worker("run", project.root, log)
    try:
        assert until(lambda: len(landed(project, "crashes")), total) == total
        assert until(lambda: view(project, "crashes_by_user"), expected_view(values)) == expected_view(values)
    finally:
        os.killpg(process.pid, signal.SIGINT)  # Ctrl-C: a clean stop
        assert process.wait(DEADLINE_S) == 0, log.read_text()[-3000:]
    assert "\nstopped\n" in log.read_text().rsplit("kept up to date (Ctrl-C to stop)", 1)[1]  # after its banner
    rows = landed(project, "crashes")
    assert len({(p, o) for p, o, _, _ in rows}) == total
    assert sorted((u, n) for _, _, u, n in rows) == sorted((json.loads(v)["user"], json.loads(v)["n"]) for v in values)


def test_structured_streamings_lines_are_the_consumers_lines(spark):
    """A message becomes the same NDJSON line whichever engine reads it: `engine.streams.line_sql` over the columns
    of Spark's Kafka source against `kafka.line_of` (metadata spliced into an object, anything else a JSON string
    that the parser quarantines)."""
    from datetime import UTC, datetime

    from pipeframe.connectors.kafka import line_of
    from pipeframe.engine.streams import line_sql

    values = [b'{"user":"u1","n":3}', b' {"a": {"b": [1, 2]}, "s": "x\\ny", "d": 1.50} ', b"{}", b"{ }",
              b'{\n"multi": 1\n}', b"not json", None, b"[1,2]", b'"just a string"', "caf\u00e9 {}".encode()]
    at = datetime(2024, 5, 3, 8, 15, 42, 123000, tzinfo=UTC)
    rows = [(value, f"k{i}".encode() if i % 3 else None, "clicks", i % 4, 1000 + i, at)
            for i, value in enumerate(values)]
    frame = spark.createDataFrame(rows, "value BINARY, key BINARY, topic STRING, partition INT, offset BIGINT, "
                                        "timestamp TIMESTAMP")
    for raw in (False, True):
        got = [r[0] for r in frame.selectExpr(f"{line_sql(raw)} AS line").collect()]
        want = [line_of(value, "clicks", i % 4, 1000 + i, int(at.timestamp() * 1000), f"k{i}".encode() if i % 3
                        else None, raw) for i, value in enumerate(values)]
        assert [json.loads(line) for line in got] == [json.loads(line) for line in want], raw
