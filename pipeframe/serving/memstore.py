"""An in-memory `TableStore` (engine/store.py): view maintenance without a JVM, for the strategies' unit tests.

Each table is a list of versions held in one DuckDB database: per version its `Commit` (operation, metrics and the
pipeframe record, as Delta's history gives them) and the rows the commit added and removed (its change feed), and
the table's rows as of it. Queries are the view plan's Spark SQL translated to DuckDB as the read path translates
an endpoint's (`serving/translate.py`, with the state queries' sketch aggregates and structs), the sketches built and
merged by `datasketches` (`serving/sketches.py`). A frame is the name of a DuckDB table holding its rows.

Writes to sources (`insert`, `delete`, `update`) record the commits Delta would record for them; view commits
(`append`, `replace_groups`) record their watermark and are skipped as replays the way Delta's idempotent writes
are (a commit from a watermark the view has moved past)."""

from __future__ import annotations

import itertools
import threading
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import duckdb

from pipeframe.compiler.maintenance import SIGN, fill
from pipeframe.engine.commits import Commit, Watermark, watermark_of
from pipeframe.engine.store import RECENT_COMMITS
from pipeframe.plan import records
from pipeframe.serving import sketches, translate
from pipeframe.serving.types import duckdb_type, spark_type

if TYPE_CHECKING:
    from pipeframe.engine.changes import Change, JoinChange
    from pipeframe.plan.snapshot import DeployedResource
    from pipeframe.plan.state import ResourceState


@dataclass(frozen=True)
class Frame:
    """Rows held by the store: a DuckDB table, and its columns' Spark types in order."""

    name: str
    columns: tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class _Version:
    commit: Commit
    rows: Frame  # the table's rows as of this version
    added: Frame | None = None  # what the commit inserted (and the new images of updated rows)
    removed: Frame | None = None  # what it deleted (and the old images of updated rows)


class MemoryStore:
    """Tables in memory, queried by DuckDB. Not thread-safe beyond one lock around every statement."""

    def __init__(self) -> None:
        self._db = duckdb.connect()
        self._db.execute("SET TimeZone = 'UTC'")
        sketches.register(self._db)
        self._lock = threading.RLock()
        self._tables: dict[str, list[_Version]] = {}
        self._txns: dict[str, dict[str, int]] = {}  # per table: each idempotent writer's last transaction version
        self._names = itertools.count()

    # ------------------------------------------------------------------ tables (the tests' writers)
    def create(self, resource: DeployedResource) -> None:
        """An empty table for `resource` at its path (version 0: CREATE TABLE)."""
        rows = self._frame(resource.state.columns, [])
        self._tables[resource.path or ""] = [_Version(self._commit(0, "CREATE TABLE"), rows)]

    def insert(self, path: str, rows: Sequence[Mapping[str, Any]]) -> int:
        """Append `rows` (dicts by column) in one commit (a WRITE in Append mode); its version."""
        latest = self._latest(path)
        added = self._frame(latest.rows.columns, rows)
        now = self._query(f"SELECT * FROM {latest.rows.name} UNION ALL SELECT * FROM {added.name}",
                          latest.rows.columns)
        return self._add(path, "WRITE", now, added, None, {"mode": "Append"}, {"numOutputRows": str(len(rows))})

    def delete(self, path: str, where: Callable[[dict], bool]) -> int:
        """Delete the rows `where` is true of in one commit (a DELETE); its version."""
        return self._rewrite(path, "DELETE", lambda row: None if where(row) else row)

    def update(self, path: str, change: Callable[[dict], dict | None]) -> int:
        """Replace each row `change` gives a new image of (None: left as it is) in one commit (an UPDATE)."""
        return self._rewrite(path, "UPDATE", lambda row: row if (new := change(row)) is None else new)

    def rows(self, path: str, version: int | None = None) -> list[dict]:
        """The table's rows (as of `version`; None: the latest) as dicts."""
        return self.fetch(self._tables[path][-1 if version is None else version].rows)

    def fetch(self, frame: Frame) -> list[dict]:
        """A frame's rows as dicts."""
        with self._lock:
            cursor = self._db.execute(f"SELECT * FROM {frame.name}")
            names = [d[0] for d in cursor.description]
            return [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]

    # ------------------------------------------------------------------ TableStore: history
    def history(self, path: str, limit: int | None = RECENT_COMMITS) -> list[Commit]:
        commits = [v.commit for v in reversed(self._tables[path])]
        return commits[:limit] if limit else commits

    def commits_between(self, path: str, after: int, upto: int) -> list[Commit]:
        return [v.commit for v in self._tables[path] if after < v.commit.version <= upto]

    def watermark(self, path: str) -> Watermark:
        return next((w for c in self.history(path, None) if (w := watermark_of(c)) is not None), Watermark(None))

    def forget(self, path: str) -> None:
        return None  # nothing remembered: every read is of the tables themselves

    # ------------------------------------------------------------------ TableStore: reads
    def appended(self, source: DeployedResource, commits: Sequence[Commit]) -> Frame:
        return self.change_rows(source, commits)[0]

    def change_rows(self, source: DeployedResource, commits: Sequence[Commit]) -> tuple[Frame, Frame]:
        versions = self._tables[source.path or ""]
        wanted = [versions[c.version] for c in commits if not c.neutral]
        columns = source.state.columns
        return (self._concat([v.added for v in wanted if v.added is not None], columns),
                self._concat([v.removed for v in wanted if v.removed is not None], columns))

    def snapshot(self, table: DeployedResource, version: int) -> Frame:
        return self._tables[table.path or ""][version].rows

    def current(self, view: DeployedResource) -> Frame:
        return self._latest(view.path or "").rows

    def none(self, table: DeployedResource) -> Frame:
        return self._frame(table.state.columns, [])

    # ------------------------------------------------------------------ TableStore: queries
    def run(self, view: DeployedResource, sql: str, rows: Frame, pins: Mapping[str, Frame] | None = None) -> Frame:
        pins = pins or {}
        return self._run(fill(sql, rows.name, {n: f.name for n, f in pins.items()}),
                         {f.name: dict(f.columns) for f in (rows, *pins.values())})

    def select(self, frame: Frame, expressions: Sequence[str]) -> Frame:
        return self._run(f"SELECT {', '.join(expressions)} FROM {frame.name}", {frame.name: dict(frame.columns)})

    def union(self, first: Frame, second: Frame) -> Frame:
        names = ", ".join(f'"{n}"' for n, _ in first.columns)
        return self._query(f"SELECT * FROM {first.name} UNION ALL SELECT {names} FROM {second.name}", first.columns)

    def except_all(self, rows: Frame, gone: Frame) -> Frame:
        names = ", ".join(f'"{n}"' for n, _ in rows.columns)
        return self._query(f"SELECT * FROM {rows.name} EXCEPT ALL SELECT {names} FROM {gone.name}", rows.columns)

    def semi(self, rows: Frame, keys: Sequence[str], wanted: Frame) -> Frame:
        if not keys:
            return rows
        match = " AND ".join(f'r."{k}" IS NOT DISTINCT FROM w."{k}"' for k in keys)
        return self._query(f"SELECT * FROM {rows.name} AS r WHERE EXISTS (SELECT 1 FROM {wanted.name} AS w "
                           f"WHERE {match})", rows.columns)

    def witnesses(self, change: Change, limit: int) -> list[dict]:
        absorb = change.plan.absorb
        assert absorb is not None
        added, removed = self.change_rows(change.source, change.commits)
        if not change.settled:
            added, removed = self.except_all(added, removed), self.except_all(removed, added)
        return [{**row, SIGN: sign} for sign, rows in ((-1, removed), (1, added))
                for row in self.fetch(self.run(change.view, absorb.sql, rows, change.pins))]

    def extremes(self, view: DeployedResource, groups: Sequence[Mapping[str, Any]],
                 rules: Sequence[tuple[str, str]]) -> list[dict]:
        keys, types = view.state.keys, dict(view.state.columns)
        rows = self.semi(self.current(view), keys, self._frame([(k, types[k]) for k in keys], groups))
        names = [f'"{k}"' for k in keys]
        merged = [f'{rule}("{column}") AS "{column}"' for column, rule in rules]
        grouped = f" GROUP BY {', '.join(names)}" if keys else ""
        return self.fetch(self._query(f"SELECT {', '.join([*names, *merged])} FROM {rows.name}{grouped}"))

    def narrowed(self, change: Change, version: int, groups: Sequence[Mapping[str, Any]] | None = None,
                 ) -> tuple[Frame, Frame | None] | None:
        """`groups`' source rows (each row's group computed by the plan's `group_keys`); without `groups`, None: the
        whole source is small, aggregated, and the touched groups kept."""
        group_keys = change.plan.group_keys
        if groups is None or not group_keys:
            return None
        types = dict(change.view.state.columns)
        wanted = self._frame([(k.name, types[k.name]) for k in group_keys], groups)
        probe = self.select(self.snapshot(change.source, version),
                            ["*", *(f"{k.sql} AS `__pf_key{i}`" for i, k in enumerate(group_keys))])
        kept = self.semi(probe, [f"__pf_key{i}" for i in range(len(group_keys))],
                         self.select(wanted, [f"`{k.name}` AS `__pf_key{i}`" for i, k in enumerate(group_keys)]))
        return wanted, self.select(kept, [f"`{name}`" for name, _ in change.source.state.columns])

    def partial_states(self, change: JoinChange) -> Frame | None:
        return None  # none kept: the view joins its source's rows

    # ------------------------------------------------------------------ TableStore: commits
    def append(self, view: DeployedResource, rows: Frame, *, metadata: records.ViewCommit | records.PopulateChunk,
               watermark: Mapping[str, object], few: bool = True) -> bool:
        path = view.path or ""
        info = self._record(view.state, path, metadata, watermark)
        if info is None:
            return False
        latest = self._latest(path)
        added = self._typed(rows, view.state)
        now = self._query(f"SELECT * FROM {latest.rows.name} UNION ALL SELECT * FROM {added.name}",
                          latest.rows.columns)
        self._add(path, "WRITE", now, added, None, {"mode": "Append"}, {"numOutputRows": str(self._count(added))},
                  info)
        return True

    def replace_groups(self, view: DeployedResource, keys: Sequence[str], touched: Frame, rows: Frame, *,
                       metadata: records.ViewCommit, watermark: Mapping[str, object], few: bool = False) -> bool:
        path = view.path or ""
        info = self._record(view.state, path, metadata, watermark)
        if info is None:
            return False
        latest = self._latest(path)
        removed = self.semi(latest.rows, keys, touched) if keys else latest.rows
        kept = self._query(f"SELECT * FROM {latest.rows.name} EXCEPT ALL SELECT * FROM {removed.name}",
                           latest.rows.columns) if keys else self._frame(latest.rows.columns, [])
        added = self._typed(rows, view.state)
        now = self._query(f"SELECT * FROM {kept.name} UNION ALL SELECT * FROM {added.name}", latest.rows.columns)
        self._add(path, "MERGE", now, added, removed, {}, {
            "numTargetRowsInserted": str(self._count(added)), "numTargetRowsDeleted": str(self._count(removed)),
            "numTargetRowsUpdated": "0"}, info)
        return True

    # ------------------------------------------------------------------ inside
    def _record(self, state: ResourceState, path: str, metadata: records.ViewCommit | records.PopulateChunk,
                watermark: Mapping[str, object]) -> records.ViewCommit | records.PopulateChunk | None:
        """The commit's record with its watermark; None when Delta's idempotent write would skip it: the view has
        recorded a watermark past the one the commit started from (`after`), or its transaction (`app_id`) has a
        version at least `txn_version`."""
        info = replace(metadata, commit=uuid.uuid4().hex)
        app_id, version = watermark.get("app_id"), watermark.get("txn_version")
        if app_id is not None:
            done = self._txns.setdefault(path, {})
            if done.get(str(app_id), -1) >= int(version):  # type: ignore[call-overload]
                return None
            done[str(app_id)] = int(version)  # type: ignore[call-overload]
        if watermark.get("source_version") is None:
            return info
        after = watermark.get("after")
        recorded = self.watermark(path).source_version
        if after is not None and recorded is not None and recorded > int(after):  # type: ignore[call-overload]
            return None
        return replace(info, source=state.source, source_version=watermark["source_version"],
                       source_path=watermark.get("source_path"))

    def _rewrite(self, path: str, operation: str, image: Callable[[dict], dict | None]) -> int:
        latest = self._latest(path)
        columns = latest.rows.columns
        old = self.rows(path)
        new = [image(dict(row)) for row in old]
        changed = [(a, b) for a, b in zip(old, new, strict=True) if b != a]
        now = self._frame(columns, [row for row in new if row is not None])
        removed = self._frame(columns, [a for a, _ in changed])
        added = self._frame(columns, [b for _, b in changed if b is not None])
        counter = "numDeletedRows" if operation == "DELETE" else "numUpdatedRows"
        return self._add(path, operation, now, added, removed, {}, {counter: str(len(changed))})

    def _add(self, path: str, operation: str, rows: Frame, added: Frame | None, removed: Frame | None,
             parameters: dict, metrics: dict, metadata: records.CommitRecord | None = None) -> int:
        versions = self._tables[path]
        commit = self._commit(len(versions), operation, parameters, metrics, metadata)
        versions.append(_Version(commit, rows, added, removed))
        return commit.version

    @staticmethod
    def _commit(version: int, operation: str, parameters: dict | None = None, metrics: dict | None = None,
                metadata: records.CommitRecord | None = None) -> Commit:
        now = datetime.now(UTC)
        return Commit(version, now, now.timestamp(), operation, parameters or {}, metrics or {}, metadata)

    def _latest(self, path: str) -> _Version:
        return self._tables[path][-1]

    def _name(self) -> str:
        return f"__m{next(self._names)}"

    def _frame(self, columns: Sequence[tuple[str, str]], rows: Sequence[Mapping[str, Any]]) -> Frame:
        """A new table of `columns` (Spark types) holding `rows`."""
        name = self._name()
        declared = ", ".join(f'"{n}" {duckdb_type(t)}' for n, t in columns)
        with self._lock:
            self._db.execute(f"CREATE TEMP TABLE {name} ({declared})")
            if rows:
                marks = ", ".join("?" for _ in columns)
                self._db.executemany(f"INSERT INTO {name} VALUES ({marks})",
                                     [[row.get(n) for n, _ in columns] for row in rows])
        return Frame(name, tuple(columns))

    def _query(self, duck_sql: str, columns: Sequence[tuple[str, str]] | None = None) -> Frame:
        """A new table holding what DuckDB SQL `duck_sql` gives; its columns' Spark types are `columns` when
        given, else DuckDB's own types read as Spark's."""
        name = self._name()
        with self._lock:
            self._db.execute(f"CREATE TEMP TABLE {name} AS {duck_sql}")
            if columns is None:
                described = self._db.execute(f"DESCRIBE {name}").fetchall()
                columns = [(row[0], spark_type(row[1]) if row[1].upper() != "TIMESTAMP WITH TIME ZONE"
                            else "TIMESTAMP") for row in described]
        return Frame(name, tuple(columns))

    def _run(self, spark_sql: str, schema: Mapping[str, Mapping[str, str]]) -> Frame:
        translated = translate.translate(translate.parse(spark_sql), schema, states=True)
        return self._query(translated.sql)

    def _typed(self, rows: Frame, state: ResourceState) -> Frame:
        """`rows` cast to the view's columns, in their order (as `tables.write_states` writes them)."""
        casts = ", ".join(f'CAST("{n}" AS {duckdb_type(t)}) AS "{n}"' for n, t in state.columns)
        return self._query(f"SELECT {casts} FROM {rows.name}", state.columns)

    def _count(self, frame: Frame) -> int:
        with self._lock:
            return int(self._db.execute(f"SELECT count(*) FROM {frame.name}").fetchone()[0])

    def _concat(self, frames: list[Frame], columns: Sequence[tuple[str, str]]) -> Frame:
        if not frames:
            return self._frame(columns, [])
        return self._query(" UNION ALL ".join(f"SELECT * FROM {f.name}" for f in frames), columns)
