"""A blind append to a local Delta table committed without a Spark job: the rows (an Arrow table) written as one
parquet file by pyarrow, and one commit file put in place atomically, as Delta's own writer does.

A group commit of a few hundred rows spent most of its time in Spark's write path (a job, the transaction's snapshot
and conflict bookkeeping, the commit): docs/benchmarks.md. This module writes what that path writes for a plain
append, and nothing it is unsure of. `append` answers None (nothing committed: the caller writes with Spark) for

* a table it cannot read exactly from its log (`deltalog`), or not in a local folder;
* column mapping, in-commit timestamps, row tracking, identity columns, a generated column that is not a partition
  column or whose expression `generated` cannot compute exactly, column invariants or CHECK constraints, a column
  default, a partition column of a type whose partition value it does not write (floats, decimals, binary), a writer
  feature it does not know;
* rows whose columns or types are not the table's (a generated column is computed here, never taken from the rows);
* on a clustered table (the `clustering` writer feature: an ENGINE_SORTING_KEY), rows it cannot give the statistics
  Delta's clustering requires of writers (bounds of every column that may be clustered: a NaN or an infinity);
* a commit that falls on a checkpoint version (every `delta.checkpointInterval`, 10 by default), unless the caller
  has the checkpoint written after it (`on_checkpoint`: by `checkpoint` here, with delta-rs, or by Delta's own
  code): readers must never replay a long log.

The commit is `NNN.json`, created by a hard link of a complete temporary file, which fails if the name exists: two
writers never both take one version. On losing a version it reads the commits that won: a metadata or protocol
change runs the checks again, anything else is retried at the next version (a blind append conflicts with no data
change, Delta's own rule). Spark's writer on a local filesystem checks then renames, a window of microseconds in
which it could replace a commit made here (the same window two Spark processes have between them); within a
process, `conflicts.table_lock` keeps these commits apart from pipeframe's Spark writes to the same table (ingest,
DELETE, TTL, OPTIMIZE, compaction, deploy's ALTERs). A crash before the link leaves an unreferenced parquet file,
which VACUUM removes.

Partitioned tables (PROTOCOL.md, "Partition Value Serialization"): one file per partition of the rows, written without
the partition columns, its `add` carrying the serialized `partitionValues` (an empty string, as Spark's writer also
has it, is a NULL partition value). A generated partition column (a partition key expression) is computed by
`generated`, which answers only where the value is certain to be Spark's.

Clustered tables (PROTOCOL.md, "Clustered Table"): an append may leave the rows unclustered (no
`clusteringProvider`: OPTIMIZE clusters them later, as after Spark's own appends); the protocol asks only that every
file's `add` carries statistics for the clustering columns, so on such a table every column of a type Delta clusters
by gets its bounds, or the append is left to Spark.

Statistics: numRecords, nullCount of every column but structs, min/max of numbers, dates, times and strings (strings
cut to Delta's 32-character prefix: the minimum as its prefix, a longer maximum as its prefix and U+10FFFF, which no
longer value with that prefix exceeds); none for the rest, which only means those files are not skipped by filters on
them until OPTIMIZE rewrites them.

Tables are created here too (`create`: version 0 as Spark's CREATE TABLE writes it, for deploy's datasource and view
tables and pipeframe's own), and pipeframe's own small tables (the state store, the deploy lock, the view records)
changed (`rewrite`: every row read, the new rows written as one file, every old file removed in the same commit),
with the same commit file a version only one writer can take.

Fences (a Kafka partition's offsets): an append may carry, per sequence it continues (`fences`: appId -> the first
and last number of its rows), a `txn` action recording the last number, Delta's idempotent-write record. It lands
only while the table's newest `txn` of each appId is below the first number: checked against the snapshot before
writing, and again against every commit that wins a version first. Two writers of one sequence (a consumer stalled
past its group session and the one that took its partition, or two groups reading one topic into one table)
therefore never land a number twice: the second is refused with `Fenced`, which says where the table is."""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import math
import os
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import TYPE_CHECKING

from pipeframe.engine import deltalog, deltaschema, generated
from pipeframe.errors import PipeframeError
from pipeframe.sqltext import first_line

if TYPE_CHECKING:
    import pyarrow as pa

log = logging.getLogger("pipeframe.deltaappend")
ENGINE = "pipeframe (pyarrow append)"
ATTEMPTS = 20  # versions tried before giving the append to Spark
# Writer features whose rules a plain append of complete rows meets (the checks below cover the conditional ones).
WRITER_FEATURES = {"appendOnly", "invariants", "checkConstraints", "changeDataFeed", "generatedColumns",
                   "deletionVectors", "timestampNtz", "domainMetadata", "v2Checkpoint", "clustering",
                   "vacuumProtocolCheck", "columnMapping", "typeWidening", "typeWidening-preview"}
# The writer features of tables whose checkpoint delta-rs writes (`checkpoint`): checked to keep every action Delta
# reads back (domain metadata of a clustered table, txn fences, removes of a change data feed table, partitions).
CHECKPOINT_FEATURES = {"appendOnly", "invariants", "checkConstraints", "changeDataFeed", "generatedColumns",
                       "domainMetadata", "clustering"}
UNSAFE_CONFIG = ("delta.constraints.", "delta.columnMapping.mode", "delta.enableInCommitTimestamps",
                 "delta.enableRowTracking")
GENERATED = "delta.generationExpression"
UNSAFE_FIELD = ("delta.invariants", GENERATED, "delta.identity.", "CURRENT_DEFAULT")
STRING_STATS = 32  # Delta truncates string statistics to this many characters; shorter ones are exact
STRING_MAX = "\U0010FFFF"  # after a cut maximum's prefix: greater than whatever followed it
# Partition column types whose values are written here (as PROTOCOL.md serializes them).
PARTITION_TYPES = ("string", "byte", "short", "integer", "long", "date", "timestamp", "timestamp_ntz", "boolean")


Fences = Mapping[str, tuple[int, int]]  # appId -> (first, last) of the numbers an append continues it with


class Fenced(PipeframeError):
    """An append continuing a sequence (a Kafka partition) from a number the table already holds: nothing of it was
    committed. `landed`: appId -> the last number the table holds, for each sequence that refused it."""

    def __init__(self, landed: Mapping[str, int]) -> None:
        self.landed = dict(landed)
        held = ", ".join(f"`{app}` up to {last}" for app, last in sorted(self.landed.items()))
        super().__init__("PF719", f"Rows already landed: the table holds {held}.",
                         "Nothing was committed: continue after what the table holds (a Kafka consumer seeks "
                         "there itself).", http_status=409)


def refuse(fences: Fences, held: Mapping[str, int]) -> None:
    """Raise `Fenced` when `held` (appId -> the table's last number) reaches into a fence's numbers."""
    landed = {app: held[app] for app, (first, _last) in fences.items() if app in held and held[app] >= first}
    if landed:
        raise Fenced(landed)


@dataclass(frozen=True)
class _Table:
    """What an append checks against: the latest version and the top-level columns (name → Delta type)."""

    version: int
    columns: dict[str, object]
    required: frozenset[str]  # NOT NULL columns
    checkpoint_interval: int
    tight_bounds: bool  # the table may have deletion vectors: its statistics say whether they are exact
    partitions: tuple[str, ...] = ()  # the partition columns, in order
    generated: tuple[tuple[str, str], ...] = ()  # (partition column, its generation expression)
    clustered: bool = False  # the `clustering` writer feature: every file needs the clustering columns' bounds
    keeps_removes: bool = False  # append-only, or a change data feed: a remove needs more than `rewrite` writes
    append_only: bool = False  # delta.appendOnly: no file is ever removed


def append(folder: str, rows: pa.Table, user_metadata: str | None = None,
           on_checkpoint: Callable[[int], object] | None = None, time_zone: str = "UTC",
           fences: Fences | None = None) -> int | None:
    """Commit `rows` as one append to the Delta table in local `folder`: the new version, or None when this module
    must leave the append to Spark (see the module's docstring; then nothing was written to the log).

    `on_checkpoint(version)` is called after a commit that falls on a checkpoint version, to have Delta write the
    checkpoint (`tables.checkpoint`); without it, such commits are left to Spark's writer. `time_zone`: the Spark
    session's, in which generated columns are computed (`generated`). `fences`: the sequences the rows continue
    (the module's docstring); `Fenced` when the table holds a number of one already."""
    data: list[dict] | None = None
    table, version, complete = None, -1, rows
    for _attempt in range(ATTEMPTS):
        if table is None:
            table = _table(folder)
            complete = _with_generated(rows, table, time_zone) if table is not None else None
            if table is None or complete is None or not _fits(complete, table):
                return None
            if fences:
                held = deltalog.transaction_versions(folder, frozenset(fences))
                if held is None:
                    return None
                refuse(fences, held)
            version = table.version + 1
        due = version % table.checkpoint_interval == 0
        if due and on_checkpoint is None:
            return None
        if data is None:
            data = _write_files(folder, complete, table) if rows.num_rows else []
            if data is None:
                return None  # statistics a clustered table requires cannot be written for these rows
        committed = _commit(folder, version, table, rows.num_rows, data, user_metadata,
                            txns={app: last for app, (_first, last) in (fences or {}).items()})
        if committed is None:
            return None  # the filesystem cannot create the commit file this way: Spark's writer can
        if committed:
            if due:
                _ask_checkpoint(folder, version, on_checkpoint)
            return version
        actions = deltalog.commit_actions(folder, version)
        if actions is None or any("metaData" in a or "protocol" in a or "domainMetadata" in a for a in actions):
            table, data = None, None  # a metadata or protocol change won: check (and lay out the files) again
        else:
            if fences:  # a writer of the same sequence won: refused when it reached into these numbers
                try:
                    refuse(fences, dict(t for a in actions if (t := deltalog.txn_of(a)) is not None))
                except deltalog.Unanswerable:
                    return None
            version += 1  # a blind append conflicts with no data change: take the next version
    return None


def rewrite(folder: str, change: Callable[[list[dict]], list[dict] | None]) -> tuple[int, list[dict]] | None:
    """Replace every row of a small table in local `folder` (one of pipeframe's own: the state store, the deploy
    lock, the view records) by `change(rows)`, in one commit without a Spark job: the rows are read from the
    snapshot's files, the new ones written as one file, and the commit removes every file read. `change` answers
    None when there is nothing to change (no commit). Like a conditional UPDATE or a MERGE, it decides from the
    snapshot it read: a commit that loses its version to another writer reads the new snapshot and asks `change`
    again, so what it writes always follows every commit before it.

    Returns (the version that holds the rows, those rows): the new version, or the one read when `change` answered
    None. None when this module leaves the change to Spark, having committed nothing: a table it cannot read exactly
    from its log (partitioned, clustered, deletion vectors, column mapping) or whose removes need more than this
    writes (append-only, a change data feed), columns it has no Arrow type for, rows that do not fit the table, and
    a commit that would fall on a checkpoint version: Spark's writer makes that one, and its checkpoint."""
    import pyarrow as pa

    for _attempt in range(ATTEMPTS):
        table, snapshot = _table(folder), deltalog.live_files(folder)
        if table is not None and snapshot is not None and snapshot[0] != table.version:
            continue  # a commit landed between the two reads
        if table is None or snapshot is None or table.partitions or table.clustered or \
                (table.version + 1) % table.checkpoint_interval == 0:
            return None
        if table.keeps_removes:
            return None
        schema = _arrow_schema(table)
        rows = deltalog.file_rows(snapshot[1], list(table.columns))
        if schema is None or rows is None:
            return None
        changed = change(rows)
        if changed is None:
            return table.version, rows
        if any(not set(row) <= set(table.columns) for row in changed):
            return None  # a column the table does not have (an older warehouse's table): Spark's SQL says so
        try:
            new = pa.Table.from_pylist([{c: row.get(c) for c in table.columns} for row in changed], schema)
        except (pa.ArrowException, TypeError, ValueError):
            return None
        if not _fits(new, table):
            return None
        data = _write_files(folder, new, table) if changed else []
        if data is None:
            return None
        version = table.version + 1
        committed = _commit(folder, version, table, len(changed), data, None, list(snapshot[1].values()))
        if committed is None:
            return None
        if committed:
            return version, changed
        for add in data:  # another writer took the version: its rows may change what `change` decides
            with contextlib.suppress(OSError):
                os.unlink(os.path.join(folder, add["path"]))
    return None


def replace_keys(folder: str, keys: list[str], touched: pa.Table, rows: pa.Table, user_metadata: str | None = None,
                 on_checkpoint: Callable[[int], object] | None = None) -> int | None:
    """In one commit without a Spark job, delete the rows of the table in local `folder` whose `keys` equal
    (NULL-safe) a row of `touched`, and add `rows`: what a MERGE that deletes the matched groups and inserts new
    rows writes, and recorded as one (its row counts). Only the files holding a touched row are rewritten: their
    other rows are written again, with `rows`, as one new file. A change data feed reads the commit's removed and
    added files as deleted and inserted rows (PROTOCOL.md: a version without `cdc` actions), which nets to the
    same change.

    Returns the new version, or None when this module leaves the change to Spark, having committed nothing: a table
    `deltalog.live_files` cannot list exactly (partitions, deletion vectors, column mapping), append-only, rows or
    files whose columns are not the table's types, and a commit on a checkpoint version without `on_checkpoint`
    (`append`'s rule). A version lost to another writer is retried from the new snapshot."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    for _attempt in range(ATTEMPTS):
        table, found = _table(folder), deltalog.live_files(folder)
        if table is not None and found is not None and found[0] != table.version:
            continue  # a commit landed between the two reads
        if table is None or found is None or table.append_only or not _fits(rows, table):
            return None
        version = table.version + 1
        due = version % table.checkpoint_interval == 0
        if due and on_checkpoint is None:
            return None
        touched = _keys_as_written(touched, table)
        if touched is None:
            return None
        doomed, kept, deleted = [], [], 0
        try:
            for path, add in found[1].items():
                matched = matching(pq.read_table(path, columns=keys), keys, touched)
                if matched is None:
                    return None
                hits = pc.sum(matched).as_py() or 0
                if hits:
                    old = pq.read_table(path, columns=list(rows.schema.names)).cast(rows.schema)
                    kept.append(old.filter(pc.invert(matched)))
                    doomed.append(add)
                    deleted += hits
        except (OSError, ValueError, TypeError, NotImplementedError):  # unreadable, or not castable to the rows' types
            return None
        new = pa.concat_tables([*kept, rows])
        data = _write_files(folder, new, table) if new.num_rows else []
        if data is None:
            return None
        counts = {"numTargetRowsInserted": rows.num_rows, "numTargetRowsUpdated": 0, "numTargetRowsDeleted": deleted,
                  "numTargetRowsCopied": new.num_rows - rows.num_rows, "numTargetFilesRemoved": len(doomed),
                  "numTargetFilesAdded": len(data)}
        committed = _commit(folder, version, table, new.num_rows, data, user_metadata, doomed, counts)
        if committed is None:
            return None
        if committed:
            if due:
                _ask_checkpoint(folder, version, on_checkpoint)
            return version
        for add in data:  # another writer took the version: decide again from the new snapshot
            with contextlib.suppress(OSError):
                os.unlink(os.path.join(folder, add["path"]))
    return None


def _keys_as_written(touched: pa.Table, table: _Table) -> pa.Table | None:
    """`touched` with each key column of a flat type cast to the Arrow type the table's files hold it as (keys
    computed elsewhere, e.g. by DuckDB, compare as Spark's would); None when a value does not fit that type."""
    import pyarrow as pa

    types = _simple_types()
    wanted = [pa.field(f.name, types[kind][0]) if isinstance(kind := table.columns.get(f.name), str)
              and kind in types else f for f in touched.schema]
    try:
        return touched.cast(pa.schema(wanted))
    except (pa.ArrowException, ValueError):
        return None


def key_rows(folder: str, keys: list[str]) -> pa.Table | None:
    """The distinct values of `keys` in the table in local `folder`, read from its files without a Spark job; None
    when it cannot say (a table `deltalog.live_files` cannot list, an unreadable file)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    found = deltalog.live_files(folder)
    if found is None:
        return None
    try:
        tables = [pq.read_table(path, columns=keys) for path in found[1]]
        if not tables:
            return None
        return pa.concat_tables(tables, promote_options="permissive").group_by(keys).aggregate([])
    except (OSError, ValueError, pa.ArrowException):
        return None


def group_extremes(folder: str, keys: list[str], touched: pa.Table, rules: list[tuple[str, str]]) -> list[dict] | None:
    """The groups of the table in local `folder` whose `keys` equal (NULL-safe) a row of `touched`: per group its
    keys, cast to `touched`'s types, and the largest ("max") or smallest ("min") value of each `rules` column over
    its rows, read from its files without a Spark job. None when it cannot say as Spark would: a table
    `deltalog.live_files` cannot list, an unreadable file, keys not comparable with `touched`'s, a NaN (Spark orders
    it above every number; Arrow's aggregates skip it)."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    found = deltalog.live_files(folder)
    if found is None or not keys:
        return None
    columns = list(dict.fromkeys([*keys, *(column for column, _ in rules)]))
    try:
        parts = []
        for path in found[1]:
            rows = pq.read_table(path, columns=columns)
            matched = matching(rows, keys, touched)
            if matched is None:
                return None
            rows = rows.filter(matched)
            parts.append(rows.cast(pa.schema(
                [touched.schema.field(c) if c in keys else rows.schema.field(c) for c in columns])))
        if not parts:
            return []
        rows = pa.concat_tables(parts, promote_options="permissive")
        if any(pa.types.is_floating(rows.schema.field(c).type) and pc.any(pc.is_nan(rows.column(c))).as_py()
               for c, _ in rules):
            return None
        merged = rows.group_by(keys).aggregate([(column, rule) for column, rule in rules])
    except (OSError, ValueError, pa.ArrowException):
        return None
    return merged.select([*keys, *(f"{column}_{rule}" for column, rule in rules)]).rename_columns(
        [*keys, *(column for column, _ in rules)]).to_pylist()


def matching(rows: pa.Table, keys: list[str], touched: pa.Table) -> pa.ChunkedArray | pa.Array | None:
    """Which of `rows` have `keys` equal (NULL-safe) to a row of `touched` (a boolean per row); None when a key's
    type cannot be compared with the touched one's."""
    import pyarrow as pa
    import pyarrow.compute as pc

    try:
        columns = [rows.column(k).cast(touched.schema.field(k).type) for k in keys]
    except (KeyError, pa.ArrowException):
        return None
    if len(keys) == 1:
        return pc.is_in(columns[0], value_set=touched.column(keys[0]).combine_chunks(), skip_nulls=False)
    if any(pa.types.is_floating(c.type) for c in columns):
        return None  # a NaN in a tuple equals no other NaN (Spark's <=> matches them): left to Spark
    wanted = set(zip(*(touched.column(k).to_pylist() for k in keys), strict=True))
    return pa.array([row in wanted for row in zip(*(c.to_pylist() for c in columns), strict=True)], pa.bool_())


def _ask_checkpoint(folder: str, version: int, on_checkpoint: Callable[[int], object] | None) -> None:
    """Have Delta write the checkpoint of `version`, committed here on a checkpoint version."""
    if on_checkpoint is None:
        return
    try:
        on_checkpoint(version)
    except Exception as exc:  # noqa: BLE001 — the version is committed: answer so, whatever the checkpoint
        log.warning("could not ask for a checkpoint of %s at version %s: %s", folder, version, exc)


def checkpoint(folder: str) -> bool:
    """Write the classic checkpoint of the newest version of the table in local `folder` with delta-rs, without a
    Spark job: False (nothing written) when its protocol is outside what delta-rs's checkpoint was checked to keep
    (CHECKPOINT_FEATURES, reader version 1: no deletion vectors, column mapping or v2 checkpoints) or delta-rs fails;
    then Delta's own code writes it (`tables.checkpoint`). Spark's checkpoint of a table is a Spark job that took
    seconds of both cores while events landed (docs/benchmarks.md, issue 33); this takes milliseconds.
    tests/spark/test_checkpoints.py reads such checkpoints back with Spark and with `deltalog`."""
    state = deltalog.table_state(folder)
    if state is None:
        return False
    protocol = state.protocol
    features = set(protocol.get("writerFeatures") or ())
    writer = protocol.get("minWriterVersion")
    if protocol.get("minReaderVersion") != 1 or not isinstance(writer, int) or writer > 7 or \
            not features <= CHECKPOINT_FEATURES:
        return False
    try:
        from deltalake import DeltaTable

        DeltaTable(folder).create_checkpoint()
    except Exception as exc:  # noqa: BLE001 — Delta's own writer is the way that always works
        log.info("delta-rs did not write a checkpoint of %s (%s): Delta's writer does", folder, first_line(exc))
        return False
    return True


def no_rows(folder: str) -> pa.Table | None:
    """No rows, in the Arrow schema `append` writes to the table in local `folder` (as Spark brings its rows to
    the driver): what an append that commits nothing but its metadata passes. None when there is no table."""
    import pyarrow as pa
    from pyspark.sql.pandas.types import to_arrow_schema
    from pyspark.sql.types import StructType

    state = deltalog.table_state(folder)
    try:
        schema = StructType.fromJson(json.loads(state.metadata.get("schemaString") or "")) if state else None
    except (ValueError, KeyError, TypeError):
        return None
    return None if schema is None else pa.Table.from_pylist([], to_arrow_schema(schema))


# The types Delta clusters by (a clustering column of another type is refused by Spark's CREATE TABLE).
CLUSTERING_TYPES = ("string", "byte", "short", "integer", "long", "float", "double", "date", "timestamp",
                    "timestamp_ntz")
CHANGE_FEED = "delta.enableChangeDataFeed"


def create(folder: str, columns: str | list[tuple[str, str]], rows: list[dict] | None = None, *,
           description: str = "", properties: dict[str, str] | None = None, partition_by: str | None = None,
           cluster_by: tuple[str, ...] = ()) -> bool | None:
    """Create a table in local `folder` without a Spark job: version 0 with the columns (`name TYPE, ...` or
    (name, Spark SQL type) pairs), `rows` (of flat types), the table's `description` and `properties`, partitioned
    by one column or clustered by up to four, as Spark's `CREATE TABLE [AS SELECT]` writes it: reader 1 / writer 2,
    or writer 7 with Spark's features where the change data feed is on or the table is clustered.

    False when a table is there already (another writer created it first: one takes version 0). None when this
    module leaves it to Spark, having written nothing: a type `deltaschema` does not spell, a table property
    starting with `delta.` other than the change data feed, a partition or clustering column Spark would refuse
    (not a column; of a type Delta does not cluster by), and a filesystem that cannot create the commit this way."""
    import pyarrow as pa

    pairs = columns if isinstance(columns, list) else [tuple(c.split()) for c in columns.split(", ")]
    schema = deltaschema.struct([(name, kind) for name, kind in pairs])
    properties = dict(properties or {})
    change_feed = properties.get(CHANGE_FEED) == "true"
    if schema is None or any(k.startswith("delta.") and k != CHANGE_FEED for k in properties) or \
            properties.get(CHANGE_FEED, "true") != "true":
        return None
    fields = {f["name"]: f["type"] for f in schema["fields"]}
    if partition_by is not None and (fields.get(partition_by) not in PARTITION_TYPES or cluster_by or len(fields) < 2):
        return None  # Spark refuses a table of partition columns only
    if cluster_by and (len(cluster_by) > 4 or any(list(fields).index(k) >= 32 or fields[k] not in CLUSTERING_TYPES
                                                 for k in cluster_by if k in fields) or
                       not set(cluster_by) <= set(fields)):
        return None
    table = _Table(-1, fields, frozenset(), 10, False)
    arrow = _arrow_schema(table) if rows else None
    if rows and arrow is None:
        return None
    os.makedirs(os.path.join(folder, deltalog.LOG), exist_ok=True)
    data = []
    if rows:
        data = _write_files(folder, pa.Table.from_pylist([{n: row.get(n) for n in fields} for row in rows], arrow),
                            table) or []
    stamp = int(time.time() * 1000)
    partitions = [partition_by] if partition_by is not None else []
    metadata = {"id": str(uuid.uuid4()), **({"description": description} if description or properties else {}),
                "format": {"provider": "parquet", "options": {}},
                "schemaString": json.dumps(schema, separators=(",", ":")), "partitionColumns": partitions,
                "configuration": properties, "createdTime": stamp}
    parameters = {"partitionBy": json.dumps(partitions), **({"clusterBy": json.dumps(list(cluster_by))}
                                                            if properties else {}),
                  "description": description or None, "isManaged": "false",
                  "properties": json.dumps(properties, separators=(",", ":"))}
    info = {"timestamp": stamp, "operation": "CREATE TABLE AS SELECT" if rows is not None else "CREATE TABLE",
            "operationParameters": parameters, "isolationLevel": "Serializable", "isBlindAppend": True,
            "operationMetrics": {"numFiles": str(len(data)), "numOutputRows": str(len(rows or ())),
                                 "numOutputBytes": str(sum(add["size"] for add in data))} if rows is not None else {},
            "engineInfo": ENGINE, "txnId": str(uuid.uuid4())}
    if change_feed or cluster_by:
        features = (["changeDataFeed"] if change_feed else []) + ["invariants", "appendOnly"] + \
            (["domainMetadata", "clustering"] if cluster_by else [])
        protocol = {"minReaderVersion": 1, "minWriterVersion": 7, "writerFeatures": features}
    else:
        protocol = {"minReaderVersion": 1, "minWriterVersion": 2}
    domains = [{"domainMetadata": {"domain": "delta.clustering", "configuration": json.dumps(
        {"clusteringColumns": [[k] for k in cluster_by], "domainName": "delta.clustering"}, separators=(",", ":")),
        "removed": False}}] if cluster_by else []
    return _put(folder, 0, [{"commitInfo": info}, {"metaData": metadata}, {"protocol": protocol}, *domains,
                            *({"add": add} for add in data)])


def _arrow_schema(table: _Table) -> pa.Schema | None:
    """The Arrow schema whose columns `_fits` the table's flat columns, in the table's order; None for a column of
    another type."""
    import pyarrow as pa

    types = _simple_types()
    if not all(isinstance(kind, str) and kind in types for kind in table.columns.values()):
        return None
    return pa.schema([pa.field(name, types[kind][0], name not in table.required)  # type: ignore[index]
                      for name, kind in table.columns.items()])


@functools.cache
def _simple_types() -> dict[str, tuple[pa.DataType, ...]]:
    """Delta's flat types → the Arrow types whose values are written as that type; the first is the one written."""
    import pyarrow as pa

    return {"string": (pa.string(), pa.large_string()), "binary": (pa.binary(), pa.large_binary()),
            "boolean": (pa.bool_(),), "byte": (pa.int8(),), "short": (pa.int16(),), "integer": (pa.int32(),),
            "long": (pa.int64(),), "float": (pa.float32(),), "double": (pa.float64(),), "date": (pa.date32(),),
            "timestamp": (pa.timestamp("us", tz="UTC"),), "timestamp_ntz": (pa.timestamp("us"),)}


def _table(folder: str) -> _Table | None:
    state = deltalog.table_state(folder)
    if state is None:
        return None
    metadata, protocol, config = state.metadata, state.protocol, state.configuration()
    if any(k.startswith(UNSAFE_CONFIG) and str(v).lower() not in ("none", "false") for k, v in config.items()):
        return None
    writer, features = protocol.get("minWriterVersion"), set(protocol.get("writerFeatures") or ())
    if not isinstance(writer, int) or writer > 7 or (writer == 7 and not features <= WRITER_FEATURES):
        return None
    try:
        fields = json.loads(metadata.get("schemaString") or "")["fields"]
        interval = int(config.get("delta.checkpointInterval", 10))
        partitions = tuple(str(name) for name in metadata.get("partitionColumns") or ())
        types = {f["name"]: f["type"] for f in fields}
        expressions = tuple((f["name"], str(f["metadata"][GENERATED])) for f in fields
                            if GENERATED in (f.get("metadata") or {}))
    except (ValueError, KeyError, TypeError):
        return None
    # A generation expression is computed only for a partition column; any other is Spark's to enforce.
    top = [key for f in fields for key in (f.get("metadata") or {}) if not (key == GENERATED and f["name"] in partitions)]
    nested = [key for f in fields for key in _field_metadata_keys([{"type": f.get("type")}])]
    if interval < 1 or any(str(key).startswith(UNSAFE_FIELD) for key in top + nested) or \
            any(types.get(name) not in PARTITION_TYPES for name in partitions):
        return None
    keeps_removes = any(str(config.get(key, "false")).lower() == "true"
                        for key in ("delta.appendOnly", "delta.enableChangeDataFeed"))
    return _Table(state.version, types, frozenset(f["name"] for f in fields if f.get("nullable") is False), interval,
                  "deletionVectors" in features, partitions, expressions, "clustering" in features, keeps_removes,
                  str(config.get("delta.appendOnly", "false")).lower() == "true")


def _with_generated(rows: pa.Table, table: _Table, time_zone: str) -> pa.Table | None:
    """The rows with the table's generated partition columns computed (`generated`); None when one cannot be, or
    the rows hold one already (its value is the table's to compute, not the caller's)."""
    import pyarrow as pa

    for name, expression in table.generated:
        if name in rows.column_names:
            return None
        value = generated.evaluate(expression, rows, time_zone)
        if not isinstance(value, pa.Array | pa.ChunkedArray):  # None, or a constant (a scalar)
            return None
        rows = rows.append_column(name, value)
    return rows


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
    if delta in ("timestamp", "timestamp_ntz"):
        return t.is_timestamp(arrow) and arrow.unit == "us" and (arrow.tz is None) == (delta == "timestamp_ntz")
    if isinstance(delta, str) and delta in _simple_types():
        return arrow in _simple_types()[delta]
    if isinstance(delta, str) and delta.startswith("decimal("):
        precision, scale = (int(x) for x in delta[8:-1].split(","))
        return t.is_decimal(arrow) and (arrow.precision, arrow.scale) == (precision, scale)
    return False


def _write_files(folder: str, rows: pa.Table, table: _Table) -> list[dict] | None:
    """The rows as parquet files in the table's folder, one per partition (without the partition columns), each
    on disk before any commit names it: their `add` actions. None when a clustered table's statistics cannot be
    written for them."""
    import pyarrow.compute as pc

    if not table.partitions:
        add = _write_file(folder, rows, {}, table)
        return None if add is None else [add]
    keys = rows.select(list(table.partitions)).group_by(list(table.partitions)).aggregate([])
    adds = []
    for key in keys.to_pylist():
        mask = None
        for name, value in key.items():
            match = pc.is_null(rows.column(name)) if value is None else \
                pc.fill_null(pc.equal(rows.column(name), value), False)
            mask = match if mask is None else pc.and_(mask, match)
        part = rows.filter(mask).drop_columns(list(table.partitions))
        values = {name: _partition_value(value, table.columns[name]) for name, value in key.items()}
        add = _write_file(folder, part, values, table)
        if add is None:
            return None
        adds.append(add)
    return adds


def _partition_value(value: object, kind: object) -> str | None:
    """A partition value as PROTOCOL.md serializes it (a timestamp as ISO 8601 in UTC, as Spark writes it); an empty
    string is NULL, as Spark's writer also stores it."""
    if value is None or value == "":
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, datetime):  # isoformat: strftime's %Y does not pad years before 1000
        if kind == "timestamp":
            return value.astimezone(UTC).replace(tzinfo=None).isoformat(timespec="microseconds") + "Z"
        return value.isoformat(sep=" ", timespec="microseconds")
    return str(value)  # strings, integers; dates as YYYY-MM-DD


def _write_file(folder: str, rows: pa.Table, partition_values: dict, table: _Table) -> dict | None:
    """One parquet file of `rows` in the table's folder, on disk before any commit names it: its `add` action."""
    import pyarrow.parquet as pq

    stats = _stats(rows, table.clustered)
    if stats is None:
        return None
    name = f"part-00000-{uuid.uuid4()}-c000.snappy.parquet"
    path = os.path.join(folder, name)
    pq.write_table(rows, path, compression="snappy")
    with open(path, "rb") as handle:
        os.fsync(handle.fileno())
    stat = os.stat(path)
    if table.tight_bounds:
        stats["tightBounds"] = True  # exact: a new file has no deletion vector
    return {"path": name, "partitionValues": partition_values, "size": stat.st_size,
            "modificationTime": stat.st_mtime_ns // 1_000_000, "dataChange": True, "stats": _stats_json(stats)}


def _stats(rows: pa.Table, complete: bool) -> dict | None:
    """numRecords; nullCount of every column but structs (Delta nests theirs); min/max of numbers, dates, strings
    (cut as the module's docstring says) and of timestamps in milliseconds as Delta writes them (the minimum rounded
    down, the maximum up: a bound never excludes a row, whether or not the reader widens it by a millisecond as
    Spark's Delta does). `complete` (a clustered table): None when a column of those types gets no bounds."""
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
        number = t.is_integer(kind) or t.is_floating(kind) or t.is_decimal(kind)
        if column.null_count == len(column) or not (number or t.is_date32(kind) or text or time_):
            continue
        try:
            bounds = pc.min_max(column).as_py()
            if t.is_floating(kind) and not all(math.isfinite(b) for b in bounds.values()) or \
                    t.is_floating(kind) and pc.any(pc.is_nan(column)).as_py():
                raise ValueError("NaN or infinite")  # Delta's JSON statistics have no spelling for them
            if time_:
                low[name], high[name] = _millis(bounds["min"], kind.tz), _millis(bounds["max"], kind.tz, up=True)
            elif text:
                low[name], high[name] = bounds["min"][:STRING_STATS], _cut_maximum(bounds["max"])
            else:
                low[name], high[name] = (str(b) if t.is_date32(kind) else b for b in (bounds["min"], bounds["max"]))
        except (ValueError, OverflowError):  # e.g. a date outside Python's years 1..9999: no bounds
            if complete:
                return None
    return {"numRecords": rows.num_rows, "minValues": low, "maxValues": high, "nullCount": nulls}


def _cut_maximum(value: str) -> str:
    """A string maximum as a statistic: itself up to STRING_STATS characters, else its prefix and STRING_MAX."""
    if len(value) <= STRING_STATS:
        return value
    if value[STRING_STATS] == STRING_MAX:
        raise ValueError("no bound of this prefix exceeds the value")
    return value[:STRING_STATS] + STRING_MAX


def _stats_json(stats: dict) -> str:
    """Statistics as Delta's JSON, written here: decimals as numbers with every digit (json.dumps has no exact spelling
    for them), everything else as json.dumps spells it."""
    if isinstance(stats, dict):
        return "{" + ",".join(f"{json.dumps(key)}:{_stats_json(value)}" for key, value in stats.items()) + "}"
    return format(stats, "f") if isinstance(stats, Decimal) else json.dumps(stats)


def _millis(value: datetime, zone: str | None, up: bool = False) -> str:
    """A timestamp statistic as Delta writes it: milliseconds, `Z` for an instant (TIMESTAMP, stored in UTC), none
    for TIMESTAMP_NTZ; rounded up to the next millisecond when `up` and it has more digits."""
    if up and value.microsecond % 1000:
        value += timedelta(microseconds=1000 - value.microsecond % 1000)
    if zone is not None:
        value = value.astimezone(UTC)
    return f"{value:%Y-%m-%dT%H:%M:%S}.{value.microsecond // 1000:03d}" + ("Z" if zone is not None else "")


def _commit(folder: str, version: int, table: _Table, count: int, data: list[dict],
            user_metadata: str | None, removed: list[dict] | None = None, merge: dict | None = None,
            txns: Mapping[str, int] | None = None) -> bool | None:
    """Put commit `version` in place: False when another writer has it, None when the filesystem cannot link.
    `removed`: the `add` actions of the files a rewrite replaces (None: a blind append); `merge`: the row counts of
    a MERGE the commit is recorded as (`replace_keys`), instead of an overwrite; `txns`: appId -> version, the `txn`
    actions of an idempotent write."""
    stamp = int(time.time() * 1000)
    if removed is None:
        operation = {"operation": "WRITE", "operationParameters": {
            "mode": "Append", "partitionBy": json.dumps(list(table.partitions))}}
    elif merge is not None:
        operation = {"operation": "MERGE", "operationParameters": {"predicate": json.dumps(["the replaced groups"])}}
    else:
        operation = {"operation": "WRITE", "operationParameters": {"mode": "Overwrite", "partitionBy": "[]"}}
    info = {"timestamp": stamp, **operation, "readVersion": table.version, "isolationLevel": "Serializable",
            "isBlindAppend": removed is None,
            "operationMetrics": {"numFiles": str(len(data)), "numOutputRows": str(count),
                                 "numOutputBytes": str(sum(add["size"] for add in data)),
                                 **({"numRemovedFiles": str(len(removed))} if removed is not None else {}),
                                 **{name: str(value) for name, value in (merge or {}).items()}},
            **({"userMetadata": user_metadata} if user_metadata is not None else {}),
            "engineInfo": ENGINE, "txnId": str(uuid.uuid4())}
    removes = [{"remove": {"path": add["path"], "deletionTimestamp": stamp, "dataChange": True,
                           "extendedFileMetadata": True, "partitionValues": add.get("partitionValues") or {},
                           "size": add.get("size", 0)}} for add in removed or ()]
    recorded = [{"txn": {"appId": app, "version": last, "lastUpdated": stamp}} for app, last in (txns or {}).items()]
    return _put(folder, version, [{"commitInfo": info}, *recorded, *removes, *({"add": add} for add in data)])


def _put(folder: str, version: int, lines: list[dict]) -> bool | None:
    """Commit file `version` made of `lines`, created only if absent: False when another writer has it, None when
    the filesystem cannot link."""
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
