"""S3 imports: a datasource with `IMPORT_CONNECTION_NAME` and `IMPORT_BUCKET_URI` (Tinybird's S3 connector) takes each
file of its bucket that matches the URI's glob once, through the append path (`Project.append`: CSV, NDJSON or
Parquet by extension, `.gz` compressed or not; rows that do not fit go to `<datasource>_quarantine`). `@auto`
datasources are polled by the runtime (`S3Imports`, beside the Kafka consumers); any import datasource is imported
on demand by `pipeframe import` (`import_files`).

How "once" holds:
- A file is appended with the idempotency key `s3://<bucket>/<key>#<etag>` (`key_of`): its rows and that key are
  one Delta commit of the datasource (a retry of a commit that landed is answered from the key, nothing is written).
- After the commit, the file is recorded in the imports ledger, a pipeframe table under `_pipeframe/imports` (one
  row per file: its URI, ETag, size, the rows landed and the commit's version; `Warehouse.record_imports`). The
  ledger decides what is new; it keeps every file however long ago, while the datasource's Delta log is cleaned up.
- A process killed between the commit and the ledger's row: the next import pass of a process reads the keys of
  the datasource's whole kept history once (`_recover`) and records the files whose key is there without appending
  them again.
- A file whose ETag changed (the object replaced) is a new file.

A file that cannot be read at all (a gzip that ends early, a Parquet file without its footer, a CSV that is not
UTF-8: PF712) lands nothing: it gets one quarantine entry naming it with the reason, and a `failed` row in the
ledger, so it is not tried again. A pipeframe error that is not the file's (the bucket away, a deploy under way) is
tried again at every pass; a Spark job that fails on a file (a Parquet file whose pages are broken) up to MAX_ATTEMPTS
passes of one process, then the file is recorded as failed."""

from __future__ import annotations

import difflib
import gzip
import logging
import re
import shutil
import tempfile
import threading
import zlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from pipeframe.connectors.spec import BUCKET_URI, S3, connector_of, environment, from_timestamp, settings_of
from pipeframe.errors import PipeframeError

if TYPE_CHECKING:
    from pipeframe.compiler.compile import CompiledProject
    from pipeframe.datafiles.model import Connection, Datasource, Resources
    from pipeframe.engine.ingest import IngestResult
    from pipeframe.engine.warehouse import ImportRecord, Warehouse
    from pipeframe.plan.snapshot import DeployedResource, DeployedSnapshot

log = logging.getLogger("pipeframe.s3")

MAX_ATTEMPTS = 3  # passes of one process whose Spark job fails on a file before it is recorded as failed
UNREADABLE = ("PF710", "PF711", "PF712")  # the append path's words for a file it cannot read: the file's fault
SCHEDULES = ("@auto", "@on-demand")


class Project(Protocol):
    """What an import asks of the project it imports for (`pipeframe.project.Project`)."""

    root: Path
    environ: Mapping[str, str]
    config: Any
    compiled: CompiledProject
    spark: Any
    warehouse: Warehouse

    def require_valid(self) -> CompiledProject: ...

    def landing_target(self, name: str) -> tuple[DeployedResource, Datasource]: ...

    def append(self, name: str, data: object, format: str | None = None, *, idempotency_key: str | None = None,
               views: bool = True) -> IngestResult: ...


# ------------------------------------------------------------------------------------------ what to import
@dataclass(frozen=True)
class BucketGlob:
    """IMPORT_BUCKET_URI: the bucket, the key prefix listed (up to the first wildcard) and the key pattern
    (`*` and `?` within a path segment, `**` across segments; no wildcard: every key under the prefix)."""

    bucket: str
    prefix: str
    pattern: re.Pattern[str]

    def matches(self, key: str) -> bool:
        return self.pattern.fullmatch(key) is not None


def bucket_glob(uri: str) -> BucketGlob:
    match = BUCKET_URI.fullmatch(uri.strip())
    if match is None:  # `check` refuses it (PF113); a secret's value is only known here
        raise PipeframeError("PF113", f"IMPORT_BUCKET_URI `{uri}` is not an S3 URI.",
                             "Write `s3://bucket/prefix/*.csv` (s3a:// too).")
    key = match.group("key") or ""
    wild = re.search(r"[*?]", key)
    prefix = key[:wild.start()] if wild else key
    if not wild:
        return BucketGlob(match.group("bucket"), prefix, re.compile(re.escape(key) + ".*", re.DOTALL))
    parts, i = [], 0
    while i < len(key):
        if key.startswith("**/", i):
            parts.append("(?:.*/)?")
            i += 3
        elif key.startswith("**", i):
            parts.append(".*")
            i += 2
        else:
            parts.append({"*": "[^/]*", "?": "[^/]"}.get(key[i], re.escape(key[i])))
            i += 1
    return BucketGlob(match.group("bucket"), prefix, re.compile("".join(parts), re.DOTALL))


@dataclass(frozen=True)
class S3Object:
    """One object listed: its key, ETag (without quotes), size and last modification."""

    bucket: str
    key: str
    etag: str
    size: int
    modified: datetime

    @property
    def uri(self) -> str:
        return f"s3://{self.bucket}/{self.key}"


def key_of(obj: S3Object) -> str:
    """The idempotency key a file's rows are committed with: which object, in which version of its content."""
    return f"{obj.uri}#{obj.etag}"


def file_format(key: str) -> str | None:
    """ndjson, csv or parquet from the key's extension (`.gz` after it: compressed); None for another one."""
    from pipeframe.engine.ingest import FORMATS

    name = key.lower().removesuffix(".gz")
    return next((fmt for suffix, fmt in FORMATS.items() if name.endswith(suffix)), None)


@dataclass(frozen=True)
class ImportSettings:
    """One import datasource's settings and its connection's, secrets put in."""

    datasource: str
    glob: BucketGlob
    schedule: str
    from_time: datetime | None
    region: str
    access_key: str | None
    secret: str | None
    endpoint: str | None

    @property
    def uri(self) -> str:
        return f"s3://{self.glob.bucket}/{self.glob.prefix}"


def import_settings(name: str, datasource: Datasource, connection: Connection,
                    environ: Mapping[str, str]) -> ImportSettings:
    """Read the settings where the import runs (PF112 for a secret that is not set)."""
    values = settings_of(datasource, connection, environ)
    stamp = values.get("IMPORT_FROM_TIMESTAMP")
    from_time = from_timestamp(stamp) if stamp else None
    if stamp and from_time is None:
        raise PipeframeError("PF113", f"IMPORT_FROM_TIMESTAMP `{stamp}` is not a timestamp.",
                             "Write an ISO 8601 time, e.g. `2024-01-31T00:00:00Z`.")
    return ImportSettings(name, bucket_glob(values["IMPORT_BUCKET_URI"]), schedule_of(datasource), from_time,
                          values["S3_REGION"], values.get("S3_ACCESS_KEY") or None, values.get("S3_SECRET") or None,
                          values.get("S3_ENDPOINT") or None)


def schedule_of(datasource: Datasource) -> str:
    """IMPORT_SCHEDULE, `@auto` when it is not written."""
    written = next((s.value for s in datasource.connector if s.keyword == "IMPORT_SCHEDULE"), "@auto")
    return written.strip().lower()


def import_datasources(resources: Resources, deployed: DeployedSnapshot | None = None,
                       schedule: str | None = None) -> dict[str, tuple[Datasource, Connection]]:
    """The project's S3 import datasources whose connection a file defines (deployed ones only, given `deployed`;
    of one `schedule` only, given it), each with its connection."""
    connections = {c.name: c for c in resources.connections if c.type == "s3"}
    found = {}
    for ds in resources.datasources:
        named = next((s.value for s in ds.connector if s.keyword == "IMPORT_CONNECTION_NAME"), None)
        if connector_of(ds) is not S3 or named not in connections:
            continue
        if (deployed is None or deployed.table(ds.name) is not None) and schedule in (None, schedule_of(ds)):
            found[ds.name] = (ds, connections[named])
    return found


# ------------------------------------------------------------------------------------------------ S3
class S3Access(Protocol):
    """How to reach a `TYPE s3` connection's store (an import's or a sink's settings)."""

    region: str
    access_key: str | None
    secret: str | None
    endpoint: str | None


def client(settings: S3Access) -> Any:
    """A boto3 S3 client for the connection: its region, keys (else boto3's own chain: environment, ~/.aws, an
    instance's role) and endpoint (an S3-compatible store)."""
    import boto3
    from botocore.config import Config

    return boto3.session.Session().client(
        "s3", region_name=settings.region, endpoint_url=settings.endpoint, aws_access_key_id=settings.access_key,
        aws_secret_access_key=settings.secret,
        config=Config(connect_timeout=5, read_timeout=60, retries={"max_attempts": 3, "mode": "standard"}))


def listed(s3: Any, settings: ImportSettings) -> list[S3Object]:
    """The objects matching the datasource's glob, oldest first (PF115 when the bucket cannot be listed)."""
    glob = settings.glob
    try:
        pages = s3.get_paginator("list_objects_v2").paginate(Bucket=glob.bucket, Prefix=glob.prefix)
        found = [S3Object(glob.bucket, item["Key"], item["ETag"].strip('"'), int(item["Size"]), item["LastModified"])
                 for page in pages for item in page.get("Contents", ()) if glob.matches(item["Key"])]
    except Exception as err:  # noqa: BLE001 — botocore's errors: unreachable, denied, no such bucket, no credentials
        raise unreachable(settings, f"cannot list {settings.uri}", err) from None
    return sorted(found, key=lambda o: (o.modified, o.key))


def unreachable(settings: ImportSettings, what: str, err: Exception) -> PipeframeError:
    reason = str(err).splitlines()[0] if str(err) else type(err).__name__
    return PipeframeError(
        "PF115", f"S3 import `{settings.datasource}`: {what}: {reason}",
        "Check the connection's S3_REGION, S3_ACCESS_KEY/S3_SECRET (or the AWS credentials of this process), "
        "S3_ENDPOINT, and that the bucket exists and lets it ListBucket and GetObject; nothing was imported, and "
        "the next import takes the same files.")


class Unreadable(Exception):
    """A file that cannot be read at all: quarantined whole, never half-ingested."""


def fetched(s3: Any, settings: ImportSettings, obj: S3Object, folder: Path) -> Path:
    """The object downloaded into `folder` under its own name, decompressed when it ends in `.gz` (Unreadable when
    that fails: the file's fault; PF115 when the download fails: the network's, tried again)."""
    raw = folder / "download"
    try:  # IfMatch: the content the ETag (and so the idempotency key) names, not a newer one written meanwhile
        body = s3.get_object(Bucket=obj.bucket, Key=obj.key, IfMatch=f'"{obj.etag}"')["Body"]
        with raw.open("wb") as out:
            shutil.copyfileobj(body, out, 1 << 20)
    except Exception as err:  # noqa: BLE001 — botocore's errors
        raise unreachable(settings, f"cannot read {obj.uri}", err) from None
    name = Path(obj.key).name
    if not name.lower().endswith(".gz"):
        path = raw.rename(folder / name)
    else:
        path = folder / name[:-3]
        try:
            with gzip.open(raw, "rb") as source, path.open("wb") as out:
                shutil.copyfileobj(source, out, 1 << 20)
        except (OSError, EOFError, zlib.error) as err:
            raise Unreadable(f"it is not a complete gzip file ({err})") from None
    if file_format(name) == "parquet":  # its footer, read here: Spark's error for a broken one names no cause
        import pyarrow as pa
        import pyarrow.parquet as pq

        try:
            pq.read_metadata(path)
        except (pa.ArrowException, OSError) as err:
            raise Unreadable(f"it is not a Parquet file ({err})") from None
    return path


# ------------------------------------------------------------------------------------------- one pass
@dataclass(frozen=True)
class FileOutcome:
    """What one pass did with one file: `ingested`, `failed` (quarantined whole), or `retry` (tried again)."""

    uri: str
    status: str
    rows: int = 0
    quarantined: int = 0
    version: int | None = None
    error: str | None = None
    replayed: bool = False  # its rows had landed before (a pass killed before its ledger row): none written now
    views: tuple = ()  # the ViewRefresh of each view its rows flowed into (an import that refreshes them)

    def to_json(self) -> dict:
        return {"uri": self.uri, "status": self.status, "rows": self.rows, "quarantined": self.quarantined,
                "version": self.version, "error": self.error}


@dataclass(frozen=True)
class ImportReport:
    """One import pass of a datasource: the files taken, how many the ledger had already, the files matched but not
    taken (`ignored`: an unknown extension, older than IMPORT_FROM_TIMESTAMP)."""

    datasource: str
    uri: str
    files: tuple[FileOutcome, ...] = ()
    already: int = 0
    ignored: tuple[tuple[str, str], ...] = ()

    @property
    def rows(self) -> int:
        return sum(f.rows for f in self.files if f.status == "ingested")

    @property
    def quarantined(self) -> int:
        return sum(f.quarantined for f in self.files if f.status == "ingested")

    def count(self, status: str) -> int:
        return sum(1 for f in self.files if f.status == status)

    def to_json(self) -> dict:
        return {"datasource": self.datasource, "uri": self.uri, "ingested": self.count("ingested"),
                "failed": self.count("failed"), "retry": self.count("retry"), "rows": self.rows,
                "quarantined_rows": self.quarantined, "already_imported": self.already,
                "files": [f.to_json() for f in self.files],
                "ignored": [{"uri": uri, "reason": why} for uri, why in self.ignored]}


def import_files(project: Project, name: str, views: bool = True) -> ImportReport:
    """`pipeframe import DATASOURCE`: every new file of an S3 import datasource imported once, whatever its
    IMPORT_SCHEDULE; the views downstream applied unless `views` is False."""
    datasource, connection = import_datasource(project, name)
    settings = import_settings(name, datasource, connection, environment(project.root, project.environ))
    return Importer(project, settings).run(views=views)


def import_datasource(project: Project, name: str) -> tuple[Datasource, Connection]:
    """An S3 import datasource of the project and its connection, or the user's error (before Spark starts)."""
    compiled = project.require_valid()
    definitions = {ds.name: ds for ds in compiled.resources.datasources}
    if name not in definitions:
        close = difflib.get_close_matches(name, sorted(definitions), n=1)
        imports = sorted(import_datasources(compiled.resources))
        raise PipeframeError("PF702", f"No datasource `{name}` in the project.",
                             f"Did you mean `{close[0]}`?" if close else
                             f"S3 import datasources: {', '.join(imports) or 'none'}.")
    datasource = definitions[name]
    if connector_of(datasource) is not S3:
        raise PipeframeError("PF114", f"`{name}` is not an S3 import datasource: its file has no IMPORT_CONNECTION_NAME "
                             "and IMPORT_BUCKET_URI.", "Add them (docs/connectors.md, \"S3 imports\"), or load its "
                             "rows with `pipeframe append`.", datasource.location)
    found = import_datasources(compiled.resources).get(name)
    if found is None:
        named = next(s for s in datasource.connector if s.keyword == "IMPORT_CONNECTION_NAME")
        raise PipeframeError("PF114", f"`{name}` imports from connection `{named.value}`, which no .connection file "
                             "defines.", f"Add connections/{named.value}.connection with `TYPE s3` and S3_REGION.",
                             named.location)
    return found


class Importer:
    """One import pass of one datasource: list, leave out what the ledger has, take each new file once."""

    def __init__(self, project: Project, settings: ImportSettings, attempts: dict[str, int] | None = None,
                 known: set[tuple[str, str]] | None = None, stop: threading.Event | None = None) -> None:
        self.project = project
        self.settings = settings
        self.attempts = attempts if attempts is not None else {}  # idempotency key -> failed passes (a job's)
        # (uri, etag) of the files the ledger listed at an earlier pass of a job: a listing with nothing else in it
        # reads no ledger
        self.known = known if known is not None else set()
        self.stop = stop or threading.Event()

    def run(self, views: bool = True, recovered: bool = False,
            on_file: Callable[[FileOutcome], None] | None = None) -> ImportReport:
        """`recovered`: the datasource's history was read for the keys of a killed pass already (a job's later
        passes), else it is read when there are new files."""
        settings = self.settings
        s3 = client(settings)
        objects, ignored = [], []
        for obj in listed(s3, settings):
            if file_format(obj.key) is None:
                ignored.append((obj.uri, "not .csv, .ndjson, .jsonl, .json or .parquet (optionally .gz)"))
            elif settings.from_time is not None and obj.modified < settings.from_time:
                ignored.append((obj.uri, "older than IMPORT_FROM_TIMESTAMP"))
            else:
                objects.append(obj)
        if any((o.uri, o.etag) not in self.known for o in objects):
            self.known |= {(r.uri, r.etag) for r in self.project.warehouse.imports(settings.datasource)}
        new = [o for o in objects if (o.uri, o.etag) not in self.known]
        already = len(objects) - len(new)
        files: list[FileOutcome] = []
        if new and not recovered:
            new, files = self._recover(new)
        for obj in new:
            if self.stop.is_set():
                break
            outcome = self._take(s3, obj, views)
            if outcome.status != "retry":
                self.known.add((obj.uri, obj.etag))
            files.append(outcome)
            if on_file is not None:
                on_file(outcome)
        return ImportReport(settings.datasource, settings.uri, tuple(files), already, tuple(ignored))

    def _recover(self, new: list[S3Object]) -> tuple[list[S3Object], list[FileOutcome]]:
        """The files among `new` whose rows a pass killed before its ledger row did land (their key is in the
        datasource's kept history): recorded now, not appended again. Returns the others, and these."""
        from pipeframe.engine.ingest import committed_keys

        table, _ = self.project.landing_target(self.settings.datasource)
        keys = committed_keys(self.project.spark, table.path or "", limit=None)
        landed = [(o, keys[key_of(o)]) for o in new if key_of(o) in keys]
        if landed:
            self.project.warehouse.record_imports([
                _record(self.settings.datasource, o, "ingested", r.accepted, r.quarantined, r.version)
                for o, r in landed])
            self.known |= {(o.uri, o.etag) for o, _ in landed}
        outcomes = [FileOutcome(o.uri, "ingested", r.accepted, r.quarantined, r.version, replayed=True)
                    for o, r in landed]
        return [o for o in new if key_of(o) not in keys], outcomes

    def _take(self, s3: Any, obj: S3Object, views: bool) -> FileOutcome:
        """Import one file: its rows and key in one commit, then its ledger row; or, unreadable, one quarantine
        entry and a `failed` row; or, failing for another reason, nothing (tried again at the next pass)."""
        name, key = self.settings.datasource, key_of(obj)
        try:
            with tempfile.TemporaryDirectory(prefix="pipeframe-s3-") as folder:
                try:
                    path = fetched(s3, self.settings, obj, Path(folder))
                    result = self.project.append(name, str(path), file_format(obj.key), idempotency_key=key,
                                                 views=views)
                except PipeframeError as err:
                    if err.code not in UNREADABLE:
                        raise
                    raise Unreadable(err.diagnostics[0].message) from None
        except Unreadable as err:
            return self._failed(obj, f"{obj.uri} cannot be read: {err}")
        except PipeframeError as err:  # not the file's: the bucket away, a deploy under way (PF717): tried again
            log.warning("S3 import %s: %s not imported yet: %s", name, obj.uri, err)
            return FileOutcome(obj.uri, "retry", error=err.diagnostics[0].message)
        except Exception as err:  # noqa: BLE001 — a Spark job failed on it: maybe the file (bad pages), tried again
            tries = self.attempts[key] = self.attempts.get(key, 0) + 1
            reason = f"{type(err).__name__}: {str(err).strip().splitlines()[0] if str(err).strip() else ''}"
            log.warning("S3 import %s: %s failed (attempt %d of %d): %s", name, obj.uri, tries, MAX_ATTEMPTS, reason)
            if tries >= MAX_ATTEMPTS:
                return self._failed(obj, f"{obj.uri} failed {tries} times: {reason}")
            return FileOutcome(obj.uri, "retry", error=reason)
        self.attempts.pop(key, None)
        self.project.warehouse.record_imports([_record(name, obj, "ingested", result.accepted, result.quarantined,
                                                       result.version)])
        return FileOutcome(obj.uri, "ingested", result.accepted, result.quarantined, result.version,
                           replayed=result.replayed, views=result.views)

    def _failed(self, obj: S3Object, reason: str) -> FileOutcome:
        from pipeframe.engine.ingest import Ingestor

        name = self.settings.datasource
        log.error("S3 import %s: %s", name, reason)
        table, _ = self.project.landing_target(name)
        Ingestor(self.project.spark, self.project.warehouse).quarantine_file(table, obj.uri, reason, key_of(obj))
        self.project.warehouse.record_imports([_record(name, obj, "failed", error=reason)])
        self.attempts.pop(key_of(obj), None)
        return FileOutcome(obj.uri, "failed", error=reason)


def _record(datasource: str, obj: S3Object, status: str, rows: int = 0, quarantined: int = 0,
            version: int | None = None, error: str | None = None) -> ImportRecord:
    from pipeframe.engine.warehouse import ImportRecord

    return ImportRecord(datasource, obj.uri, obj.etag, obj.size, obj.modified, status, rows, quarantined, version,
                        error)


# --------------------------------------------------------------------------------------- the runtime's job
@dataclass
class _Source:
    """What `GET /v0/ingest` shows of one @auto datasource."""

    uri: str = ""
    ingested: int = 0
    failed: int = 0
    rows: int = 0
    last_poll: datetime | None = None
    last_error: str | None = None
    recovered: bool = False  # its history read once for the keys of a killed pass
    attempts: dict[str, int] = field(default_factory=dict)
    known: set[tuple[str, str]] = field(default_factory=set)  # (uri, etag) of the files its ledger lists
    counted: bool = False  # the ledger's counts read once

    def to_json(self) -> dict:
        return {"uri": self.uri, "files_ingested": self.ingested, "files_failed": self.failed, "rows": self.rows,
                "last_poll": self.last_poll.isoformat() if self.last_poll else None, "last_error": self.last_error}


class S3Imports:
    """The runtime's job that imports every deployed `@auto` S3 datasource of the project it works for (`serve`,
    `dev`, `run`): one thread, each datasource's bucket listed every `ingest.import_poll_ms`."""

    def __init__(self, runtime: Any) -> None:
        self.runtime = runtime
        self.sources: dict[str, _Source] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self, service: Any) -> None:
        self._stop.clear()
        self._thread = threading.Thread(target=self._loop, name="pipeframe-s3", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop polling; the file being imported lands (or not) first."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    def _loop(self) -> None:
        while not self._stop.is_set():
            project = self.runtime.current()
            try:
                self.poll(project)
            except Exception:  # a deploy under way: the next pass tries again
                log.exception("S3 import datasources could not be read")
            self._stop.wait(project.config.ingest.import_poll_ms / 1000)

    def poll(self, project: Project) -> None:
        """One pass over every deployed @auto datasource."""
        wanted = import_datasources(project.compiled.resources, project.warehouse.snapshot(), "@auto")
        with self._lock:
            for name in list(self.sources):
                if name not in wanted:
                    del self.sources[name]
        for name, (datasource, connection) in wanted.items():
            if self._stop.is_set():
                return
            with self._lock:
                source = self.sources.setdefault(name, _Source())
            try:
                settings = import_settings(name, datasource, connection, environment(project.root, project.environ))
                source.uri = settings.uri
                if not source.counted:
                    self._count(source, project.warehouse.imports(name))
                importer = Importer(project, settings, source.attempts, source.known, self._stop)
                report = importer.run(views=False, recovered=source.recovered,
                                      on_file=lambda outcome, s=source: self._counted(s, outcome))
                source.recovered = True
                retry = next((f.error for f in report.files if f.status == "retry"), None)
                with self._lock:
                    source.last_error = retry
            except PipeframeError as err:  # e.g. PF112, PF115: shown, tried again at the next pass
                if source.last_error != str(err):
                    log.error("S3 import %s: %s", name, err)
                with self._lock:
                    source.last_error = str(err)
            with self._lock:
                source.last_poll = datetime.now(UTC)

    def _count(self, source: _Source, ledger: list[ImportRecord]) -> None:
        with self._lock:
            source.ingested = sum(1 for r in ledger if r.status == "ingested")
            source.failed = sum(1 for r in ledger if r.status == "failed")
            source.rows = sum(r.rows or 0 for r in ledger if r.status == "ingested")
            source.known |= {(r.uri, r.etag) for r in ledger}
            source.counted = True

    def _counted(self, source: _Source, outcome: FileOutcome) -> None:
        with self._lock:
            if outcome.status == "ingested":
                source.ingested += 1
                source.rows += outcome.rows
            elif outcome.status == "failed":
                source.failed += 1

    def state(self) -> dict[str, dict]:
        """What `GET /v0/ingest` shows of each @auto S3 datasource (`s3`)."""
        with self._lock:
            return {name: source.to_json() for name, source in sorted(self.sources.items())}
