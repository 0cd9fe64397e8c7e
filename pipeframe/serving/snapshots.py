"""Delta tables as the read path sees them: a table's newest committed version, probed without replaying its log, and
its snapshot at that version as a DuckDB table, the log read by delta-rs (`deltalake`), without a JVM.

A local table's newest version is found by looking for the commit file after the one known (one `stat`, however long
its log); a table on object storage asks delta-rs, which lists what its log gained. A table is copied into DuckDB
(one table per Delta table, each row tagged with its data file) and moved forward version by version in one DuckDB
transaction: the files a version added are read, the rows of those it removed deleted, so a query sees either the
old version or the new one, and a data file is read once however many versions keep it. A table larger than
`in_memory_bytes` is read from its files by each query instead (a view over them, made again per version).
"""

from __future__ import annotations

import itertools
import json
import os
import re
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pipeframe.engine.conflicts import local_folder
from pipeframe.sqltext import first_line

if TYPE_CHECKING:
    import duckdb
    from deltalake import DeltaTable

# Tables whose data files add up to at most this are copied into DuckDB (views are small by design; raw sources
# are not): their queries read memory, not files.
IN_MEMORY_BYTES = 256 * 1024 * 1024
FILE_COLUMN = "__pf_file"
# Reader features this path reads; a table needing another one is read by Spark.
READER_FEATURES = {"timestampNtz", "deletionVectors", "v2Checkpoint", "vacuumProtocolCheck", "typeWidening",
                   "typeWidening-preview", "columnMapping"}


class Unreadable(Exception):
    """A table this path cannot read as Spark would (a Delta feature it lacks, a log delta-rs refuses): the reason,
    in a few words, is what `statistics.engine_reason` shows when Spark answers instead."""


@dataclass(frozen=True)
class DataFile:
    """One data file of a snapshot: where it is, its size, its rows (-1: not recorded) and its partition values."""

    path: str
    size: int
    rows: int
    partition: tuple[tuple[str, str | None], ...] = ()


@dataclass(frozen=True)
class Relation:
    """A table at one version, as DuckDB queries it: the relation's name, its columns (name, Spark type) and what
    its snapshot holds (rows, bytes of data files)."""

    name: str
    path: str
    version: int
    columns: tuple[tuple[str, str], ...]
    rows: int
    bytes: int
    files: int
    in_memory: bool = True  # copied into a DuckDB table (else a view over its files)


@dataclass
class _Copy:
    """What DuckDB holds of one table: the relation's name, the version and files it was brought to."""

    name: str
    version: int = -1
    files: frozenset[str] = frozenset()
    columns: tuple[tuple[str, str], ...] = ()
    in_memory: bool = True
    relation: Relation | None = None


class Snapshots:
    """The tables of one warehouse in one DuckDB database, at their newest versions. Thread-safe."""

    def __init__(self, db: duckdb.DuckDBPyConnection, storage_options: dict[str, str] | None = None,
                 in_memory_bytes: int = IN_MEMORY_BYTES) -> None:
        self.db = db
        self.storage_options = dict(storage_options or {})
        self.in_memory_bytes = in_memory_bytes
        self._lock = threading.Lock()  # guards the dicts below
        self._locks: dict[str, threading.Lock] = {}  # one writer per table
        self._tables: dict[str, DeltaTable] = {}
        self._known: dict[str, tuple[int, tuple[int, int] | None]] = {}  # local path → (version, commit identity)
        self._copies: dict[str, _Copy] = {}
        self._names = itertools.count()
        self._dropped: list[tuple[str, bool]] = []  # copies of tables that are gone: dropped at the next copy made

    # ------------------------------------------------------------------------------------------- versions
    def version(self, path: str) -> int:
        """The table's newest committed version; -1 while there is no table at `path`."""
        folder = local_folder(path)
        if folder is None:
            return self._remote_version(path)
        known = self._known.get(path)
        if known is not None and known[1] is not None and _identity(folder, known[0]) == known[1]:
            version = known[0]
        else:
            from pipeframe.engine import deltalog

            if known is not None:  # the commit file it knew is gone or another: the table was removed or made again
                self._forget(path)
            version = deltalog.latest_version(folder)
            version = -1 if version is None else version
        while os.path.exists(_commit_file(folder, version + 1)):  # commit files appear whole, in version order
            version += 1
        self._known[path] = (version, _identity(folder, version) if version >= 0 else None)
        return version

    def _forget(self, path: str) -> None:
        """Let go of what is held of the table at `path` (it was removed, or made again: its next copy gets a new
        name, so nothing kept for the old one, such as an answer, is taken for the new one's)."""
        with self._lock:
            copy = self._copies.pop(path, None)
            self._tables.pop(path, None)
            if copy is not None and copy.relation is not None:
                self._dropped.append((copy.name, copy.in_memory))

    def _remote_version(self, path: str) -> int:
        try:
            with self._lock:
                known = path in self._tables
            table = self._delta_table(path)
            if table is None:
                return -1
            if known:
                table.update_incremental()
            return table.version()
        except Exception as exc:  # noqa: BLE001 — delta-rs' errors: the log cannot be read here
            raise Unreadable(f"delta-rs cannot read the log of {path}: {first_line(exc)}") from None

    # ------------------------------------------------------------------------------------------- data
    def relation(self, path: str, version: int) -> Relation:
        """The table at `path` brought to `version` (one `version(path)` gave) in DuckDB."""
        with self._lock:
            copy = self._copies.get(path)
            lock = self._locks.setdefault(path, threading.Lock())
        if copy is not None and copy.version >= version and copy.relation is not None:
            return copy.relation
        with lock:
            with self._lock:
                copy = self._copies.setdefault(path, _Copy(f"__pf_table_{next(self._names)}"))
            if copy.version < version or copy.relation is None:
                self._bring(copy, path, version)
            assert copy.relation is not None
            return copy.relation

    def figures(self, path: str) -> tuple[int, int, int]:
        """(data files, their bytes, rows) of the table's newest snapshot, from its log; rows the log does not
        count are counted from the files' footers."""
        version = self.version(path)
        if version < 0:
            raise Unreadable(f"there is no Delta table at {path}")
        with self._lock:
            lock = self._locks.setdefault(path, threading.Lock())
        with lock:
            files, _, _ = _snapshot(self._table_at(path, version), path)
        rows = sum(f.rows for f in files)
        if any(f.rows < 0 for f in files):
            from pipeframe.sqltext import quote_string

            listed = ", ".join(quote_string(f.path) for f in files)
            cursor = self.db.cursor()
            try:
                rows = int(cursor.execute(f"SELECT sum(num_rows) FROM parquet_file_metadata([{listed}])")
                           .fetchone()[0] or 0)
            finally:
                cursor.close()
        return len(files), sum(f.size for f in files), rows

    def _bring(self, copy: _Copy, path: str, version: int) -> None:
        table = self._table_at(path, version)
        files, columns, partitions = _snapshot(table, path)
        size = sum(f.size for f in files)
        rows = sum(f.rows for f in files) if all(f.rows >= 0 for f in files) else -1
        in_memory = size <= self.in_memory_bytes
        local = local_folder(path) is not None
        if not local and not in_memory:
            raise Unreadable(f"{path} is larger than the read path keeps in memory ({size} bytes)")
        cursor = self.db.cursor()
        with self._lock:
            dropped, self._dropped = self._dropped, []
        for name, table in dropped:
            cursor.execute(f'DROP {"TABLE" if table else "VIEW"} IF EXISTS "{name}"')
        try:
            cursor.execute("BEGIN TRANSACTION")
            if columns != copy.columns or in_memory != copy.in_memory or copy.version < 0:
                kind = "TABLE" if copy.in_memory else "VIEW"  # what the copy was made as (DuckDB minds)
                cursor.execute(f'DROP {kind} IF EXISTS "{copy.name}"')
                copy.files = frozenset()
                if in_memory:
                    ddl = ", ".join(f'"{c}" {duckdb_type(t)}' for c, t in columns)
                    cursor.execute(f'CREATE TABLE "{copy.name}" ({ddl}, "{FILE_COLUMN}" VARCHAR)')
            live = {f.path: f for f in files}
            if in_memory:
                removed = copy.files - live.keys()
                if removed:
                    cursor.execute(f'DELETE FROM "{copy.name}" WHERE "{FILE_COLUMN}" IN '
                                   f'(SELECT unnest(?::VARCHAR[]))', [sorted(removed)])
                added = [f for p, f in live.items() if p not in copy.files]
                for group in _by_partition(added):
                    self._insert(cursor, copy.name, table, group, dict(columns), partitions, local)
            else:
                source = _select_files(list(live.values()), dict(columns), partitions, tag=False)
                cursor.execute(f'CREATE OR REPLACE VIEW "{copy.name}" AS {source}')
            cursor.execute("COMMIT")
        except Exception as exc:
            cursor.execute("ROLLBACK")
            copy.version, copy.relation = -1, None
            import duckdb

            if isinstance(exc, duckdb.Error | OSError):
                raise Unreadable(f"{path} v{version} cannot be read here: {first_line(exc)}") from None
            raise
        finally:
            cursor.close()
        copy.version, copy.files, copy.columns, copy.in_memory = version, frozenset(live), columns, in_memory
        if rows < 0:
            rows = int(self.db.cursor().execute(f'SELECT count(*) FROM "{copy.name}"').fetchone()[0])
        copy.relation = Relation(copy.name, path, version, columns, rows, size, len(files), in_memory)

    def _insert(self, cursor: duckdb.DuckDBPyConnection, name: str, table: DeltaTable, files: list[DataFile],
                columns: dict[str, str], partitions: tuple[str, ...], local: bool) -> None:
        """Add the rows of `files` (all of one partition) to the DuckDB table `name`, each tagged with its file."""
        if local:
            cursor.execute(f'INSERT INTO "{name}" BY NAME {_select_files(files, columns, partitions, tag=True)}')
            return
        import pyarrow as pa

        dataset = table.to_pyarrow_dataset()
        wanted = {f.path for f in files}
        for fragment in dataset.get_fragments():
            uri = _fragment_uri(table, fragment.path)
            if uri not in wanted:
                continue
            rows = fragment.to_table(schema=dataset.schema)
            rows = rows.append_column(FILE_COLUMN, pa.array([uri] * rows.num_rows, pa.string()))
            cursor.register("__pf_arrow", rows)
            cursor.execute(f'INSERT INTO "{name}" BY NAME SELECT * FROM "__pf_arrow"')
            cursor.unregister("__pf_arrow")

    def _table_at(self, path: str, version: int) -> DeltaTable:
        try:
            table = self._delta_table(path)
            if table is None:
                raise Unreadable(f"there is no Delta table at {path}")
            if table.version() != version:
                table.load_as_version(version)
        except Unreadable:
            raise
        except Exception as exc:  # noqa: BLE001 — delta-rs' errors
            raise Unreadable(f"delta-rs cannot read {path} v{version}: {first_line(exc)}") from None
        return table

    def _delta_table(self, path: str) -> DeltaTable | None:
        """delta-rs' table at `path` (opened once, then moved forward), None while there is none."""
        with self._lock:
            table = self._tables.get(path)
        return table if table is not None else self._open(path)

    def _open(self, path: str) -> DeltaTable | None:
        from deltalake import DeltaTable

        uri = delta_rs_uri(path)
        options = self.storage_options or None
        if not DeltaTable.is_deltatable(uri, storage_options=options):
            return None
        table = DeltaTable(uri, storage_options=options)
        with self._lock:
            self._tables[path] = table
        return table


_DELTA_PRIMITIVES = {"byte": "TINYINT", "short": "SMALLINT", "integer": "INT", "long": "BIGINT", "float": "FLOAT",
                     "double": "DOUBLE", "boolean": "BOOLEAN", "date": "DATE", "string": "STRING", "binary": "BINARY",
                     "timestamp": "TIMESTAMP", "timestamp_ntz": "TIMESTAMP_NTZ"}
_DELTA_DECIMAL = re.compile(r"decimal\(\s*(\d+)\s*,\s*(\d+)\s*\)")


def delta_spark_type(delta: str | dict[str, Any]) -> str:
    """A column type of a Delta schema (the protocol's JSON: a primitive name, or an array/map/struct object) as the
    Spark type pipeframe names it. Read from the log's schema as written, so no Arrow library is loaded for it."""
    if isinstance(delta, str):
        if delta in _DELTA_PRIMITIVES:
            return _DELTA_PRIMITIVES[delta]
        decimal = _DELTA_DECIMAL.fullmatch(delta)
        if decimal:
            return f"DECIMAL({decimal.group(1)}, {decimal.group(2)})"
    elif delta.get("type") == "array":
        return f"ARRAY<{delta_spark_type(delta['elementType'])}>"
    elif delta.get("type") == "map":
        return f"MAP<{delta_spark_type(delta['keyType'])}, {delta_spark_type(delta['valueType'])}>"
    elif delta.get("type") == "struct":
        return "STRUCT<" + ", ".join(f"`{f['name']}`: {delta_spark_type(f['type'])}" for f in delta["fields"]) + ">"
    raise Unreadable(f"a column of Delta type {delta}, which the read path does not read")


def _snapshot(table: DeltaTable, path: str) -> tuple[list[DataFile], tuple[tuple[str, str], ...], tuple[str, ...]]:
    """The data files of a delta-rs table's loaded version, its columns (name, Spark type) and partition columns;
    Unreadable for what reading the files alone would get wrong (deletion vectors, column mapping)."""
    from arro3.core import RecordBatchReader  # delta-rs' own Arrow library: pyarrow (and numpy) stay unloaded

    protocol = table.protocol()
    unknown = set(protocol.reader_features or ()) - READER_FEATURES
    if protocol.min_reader_version > 3 or unknown:
        what = ", ".join(sorted(unknown)) or f"reader version {protocol.min_reader_version}"
        raise Unreadable(f"{path} uses Delta reader features this path does not read ({what})")
    metadata = table.metadata()
    if (metadata.configuration or {}).get("delta.columnMapping.mode", "none") != "none":
        raise Unreadable(f"{path} uses column mapping")
    columns = tuple((field["name"], delta_spark_type(field["type"]))
                    for field in json.loads(table.schema().to_json())["fields"])
    partitions = tuple(metadata.partition_columns)
    if "deletionVectors" in (protocol.reader_features or ()) and \
            RecordBatchReader.from_stream(table.deletion_vectors()).read_all().num_rows:
        raise Unreadable(f"{path} has deletion vectors (rows its files hold that are deleted)")
    adds = table.get_add_actions(flatten=True)
    names = adds.column_names
    wanted = ["path", "size_bytes", "num_records", *(f"partition.{p}" for p in partitions)]
    get = {name: adds.column(name).to_pylist() for name in wanted if name in names}  # (times would import pandas)
    count = adds.num_rows
    files = []
    for i in range(count):
        rows = get.get("num_records", [None] * count)[i]
        partition = tuple((p, get[f"partition.{p}"][i]) for p in partitions) if partitions else ()
        files.append(DataFile(_file_uri(table, get["path"][i]), int(get["size_bytes"][i] or 0),
                              -1 if rows is None else int(rows), tuple((k, None if v is None else str(v))
                                                                       for k, v in partition)))
    return files, columns, partitions


def _by_partition(files: list[DataFile]) -> list[list[DataFile]]:
    groups: dict[tuple, list[DataFile]] = {}
    for f in files:
        groups.setdefault(f.partition, []).append(f)
    return list(groups.values())


def _select_files(files: list[DataFile], columns: dict[str, str], partitions: tuple[str, ...], tag: bool) -> str:
    """A SELECT of the table's columns from local parquet files (UNION ALL of one per partition), each column cast
    to the table's type; `tag`: with the file each row came from."""
    from pipeframe.sqltext import quote_string

    if not files:
        empty = ", ".join(f'CAST(NULL AS {duckdb_type(t)}) AS "{c}"' for c, t in columns.items())
        return f"SELECT {empty}{f', NULL AS {FILE_COLUMN}' if tag else ''} WHERE false"
    selects = []
    for group in _by_partition(files):
        values = dict(group[0].partition)
        listed = ", ".join(quote_string(f.path) for f in group)
        projection = ", ".join(
            f'CAST({_literal(values.get(c))} AS {duckdb_type(t)}) AS "{c}"' if c in partitions
            else f'CAST("{c}" AS {duckdb_type(t)}) AS "{c}"' for c, t in columns.items())
        if tag:
            projection += f', filename AS "{FILE_COLUMN}"'
        selects.append(f"SELECT {projection} FROM read_parquet([{listed}], union_by_name = true, "
                       f"filename = true)")
    return " UNION ALL ".join(selects)


def _literal(value: str | None) -> str:
    from pipeframe.sqltext import quote_string

    return "NULL" if value is None else quote_string(value)


def _file_uri(table: DeltaTable, path: str) -> str:
    """Where an `add` action's file is: a local path for a local table, a URI otherwise."""
    from urllib.parse import unquote

    if "://" in path:
        return path
    root = table.table_uri.rstrip("/")
    local = local_folder(root)
    if local is not None:
        return os.path.normpath(os.path.join(local, unquote(path)))
    return f"{root}/{path}"


def _fragment_uri(table: DeltaTable, fragment_path: str) -> str:
    root = table.table_uri.rstrip("/")
    scheme, _, rest = root.partition("://")
    bucket_path = rest if rest else root
    if fragment_path.startswith(bucket_path):
        return f"{scheme}://{fragment_path}" if rest else fragment_path
    return _file_uri(table, fragment_path)


def duckdb_type(spark_type: str) -> str:
    """A Spark type as DuckDB declares it (TIMESTAMP is an instant: TIMESTAMPTZ)."""
    from pipeframe.serving.types import duckdb_type as convert

    return convert(spark_type)


def delta_rs_uri(path: str) -> str:
    """The URI delta-rs reads a warehouse path by: Hadoop's `s3a://` and `s3n://` are its `s3://`, a `file:` URI a
    plain path."""
    folder = local_folder(path)
    if folder is not None:
        return folder
    scheme, rest = path.split("://", 1)
    return f"s3://{rest}" if scheme.lower() in ("s3a", "s3n") else path


def storage_options(spark_conf: dict[str, Any]) -> dict[str, str]:
    """delta-rs' options for a warehouse on S3 from the project's Hadoop s3a settings (`spark.hadoop.fs.s3a.*`), so
    the read path reaches the bucket Spark writes: endpoint, region, keys, path-style access, plain HTTP. Settings
    not given are left to delta-rs' own lookup (AWS_* environment variables, instance credentials)."""
    prefix = "spark.hadoop.fs.s3a."
    conf = {k[len(prefix):]: str(v) for k, v in spark_conf.items() if k.startswith(prefix)}
    options: dict[str, str] = {}
    names = {"endpoint": "AWS_ENDPOINT_URL", "endpoint.region": "AWS_REGION", "access.key": "AWS_ACCESS_KEY_ID",
             "secret.key": "AWS_SECRET_ACCESS_KEY", "session.token": "AWS_SESSION_TOKEN"}
    for key, option in names.items():
        if conf.get(key):
            options[option] = conf[key]
    endpoint = options.get("AWS_ENDPOINT_URL")
    if endpoint and "://" not in endpoint:
        secure = conf.get("connection.ssl.enabled", "true").lower() != "false"
        options["AWS_ENDPOINT_URL"] = f"{'https' if secure else 'http'}://{endpoint}"
    if options.get("AWS_ENDPOINT_URL", "").startswith("http://"):
        options["AWS_ALLOW_HTTP"] = "true"
    if conf.get("path.style.access", "").lower() == "true":
        options["AWS_VIRTUAL_HOSTED_STYLE_REQUEST"] = "false"
    return options


def _commit_file(folder: str, version: int) -> str:
    return os.path.join(folder, "_delta_log", f"{version:020d}.json")


def _identity(folder: str, version: int) -> tuple[int, int] | None:
    """A commit file's (inode, mtime): a table made again in the same folder has other files under the same names."""
    try:
        stat = os.stat(_commit_file(folder, version))
    except OSError:
        return None
    return stat.st_ino, stat.st_mtime_ns
