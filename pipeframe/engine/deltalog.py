"""A local Delta table's log read in pure Python: its history, its latest version and its idempotent-write
versions, from the commit files of `_delta_log/` (and its checkpoints), without a Spark job.

Every answer is the one Delta itself gives for the same table, or None when this module cannot be sure of it
(no log, commit files removed by log cleanup, a file it cannot read or parse, a layout it does not know); callers
then ask Spark. What Delta does, and what is copied here:

* `DESCRIBE HISTORY` reads the first `commitInfo` action of each commit file in `[start, latest]` (start =
  latest - limit + 1, or the earliest commit file without a limit). A commit's timestamp is the file's
  modification time in milliseconds, not the `timestamp` inside commitInfo, made strictly increasing over the
  range read (a commit not newer than the one before it gets that one's time + 1 ms). Tables with in-commit
  timestamps use `inCommitTimestamp` from their enablement version on.
* pyspark turns the timestamp into a naive datetime in the Python process's local time zone
  (`datetime.fromtimestamp`); `spark.sql.session.timeZone` plays no part in that conversion.
* operationParameters are read back as strings: a JSON string stays as it is, true/false/numbers become their
  JSON text, null stays None.
* Delta writes a commit file on a local filesystem to a hidden temporary file (`.000…012.json.<uuid>.tmp`) and
  renames it into place, so a listed commit file is complete; a file that still does not parse is not trusted.
"""

from __future__ import annotations

import functools
import json
import os
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from pipeframe.engine.commits import Commit
from pipeframe.plan import records

LOG = "_delta_log"
_COMMIT_FILE = re.compile(r"(\d{20})\.json")
# classic single-file and multi-part checkpoints, and V2 (UUID-named, JSON or parquet) checkpoints
_CHECKPOINT_FILE = re.compile(r"(\d{20})\.checkpoint(?:\.(\d{10})\.(\d{10}))?\.parquet")
_V2_CHECKPOINT_FILE = re.compile(r"(\d{20})\.checkpoint\.[0-9a-fA-F-]{36}\.(?:json|parquet)")
ICT_ENABLED = "delta.enableInCommitTimestamps"
ICT_VERSION = "delta.inCommitTimestampEnablementVersion"
ICT_TIMESTAMP = "delta.inCommitTimestampEnablementTimestamp"
TXN_RETENTION = "delta.setTransactionRetentionDuration"


class Unanswerable(Exception):
    """The log cannot give an exact answer (the caller asks Spark instead)."""


@dataclass
class Listing:
    """The files of one `_delta_log/` folder, read once."""

    commits: set[int] = field(default_factory=set)
    checkpoints: dict[int, list[str]] = field(default_factory=dict)  # version → the files of one complete one

    @functools.cached_property
    def latest(self) -> int:  # read once the listing is made (a listing is not changed after)
        return max(max(self.commits, default=-1), max(self.checkpoints, default=-1))


# A folder's listing, kept between calls: a table's log only grows between two log cleanups, so the commits after the
# newest one known are found by looking for each next file, not by listing the folder again (an hour of group commits
# is thousands of files: a listing took ~4 ms, read on every commit). The whole folder is listed again every
# `RELIST_EVERY` calls, and whenever the newest commit known is no longer the file it was (the table was made again).
RELIST_EVERY = 100
_LISTINGS: dict[str, tuple[tuple[int, int], Listing, int]] = {}  # folder → (newest commit's identity, listing, uses)


def list_log(folder: str) -> Listing | None:
    """The commit and checkpoint files of a table's log; None when the folder has no `_delta_log`. Other OS
    errors are raised. The listing may be shared with other callers: it is never changed once made. Commit files
    removed by a log cleanup since the last full listing may still be in it (a reader of one finds it missing, and
    says it cannot answer)."""
    known = _LISTINGS.get(folder)
    if known is not None and known[2] < RELIST_EVERY:
        found = _listed_since(folder, known[0], known[1])
        if found is known[1]:  # nothing new: the same newest commit, already looked at
            _LISTINGS[folder] = (known[0], found, known[2] + 1)
            return found
        if found is not None:
            _remember(folder, found, known[2] + 1)
            return found
    listing = _list_folder(folder)
    if listing is not None and listing.commits:
        _remember(folder, listing, 0)
    return listing


def _remember(folder: str, listing: Listing, uses: int) -> None:
    try:
        identity = _identity(folder, listing.latest)
    except OSError:
        _LISTINGS.pop(folder, None)
        return
    if len(_LISTINGS) > 1024:
        _LISTINGS.clear()
    _LISTINGS[folder] = (identity, listing, uses)


def _listed_since(folder: str, identity: tuple[int, int], known: Listing) -> Listing | None:
    """`known` with the commits written after its newest and the checkpoint `_last_checkpoint` names; None when
    the newest commit it knew is not the same file any more."""
    latest = known.latest
    try:
        if _identity(folder, latest) != identity:
            return None
    except OSError:
        return None
    written = []
    while os.path.exists(_commit_path(folder, latest + 1)):
        latest += 1
        written.append(latest)
    newest = _last_checkpoint(folder)
    if not written and (newest is None or newest[0] in known.checkpoints):
        return known
    checkpoints = known.checkpoints if newest is None else {**known.checkpoints, newest[0]: newest[1]}
    return Listing(known.commits | set(written), checkpoints)


def _last_checkpoint(folder: str) -> tuple[int, list[str]] | None:
    """The classic checkpoint `_delta_log/_last_checkpoint` names, when its files are all there; None otherwise (a
    V2 checkpoint is found by the next full listing)."""
    try:
        with open(os.path.join(folder, LOG, "_last_checkpoint"), "rb") as file:
            told = json.loads(file.read())
        version, parts = int(told["version"]), told.get("parts")
    except (OSError, ValueError, KeyError, TypeError):
        return None
    names = ([f"{version:020d}.checkpoint.parquet"] if not parts else
             [f"{version:020d}.checkpoint.{p:010d}.{int(parts):010d}.parquet" for p in range(1, int(parts) + 1)])
    return (version, names) if all(os.path.exists(os.path.join(folder, LOG, n)) for n in names) else None


def _list_folder(folder: str) -> Listing | None:
    try:
        names = os.listdir(os.path.join(folder, LOG))
    except (FileNotFoundError, NotADirectoryError):
        return None
    listing = Listing()
    parts: dict[tuple[int, int], set[int]] = {}
    for name in names:
        if match := _COMMIT_FILE.fullmatch(name):
            listing.commits.add(int(match[1]))
        elif match := _CHECKPOINT_FILE.fullmatch(name):
            version = int(match[1])
            if match[2] is None:
                listing.checkpoints[version] = [name]
            else:
                parts.setdefault((version, int(match[3])), set()).add(int(match[2]))
        elif match := _V2_CHECKPOINT_FILE.fullmatch(name):
            listing.checkpoints.setdefault(int(match[1]), [name])
    for (version, count), seen in parts.items():
        if seen == set(range(1, count + 1)) and version not in listing.checkpoints:
            listing.checkpoints[version] = [f"{version:020d}.checkpoint.{p:010d}.{count:010d}.parquet"
                                            for p in range(1, count + 1)]
    return listing


def latest_version(folder: str) -> int | None:
    """The latest version of the Delta table in a local folder, from the names of its log files: -1 while it has
    no commit (no `_delta_log` yet, or an empty one), None when the log cannot be listed."""
    try:
        listing = list_log(folder)
    except OSError:
        return None
    return -1 if listing is None else listing.latest


def history(folder: str, limit: int | None = None) -> list[Commit] | None:
    """The newest `limit` commits of the table in a local folder, newest first, exactly as `DESCRIBE HISTORY`
    gives them (see the module's docstring); None when the log cannot say exactly."""
    try:
        listing = list_log(folder)
        if listing is None or not listing.commits:
            return None
        latest = listing.latest
        start = max(latest - int(limit) + 1, 0) if limit else min(listing.commits)
        versions = range(start, latest + 1)
        if any(v not in listing.commits for v in versions):
            return None  # removed by log cleanup (or never there): Spark knows what to make of that
        infos = [_commit_info(_commit_path(folder, v)) for v in versions]
        stamps = _timestamps(folder, listing, start, infos)
        commits = []
        for version, (_, info), ms in zip(versions, infos, stamps, strict=True):
            commits.append(Commit(version, _local_datetime(ms), ms * 1000 / 1e6, info.get("operation") or "",
                                  _string_map(info.get("operationParameters")),
                                  _string_map(info.get("operationMetrics")),
                                  records.decode(_text(info.get("userMetadata")),
                                                 f"Commit {version} of the table at {folder}"),
                                  _text(info.get("engineInfo")) or ""))
    except (OSError, Unanswerable):
        return None
    commits.reverse()
    return commits


def transaction_version(folder: str, app_id: str) -> int | None:
    """The version of the newest idempotent write (`txnAppId`/`txnVersion`) recorded for `app_id` in the table's
    current snapshot; None when it has none, or when the log cannot say (no log, a gap in it, a transaction
    retention the snapshot would apply)."""
    found = transaction_versions(folder, frozenset({app_id}))
    return None if found is None else found.get(app_id)


def transaction_versions(folder: str, app_ids: frozenset[str]) -> dict[str, int] | None:
    """`transaction_version` of each of `app_ids` that has one (one replay of the log for all of them); None when
    the log cannot say."""
    try:
        listing = list_log(folder)
        if listing is None or listing.latest < 0:
            return None
        found = _snapshot_actions(folder, listing, want_txns=app_ids)
    except (OSError, Unanswerable):
        return None
    if TXN_RETENTION in found.configuration():
        return None  # expired transactions leave the snapshot: let Delta judge
    return found.txns


def txn_of(action: dict) -> tuple[str, int] | None:
    """(appId, version) of a `txn` action; None for any other action. Unanswerable for a txn without a version."""
    entry = action.get("txn")
    if not isinstance(entry, dict):
        return None
    version = entry.get("version")
    if not isinstance(version, int) or isinstance(version, bool):
        raise Unanswerable("a txn action without a version")
    return str(entry.get("appId")), version


@dataclass(frozen=True)
class TableState:
    """The latest version of a table, and its current metaData and protocol actions (as Delta wrote them)."""

    version: int
    metadata: dict
    protocol: dict

    def configuration(self) -> dict:
        return _Found(metadata=self.metadata).configuration()


# Per folder, the state at the newest version read, with that commit file's identity (inode, mtime): a commit file
# never changes, and its identity guards a table made again in the same folder. A writer asks before each append, so
# the next ask replays only the commits made since (each just its metaData and protocol, if any) instead of the
# newest checkpoint and every commit after it.
_STATES: dict[str, tuple[tuple[int, int], TableState]] = {}


def table_state(folder: str) -> TableState | None:
    """The latest version, metaData and protocol of the table in a local folder; None when the log cannot say
    exactly (or there is no table)."""
    try:
        listing = list_log(folder)
        if listing is None or listing.latest < 0:
            return None
        state = _state_since(folder, listing, _STATES.get(folder))
        if state is None:
            found = _snapshot_actions(folder, listing, want_protocol=True)
            state = TableState(listing.latest, found.metadata or {}, found.protocol or {})
        if len(_STATES) > 1024:
            _STATES.clear()
        _STATES[folder] = (_identity(folder, state.version), state)
        return state
    except (OSError, Unanswerable):
        return None


def _identity(folder: str, version: int) -> tuple[int, int]:
    stat = os.stat(_commit_path(folder, version))
    return stat.st_ino, stat.st_mtime_ns


def _state_since(folder: str, listing: Listing, known: tuple[tuple[int, int], TableState] | None) -> TableState | None:
    """The state at `listing.latest` from a state known at an earlier version, by the commits after it; None when
    it cannot be (nothing known, the known commit file is not the one read then, or a commit file is missing)."""
    if known is None:
        return None
    identity, state = known
    if state.version > listing.latest or any(v not in listing.commits for v in range(state.version + 1,
                                                                                      listing.latest + 1)):
        return None
    try:
        if _identity(folder, state.version) != identity:
            return None
    except OSError:
        return None
    metadata, protocol = state.metadata, state.protocol
    for version in range(state.version + 1, listing.latest + 1):
        for action in _actions(_commit_path(folder, version)):
            if isinstance(action.get("metaData"), dict):
                metadata = action["metaData"]
            if isinstance(action.get("protocol"), dict):
                protocol = action["protocol"]
    return TableState(listing.latest, metadata, protocol)


def commit_actions(folder: str, version: int) -> list[dict] | None:
    """The actions of one commit file; None when it cannot be read."""
    try:
        return list(_actions(_commit_path(folder, version)))
    except (OSError, Unanswerable):
        return None


def data_files(folder: str) -> tuple[int, list[str]] | None:
    """(version, the data files) of the latest snapshot of a small, plain table in a local folder: the `add`
    actions of its newest checkpoint and of the commit files after it, less their `remove`s. None when the log
    cannot say it exactly, or when reading the files alone would not give the table's rows (deletion vectors,
    partition columns, column mapping, a checkpoint with sidecar files)."""
    found = live_files(folder)
    return None if found is None else (found[0], list(found[1]))


def live_files(folder: str) -> tuple[int, dict[str, dict]] | None:
    """`data_files`, each local file with its `add` action (as the log holds it: what a `remove` of it repeats)."""
    found = _snapshot_files(folder)
    if found is None:
        return None
    latest, live, metadata = found
    if metadata is None or metadata.get("partitionColumns") or \
            _Found(metadata=metadata).configuration().get("delta.columnMapping.mode", "none") != "none":
        return None
    return latest, live


def file_count(folder: str) -> tuple[int, int] | None:
    """(the latest version, how many data files its snapshot holds) of the table in a local folder, of any layout;
    None when the log cannot say exactly."""
    found = _snapshot_files(folder)
    return None if found is None else (found[0], len(found[1]))


def added_since_optimize(folder: str, within: int = 256) -> bool | None:
    """Whether a commit the table's newest OPTIMIZE did not compact (one after it, or one it did not read: its
    commitInfo's `readVersion`) added a data file; with no OPTIMIZE, whether any commit did. False means an OPTIMIZE
    now would find only files an OPTIMIZE already wrote. None when the log cannot say from its newest `within`
    commit files (a gap, an unreadable file, no OPTIMIZE among them)."""
    try:
        listing = list_log(folder)
        if listing is None or listing.latest < 0:
            return None
        version, floor = listing.latest, 0
        while version >= max(floor, listing.latest - within + 1):
            if version not in listing.commits:
                return None
            actions = list(_actions(_commit_path(folder, version)))
            info = next((a["commitInfo"] for a in actions if isinstance(a.get("commitInfo"), dict)), {})
            read = info.get("readVersion")
            if info.get("operation") == "OPTIMIZE" and floor == 0 and isinstance(read, int):
                floor = read + 1  # the commits it read are compacted; those between it and them are not
            elif any("add" in action for action in actions):
                return True
            version -= 1
        return False if version < floor else None  # walked down to the floor: every commit looked at
    except (OSError, Unanswerable):
        return None


def oldest_commit_ms(folder: str) -> int | None:
    """A time (ms since 1970) no retained commit of the table is older than: the smallest of the earliest commit
    file's modification time, its in-commit timestamp and its commitInfo's own clock. None when the log cannot say.
    Delta's `VACUUM ... LITE` deletes nothing while this is newer than its retention horizon (no commit lies
    outside the retention window)."""
    try:
        listing = list_log(folder)
        if listing is None or not listing.commits:
            return None
        mtime, info = _commit_info(_commit_path(folder, min(listing.commits)))
    except (OSError, Unanswerable):
        return None
    clocks = [info.get("inCommitTimestamp"), info.get("timestamp")]
    return min([mtime, *(c for c in clocks if isinstance(c, int) and not isinstance(c, bool))])


def _snapshot_files(folder: str) -> tuple[int, dict[str, dict], dict | None] | None:
    """(latest version, each live file with its `add` action, the metaData) from the newest checkpoint and the
    commits after it; None when the log cannot say (deletion vectors, sidecar files, an unreadable file)."""
    try:
        listing = list_log(folder)
        if listing is None or listing.latest < 0:
            return None
        latest = listing.latest
        base, first = _replay_start(listing)
        live: dict[str, dict] = {}
        metadata: dict | None = None

        def apply(actions: Iterator[dict]) -> None:
            nonlocal metadata
            for action in actions:
                if isinstance(action.get("metaData"), dict):
                    metadata = action["metaData"]
                if "sidecar" in action:
                    raise Unanswerable("a checkpoint with sidecar files")
                if isinstance(add := action.get("add"), dict):
                    if add.get("deletionVector"):
                        raise Unanswerable("a deletion vector")
                    live[_file_path(folder, add.get("path"))] = add
                elif isinstance(remove := action.get("remove"), dict):
                    live.pop(_file_path(folder, remove.get("path")), None)

        if base is not None:  # a checkpoint's adds are the live files; its removes are tombstones, not read
            for name in listing.checkpoints[base]:
                path = os.path.join(folder, LOG, name)
                apply(_actions(path) if name.endswith(".json") else
                      _parquet_actions(path, ("add", "metaData", "sidecar")))
        for version in range(first, latest + 1):
            apply(_actions(_commit_path(folder, version)))
    except (OSError, Unanswerable):
        return None
    return latest, live, metadata


@dataclass(frozen=True)
class AppendedFile:
    """A data file a commit added, with its partition values as the log serializes them (column -> string or None;
    empty for an unpartitioned table): Delta keeps a partition column's value out of the file."""

    path: str
    partition_values: dict[str, str | None] = field(default_factory=dict)


def appended_files(folder: str, versions: list[int]) -> list[AppendedFile] | None:
    """The data files the commits `versions` of a local table added, when those commits only appended rows: what its
    change data feed would read as their inserts, without Spark planning the feed (which replays the log again
    after every commit another writer made). None when the files alone would not be the rows the commits changed: a
    commit that removed rows or wrote change data, changed the schema or protocol, an `add` with a deletion vector,
    column mapping, a file no longer on disk. Files added without a data change (compaction) are not rows the
    commits changed."""
    try:
        state = table_state(folder)
        if state is None or state.configuration().get("delta.columnMapping.mode", "none") != "none":
            return None
        files = []
        for version in versions:
            for action in _actions(_commit_path(folder, version)):
                if any(kind in action for kind in ("cdc", "metaData", "protocol")):
                    return None
                if isinstance(add := action.get("add"), dict):
                    if add.get("deletionVector") or not os.path.exists(path := _file_path(folder, add.get("path"))):
                        return None
                    if add.get("dataChange", True):
                        files.append(AppendedFile(path, dict(add.get("partitionValues") or {})))
                elif isinstance(remove := action.get("remove"), dict) and remove.get("dataChange", True):
                    return None
        return files
    except (OSError, Unanswerable):
        return None


def read_rows(folder: str, columns: list[str]) -> tuple[int, list[dict]] | None:
    """(version, every row as {column: value}) of a small, plain table in a local folder, read with pyarrow
    without a Spark job; a column its files lack reads as None. None when `data_files` cannot say, or a file
    cannot be read: the caller asks Spark."""
    found = data_files(folder)
    if found is None:
        return None
    rows = file_rows(found[1], columns)
    return None if rows is None else (found[0], rows)


def file_rows(paths: Iterable[str], columns: list[str]) -> list[dict] | None:
    """The rows of parquet files as {column: value} (a column a file lacks reads as None; a timestamp as a naive
    datetime in UTC, as pipeframe's clock and Spark's session zone have them); None when one cannot be read."""
    import pyarrow.parquet as pq

    rows = []
    try:
        for path in paths:
            table = pq.read_table(path)
            rows += [{c: _utc(row.get(c)) for c in columns}
                     for row in table.select([c for c in columns if c in table.column_names]).to_pylist()]
    except (OSError, ValueError):  # pyarrow's errors are both (ArrowInvalid is a ValueError)
        return None
    return rows


def _utc(value: Any) -> Any:
    if not isinstance(value, datetime):
        return value
    if hasattr(value, "to_pydatetime"):  # pandas' Timestamp: what pyarrow gives for Spark's INT96 timestamps
        value = value.to_pydatetime()
    return value.astimezone(UTC).replace(tzinfo=None) if value.tzinfo else value


def _file_path(folder: str, path: object) -> str:
    """The local file an `add`/`remove` path names (relative to the table, URL-encoded, or a file: URI)."""
    from urllib.parse import unquote, urlparse

    if not isinstance(path, str) or not path:
        raise Unanswerable(f"a file action without a path: {path!r}")
    parsed = urlparse(path)
    if parsed.scheme not in ("", "file"):
        raise Unanswerable(f"a file outside the local folder: {path}")
    local = unquote(parsed.path)
    return os.path.normpath(local if os.path.isabs(local) else os.path.join(folder, local))


# ----------------------------------------------------------------------------------------------- internals
def _commit_path(folder: str, version: int) -> str:
    return os.path.join(folder, LOG, f"{version:020d}.json")


def _commit_info(path: str) -> tuple[int, dict]:
    """(modification time in ms, the file's first commitInfo action or {}) of one commit file."""
    stat = os.stat(path)
    # Java (and so Hadoop's local FileStatus) truncates the modification time to whole milliseconds
    return stat.st_mtime_ns // 1_000_000, _parse_commit_info(path, stat.st_mtime_ns, stat.st_size, stat.st_ino)


@functools.lru_cache(maxsize=8192)
def _parse_commit_info(path: str, mtime_ns: int, size: int, inode: int) -> dict:
    """A commit file's first commitInfo (commit files never change: the stat in the key guards a replaced one)."""
    if size == 0:
        raise Unanswerable(path)
    for action in _actions(path):
        if "commitInfo" in action:
            info = action["commitInfo"]
            if not isinstance(info, dict):
                raise Unanswerable(path)
            return info
    return {}  # no commitInfo: Delta shows an empty entry


def _actions(path: str) -> Iterator[dict]:
    """The actions of a commit (or V2 JSON checkpoint) file, one JSON object a line."""
    with open(path, encoding="utf-8") as handle:
        for line in handle:
            if not line.strip():
                continue
            try:
                action = json.loads(line)
            except ValueError:
                raise Unanswerable(path) from None
            if not isinstance(action, dict):
                raise Unanswerable(path)
            yield action


def _timestamps(folder: str, listing: Listing, start: int, infos: list[tuple[int, dict]]) -> list[int]:
    """The commit times (ms) `DESCRIBE HISTORY` shows for the commits start, start + 1, ...: file times made
    strictly increasing, or in-commit timestamps from their enablement on."""
    ict_from: int | None = None  # the first version whose time is its in-commit timestamp
    if "inCommitTimestamp" in infos[-1][1]:  # only tables with in-commit timestamps enabled write them
        config = _snapshot_actions(folder, listing).configuration()
        if config.get(ICT_ENABLED, "").lower() == "true":
            enabled_at, enabled_ts = config.get(ICT_VERSION), config.get(ICT_TIMESTAMP)
            if (enabled_at is None) != (enabled_ts is None):
                raise Unanswerable("half an in-commit timestamp enablement")  # Delta fails on it too
            ict_from = int(enabled_at) if enabled_at is not None else start
    stamps = []
    for offset, (mtime, info) in enumerate(infos):
        if ict_from is not None and start + offset >= ict_from:
            value = info.get("inCommitTimestamp")
            if not isinstance(value, int) or isinstance(value, bool):
                raise Unanswerable("a commit without its in-commit timestamp")
            stamps.append(value)
        elif stamps and stamps[-1] >= mtime:
            stamps.append(stamps[-1] + 1)
        else:
            stamps.append(mtime)
    return stamps


def _local_datetime(ms: int) -> datetime:
    """What pyspark's `collect()` makes of a TIMESTAMP: a naive datetime in the process's local time zone."""
    micros = ms * 1000
    return datetime.fromtimestamp(micros // 1_000_000).replace(microsecond=micros % 1_000_000)


def _text(value: Any) -> str | None:
    if value is not None and not isinstance(value, str):
        raise Unanswerable(f"not a string: {value!r}")
    return value


def _string_map(value: Any) -> dict:
    """A commitInfo map as Delta reads it back: str → str (or None)."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise Unanswerable("not a map")
    out: dict = {}
    for key, item in value.items():
        if item is None or isinstance(item, str):
            out[key] = item
        elif isinstance(item, bool):
            out[key] = "true" if item else "false"
        elif isinstance(item, int):
            out[key] = str(item)
        else:  # floats, lists, objects: Jackson's text for them is not worth guessing
            raise Unanswerable(f"{key}: {item!r}")
    return out


@dataclass
class _Found:
    txns: dict[str, int] = field(default_factory=dict)  # appId -> version, of the app ids asked for
    metadata: dict | None = None
    protocol: dict | None = None

    def configuration(self) -> dict:
        config = (self.metadata or {}).get("configuration") or {}
        if isinstance(config, list):  # a parquet map read by pyarrow: (key, value) pairs
            config = dict(config)
        return config if isinstance(config, dict) else {}


def _replay_start(listing: Listing) -> tuple[int | None, int]:
    """Where the latest snapshot is read from: (the newest checkpoint that every later commit file follows, or None;
    the first commit file to read after it). Unanswerable when commit files are missing in between."""
    latest = listing.latest
    base = next((v for v in sorted(listing.checkpoints, reverse=True) if v <= latest and all(
        c in listing.commits for c in range(v + 1, latest + 1))), None)
    first = 0 if base is None else base + 1
    if any(v not in listing.commits for v in range(first, latest + 1)):
        raise Unanswerable("commit files missing and no checkpoint before them")
    return base, first


def _snapshot_actions(folder: str, listing: Listing, want_txns: frozenset[str] = frozenset(),
                      want_protocol: bool = False) -> _Found:
    """The current metaData action (and the newest txn of each of `want_txns`, the protocol if `want_protocol`) of a
    table: commit files newest first, then the newest checkpoint they reach back to."""
    found = _Found()
    latest = listing.latest
    base, first = _replay_start(listing)

    def take(actions: Iterator[dict]) -> None:
        """One file's metaData and txns of `want_txns`: the last of each in it (Delta applies them in order);
        a newer file's win over an older one's."""
        meta = protocol = None
        txns: dict[str, int] = {}
        for action in actions:
            if isinstance(action.get("metaData"), dict):
                meta = action["metaData"]
            if isinstance(action.get("protocol"), dict):
                protocol = action["protocol"]
            if want_txns and (txn := txn_of(action)) is not None and txn[0] in want_txns:
                txns[txn[0]] = txn[1]
        if found.metadata is None and meta is not None:
            found.metadata = meta
        if found.protocol is None and protocol is not None:
            found.protocol = protocol
        for app_id, version in txns.items():
            found.txns.setdefault(app_id, version)

    for version in range(latest, first - 1, -1):
        take(_actions(_commit_path(folder, version)))
        if found.metadata is not None and len(found.txns) == len(want_txns) and \
                (not want_protocol or found.protocol is not None):
            return found
    if base is not None:
        for name in listing.checkpoints[base]:  # a checkpoint holds each appId once, one metaData, one protocol
            path = os.path.join(folder, LOG, name)
            take(_actions(path) if name.endswith(".json") else
                 _parquet_actions(path, ("txn", "metaData", "protocol")))
    if found.metadata is None or (want_protocol and found.protocol is None):
        raise Unanswerable("no metaData (or protocol) action in the log")
    return found


def _parquet_actions(path: str, kinds: tuple[str, ...] = ("txn", "metaData")) -> Iterator[dict]:
    """The actions of `kinds` (by default txn and metaData) of a parquet checkpoint (part)."""
    import pyarrow.parquet as pq

    try:
        schema = pq.read_schema(path)
        columns = [c for c in kinds if c in schema.names]
        table = pq.read_table(path, columns=columns)
    except Exception as exc:  # noqa: BLE001 — an unreadable checkpoint: let Spark read it
        raise Unanswerable(f"{path}: {exc}") from None
    for column in columns:
        for value in table.column(column).to_pylist():
            if value is not None:
                yield {column: value}
