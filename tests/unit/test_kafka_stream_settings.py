"""Kafka by Structured Streaming, the parts decided without a JVM (connectors/kafka_stream.py): the source's options
from a connection, where a new query starts, what of a micro-batch is left to commit, and the setting itself."""

from __future__ import annotations

import json

import pytest

from pipeframe.config import load_config
from pipeframe.connectors.kafka_stream import MAX_OFFSETS, source_options, spans_after, starting_offsets
from pipeframe.engine.session import spark_settings
from pipeframe.engine.streams import SOURCE_PACKAGE
from pipeframe.errors import PipeframeError

PLAIN = {"KAFKA_BOOTSTRAP_SERVERS": "127.0.0.1:9092", "KAFKA_SECURITY_PROTOCOL": "PLAINTEXT", "KAFKA_TOPIC": "clicks"}


def test_the_source_reads_the_topic_from_the_connections_broker_in_bounded_micro_batches():
    assert source_options("clicks", PLAIN) == {
        "kafka.bootstrap.servers": "127.0.0.1:9092", "kafka.security.protocol": "PLAINTEXT", "subscribe": "clicks",
        "failOnDataLoss": "false", "maxOffsetsPerTrigger": str(MAX_OFFSETS)}


def test_sasl_settings_become_the_java_clients_jaas_line_with_the_secret_quoted():
    options = source_options("clicks", {**PLAIN, "KAFKA_SECURITY_PROTOCOL": "SASL_SSL", "KAFKA_SASL_MECHANISM":
                                        "SCRAM-SHA-512", "KAFKA_KEY": "svc", "KAFKA_SECRET": 'p"w;x',
                                        "KAFKA_SSL_CA_PEM": "-----BEGIN CERTIFICATE-----"})
    assert options["kafka.security.protocol"] == "SASL_SSL"
    assert options["kafka.sasl.mechanism"] == "SCRAM-SHA-512"
    assert options["kafka.sasl.jaas.config"] == (
        'org.apache.kafka.common.security.scram.ScramLoginModule required username="svc" password="p\\"w;x";')
    assert options["kafka.ssl.truststore.type"] == "PEM"
    assert options["kafka.ssl.truststore.certificates"] == "-----BEGIN CERTIFICATE-----"
    plain = source_options("clicks", {**PLAIN, "KAFKA_SASL_MECHANISM": "PLAIN", "KAFKA_KEY": "k", "KAFKA_SECRET": "s"})
    assert plain["kafka.sasl.jaas.config"].startswith("org.apache.kafka.common.security.plain.PlainLoginModule ")


def test_a_new_query_starts_after_what_the_table_holds_and_names_every_partition():
    assert starting_offsets("clicks", [0, 1, 2], {}, "earliest") == "earliest"
    assert starting_offsets("clicks", [0, 1, 2], {}, "latest") == "latest"
    assert json.loads(starting_offsets("clicks", [0, 1, 2], {0: 17, 2: 5}, "earliest")) == \
        {"clicks": {"0": 17, "1": -2, "2": 5}}
    assert json.loads(starting_offsets("clicks", [0], {3: 9}, "latest")) == {"clicks": {"0": -1, "3": 9}}


def test_a_micro_batch_commits_only_the_offsets_after_what_the_table_holds():
    spans = {0: (10, 19), 1: (5, 9), 2: (0, 3)}
    assert spans_after(spans, {}) == spans
    assert spans_after(spans, {0: 14, 1: 9, 3: 100}) == {0: (15, 19), 2: (0, 3)}
    assert spans_after(spans, {0: 19, 1: 20, 2: 3}) == {}  # a micro-batch run again after it landed


def test_the_streaming_engine_adds_sparks_kafka_source_to_the_session_and_is_checked(tmp_path):
    (tmp_path / "pipeframe.yaml").write_text(
        "ingest:\n  kafka_engine: streaming\nspark:\n  conf:\n    spark.jars.packages: org.example:extra:1.0\n")
    config = load_config(tmp_path)
    assert config.ingest.kafka_engine == "streaming"
    settings = spark_settings(config, environ={})
    assert settings["spark.jars.packages"] == f"{SOURCE_PACKAGE},org.example:extra:1.0"
    assert "org.xerial.snappy:snappy-java" in settings["spark.jars.excludes"].split(",")
    (tmp_path / "pipeframe.yaml").write_text("ingest:\n  kafka_engine: flink\n")
    with pytest.raises(PipeframeError, match="kafka_engine` must be one of consumer, streaming, not `flink`"):
        load_config(tmp_path)
    (tmp_path / "pipeframe.yaml").write_text("ingest: {}\n")
    assert "spark.jars.packages" not in spark_settings(load_config(tmp_path), environ={})
