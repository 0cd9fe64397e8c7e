"""Sinks: a `TYPE sink` pipe's rows written to EXPORT_BUCKET_URI as CSV, NDJSON or Parquet files named by
EXPORT_FILE_TEMPLATE (a `TYPE s3` connection), or to EXPORT_KAFKA_TOPIC as JSON messages (a `TYPE kafka` connection),
on demand (`pipeframe sink run`, `run_sink`) or at each EXPORT_SCHEDULE cron time (UTC) inside `serve`, `run` and
`dev` (`SinkScheduler`).

How "each run written once" holds: a run is identified by its time — the scheduled cron time, or the time given to
`pipeframe sink run --run-time` (default: now, to the second) — and every file name it writes is a function of that
time and of the rows (with `EXPORT_WRITE_STRATEGY new`, the default, the run's time is in every name). S3 replaces an
object put under an existing key, so a run done again after a crash (or twice by mistake) writes the same keys again,
never a second set of files.

A Kafka sink's run is one Kafka transaction (`transactional.id` `pipeframe-sink-<pipe>`: a crashed run's open
transaction is aborted by the next run's producer, so `read_committed` consumers never see half a run), and the run's
time is committed in that same transaction as the offset of the consumer group `pipeframe-sink-<pipe>` on the topic's
partition 0 (`send_offsets_to_transaction`): a run whose time is not after the last committed one is skipped, so a
run done again after it committed writes nothing."""

from __future__ import annotations

import contextlib
import gzip
import io
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from pipeframe.connectors.export import (
    DEFAULT_STAMP,
    RUN_TIME,
    FileTemplate,
    TemplateError,
    export_settings,
    file_template,
)
from pipeframe.connectors.s3 import client
from pipeframe.connectors.spec import BUCKET_URI, environment, resolved
from pipeframe.errors import PipeframeError
from pipeframe.scheduler import CronScheduler

if TYPE_CHECKING:
    import pyarrow as pa

    from pipeframe.datafiles.model import Connection, Pipe, Resources
    from pipeframe.project import Project

EXTENSIONS = {"csv": ".csv", "ndjson": ".ndjson", "parquet": ".parquet"}


@dataclass(frozen=True)
class SinkSettings:
    """One S3 sink pipe's settings and its connection's, secrets put in."""

    pipe: str
    bucket: str
    prefix: str  # the key prefix files go under ("" or ending in "/")
    template: FileTemplate
    format: str
    compression: str  # none | gzip
    strategy: str  # new | truncate
    schedule: str  # a cron or @on-demand
    region: str
    access_key: str | None = field(repr=False)
    secret: str | None = field(repr=False)
    endpoint: str | None


def sink_pipes(resources: Resources) -> dict[str, tuple[Pipe, Connection]]:
    """The project's sink pipes whose connection a file defines (TYPE s3 or kafka), each with its connection."""
    connections = {c.name: c for c in resources.connections if c.type in ("s3", "kafka")}
    found = {}
    for pipe in resources.pipes:
        named = next((s.value for s in export_settings(pipe) if s.keyword == "EXPORT_CONNECTION_NAME"), None)
        if pipe.type == "sink" and named in connections:
            found[pipe.name] = (pipe, connections[named])
    return found


def schedule_of(pipe: Pipe) -> str:
    """EXPORT_SCHEDULE, `@on-demand` when it is not written."""
    return next((s.value for s in export_settings(pipe) if s.keyword == "EXPORT_SCHEDULE"), "@on-demand").strip()


def schedules(project: Project) -> dict[str, str]:
    """Sink pipe name → its cron expression, for the sinks that have one (not @on-demand)."""
    return {name: schedule_of(pipe) for name, (pipe, _) in sink_pipes(project.compiled.resources).items()
            if schedule_of(pipe).lower() != "@on-demand"}


def sink_values(project: Project, name: str, kind: str = "s3") -> dict[str, str]:
    """A `kind` sink pipe's EXPORT_* settings and its connection's, secrets put in: PF117 when it has no connection
    file of that TYPE, PF112 for a secret not set."""
    found = sink_pipes(project.compiled.resources)
    if name not in found or found[name][1].type != kind:
        raise PipeframeError("PF117", f"Sink pipe `{name}` has no {'S3' if kind == 's3' else 'Kafka'} connection to "
                             "export through.", f"Name a `TYPE {kind}` connection in EXPORT_CONNECTION_NAME, defined "
                             "by a .connection file (docs/connectors.md#sinks).")
    pipe, connection = found[name]
    env = environment(project.root, project.environ)
    return {s.keyword: resolved(s, env) for s in (*connection.settings, *export_settings(pipe))}


def sink_settings(project: Project, name: str) -> SinkSettings:
    """Read a sink pipe's settings where it runs: PF117 when it has no `TYPE s3` connection file, PF112 for a
    secret not set, PF116 for a value a secret made wrong."""
    values = sink_values(project, name)
    uri = BUCKET_URI.fullmatch(values["EXPORT_BUCKET_URI"])
    if uri is None:
        raise PipeframeError("PF116", f"EXPORT_BUCKET_URI `{values['EXPORT_BUCKET_URI']}` is not an S3 URI.",
                             "Write `s3://bucket/prefix/`.")
    try:
        template = file_template(values["EXPORT_FILE_TEMPLATE"])
    except TemplateError as err:
        raise PipeframeError("PF116", f"EXPORT_FILE_TEMPLATE `{values['EXPORT_FILE_TEMPLATE']}` does not parse: "
                             f"{err}.", "Write names with `{column}`, `{8}` or `{run_time}` between literal text.") \
            from None
    prefix = (uri.group("key") or "").lstrip("/")
    strategy = values.get("EXPORT_WRITE_STRATEGY") or values.get("EXPORT_STRATEGY") or "new"
    compression = (values.get("EXPORT_COMPRESSION") or "none").lower()
    return SinkSettings(name, uri.group("bucket"), prefix + ("/" if prefix and not prefix.endswith("/") else ""),
                        template, (values.get("EXPORT_FORMAT") or "csv").lower(),
                        "gzip" if compression in ("gz", "gzip") else "none", strategy.lower().lstrip("@"),
                        values.get("EXPORT_SCHEDULE") or "@on-demand", values["S3_REGION"], values.get("S3_ACCESS_KEY") or None,
                        values.get("S3_SECRET") or None, values.get("S3_ENDPOINT") or None)


@dataclass(frozen=True)
class SinkFile:
    uri: str
    rows: int
    bytes: int


@dataclass(frozen=True)
class SinkResult:
    pipe: str
    run_time: datetime
    files: tuple[SinkFile, ...]  # a Kafka sink: one, `kafka://<topic>`
    elapsed: float
    skipped: bool = False  # a Kafka sink's run written before (its time not after the last committed run's)

    @property
    def rows(self) -> int:
        return sum(f.rows for f in self.files)

    def __str__(self) -> str:
        if self.skipped:
            return f"the run of {self.run_time:%Y-%m-%d %H:%M:%S} UTC was written before: nothing written"
        return (f"{self.rows} row(s) in {len(self.files)} file(s) for the run of {self.run_time:%Y-%m-%d %H:%M:%S} "
                f"UTC in {self.elapsed:.1f} s")

    def to_json(self) -> dict:
        return {"pipe": self.pipe, "run_time": self.run_time.isoformat(), "rows": self.rows, "skipped": self.skipped,
                "files": [{"uri": f.uri, "rows": f.rows, "bytes": f.bytes} for f in self.files],
                "elapsed": self.elapsed}


def run_sink(project: Project, name: str, params: Mapping[str, Any] | None = None,
             run_time: datetime | None = None) -> SinkResult:
    """Run the sink pipe `name` once (as deployed) for the run of `run_time` (default: now, to the second, UTC)
    and write its rows to its bucket; writing the same run again replaces the same files."""
    from pipeframe.endpoints import declared_pipe

    start = time.perf_counter()
    at = (run_time or datetime.now(UTC)).astimezone(UTC).replace(microsecond=0)
    declared_pipe(project.compiled, name, "sink")  # PF801/PF802 before the settings are read
    found = sink_pipes(project.compiled.resources).get(name)
    if found is not None and found[1].type == "kafka":
        return run_kafka_sink(project, name, params, at)
    settings = sink_settings(project, name)
    table = project.endpoints().frame(name, params or {}, kind="sink").toArrow()
    s3 = client(settings)
    files = []
    for key, rows in planned(settings, table, at):
        body = encoded(rows, settings)
        try:
            s3.put_object(Bucket=settings.bucket, Key=key, Body=body)
        except Exception as err:  # noqa: BLE001 — botocore's errors: unreachable, denied, no such bucket, no keys
            reason = str(err).splitlines()[0] if str(err) else type(err).__name__
            raise PipeframeError(
                "PF118", f"Sink `{name}`: cannot write s3://{settings.bucket}/{key}: {reason}",
                "Check the connection's S3_REGION, S3_ACCESS_KEY/S3_SECRET (or the AWS credentials of this "
                "process), S3_ENDPOINT, and that the bucket exists and lets it PutObject; run the same run again "
                f"with `pipeframe sink run {name} --run-time {at.isoformat()}` (it writes the same files).") from None
        files.append(SinkFile(f"s3://{settings.bucket}/{key}", rows.num_rows, len(body)))
    return SinkResult(name, at, tuple(files), time.perf_counter() - start)


def planned(settings: SinkSettings, table: pa.Table, at: datetime) -> list[tuple[str, pa.Table]]:
    """Each object key of the run and the rows it holds: one group per distinct value of the template's columns,
    each split into `{N}` parts (the empty ones are not written; a run without rows writes one empty file, unless
    the template names columns)."""
    import pyarrow as pa

    template = settings.template
    columns = template.columns(table.column_names)
    unknown = [p.text for p in template.placeholders if p.name and p.name not in (*columns, RUN_TIME)]
    if unknown:  # check could not know the pipe's columns (a `SELECT *` of what it could not resolve)
        raise PipeframeError("PF116", f"EXPORT_FILE_TEMPLATE of sink `{settings.pipe}` names {', '.join(unknown)}, "
                             "which the pipe's result has no column of.",
                             f"Its columns: {', '.join(table.column_names)}; or `{{run_time}}`, the run's time.")
    # Rows are grouped by the name they render to, not by their raw values: `{ts, '%Y-%m-%d'}` puts a day's rows in
    # one file (grouped by the raw timestamps, each would overwrite the one before under the same key).
    groups: dict[str, tuple[tuple, list[int]]] = {}
    if columns:
        keys = zip(*(table.column(c).to_pylist() for c in columns), strict=True)
        for index, values in enumerate(keys):
            named = template.render(dict(zip(columns, values, strict=True)), 0, at)
            groups.setdefault(named, (values, []))[1].append(index)
    else:
        groups[""] = ((), list(range(table.num_rows)))
    stamped = settings.strategy == "new" and not template.uses_run_time(table.column_names)
    found = []
    for values, indices in groups.values():
        count = template.files
        for part in range(count):
            chunk = indices[part * len(indices) // count:(part + 1) * len(indices) // count]
            if not chunk and (columns or part):
                continue
            name = template.render(dict(zip(columns, values, strict=True)), part, at)
            found.append((settings.prefix + file_name(name, settings, at if stamped else None), table.take(pa.array(chunk, pa.int64()))))
    return found


def file_name(rendered: str, settings: SinkSettings, stamp: datetime | None) -> str:
    """The template's name with the run's time (strategy `new`) and the format's extension, `.gz` when compressed."""
    extension = EXTENSIONS[settings.format]
    base = rendered.removesuffix(".gz").removesuffix(extension)
    if stamp is not None:
        base += f"_{stamp:{DEFAULT_STAMP}}"
    return base + extension + (".gz" if settings.compression == "gzip" and settings.format != "parquet" else "")


def pa_nested(kind: pa.DataType) -> bool:
    import pyarrow.types as pt

    return pt.is_nested(kind)


def encoded(rows: pa.Table, settings: SinkSettings) -> bytes:
    """The rows as the file's bytes: CSV with a header, NDJSON (one object a line), or Parquet (gzip inside)."""
    import pyarrow.parquet as pq
    from pyarrow import csv

    out = io.BytesIO()
    if settings.format == "parquet":
        pq.write_table(rows, out, compression="gzip" if settings.compression == "gzip" else "none")
        return out.getvalue()
    if settings.format == "csv":
        nested = [f.name for f in rows.schema if pa_nested(f.type)]
        if nested:
            raise PipeframeError("PF116", f"Sink `{settings.pipe}` exports CSV, which has no way to write "
                                 f"{', '.join(nested)} (arrays, maps or tuples).",
                                 "Export ndjson or parquet, or turn the columns into strings in the pipe.")
        csv.write_csv(rows, out)
        data = out.getvalue()
    else:
        data = b"".join(row + b"\n" for row in json_rows(rows))
    return gzip.compress(data, mtime=0) if settings.compression == "gzip" else data


def run_kafka_sink(project: Project, name: str, params: Mapping[str, Any] | None, at: datetime) -> SinkResult:
    """The run `at` of a Kafka sink: its rows as JSON messages to EXPORT_KAFKA_TOPIC in one transaction, with the
    run's time committed in it (skipped when a run as late was committed already)."""
    from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

    from pipeframe.connectors.kafka import client_config

    start = time.perf_counter()
    values = sink_values(project, name, "kafka")
    topic, group = values["EXPORT_KAFKA_TOPIC"], f"pipeframe-sink-{name}"
    table = project.endpoints().frame(name, params or {}, kind="sink").toArrow()
    config = {**client_config(name, values), "group.id": group, "log_level": 0}
    stamp, marker = int(at.timestamp()), TopicPartition(topic, 0)
    consumer = producer = None
    try:
        producer = Producer({**{k: v for k, v in config.items() if k != "group.id"}, "transactional.id": group})
        # Fences a crashed run's producer and aborts its open transaction, and waits for one being committed to
        # finish: only then does the group's committed offset say which runs are in (read after, not before).
        producer.init_transactions(30)
        consumer = Consumer({**config, "enable.auto.commit": False, "isolation.level": "read_committed"})
        last = committed(consumer, marker, 30)
        if last.offset >= stamp:
            return SinkResult(name, at, (), time.perf_counter() - start, skipped=True)
        producer.begin_transaction()
        sent = 0
        for message in json_rows(table):
            while True:
                try:
                    producer.produce(topic, message)
                    break
                except BufferError:  # the client's queue is full: let it send, then try again
                    producer.poll(0.1)
            sent += len(message)
        producer.send_offsets_to_transaction([TopicPartition(topic, 0, stamp, at.isoformat())],
                                             consumer.consumer_group_metadata(), 30)
        producer.commit_transaction(120)
    except KafkaException as err:
        if producer is not None:
            with contextlib.suppress(KafkaException):
                producer.abort_transaction(10)
        raise PipeframeError(
            "PF118", f"Sink `{name}`: cannot write the run of {at.isoformat()} to Kafka topic `{topic}`: "
            f"{err.args[0].str() if err.args else err}",
            "Check the connection's KAFKA_BOOTSTRAP_SERVERS and security settings, and that the topic exists and the "
            "client may write it with transactions; nothing of this run is visible to read_committed consumers, run "
            f"it again with `pipeframe sink run {name} --run-time {at.isoformat()}`.") from None
    finally:
        if consumer is not None:
            consumer.close()
    return SinkResult(name, at, (SinkFile(f"kafka://{topic}", table.num_rows, sent),), time.perf_counter() - start)


def committed(consumer: Any, marker: Any, timeout: float) -> Any:
    """The group's committed offset of `marker` (a TopicPartition). A coordinator that is moving or still loading
    the group's offsets (a broker just started, `__consumer_offsets` just created) answers with an error Kafka marks
    retriable: asked again, with a growing pause, until `timeout`; any other error is raised at once."""
    from confluent_kafka import KafkaError, KafkaException

    moving = {KafkaError.NOT_COORDINATOR, KafkaError.COORDINATOR_LOAD_IN_PROGRESS, KafkaError.COORDINATOR_NOT_AVAILABLE}
    deadline, pause = time.monotonic() + timeout, 0.05
    while True:
        try:
            return consumer.committed([marker], timeout=max(1.0, deadline - time.monotonic()))[0]
        except KafkaException as err:
            error = err.args[0] if err.args else None
            again = error is not None and (error.code() in moving or error.retriable())
            if not again or time.monotonic() + pause > deadline:
                raise
            time.sleep(pause)  # a backoff before asking a coordinator again, not a wait for another thread
            pause = min(pause * 2, 1.0)


def json_rows(rows: pa.Table) -> list[bytes]:
    """Each row as one JSON object (dates and times ISO 8601, UTC)."""
    import orjson

    return [orjson.dumps(row, default=str, option=orjson.OPT_NAIVE_UTC) for row in rows.to_pylist()]


class SinkScheduler(CronScheduler):
    """Runs each sink pipe (S3 or Kafka) at its EXPORT_SCHEDULE cron times (UTC) while the server runs; a run is named by its
    scheduled time."""

    what = "sink"

    def schedules(self, project: Project) -> dict[str, str]:
        return schedules(project)

    def run(self, project: Project, name: str, at: datetime) -> SinkResult:
        return run_sink(project, name, run_time=at)
