"""connectors.sink.committed without a broker: a Kafka sink reads its group's committed offset before a run; a
coordinator that is moving or loading answers with an error Kafka marks retriable (what tests/spark/test_sinks.py met
once on a just-started broker: "Failed to get committed offsets: Broker: Not coordinator"), which is asked again;
any other error reaches the user at once."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError, KafkaException, TopicPartition

from pipeframe.connectors.sink import committed

MARKER = TopicPartition("sales_out", 0)


class Answers:
    """A consumer whose `committed` raises the given errors in turn, then answers."""

    def __init__(self, *errors: int) -> None:
        self.errors = list(errors)
        self.calls = 0

    def committed(self, partitions: list, timeout: float) -> list:
        self.calls += 1
        assert timeout > 0
        if self.errors:
            raise KafkaException(KafkaError(self.errors.pop(0)))
        return [TopicPartition(partitions[0].topic, 0, 42)]


def test_a_moving_or_loading_coordinator_is_asked_again():
    consumer = Answers(KafkaError.NOT_COORDINATOR, KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
                       KafkaError.COORDINATOR_NOT_AVAILABLE)
    assert committed(consumer, MARKER, 30).offset == 42
    assert consumer.calls == 4


def test_another_error_is_raised_at_once_and_a_lasting_one_by_the_deadline():
    consumer = Answers(KafkaError.TOPIC_AUTHORIZATION_FAILED, KafkaError.NOT_COORDINATOR)
    with pytest.raises(KafkaException) as refused:
        committed(consumer, MARKER, 30)
    assert refused.value.args[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED and consumer.calls == 1
    lasting = Answers(*[KafkaError.NOT_COORDINATOR] * 100)
    with pytest.raises(KafkaException) as gave_up:
        committed(lasting, MARKER, 0.3)
    assert gave_up.value.args[0].code() == KafkaError.NOT_COORDINATOR and 2 <= lasting.calls < 100
