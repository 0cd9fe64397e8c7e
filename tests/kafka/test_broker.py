"""The Kafka test broker is a real broker: records keep their partition order, and a restart loses nothing.

Records are produced with confluent-kafka (librdkafka) and read back by consumer groups; every wait is a poll
loop with a deadline. Each test uses topics and groups of its own, as the broker lives for the whole session.
"""

from __future__ import annotations

import json
import time
import uuid
from collections import defaultdict

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition

from tests.kafka.broker import KafkaBroker

pytestmark = pytest.mark.kafka

# (partition, offset, key, value): a record where the broker put it.
Record = tuple[int, int, str, dict]


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def produce(broker: KafkaBroker, topic: str, records: list[tuple[str, dict]]) -> list[Record]:
    """Produce (key, value) pairs in order; the broker's delivery reports say where each one landed."""
    delivered: list[Record] = []
    errors: list[object] = []

    def report(error, message) -> None:
        if error is not None:
            errors.append(error)
        else:
            delivered.append((message.partition(), message.offset(), message.key().decode(),
                              json.loads(message.value())))

    # murmur2: the partitioner of Kafka's Java clients, so a key lands where a JVM producer would put it.
    producer = Producer({"bootstrap.servers": broker.bootstrap, "enable.idempotence": True,
                         "partitioner": "murmur2_random", "linger.ms": 5})
    for key, value in records:
        producer.produce(topic, key=key.encode(), value=json.dumps(value).encode(), on_delivery=report)
        producer.poll(0)
    assert producer.flush(30) == 0, "records still undelivered after 30 s"
    assert errors == []
    assert len(delivered) == len(records)
    return delivered


def consumer(broker: KafkaBroker, group: str) -> Consumer:
    return Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                     "enable.auto.commit": False})


def consume(reader: Consumer, count: int, timeout: float = 60) -> list[Record]:
    """Poll until `count` records arrived (in the order they arrived), or fail at the deadline."""
    received: list[Record] = []
    deadline = time.monotonic() + timeout
    while len(received) < count:
        assert time.monotonic() < deadline, f"only {len(received)} of {count} records after {timeout} s"
        message = reader.poll(0.5)
        if message is None:
            continue
        if message.error() is not None:
            assert message.error().code() == KafkaError._PARTITION_EOF, message.error()
            continue
        received.append((message.partition(), message.offset(), message.key().decode(),
                         json.loads(message.value())))
    return received


def committed(reader: Consumer, topic: str, partitions: int) -> dict[int, int]:
    """The group's committed offset of each partition (-1001, OFFSET_INVALID, where it has none)."""
    answer = reader.committed([TopicPartition(topic, p) for p in range(partitions)], timeout=30)
    assert all(tp.error is None for tp in answer), answer
    return {tp.partition: tp.offset for tp in answer}


def end_offsets(reader: Consumer, topic: str, partitions: int) -> dict[int, int]:
    return {p: reader.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1] for p in range(partitions)}


def by_partition(records: list[Record]) -> dict[int, list[tuple[int, int]]]:
    """Each partition's (offset, seq) pairs in the order the records were given."""
    out: dict[int, list[tuple[int, int]]] = defaultdict(list)
    for partition, offset, _key, value in records:
        out[partition].append((offset, value["seq"]))
    return dict(out)


def test_records_are_consumed_exactly_once_in_partition_order(kafka_broker: KafkaBroker) -> None:
    topic = unique("orders")
    kafka_broker.create_topic(topic, partitions=4)
    sent = produce(kafka_broker, topic, [(f"user-{i % 10}", {"seq": i, "user": f"user-{i % 10}"})
                                         for i in range(100)])
    # The keys spread over every partition, and a key always lands on the same one.
    assert {partition for partition, *_ in sent} == {0, 1, 2, 3}
    partition_of = defaultdict(set)
    for partition, _offset, key, _value in sent:
        partition_of[key].add(partition)
    assert all(len(partitions) == 1 for partitions in partition_of.values())
    # Each partition holds its records at offsets 0..n-1 in the order they were produced.
    for partition, pairs in by_partition(sent).items():
        pairs.sort()
        assert [offset for offset, _ in pairs] == list(range(len(pairs))), partition
        assert [seq for _, seq in pairs] == sorted(seq for _, seq in pairs), partition

    reader = consumer(kafka_broker, unique("group"))
    try:
        reader.subscribe([topic])
        received = consume(reader, 100)
        assert sorted(received) == sorted(sent)  # exactly the produced records, where they were produced
        for partition, pairs in by_partition(received).items():  # read in offset (= produce) order per partition
            assert pairs == sorted(by_partition(sent)[partition]), partition
        assert end_offsets(reader, topic, 4) == {p: len(pairs) for p, pairs in by_partition(sent).items()}
    finally:
        reader.close()


def test_restart_keeps_records_and_committed_offsets(kafka_broker: KafkaBroker) -> None:
    topic, group = unique("events"), unique("group")
    kafka_broker.create_topic(topic, partitions=2)
    first = produce(kafka_broker, topic, [(f"device-{i % 10}", {"seq": i}) for i in range(30)])
    reader = consumer(kafka_broker, group)
    try:
        reader.subscribe([topic])
        assert sorted(consume(reader, 30)) == sorted(first)
        reader.commit(asynchronous=False)
        before = committed(reader, topic, 2)
    finally:
        reader.close()
    counts = {p: len(pairs) for p, pairs in by_partition(first).items()}
    assert set(counts) == {0, 1}  # both partitions have records, so both have a committed offset
    assert before == counts and sum(before.values()) == 30

    bootstrap = kafka_broker.bootstrap
    kafka_broker.restart()
    assert kafka_broker.bootstrap == bootstrap

    second = produce(kafka_broker, topic, [(f"device-{i % 10}", {"seq": i}) for i in range(30, 50)])
    reader = consumer(kafka_broker, group)
    try:
        assert committed(reader, topic, 2) == before  # the group's offsets survived the restart
        reader.subscribe([topic])
        # The group resumes where it committed: the records produced after the restart, none from before.
        assert sorted(consume(reader, 20)) == sorted(second)
        reader.commit(asynchronous=False)
        assert committed(reader, topic, 2) == end_offsets(reader, topic, 2)
        assert sum(end_offsets(reader, topic, 2).values()) == 50
    finally:
        reader.close()

    # The records from before the restart are still on disk: a new group reads all 50, in partition order.
    fresh = consumer(kafka_broker, unique("group"))
    try:
        fresh.subscribe([topic])
        everything = consume(fresh, 50)
        assert sorted(everything) == sorted(first + second)
        for partition, pairs in by_partition(everything).items():
            assert pairs == sorted(by_partition(first + second)[partition]), partition
    finally:
        fresh.close()
