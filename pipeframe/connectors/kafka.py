"""Kafka ingest, exactly once: each Kafka datasource (`KAFKA_CONNECTION_NAME`, `KAFKA_TOPIC` in its file) is consumed
into the group-commit path the events API uses (engine/groupcommit.py), with the consumed offsets committed in the
same Delta commit as the rows.

How "exactly once" holds:
- A batch of one partition's messages, offsets `first`..`last`, is submitted as one request with the idempotency key
  `kafka/<topic>/<partition>/<first>-<last>`. The group committer lands a request whole or not at all and records its
  key in the commit's metadata (`IngestRecord.keys`), so the rows and the offsets they came from are one commit.
- Where a partition resumes is read from Delta, not from the broker: on assignment, the highest `last` among the
  table's committed keys for that partition, plus one (`resume_offsets`). The broker's committed offset is only a
  hint written after the Delta commit (tools that show consumer lag read it); without a key in Delta (a new
  datasource), `KAFKA_AUTO_OFFSET_RESET` decides (`latest` by default, as in Tinybird).
- A partition has at most one request in flight: a request that fails is sent again with the same key (a retry of a
  commit that did land is answered from the recorded key), so no later batch can land before an earlier one.
  A process killed at any moment therefore loses and doubles nothing: what it had not committed is read again.

Back-pressure: messages wait in a per-partition buffer while that partition's request is in flight; above
`MAX_BUFFERED` messages the partition is paused at the broker, and resumed once its buffer has been sent. A broker
that goes away is waited for (librdkafka reconnects; its errors are logged, never raised).

A message whose value is a JSON object is one NDJSON line with Tinybird's metadata columns added (`__topic`,
`__partition`, `__offset`, `__timestamp`, `__key`, and `__value` when `KAFKA_STORE_RAW_VALUE true`); anything else is
sent as it is and lands in quarantine with the parser's reason."""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import Future
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import orjson

from pipeframe.connectors.spec import environment, settings_of
from pipeframe.datafiles.parser import KAFKA_COLUMNS
from pipeframe.errors import PipeframeError
from pipeframe.sqltext import first_line

if TYPE_CHECKING:
    from pipeframe.datafiles.model import Connection, Datasource, Resources
    from pipeframe.plan.snapshot import DeployedSnapshot

log = logging.getLogger("pipeframe.kafka")

MAX_BATCH = 20_000  # messages of one partition in one request
MAX_BUFFERED = 50_000  # messages of one partition held before it is paused at the broker
POLL_S = 0.05
RETRY_S = 0.2  # wait before sending a refused (429) or failed request again
# A consumer that stops heartbeating (a process killed) keeps its partitions this long before the group gives them to
# another (librdkafka's default, 45 s, left a restarted server idle that long); heartbeats come from librdkafka's own
# thread every 3 s, so a busy Python process does not miss them.
SESSION_MS = 10_000
LOOKUP_S = 3.0  # how long `status` waits for the broker's high watermarks
SYNC_S = 1.0  # how often the job looks for Kafka datasources added or removed by a deploy


META_COLUMNS = frozenset(column.split("`")[1] for column in KAFKA_COLUMNS)


def key_of(topic: str, partition: int, first: int, last: int) -> str:
    return f"{app_of(topic, partition)}/{first}-{last}"


def app_of(topic: str, partition: int) -> str:
    """The sequence a partition's batches continue (`engine.ingest.fence_of`): the appId of their `txn` actions."""
    return f"kafka/{topic}/{partition}"


def parse_key(key: str, topic: str) -> tuple[int, int, int] | None:
    """(partition, first, last) of a `key_of` key of `topic`; None for any other key (another writer's key that
    only looks like ours included)."""
    from pipeframe.engine.ingest import fence_of

    fence, prefix = fence_of(key), app_of(topic, 0)[:-1]
    if fence is None or not fence[0].startswith(prefix):
        return None
    try:
        return int(fence[0][len(prefix):]), fence[1], fence[2]
    except ValueError:
        return None


def resume_offsets(keys: Iterable[str], topic: str) -> dict[int, int]:
    """Per partition of `topic`, the offset after the last message the table holds (from its committed keys)."""
    found: dict[int, int] = {}
    for key in keys:
        parsed = parse_key(key, topic)
        if parsed is not None:
            found[parsed[0]] = max(found.get(parsed[0], 0), parsed[2] + 1)
    return found


def topic_of(datasource: Datasource) -> str:
    """A Kafka datasource's KAFKA_TOPIC as written (a `tb_secret()` in it unresolved)."""
    return next((s.value for s in datasource.connector if s.keyword == "KAFKA_TOPIC"), "")


def line_of(value: bytes | None, topic: str, partition: int, offset: int, timestamp_ms: int | None,
            key: bytes | None, raw: bool) -> str:
    """One message as an NDJSON line: the value's object with the metadata columns added (a value's own key of
    that name wins). A value that is not a JSON object in UTF-8 (an empty one, a tombstone) is sent as a JSON
    string, which the parser quarantines with its reason. The object is checked by parsing it, but sent as
    written (its numbers' digits kept, as the events API receives them), the metadata spliced in before its
    closing brace; only a value spread over several lines, or with a key of its own named like a metadata column,
    is written out again from the parsed object."""
    try:
        parsed = orjson.loads(value or b"")
    except orjson.JSONDecodeError:
        parsed = None
    if not isinstance(parsed, dict):
        return orjson.dumps((value or b"").decode("utf-8", errors="replace")).decode()
    text = value.decode()  # type: ignore[union-attr] — orjson read it: UTF-8
    meta = {"__topic": topic, "__partition": partition, "__offset": offset, "__timestamp": _timestamp(timestamp_ms),
            "__key": (key or b"").decode("utf-8", errors="replace"), "__value": text if raw else ""}
    if "\n" in text or "\r" in text or not META_COLUMNS.isdisjoint(parsed):
        return orjson.dumps({**meta, **parsed}).decode()
    body = text.strip(" \t")[1:-1]  # between the braces of the object orjson read
    return "{" + body + ("," if parsed else "") + orjson.dumps(meta).decode()[1:]


def _timestamp(timestamp_ms: int | None) -> str:
    """`__timestamp` of a message: its timestamp, to the second, in UTC; when it was read for a message without one,
    or with one no datetime holds (a producer's clock beyond the year 9999)."""
    if timestamp_ms is not None and timestamp_ms >= 0:
        try:
            return _second(timestamp_ms // 1000)
        except (ValueError, OverflowError, OSError):
            pass
    return _second(int(time.time()))


@functools.lru_cache(maxsize=1024)
def _second(seconds: int) -> str:
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%d %H:%M:%S")


def client_config(name: str, settings: Mapping[str, str]) -> dict[str, Any]:
    """librdkafka's settings for a consumer of the datasource `name`: broker, group, security."""
    config = {"bootstrap.servers": settings["KAFKA_BOOTSTRAP_SERVERS"],
              "group.id": settings.get("KAFKA_GROUP_ID") or f"pipeframe-{name}",
              "security.protocol": settings.get("KAFKA_SECURITY_PROTOCOL", "SASL_SSL").lower()}
    if "KAFKA_SASL_MECHANISM" in settings or "KAFKA_KEY" in settings:
        config.update({"sasl.mechanisms": settings.get("KAFKA_SASL_MECHANISM", "PLAIN"),
                       "sasl.username": settings.get("KAFKA_KEY", ""), "sasl.password": settings.get("KAFKA_SECRET", "")})
    if settings.get("KAFKA_SSL_CA_PEM"):
        config["ssl.ca.pem"] = settings["KAFKA_SSL_CA_PEM"]
    return config


def lag_row(committed: int | None, high: int | None) -> dict[str, int | None]:
    return {"committed": committed, "high": high,
            "lag": None if high is None or committed is None else max(0, high - committed)}


def topic_lag(name: str, datasource: Datasource, connection: Connection, environ: Mapping[str, str],
              keys: Iterable[str], timeout: float = LOOKUP_S) -> dict:
    """What `status` and the views API show of a Kafka datasource this process does not consume: per partition, the
    offset after the last message its table holds (from the table's committed keys), the broker's high watermark
    and the lag; the broker is asked without joining the consumer group. A broker that does not answer within
    `timeout` seconds in all, or a secret not set, is the `error`, with the table's offsets still shown."""
    from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

    topic, high, error = topic_of(datasource), {}, None
    deadline = time.monotonic() + timeout

    def left() -> float:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise KafkaException(KafkaError(KafkaError._TIMED_OUT, "out of time"))
        return remaining

    try:
        settings = settings_of(datasource, connection, environ)
        topic = settings["KAFKA_TOPIC"]
        # log_level 0: librdkafka's connection errors (dozens a second while the broker is away) stay out of the
        # terminal; the one error that matters is this function's answer.
        consumer = Consumer({**client_config(name, settings), "enable.auto.commit": False, "log_level": 0,
                             "socket.connection.setup.timeout.ms": max(1000, int(timeout * 1000))})
        try:
            found = consumer.list_topics(topic, timeout=left()).topics.get(topic)
            if found is None or found.error is not None:
                error = f"the broker does not have the topic {topic!r}" + (f" ({found.error})" if found else "")
            else:
                for partition in found.partitions:
                    high[partition] = consumer.get_watermark_offsets(TopicPartition(topic, partition),
                                                                     timeout=left(), cached=False)[1]
        finally:
            consumer.close()
    except PipeframeError as err:
        error = str(err)
    except KafkaException as err:
        code = err.args[0].code() if err.args and isinstance(err.args[0], KafkaError) else None
        error = f"the broker did not answer within {timeout:g} s" if code in (
            KafkaError._TIMED_OUT, KafkaError._TRANSPORT, KafkaError._ALL_BROKERS_DOWN) else \
            f"the broker could not be asked: {err}"
    return lag_of(name, topic, resume_offsets(keys, topic), high, error)


def lag_of(name: str, topic: str, committed: Mapping[int, int | None], high: Mapping[int, int | None],
           error: str | None) -> dict:
    """A datasource's lag as `status`, the views API and `GET /v0/ingest` show it."""
    return {"datasource": name, "topic": topic, "error": error,
            "partitions": {str(p): lag_row(committed.get(p), high.get(p)) for p in sorted({*committed, *high})}}


@dataclass
class _Partition:
    buffered: list[tuple[int, str]] = field(default_factory=list)  # (offset, line)
    in_flight: tuple[Future, list[tuple[int, str]]] | None = None
    paused: bool = False
    committed: int | None = None  # the offset after the last message in Delta
    high: int | None = None  # the broker's high watermark, last seen
    next: int | None = None  # the offset expected next: one already read (fetched before a seek) is dropped


class KafkaSource:
    """One Kafka datasource's consumer: a thread reading its topic into `submit(name, lines, key)` (the runtime's
    group committer), resuming each partition where the table's commits say."""

    def __init__(self, name: str, datasource: Datasource, connection: Connection, environ: Mapping[str, str],
                 submit: Callable[[str, list[str], str], Future], committed_keys: Callable[[], Mapping[str, object]]
                 ) -> None:
        settings = settings_of(datasource, connection, environ)
        self.name = name
        self.topic = settings["KAFKA_TOPIC"]
        self.raw = settings.get("KAFKA_STORE_RAW_VALUE", "false").lower() == "true"
        self.reset = settings.get("KAFKA_AUTO_OFFSET_RESET", "latest").lower()
        self.config = {**client_config(name, settings), "enable.auto.commit": False,
                       "enable.auto.offset.store": False, "auto.offset.reset": self.reset,
                       "enable.partition.eof": False, "session.timeout.ms": SESSION_MS}
        self.submit = submit
        self.committed_keys = committed_keys
        self.partitions: dict[int, _Partition] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._watermarks_due = False  # partitions just assigned: their high watermarks are read at once
        self.error: str | None = None  # the last error the broker or a commit reported (status shows it)

    # ------------------------------------------------------------------------------------ lifecycle
    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name=f"pipeframe-kafka-{self.name}", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 300.0) -> None:
        """Stop consuming; the requests in flight are waited for (what they hold lands or is read again later)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)

    def lag(self) -> dict:
        """`lag_of` as this consumer sees it: per partition it holds, the offset after the last message in Delta, the
        broker's high watermark, the lag; with the last error the broker or a commit reported."""
        with self._lock:
            committed = {p: s.committed for p, s in self.partitions.items()}
            high = {p: s.high for p, s in self.partitions.items()}
        return lag_of(self.name, self.topic, committed, high, self.error)

    # ------------------------------------------------------------------------------------ the loop
    @property
    def alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def _run(self) -> None:
        try:
            self._consume()
        except Exception as err:
            self.error = f"the consumer stopped: {err}"
            log.exception("Kafka datasource %s: the consumer stopped", self.name)

    def _consume(self) -> None:
        from confluent_kafka import Consumer

        consumer = Consumer({**self.config, "error_cb": self._broker_error})
        consumer.subscribe([self.topic], on_assign=self._assigned, on_revoke=self._revoked)
        seen = 0.0
        try:
            while not self._stop.is_set():
                if self._watermarks_due or time.monotonic() - seen > SYNC_S:  # the broker's high watermarks
                    self._watermarks_due = False  # (for the lag), read again each SYNC_S
                    self._watermarks(consumer)
                    seen = time.monotonic()
                for message in consumer.consume(num_messages=MAX_BATCH, timeout=POLL_S):
                    if message.error() is not None:
                        self._broker_error(message.error())
                        continue
                    state = self.partitions.get(message.partition())
                    if state is None or (state.next is not None and message.offset() < state.next):
                        continue  # revoked meanwhile, or read already
                    state.next = message.offset() + 1
                    state.buffered.append((message.offset(), line_of(
                        message.value(), self.topic, message.partition(), message.offset(),
                        message.timestamp()[1], message.key(), self.raw)))
                self._pump(consumer)
            self._drain(consumer, list(self.partitions))
        finally:
            consumer.close()

    def _pump(self, consumer: Any) -> None:
        from confluent_kafka import TopicPartition

        for partition, state in list(self.partitions.items()):
            if state.in_flight is not None and state.in_flight[0].done():
                self._settled(consumer, partition, state)
            if state.in_flight is None and state.buffered:
                batch, state.buffered = state.buffered[:MAX_BATCH], state.buffered[MAX_BATCH:]
                self._send(partition, state, batch)
            full = len(state.buffered) >= MAX_BUFFERED
            if full != state.paused:
                (consumer.pause if full else consumer.resume)([TopicPartition(self.topic, partition)])
                state.paused = full

    def _send(self, partition: int, state: _Partition, batch: list[tuple[int, str]]) -> None:
        key = key_of(self.topic, partition, batch[0][0], batch[-1][0])
        try:
            future = self.submit(self.name, [line for _, line in batch], key)
        except Exception as err:  # noqa: BLE001 — refused (429), stopping (503), a deploy under way: sent again
            future = Future()
            future.set_exception(err)
        state.in_flight = (future, batch)

    def _settled(self, consumer: Any, partition: int, state: _Partition) -> None:
        from confluent_kafka import TopicPartition

        assert state.in_flight is not None
        future, batch = state.in_flight
        state.in_flight = None
        error = future.exception()
        held = getattr(error, "landed", {}).get(app_of(self.topic, partition))
        if held is not None:  # `Fenced`: another writer landed these offsets (up to `held`) first
            self._skip(consumer, partition, state, batch, held)
            return
        if error is not None:
            self.error = str(error)
            log.warning("Kafka datasource %s: the commit of partition %d offsets %d-%d failed (%s); sending it again",
                        self.name, partition, batch[0][0], batch[-1][0], error)
            if not self._stop.wait(RETRY_S):
                self._send(partition, state, batch)  # the same key: a commit that did land is not repeated
            return
        with self._lock:
            state.committed = batch[-1][0] + 1
        consumer.commit(offsets=[TopicPartition(self.topic, partition, state.committed)], asynchronous=True)

    def _skip(self, consumer: Any, partition: int, state: _Partition, batch: list[tuple[int, str]], held: int) -> None:
        """Continue partition `partition` after offset `held`, which the table holds from another writer (a consumer
        of another group, or one that took the partition while this one stalled): what was read up to it is
        dropped, the rest sent again, and the consumer seeks past it when it had not read that far."""
        from confluent_kafka import KafkaException, TopicPartition

        log.warning("Kafka datasource %s: partition %d up to offset %d was landed by another writer; continuing "
                    "after it", self.name, partition, held)
        state.buffered = [m for m in batch + state.buffered if m[0] > held]
        with self._lock:
            state.committed = max(state.committed or 0, held + 1)
        if state.next is None or state.next <= held:
            state.next = held + 1
            try:
                consumer.seek(TopicPartition(self.topic, partition, held + 1))
            except KafkaException as err:  # not fetching yet: `next` drops what is read before it
                self._broker_error(err)
        consumer.commit(offsets=[TopicPartition(self.topic, partition, held + 1)], asynchronous=True)

    def _drain(self, consumer: Any, partitions: list[int]) -> None:
        """Wait for the requests in flight of `partitions` (stopping, or a rebalance taking them away): as long as
        they take, since the committer answers each one (committed or failed) and a partition given up while its
        request is still queued could be committed again by its next owner."""
        for partition in partitions:
            state = self.partitions.get(partition)
            if state is not None and state.in_flight is not None:
                try:
                    state.in_flight[0].result()
                except Exception as err:  # noqa: BLE001 — not landed, whatever failed: the next owner reads it again
                    log.warning("Kafka datasource %s: partition %d's last batch did not land (%s)",
                                self.name, partition, err)
                    state.in_flight = None
                else:
                    self._settled(consumer, partition, state)

    # ------------------------------------------------------------------------------------ rebalances
    def _assigned(self, consumer: Any, assigned: list) -> None:
        offsets = resume_offsets(self.committed_keys(), self.topic)
        for tp in assigned:
            known = offsets.get(tp.partition)
            if known is not None:  # what the table holds decides
                tp.offset = known
            # else (nothing of it in the table's history: a new datasource, a rebuilt table, a history cleaned up)
            # the group's committed offset, written after each Delta commit, then KAFKA_AUTO_OFFSET_RESET
            with self._lock:
                self.partitions[tp.partition] = _Partition(committed=known, next=known)
        consumer.assign(assigned)
        self._watermarks_due = True

    def _revoked(self, consumer: Any, revoked: list) -> None:
        self._drain(consumer, [tp.partition for tp in revoked])
        with self._lock:
            for tp in revoked:
                self.partitions.pop(tp.partition, None)

    def _watermarks(self, consumer: Any) -> None:
        from confluent_kafka import KafkaException, TopicPartition

        for partition, state in list(self.partitions.items()):
            try:
                _low, high = consumer.get_watermark_offsets(TopicPartition(self.topic, partition), timeout=2,
                                                            cached=False)
            except KafkaException as err:  # the broker is away: the lag shows what was last seen
                self._broker_error(err)
                return
            with self._lock:
                state.high = high

    def _broker_error(self, error: Any) -> None:
        self.error = str(error)
        log.warning("Kafka datasource %s: %s", self.name, error)


class KafkaIngest:
    """The runtime's job that consumes every deployed Kafka datasource of the project it works for (`serve`, `dev`):
    a `KafkaSource` per datasource, started and stopped as deploys add and remove them, started again if its
    consumer stopped on an error."""

    def __init__(self, runtime: Any, stream: Callable[..., Any]) -> None:
        self.runtime = runtime
        self.stream = stream  # `kafka_stream.KafkaStream`, for `ingest.kafka_engine: streaming`
        self.sources: dict[str, Any] = {}  # KafkaSource or KafkaStream
        self.failed: dict[str, str] = {}  # datasource -> why its consumer could not start (a secret not set, ...)
        self._lock = threading.Lock()  # sources and failed: the sync thread, stop() and lag() share them
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self, service: Any) -> None:
        self._stop.clear()
        self._thread = threading.Thread(target=self._loop, name="pipeframe-kafka", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                self.sync()
            except Exception:  # a deploy under way: the next look tries again
                log.exception("Kafka datasources could not be read")
            self._stop.wait(SYNC_S)

    def sync(self) -> None:
        """Start a consumer for each Kafka datasource the project has deployed (again, for one whose consumer
        stopped on an error), stop those it no longer has."""
        project = self.runtime.current()
        wanted = kafka_datasources(project.compiled.resources, project.warehouse.snapshot())
        committer = self.runtime.committer  # bound now: a runtime stopped meanwhile builds a new one
        with self._lock:
            gone = [self.sources.pop(name) for name in list(self.sources)
                    if name not in wanted or not self.sources[name].alive]
        for source in gone:
            source.stop()
        for name, (datasource, connection) in wanted.items():
            with self._lock:
                if name in self.sources or self._stop.is_set():
                    continue
                environ = environment(project.root, project.environ)
                try:
                    if project.config.ingest.kafka_engine == "streaming":
                        source = self.stream(name, datasource, connection, environ, self.runtime)
                    else:
                        source = KafkaSource(name, datasource, connection, environ, committer.submit,
                                             lambda n=name: self._keys(n))
                    source.start()
                except Exception as err:  # noqa: BLE001 — e.g. PF112, Spark without its Kafka source: told once,
                    why = first_line(err)  # tried again at each look (a .env edited, the broker back)
                    if self.failed.get(name) != why:
                        log.error("Kafka datasource %s is not consumed: %s", name, why)
                    self.failed[name] = why
                    continue
                self.failed.pop(name, None)
                self.sources[name] = source

    def _keys(self, name: str) -> Mapping[str, object]:
        from pipeframe.engine.ingest import committed_keys

        project = self.runtime.current()
        table, _ = project.landing_target(name)
        return committed_keys(project.spark, table.path, limit=None)

    def stop(self) -> None:
        """Stop every consumer (their requests in flight land first); the committer is stopped after this."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        with self._lock:
            sources, self.sources = list(self.sources.values()), {}
        for source in sources:
            source.stop()

    def lag(self) -> dict[str, dict]:
        """What `GET /v0/ingest` shows of each Kafka datasource (`kafka`)."""
        with self._lock:
            failed, sources = dict(self.failed), dict(self.sources)
        return {**{name: lag_of(name, None, {}, {}, why) for name, why in failed.items()},
                **{name: s.lag() for name, s in sources.items()}}

    def consumed(self, name: str) -> dict | None:
        """The live lag of datasource `name` when this process consumes it (None otherwise)."""
        with self._lock:
            source = self.sources.get(name)
        return source.lag() if source is not None and source.alive else None


def kafka_datasources(resources: Resources, deployed: DeployedSnapshot) -> dict[str, tuple[Datasource, Connection]]:
    """The project's deployed Kafka datasources, each with its connection."""
    connections = {c.name: c for c in resources.connections}
    if not connections:
        return {}
    found = {}
    for ds in resources.datasources:
        named = next((s.value for s in ds.connector if s.keyword == "KAFKA_CONNECTION_NAME"), None)
        if named in connections and deployed.table(ds.name) is not None:
            found[ds.name] = (ds, connections[named])
    return found
