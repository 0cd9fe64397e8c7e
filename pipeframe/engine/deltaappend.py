"""A blind append to a local Delta table committed without a Spark job: the rows (an Arrow table) written as one
parquet file by pyarrow, and one commit file put in place atomically, as Delta's own writer does.

A group commit of a few hundred rows spent most of its time in Spark's write path (a job, the transaction's snapshot
and conflict bookkeeping, the commit): docs/benchmarks.md. This module writes what that path writes for a plain
append, and nothing it is unsure of. `append` answers None (nothing committed: the caller writes with Spark) for

* a table it cannot read exactly from its log (`deltalog`), or not in a local folder;
* partition columns, column mapping, in-commit timestamps, row tracking, identity or generated columns, column
  invariants or CHECK constraints, a column default, liquid clustering (its writers must give the clustering columns
  statistics this module does not write for every type), a writer feature it does not know;
* rows whose columns or types are not the table's;
* a commit that falls on a checkpoint version (every `delta.checkpointInterval`, 10 by default), unless the caller
  has Delta write the checkpoint after it (`on_checkpoint`): readers must never replay a long log.

The commit is `NNN.json`, created by a hard link of a complete temporary file, which fails if the name exists: two
writers never both take one version. On losing a version it reads the commits that won: a metadata or protocol
change runs the checks again, anything else is retried at the next version (a blind append conflicts with no data
change, Delta's own rule). Spark's writer on a local filesystem checks then renames, a window of microseconds in
which it could replace a commit made here (the same window two Spark processes have between them); within a
process, `conflicts.table_lock` keeps these commits apart from pipeframe's Spark writes to the same table (ingest,
DELETE, TTL, OPTIMIZE, compaction, deploy's ALTERs). A crash before the link leaves an unreferenced parquet file,
which VACUUM removes.

Statistics: numRecords, nullCount of every column but structs, min/max of integer, date and short string columns
(exact values, as Delta's reader expects them); none for the rest, which only means those files are not skipped by
filters on them until OPTIMIZE rewrites them."""

from __future__ import annotations

import json
import logging
import os
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

from pipeframe.engine import deltalog

if TYPE_CHECKING:
    import pyarrow as pa

log = logging.getLogger("pipeframe.deltaappend")
ENGINE = "pipeframe (pyarrow append)"
ATTEMPTS = 20  # versions tried before giving the append to Spark
# Writer features whose rules a plain append of complete rows meets (the checks below cover the conditional ones).
WRITER_FEATURES = {"appendOnly", "invariants", "checkConstraints", "changeDataFeed", "generatedColumns",
                   "deletionVectors", "timestampNtz", "domainMetadata", "v2Checkpoint",
                   "vacuumProtocolCheck", "columnMapping", "typeWidening", "typeWidening-preview"}
UNSAFE_CONFIG = ("delta.constraints.", "delta.columnMapping.mode", "delta.enableInCommitTimestamps",
                 "delta.enableRowTracking")
UNSAFE_FIELD = ("delta.invariants", "delta.generationExpression", "delta.identity.", "CURRENT_DEFAULT")
STRING_STATS = 32  # Delta truncates string statistics to this many characters; shorter ones are exact


@dataclass(frozen=True)
class _Table:
    """What an append checks against: the latest version and the top-level columns (name → Delta type)."""

    version: int
    columns: dict[str, object]
    required: frozenset[str]  # NOT NULL columns
    checkpoint_interval: int
    tight_bounds: bool  # the table may have deletion vectors: its statistics say whether they are exact


def append(folder: str, rows: pa.Table, user_metadata: str | None = None,
           on_checkpoint: Callable[[int], object] | None = None) -> int | None:
    """Commit `rows` as one append to the Delta table in local `folder`: the new version, or None when this module
    must leave the append to Spark (see the module's docstring; then nothing was written to the log).

    `on_checkpoint(version)` is called after a commit that falls on a checkpoint version, to have Delta write the
    checkpoint (`tables.checkpoint`); without it, such commits are left to Spark's writer."""
    data: tuple[str, dict] | None = None
    table, version = None, -1
    for _attempt in range(ATTEMPTS):
        if table is None:
            table = _table(folder)
            if table is None or not _fits(rows, table):
                return None
            version = table.version + 1
        due = version % table.checkpoint_interval == 0
        if due and on_checkpoint is None:
            return None
        if data is None and rows.num_rows:
            data = _write_file(folder, rows, table.tight_bounds)
        committed = _commit(folder, version, table.version, rows.num_rows, data, user_metadata)
        if committed is None:
            return None  # the filesystem cannot create the commit file this way: Spark's writer can
        if committed:
            if due and on_checkpoint is not None:
                try:
                    on_checkpoint(version)
                except Exception as exc:  # noqa: BLE001 — the rows are committed: answer so, whatever the checkpoint
                    log.warning("could not ask for a checkpoint of %s at version %s: %s", folder, version, exc)
            return version
        actions = deltalog.commit_actions(folder, version)
        if actions is None or any("metaData" in a or "protocol" in a for a in actions):
            table = None  # a metadata or protocol change won: check everything again
        else:
            version += 1  # a blind append conflicts with no data change: take the next version
    return None


def _table(folder: str) -> _Table | None:
    state = deltalog.table_state(folder)
    if state is None:
        return None
    metadata, protocol, config = state.metadata, state.protocol, state.configuration()
    if metadata.get("partitionColumns") or any(k.startswith(UNSAFE_CONFIG) and
                                               str(v).lower() not in ("none", "false") for k, v in config.items()):
        return None
    writer, features = protocol.get("minWriterVersion"), set(protocol.get("writerFeatures") or ())
    if not isinstance(writer, int) or writer > 7 or (writer == 7 and not features <= WRITER_FEATURES):
        return None
    try:
        fields = json.loads(metadata.get("schemaString") or "")["fields"]
        interval = int(config.get("delta.checkpointInterval", 10))
    except (ValueError, KeyError, TypeError):
        return None
    if interval < 1 or any(str(key).startswith(UNSAFE_FIELD) for key in _field_metadata_keys(fields)):
        return None
    return _Table(state.version, {f["name"]: f["type"] for f in fields},
                  frozenset(f["name"] for f in fields if f.get("nullable") is False), interval,
                  "deletionVectors" in features)


def writable(folder: str) -> bool:
    """Whether the table in local `folder` is one `append` can write (its rows may still not fit, or a commit of
    another writer change that): checked before rows are brought to the driver for it."""
    return _table(folder) is not None


def _field_metadata_keys(fields: list) -> list[str]:
    """The metadata keys of every field of a schema, nested ones included."""
    keys: list[str] = []
    for f in fields:
        keys += list(f.get("metadata") or {})
        kind = f.get("type")
        while isinstance(kind, dict):
            if kind.get("type") == "struct":
                keys += _field_metadata_keys(kind.get("fields") or [])
                break
            kind = kind.get("elementType") or kind.get("valueType")
    return keys


def _fits(rows: pa.Table, table: _Table) -> bool:
    """The rows have exactly the table's columns, each of an Arrow type that is written as the Delta type, and no
    NULL in a NOT NULL column."""
    if sorted(rows.column_names) != sorted(table.columns):
        return False
    return all(_same_type(rows.schema.field(name).type, kind) for name, kind in table.columns.items()) and \
        not any(rows.column(name).null_count for name in table.required)


def _same_type(arrow: pa.DataType, delta: object) -> bool:
    import pyarrow as pa
    import pyarrow.types as t

    if isinstance(delta, dict):
        if delta.get("containsNull") is False or delta.get("valueContainsNull") is False or \
                any(f.get("nullable") is False for f in delta.get("fields") or ()):
            return False  # a NOT NULL inside a column: Spark's writer checks it
        kind = delta.get("type")
        if kind == "array":
            return (t.is_list(arrow) or t.is_large_list(arrow)) and _same_type(arrow.value_type, delta["elementType"])
        if kind == "map":
            return t.is_map(arrow) and _same_type(arrow.key_type, delta["keyType"]) and \
                _same_type(arrow.item_type, delta["valueType"])
        if kind == "struct":
            fields = delta.get("fields") or []
            return t.is_struct(arrow) and [arrow.field(i).name for i in range(arrow.num_fields)] == \
                [f["name"] for f in fields] and all(_same_type(arrow.field(i).type, f["type"])
                                                    for i, f in enumerate(fields))
        return False
    simple = {"string": (pa.string(), pa.large_string()), "binary": (pa.binary(), pa.large_binary()),
              "boolean": (pa.bool_(),), "byte": (pa.int8(),), "short": (pa.int16(),), "integer": (pa.int32(),),
              "long": (pa.int64(),), "float": (pa.float32(),), "double": (pa.float64(),), "date": (pa.date32(),)}
    if delta in simple:
        return arrow in simple[delta]
    if delta in ("timestamp", "timestamp_ntz"):
        return t.is_timestamp(arrow) and arrow.unit == "us" and (arrow.tz is None) == (delta == "timestamp_ntz")
    if isinstance(delta, str) and delta.startswith("decimal("):
        precision, scale = (int(x) for x in delta[8:-1].split(","))
        return t.is_decimal(arrow) and (arrow.precision, arrow.scale) == (precision, scale)
    return False


def _write_file(folder: str, rows: pa.Table, tight_bounds: bool) -> tuple[str, dict]:
    """One parquet file of `rows` in the table's folder, on disk before any commit names it: its `add` action."""
    import pyarrow.parquet as pq

    name = f"part-00000-{uuid.uuid4()}-c000.snappy.parquet"
    path = os.path.join(folder, name)
    pq.write_table(rows, path, compression="snappy")
    with open(path, "rb") as handle:
        os.fsync(handle.fileno())
    stat = os.stat(path)
    stats = _stats(rows)
    if tight_bounds:
        stats["tightBounds"] = True  # exact: a new file has no deletion vector
    return name, {"path": name, "partitionValues": {}, "size": stat.st_size,
                  "modificationTime": stat.st_mtime_ns // 1_000_000, "dataChange": True,
                  "stats": json.dumps(stats, separators=(",", ":"))}


def _stats(rows: pa.Table) -> dict:
    """numRecords; nullCount of every column but structs (Delta nests theirs); exact min/max of integer, date and
    short string columns; min/max of timestamps in milliseconds as Delta writes them (the minimum rounded down,
    the maximum up: a bound never excludes a row, whether or not the reader widens it by a millisecond as Spark's
    Delta does)."""
    import pyarrow.compute as pc
    import pyarrow.types as t

    low, high, nulls = {}, {}, {}
    for name in rows.column_names:
        column = rows.column(name)
        kind = column.type
        if t.is_struct(kind):
            continue
        nulls[name] = column.null_count
        text = t.is_string(kind) or t.is_large_string(kind)
        time_ = t.is_timestamp(kind)
        if column.null_count == len(column) or not (t.is_integer(kind) or t.is_date32(kind) or text or time_):
            continue
        try:
            if text and pc.max(pc.utf8_length(column)).as_py() > STRING_STATS:
                continue
            bounds = pc.min_max(column).as_py()
            if time_:
                low[name], high[name] = _millis(bounds["min"], kind.tz), _millis(bounds["max"], kind.tz, up=True)
                continue
        except (ValueError, OverflowError):  # e.g. a date outside Python's years 1..9999: no bounds
            continue
        low[name], high[name] = (str(b) if t.is_date32(kind) else b for b in (bounds["min"], bounds["max"]))
    return {"numRecords": rows.num_rows, "minValues": low, "maxValues": high, "nullCount": nulls}


def _millis(value: datetime, zone: str | None, up: bool = False) -> str:
    """A timestamp statistic as Delta writes it: milliseconds, `Z` for an instant (TIMESTAMP, stored in UTC), none
    for TIMESTAMP_NTZ; rounded up to the next millisecond when `up` and it has more digits."""
    if up and value.microsecond % 1000:
        value += timedelta(microseconds=1000 - value.microsecond % 1000)
    if zone is not None:
        value = value.astimezone(UTC)
    return f"{value:%Y-%m-%dT%H:%M:%S}.{value.microsecond // 1000:03d}" + ("Z" if zone is not None else "")


def _commit(folder: str, version: int, read: int, count: int, data: tuple[str, dict] | None,
            user_metadata: str | None) -> bool | None:
    """Put commit `version` in place: False when another writer has it, None when the filesystem cannot link."""
    info = {"timestamp": int(time.time() * 1000), "operation": "WRITE",
            "operationParameters": {"mode": "Append", "partitionBy": "[]"}, "readVersion": read,
            "isolationLevel": "Serializable", "isBlindAppend": True,
            "operationMetrics": {"numFiles": str(1 if data else 0), "numOutputRows": str(count),
                                 "numOutputBytes": str(data[1]["size"] if data else 0)},
            **({"userMetadata": user_metadata} if user_metadata is not None else {}),
            "engineInfo": ENGINE, "txnId": str(uuid.uuid4())}
    lines = [{"commitInfo": info}, *([{"add": data[1]}] if data else [])]
    log = os.path.join(folder, deltalog.LOG)
    final = os.path.join(log, f"{version:020d}.json")
    temporary = os.path.join(log, f".{version:020d}.json.{uuid.uuid4()}.tmp")
    with open(temporary, "w", encoding="utf-8") as handle:
        handle.write("".join(json.dumps(line, separators=(",", ":")) + "\n" for line in lines))
        handle.flush()
        os.fsync(handle.fileno())
    try:
        os.link(temporary, final)
        return True
    except FileExistsError:
        return False
    except OSError:  # no hard links here (some network and FUSE filesystems)
        return None
    finally:
        os.unlink(temporary)
