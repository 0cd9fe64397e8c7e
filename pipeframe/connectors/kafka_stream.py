"""Kafka ingest by Spark Structured Streaming (`ingest.kafka_engine: streaming` in pipeframe.yaml): the same Kafka
datasources as connectors/kafka.py, read by Spark's Kafka source (the `spark-sql-kafka` package, added to the
session's packages by `engine.session.spark_settings`) so that reading and parsing the messages run on the
cluster's executors and grow with them; the driver only commits.

Each micro-batch goes through the commit path of the events API and the consumer (`Ingestor.commit`): the messages
become NDJSON lines with Tinybird's metadata columns spliced in (`LINE_SQL`, as `kafka.line_of` does), are conformed
by Spark (`conform_frame_lines`; misfits quarantined), and land in ONE Delta commit whose keys are one per partition,
`kafka/<topic>/<partition>/<first>-<last>`: the fence per partition (engine/deltaappend.py: a Delta `txn` per
partition, checked before and at the commit) makes a micro-batch that Spark runs again after a crash (its checkpoint
says it did not finish) land nothing twice, and lets this engine and the consumer, or two streams, share a topic.

Where a query starts: its checkpoint (`Warehouse.streams_path`/<datasource>-<table id>) once it has one; a new one
starts at the offsets the table's commits hold (`kafka.resume_offsets`), the partitions they do not name at
`KAFKA_AUTO_OFFSET_RESET`. A query that fails (the broker away for long, a commit refused) is started again by
`KafkaIngest.sync` within a second, from its checkpoint."""

from __future__ import annotations

import hashlib
import json
import logging
import threading
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from pipeframe.connectors.kafka import app_of, client_config, key_of, lag_of, resume_offsets
from pipeframe.connectors.spec import settings_of
from pipeframe.engine import streams
from pipeframe.errors import PipeframeError
from pipeframe.sqltext import first_line

if TYPE_CHECKING:
    from pipeframe.datafiles.model import Connection, Datasource

log = logging.getLogger("pipeframe.kafka")

MAX_OFFSETS = 200_000  # messages per micro-batch, over all partitions: a backlog is read in bounded steps
ATTEMPTS = 5  # a micro-batch refused by the fence (another writer landed some of it) is cut and committed again
KEY_COMMITS = 1000  # the newest commits whose keys say where the query is, where the log's fences cannot

def source_options(name: str, settings: Mapping[str, str]) -> dict[str, str]:
    """Spark's Kafka source options for the datasource `name` (its settings, secrets resolved): the broker and its
    security as `client_config` gives them to librdkafka, in the Java client's words."""
    config = client_config(name, settings)
    options = {"kafka.bootstrap.servers": config["bootstrap.servers"],
               "kafka.security.protocol": config["security.protocol"].upper(),
               "subscribe": settings["KAFKA_TOPIC"], "failOnDataLoss": "false",
               "maxOffsetsPerTrigger": str(MAX_OFFSETS)}
    if "sasl.mechanisms" in config:
        mechanism = config["sasl.mechanisms"].upper()
        module = "plain.PlainLoginModule" if mechanism == "PLAIN" else "scram.ScramLoginModule"
        options["kafka.sasl.mechanism"] = mechanism
        options["kafka.sasl.jaas.config"] = (
            f"org.apache.kafka.common.security.{module} required username={json.dumps(config['sasl.username'])} "
            f"password={json.dumps(config['sasl.password'])};")
    if "ssl.ca.pem" in config:
        options["kafka.ssl.truststore.type"] = "PEM"
        options["kafka.ssl.truststore.certificates"] = config["ssl.ca.pem"]
    return options


def starting_offsets(topic: str, partitions: list[int], held: Mapping[int, int], reset: str) -> str:
    """`startingOffsets` of a new query: per partition, the offset after what the table holds, else the reset
    (`-2` earliest, `-1` latest: Spark's words); every partition named, as Spark requires of specific offsets."""
    if not held:
        return "earliest" if reset == "earliest" else "latest"
    default = -2 if reset == "earliest" else -1
    return json.dumps({topic: {str(p): held.get(p, default) for p in sorted({*partitions, *held})}})


def spans_after(spans: Mapping[int, tuple[int, int]], held: Mapping[int, int]) -> dict[int, tuple[int, int]]:
    """A micro-batch's offsets per partition (first, last) less what the table holds (`held`: partition -> its last
    landed offset): the part of each span after it, and no span the table holds whole."""
    left = {}
    for partition, (first, last) in spans.items():
        first = max(first, held.get(partition, -1) + 1)
        if first <= last:
            left[partition] = (first, last)
    return left


class KafkaStream:
    """One Kafka datasource read by a Structured Streaming query (the same lifecycle as `kafka.KafkaSource`)."""

    def __init__(self, name: str, datasource: Datasource, connection: Connection, environ: Mapping[str, str],
                 runtime: Any) -> None:
        settings = settings_of(datasource, connection, environ)
        self.name = name
        self.topic = settings["KAFKA_TOPIC"]
        self.raw = settings.get("KAFKA_STORE_RAW_VALUE", "false").lower() == "true"
        self.reset = settings.get("KAFKA_AUTO_OFFSET_RESET", "latest").lower()
        self.settings = settings
        self.options = source_options(name, settings)
        self.runtime = runtime
        self.query: Any = None
        self.error: str | None = None
        self._committed: dict[int, int] = {}  # partition -> the offset after the last one landed by this query
        self._from_keys: dict[int, int] | None = None  # what the table's keys held (`_held`)
        self.partitions: list[int] = []  # the topic's, when the query started
        self._lock = threading.Lock()

    # ------------------------------------------------------------------------------------ lifecycle
    def start(self) -> None:
        project = self.runtime.current()
        if project.config.spark.remote:
            raise PipeframeError("PF120", f"Kafka datasource `{self.name}`: `ingest.kafka_engine: streaming` needs "
                                 "a Spark driver of pipeframe's own (embedded or on a cluster), not Spark Connect.",
                                 "Set `ingest.kafka_engine: consumer` (the default) under Spark Connect.")
        table, _definition = project.landing_target(self.name)
        spark = project.spark
        checkpoint = (f"{project.warehouse.streams_path}/{self.name}-"
                      f"{hashlib.sha256((table.path or '').encode()).hexdigest()[:12]}")
        self.partitions = self._partitions()
        held = self._held(project)
        options = {**self.options, "startingOffsets": starting_offsets(
            self.topic, self.partitions, {p: last + 1 for p, last in held.items()}, self.reset)}
        self.query = streams.start(spark, options, checkpoint, f"pipeframe-kafka-{self.name}", self._batch)

    def stop(self) -> None:
        """Stop the query: a micro-batch it interrupts either committed whole or is read again from the checkpoint."""
        if self.query is not None:
            try:
                self.query.stop()
            except Exception as err:  # noqa: BLE001 — already failed: its error is kept
                self.error = self.error or str(err)

    @property
    def alive(self) -> bool:
        if self.query is None:
            return False
        try:
            active = self.query.isActive
            if not active and self.query.exception() is not None:
                self.error = f"the stream stopped: {first_line(self.query.exception())}"
                log.error("Kafka datasource %s: %s; it starts again from its checkpoint", self.name, self.error)
            return bool(active)
        except Exception:  # noqa: BLE001 — the session is gone
            return False

    def lag(self) -> dict:
        """Per partition: the offset after the last one landed, the broker's latest offset as the query last saw it."""
        high: dict[int, int | None] = {}
        try:
            progress = self.query.lastProgress if self.query is not None else None
        except Exception:  # noqa: BLE001 — the session is gone
            progress = None
        for source in (progress or {}).get("sources") or ():
            latest = source.get("latestOffset")
            latest = json.loads(latest) if isinstance(latest, str) else latest
            for partition, offset in ((latest or {}).get(self.topic) or {}).items():
                high[int(partition)] = offset
        with self._lock:
            committed = dict(self._committed)
        return lag_of(self.name, self.topic, {**{p: None for p in high}, **committed}, high, self.error)

    # ------------------------------------------------------------------------------------ one micro-batch
    def _batch(self, frame: Any, batch_id: int) -> None:
        from pipeframe.engine.deltaappend import Fenced
        from pipeframe.engine.ingest import Batch, conform_frame_lines
        from pipeframe.plan import records

        frame = frame.persist()  # read from the broker once, for the offsets, the sizes and the commit
        try:
            spans = streams.spans(frame)
            project = self.runtime.current()
            self.partitions = sorted({*self.partitions, *spans})  # a partition added to the topic since the start
            for _attempt in range(ATTEMPTS):
                left = spans_after(spans, self._held(project))
                if not left:
                    break  # landed already (a micro-batch run again after a crash)
                table, definition = project.landing_target(self.name)
                keys = [key_of(self.topic, p, *left[p]) for p in sorted(left)]
                lines = streams.lines(frame, left, self.raw)
                committer = self.runtime.committer
                started = time.monotonic()
                try:
                    version, landed = committer.ingestor.commit(
                        table, Batch(conform_frame_lines(lines, definition), f"kafka {self.topic}"), len(keys), keys,
                        metadata=records.GroupCommit(requests=len(keys), parse="stream"),
                        sizes=streams.sizes(lines, len(keys)))
                except Fenced:
                    continue  # another writer landed some of these offsets meanwhile: what is left is committed
                if version is not None:
                    committer.on_commit(self.name, version)
                committer.record("append", datasource=self.name, seconds=time.monotonic() - started,
                                 rows=sum(part.accepted for part in landed),
                                 rows_quarantine=sum(part.quarantined for part in landed))
                break
            else:
                raise PipeframeError("PF718", f"Kafka datasource `{self.name}`: micro-batch {batch_id} was refused "
                                     f"{ATTEMPTS} times by other writers of its partitions.",
                                     "The query starts again from its checkpoint.")
        finally:
            frame.unpersist()
        with self._lock:
            for partition, (_first, last) in spans.items():
                self._committed[partition] = max(self._committed.get(partition, 0), last + 1)

    def _held(self, project: Any) -> dict[int, int]:
        """Partition -> the last offset the table holds: its fence (`txn`) where a local log says, over what the
        table's keys said when the query started (a history written before fences, or object storage)."""
        from pipeframe.engine import deltalog
        from pipeframe.engine.conflicts import local_folder
        from pipeframe.engine.ingest import committed_keys

        table, _ = project.landing_target(self.name)
        folder = local_folder(table.path or "")
        apps = {app_of(self.topic, p): p for p in self.partitions}
        found = deltalog.transaction_versions(folder, frozenset(apps)) if folder is not None else None
        if found is None or self._from_keys is None:
            limit = None if self._from_keys is None else KEY_COMMITS
            keys = committed_keys(project.spark, table.path or "", limit=limit)
            self._from_keys = {p: after - 1 for p, after in resume_offsets(keys, self.topic).items()}
        return {**self._from_keys, **{apps[app]: last for app, last in (found or {}).items()}}

    def _partitions(self) -> list[int]:
        """The topic's partitions, as the broker lists them (none when it cannot be asked within a few seconds)."""
        from confluent_kafka import Consumer, KafkaException

        try:
            consumer = Consumer({**client_config(self.name, self.settings), "log_level": 0})
            try:
                found = consumer.list_topics(self.topic, timeout=10).topics.get(self.topic)
            finally:
                consumer.close()
        except KafkaException as err:
            self.error = f"the broker could not be asked for the topic's partitions: {err}"
            return []
        return sorted(found.partitions) if found is not None and found.error is None else []
