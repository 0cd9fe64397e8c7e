"""Connections without a broker: `.connection` files and a datasource's Kafka settings as `pipeframe check` judges
them (file:line, did-you-mean), `tb_secret()` resolved from the environment, `.env` and defaults, and the two pure
parts of the Kafka consumer: a message as an NDJSON line with Tinybird's metadata columns, and where each partition
resumes from the idempotency keys a table's commits hold."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import UTC, datetime

import pytest

from pipeframe.connectors.kafka import key_of, line_of, resume_offsets
from pipeframe.connectors.spec import environment, resolved
from pipeframe.datafiles.model import Setting
from pipeframe.errors import Location, PipeframeError
from pipeframe.project import Project
from tests.conftest import write_project

KAFKA = """\
TYPE kafka
KAFKA_BOOTSTRAP_SERVERS {{ tb_secret("KAFKA_SERVERS", "127.0.0.1:9092") }}
KAFKA_SECURITY_PROTOCOL PLAINTEXT
"""
CLICKS = """\
SCHEMA >
    `user` String `json:$.user`,
    `n` Int32 `json:$.n`

KAFKA_CONNECTION_NAME local_kafka
KAFKA_TOPIC clicks
KAFKA_AUTO_OFFSET_RESET earliest
"""


def checked(tmp_path, files: dict[str, str]) -> list[str]:
    root = write_project(tmp_path / "proj", files)
    return sorted(f"{d.location} {d.code}{'' if d.is_error else ' (warning)'} {d.message} | {d.hint}"
                  for d in Project(root, environ={}).check().diagnostics)


def test_a_kafka_datasource_and_its_connection_check_clean_with_tinybirds_metadata_columns(tmp_path):
    root = write_project(tmp_path / "proj", {"connections/local_kafka.connection": KAFKA,
                                             "datasources/clicks.datasource": CLICKS})
    project = Project(root, environ={})
    assert project.check().diagnostics == ()
    [connection] = project.compiled.resources.connections
    assert (connection.name, connection.type) == ("local_kafka", "kafka")
    columns = [c.name for c in project.compiled.datasources["clicks"].columns]
    assert columns == ["user", "n", "__value", "__topic", "__partition", "__offset", "__timestamp", "__key"]


@pytest.mark.parametrize("files, expected", [
    ({"connections/local_kafka.connection": KAFKA.replace("KAFKA_SECURITY_PROTOCOL", "KAFKA_SECURITY_PROTOCL"),
      "datasources/clicks.datasource": CLICKS},
     [("connections/local_kafka.connection:3:1 PF111 `KAFKA_SECURITY_PROTOCL` is not a setting of a connection "
      "`local_kafka` (TYPE kafka). | Did you mean `KAFKA_SECURITY_PROTOCOL`?")]),
    ({"connections/local_kafka.connection": KAFKA.replace("PLAINTEXT", "TLS"), "datasources/clicks.datasource": CLICKS},
     [("connections/local_kafka.connection:3:1 PF111 KAFKA_SECURITY_PROTOCOL `TLS` is not one of PLAINTEXT, "
      "SASL_PLAINTEXT, SASL_SSL, SSL. | Write one of: PLAINTEXT, SASL_PLAINTEXT, SASL_SSL, SSL.")]),
    ({"connections/local_kafka.connection": "TYPE kafka\n", "datasources/clicks.datasource": CLICKS},
     [("connections/local_kafka.connection:1:1 PF111 A connection `local_kafka` (TYPE kafka) needs KAFKA_BOOTSTRAP_SERVERS. "
      "| Add a `KAFKA_BOOTSTRAP_SERVERS <value>` line.")]),
    ({"connections/local_kafka.connection": KAFKA.replace("TYPE kafka", "TYPE bigquery"),
      "datasources/clicks.datasource": CLICKS},
     [("connections/local_kafka.connection:1:1 PF111 Connection `local_kafka` has TYPE `bigquery`, which pipeframe does not "
      "connect to. | Write `TYPE kafka` or `TYPE s3` as its first line."),
      ("datasources/clicks.datasource:5:1 PF113 `clicks` reads Kafka from connection `local_kafka`, which is TYPE "
      "bigquery. | Name a `TYPE kafka` connection.")]),
    ({"connections/local_kafka.connection": KAFKA, "datasources/clicks.datasource": CLICKS.replace(
        "KAFKA_CONNECTION_NAME local_kafka", "KAFKA_CONNECTION_NAME local_kafak")},
     [("datasources/clicks.datasource:5:1 PF113 (warning) `clicks` reads from connection `local_kafak`, which no .connection "
      "file defines: it is deployed but not consumed. | Did you mean `local_kafka`?")]),
    ({"connections/local_kafka.connection": KAFKA, "datasources/clicks.datasource": CLICKS.replace(
        "KAFKA_TOPIC clicks\n", "").replace("earliest", "oldest")},
     [("datasources/clicks.datasource:1:1 PF113 A Kafka datasource `clicks` needs KAFKA_TOPIC. | Add a `KAFKA_TOPIC "
      "<value>` line."),
      ("datasources/clicks.datasource:6:1 PF113 KAFKA_AUTO_OFFSET_RESET `oldest` is not one of earliest, latest. | "
      "Write one of: earliest, latest.")]),
])
def test_check_names_each_connection_problem_at_its_line_with_the_fix(tmp_path, files, expected):
    assert checked(tmp_path, files) == expected


def test_a_kafka_setting_pipeframe_does_not_act_on_is_a_warning_at_its_line(tmp_path):
    found = checked(tmp_path, {"connections/local_kafka.connection": KAFKA,
                               "datasources/clicks.datasource": CLICKS + "KAFKA_VALUE_FORMAT avro\n"})
    assert [f.split(" |")[0] for f in found] == [
        ("datasources/clicks.datasource:8:1 PF110 (warning) This Kafka setting is not supported yet; `KAFKA_VALUE_FORMAT` is "
        "ignored.")]


def test_secrets_come_from_the_environment_then_dotenv_then_the_default(tmp_path):
    (tmp_path / ".env").write_text("KAFKA_KEY=from-dotenv\nKAFKA_SECRET=dotenv-secret\n")
    environ = environment(tmp_path, {"KAFKA_SECRET": "from-environ"})

    def setting(value: str) -> Setting:
        return Setting("KAFKA_KEY", value, Location("connections/c.connection", 4))

    assert resolved(setting('{{ tb_secret("KAFKA_KEY") }}'), environ) == "from-dotenv"
    assert resolved(setting("{{ tb_secret('KAFKA_SECRET', 'x') }}"), environ) == "from-environ"
    assert resolved(setting('{{tb_secret("NOT_SET", "fallback:9092")}}'), environ) == "fallback:9092"
    with pytest.raises(PipeframeError) as err:
        resolved(setting('{{ tb_secret("NOT_SET") }}'), environ)
    [found] = err.value.diagnostics
    assert (found.code, str(found.location)) == ("PF112", "connections/c.connection:4:1")
    assert "`NOT_SET`" in found.message and ".env" in found.hint


def test_a_message_becomes_a_line_with_the_metadata_columns_and_its_own_keys():
    line = line_of(b'{"user": "u1", "n": 3}', "clicks", 2, 41, 1_700_000_000_000, b"k", raw=True)
    assert json.loads(line) == {"__topic": "clicks", "__partition": 2, "__offset": 41,
                                "__timestamp": "2023-11-14 22:13:20", "__key": "k",
                                "__value": '{"user": "u1", "n": 3}', "user": "u1", "n": 3}
    own = json.loads(line_of(b' {"__key": "mine", "a": {"__topic": 1}}', "t", 0, 0, 0, b"k", raw=False))
    assert own["__key"] == "mine" and own["a"] == {"__topic": 1} and own["__topic"] == "t"  # its own key wins
    assert json.loads(line_of(b"{}", "t", 0, 0, 0, None, raw=False)) == {
        "__topic": "t", "__partition": 0, "__offset": 0, "__timestamp": "1970-01-01 00:00:00", "__key": "",
        "__value": ""}
    # sent as written (a decimal's digits kept for Decimal columns), on one line even when the message spans several
    assert line_of(b'{"price": 1.10, "big": 12345678901234567890}', "t", 0, 0, 0, None, raw=False).startswith(
        '{"price": 1.10, "big": 12345678901234567890,"__topic":"t",')
    pretty = line_of(b'{\n  "user": "u1",\n  "n": 3\n}\n', "t", 0, 0, 0, None, raw=False)
    assert "\n" not in pretty and json.loads(pretty)["user"] == "u1"
    # a timestamp no datetime holds (a producer's clock past the year 9999): when it was read, not a stopped consumer
    read = json.loads(line_of(b"{}", "t", 0, 0, 10**17, None, raw=False))["__timestamp"]
    assert abs((datetime.strptime(read, "%Y-%m-%d %H:%M:%S").replace(tzinfo=UTC) - datetime.now(UTC)).total_seconds()) < 600
    # not a JSON object: a JSON string, which the parser quarantines with the message's text
    assert [json.loads(line_of(v, "t", 0, 7, 0, None, raw=False)) for v in (b"not json", b"", None, b"[1]")] == [
        "not json", "", "", "[1]"]


def test_each_partition_resumes_after_the_last_offset_its_table_holds():
    keys = {key_of("clicks", 0, 0, 99): None, key_of("clicks", 0, 100, 149): None, key_of("clicks", 3, 0, 9): None,
            key_of("other", 1, 0, 500): None, "events-api-key": None, "kafka/clicks/x/1-2": None}
    assert resume_offsets(keys, "clicks") == {0: 150, 3: 10}
    assert resume_offsets({}, "clicks") == {}


def test_the_lag_of_a_topic_whose_broker_does_not_answer_shows_the_tables_offsets_and_why(tmp_path):
    from pipeframe.connectors.kafka import topic_lag
    from pipeframe.engine.localserver import free_port

    root = write_project(tmp_path / "proj", {"connections/local_kafka.connection": KAFKA,
                                             "datasources/clicks.datasource": CLICKS})
    resources = Project(root, environ={}).compiled.resources
    [connection], clicks = resources.connections, resources.datasources[0]
    keys = {key_of("clicks", 0, 0, 9): None, key_of("clicks", 2, 0, 4): None}
    nowhere = {"KAFKA_SERVERS": f"127.0.0.1:{free_port()}"}  # a port nothing listens on
    lag = topic_lag("clicks", clicks, connection, nowhere, keys, timeout=1.5)
    assert lag == {"datasource": "clicks", "topic": "clicks", "error": "the broker did not answer within 1.5 s",
                   "partitions": {"0": {"committed": 10, "high": None, "lag": None},
                                  "2": {"committed": 5, "high": None, "lag": None}}}
    servers, *others = connection.settings
    unset = replace(connection, settings=(replace(servers, value='{{ tb_secret("NOT_SET") }}'), *others))
    assert topic_lag("clicks", clicks, unset, {}, keys, timeout=1.5)["error"].startswith(
        "connections/local_kafka.connection:2:1 PF112 error: Secret `NOT_SET` (KAFKA_BOOTSTRAP_SERVERS) is not set.")
