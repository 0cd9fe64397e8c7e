"""The read path without a JVM: endpoints and ad-hoc SQL over the warehouse's Delta tables, answered by DuckDB.

Every query reads one snapshot of each table it touches, at the newest committed version: the state store's version
says what is deployed (a deploy or rebuild made by any process is seen by the next query), each table's its rows.
Each thread queries through its own DuckDB cursor, on which every table is a view named as Spark names it (a view
target through its finalizing SQL) over the table's rows registered as Arrow. Translations are kept per statement,
answers per statement and table versions.
"""

from __future__ import annotations

import datetime as dt
import threading
from collections import OrderedDict
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from pipeframe.compiler.service import BY_RELATION, ServiceTable
from pipeframe.plan.records import decode_state
from pipeframe.plan.snapshot import DeployedResource, DeployedSnapshot
from pipeframe.plan.state import ResourceState
from pipeframe.serving import sketches, translate
from pipeframe.serving.snapshots import Relation, Snapshots, Unreadable
from pipeframe.serving.types import duck_simple, spark_type

if TYPE_CHECKING:
    import duckdb

    from pipeframe.serving.translate import Translation

STATE_TABLE = "_pipeframe/state"
CACHED_TRANSLATIONS = 512
CACHED_ANSWERS = 256
ANSWER_ROWS = 100_000  # answers of more rows are not kept


class ReadFailed(Exception):
    """DuckDB could not answer (an error Spark may not raise): the statement runs on Spark. `reason` says why."""


@dataclass(frozen=True)
class Answer:
    """A query's rows as Spark would return them (the same Python values), their (column, Spark type) pairs, what
    was read, and which engine answered."""

    meta: tuple[tuple[str, str], ...]
    rows: list[tuple[Any, ...]]
    rows_read: int
    bytes_read: int
    engine: str = "duckdb"


@dataclass(frozen=True)
class Deployed:
    """What is deployed, as of one version of the state store."""

    version: int
    snapshot: DeployedSnapshot

    def resource(self, name: str) -> DeployedResource | None:
        return self.snapshot.table(name)


class Reader:
    """The warehouse at `uri`, read by DuckDB. Thread-safe: a server shares one between its request threads."""

    def __init__(self, uri: str, storage_options: Mapping[str, str] | None = None, time_zone: str = "UTC") -> None:
        import duckdb

        self.uri = uri.rstrip("/")
        self.time_zone = time_zone
        self._db = duckdb.connect()
        self._db.execute("SET TimeZone = 'UTC'")  # Delta stores instants; Spark's session zone is UTC (`_check_zone`)
        self._functions_made = False  # on first use (creating Python functions in DuckDB costs a numpy import)
        self.snapshots = Snapshots(self._db, dict(storage_options or {}))
        self._lock = threading.Lock()
        self._views_lock = threading.Lock()
        self._local = threading.local()
        self._deployed = Deployed(-2, DeployedSnapshot())
        # name → (what its DuckDB view or table reads, the deployed definition it was made from, its columns as
        # Spark types, TABLE or VIEW)
        self._views: dict[str, tuple[tuple[Relation, ...], ResourceState, dict[str, str], str]] = {}
        self._sketches: set[str] = set()  # views with merged sketch states among their columns
        self._parsed: OrderedDict[str, tuple[str, ...]] = OrderedDict()  # a statement's shape → the tables it reads
        self._translations: OrderedDict[tuple, tuple] = OrderedDict()  # (shape, schema) → `_translation`'s
        self._answers: OrderedDict[tuple, Answer] = OrderedDict()

    # ------------------------------------------------------------------------------------ what is deployed
    def deployed(self) -> Deployed:
        """What is deployed now (the state store read again only when its version moved); within `pinned`, what
        was deployed when it began."""
        pinned = getattr(self._local, "deployed", None)
        if pinned is not None:
            return pinned
        path = f"{self.uri}/{STATE_TABLE}"
        version = self.snapshots.version(path)
        current = self._deployed
        if version == current.version:
            return current
        records = self.rows(path, ["record", "key", "version", "path", "state", "deployed_at"]) if version >= 0 else []
        snapshot = deployed_snapshot(records, path)
        fresh = Deployed(version, snapshot)
        with self._lock:
            if fresh.version > self._deployed.version:
                self._deployed = fresh
        return fresh

    @contextmanager
    def pinned(self) -> Iterator[Deployed]:
        """Within: this thread reads one state of what is deployed, the one deployed as it begins (a request checks
        its pipe, its token and its tables against one state, and probes the state store once, not at each step).
        Tables are still read at their newest versions. Nested: the outer state."""
        local = self._local
        if getattr(local, "deployed", None) is not None:
            yield local.deployed
            return
        local.deployed = self.deployed()
        try:
            yield local.deployed
        finally:
            local.deployed = None

    def rows(self, path: str, columns: list[str]) -> list[dict[str, Any]]:
        """Every row of the (small) table at `path`, its `columns` only; [] while there is no table."""
        version = self.snapshots.version(path)
        if version < 0:
            return []
        relation = self.snapshots.relation(path, version)
        cursor = self._db.cursor()
        try:
            found = cursor.execute(f'SELECT {", ".join(f"{chr(34)}{c}{chr(34)}" for c in columns)} '
                                   f'FROM "{relation.name}"')
            return [dict(zip(columns, (python_value(v) for v in row), strict=True)) for row in found.fetchall()]
        finally:
            cursor.close()

    def has_quarantine(self, datasource: str) -> bool:
        """Whether rows that did not fit `datasource` were ever kept (its `<datasource>_quarantine` table exists)."""
        return self.snapshots.version(self._quarantine_path(datasource)) >= 0

    def _quarantine_path(self, datasource: str) -> str:
        return f"{self.uri}/quarantine/{datasource}"  # as the engine's Warehouse.quarantine_path

    def figures(self, path: str) -> tuple[int, int, int]:
        """(data files, their bytes, rows) of the table at `path` now, from its log (its rows are not read)."""
        return self.snapshots.figures(path)

    # ------------------------------------------------------------------------------------------ querying
    def query(self, spark_sql: str, readable: Iterable[str] | None = None) -> Answer:
        """Run a statement written for Spark (a compiled endpoint, or ad-hoc SQL over the deployed names).

        Raises `translate.Untranslatable` or `ReadFailed` when DuckDB cannot answer as Spark would (the caller asks
        Spark), `Unreadable` when a table cannot be read here, `UnknownTable` for a name nothing deployed has,
        `SparkError` for an error Spark raises too."""
        self._check_zone()
        deployed = self.deployed()
        shape = translate.shape(spark_sql)
        names = self._parsed.get(shape.key)  # the tables are named outside literals: one shape reads the same ones
        tree = None
        if names is None:
            tree = translate.parse(spark_sql)
            names = translate.reads(tree)
            self._remember(self._parsed, shape.key, names, CACHED_TRANSLATIONS)
        tables = [self._table(deployed, name, readable) for name in names]
        schema = {name: columns for name, (_, columns) in zip(names, tables, strict=True)}
        read = [relation for relations, _ in tables for relation in relations]
        # One translation per shape and schema: a Date or DateTime parameter's value is bound as a DuckDB parameter,
        # so sqlglot runs once per endpoint and set of parameters, not once per value. The other literals must be
        # the ones it was translated with.
        key = (shape.key, tuple((name, tuple(columns.items())) for name, columns in schema.items()))
        kept = self._translations.get(key)
        if kept is None or any(shape.literals[i] != text for i, text in kept[2]):
            tree = translate.parse(spark_sql) if tree is None else tree
            kept = self._translation(tree, schema, shape)
            self._remember(self._translations, key, kept, CACHED_TRANSLATIONS)
        translation, bound, _ = kept
        values = {name: shape.literals[i] for i, name in bound}
        # An answer is kept for one deployed state (a redeploy may finalize a view otherwise over the same rows)
        # and the versions of the tables it read.
        answer_key = (translation.sql, tuple(values.items()), deployed.version,
                      tuple((r.name, r.version) for r in read))
        answer = self._answers.get(answer_key)
        if answer is None:
            answer = self._run(translation, read, values)
            if any(kind == "binary" for _, kind in answer.meta) and self._sketches.intersection(names):
                # A merged sketch read as bytes: its bytes are Spark's own serialization (the order it merged in)
                raise ReadFailed("a merged sketch state is read as bytes (its serialization is Spark's own)")
            if len(answer.rows) <= ANSWER_ROWS:
                self._remember(self._answers, answer_key, answer, CACHED_ANSWERS)
        return answer

    def _check_zone(self) -> None:
        if self.time_zone.upper() not in ("UTC", "ETC/UTC", "Z", "+00:00", "GMT"):
            raise ReadFailed(f"spark.sql.session.timeZone is {self.time_zone}: the read path computes in UTC")

    @staticmethod
    def _translation(tree: Any, schema: dict[str, dict[str, str]], shape: translate.Shape) -> tuple[
            Translation, tuple[tuple[int, str], ...], tuple[tuple[int, str], ...]]:
        """`tree` (the statement of `shape`) translated with its parameter literals as DuckDB parameters: the
        translation, (literal index, parameter name) of those, and (literal index, text) of the other literals. When
        a literal cannot be a parameter as chosen, every literal stays in the statement (kept for these values)."""
        index = {start: i for i, start in enumerate(shape.starts)}
        parameters = shape.parameters(tree)
        try:
            translation = translate.translate(tree, schema, parameters=parameters, named=True)
        except ValueError:
            parameters = {}
            translation = translate.translate(tree, schema, named=True)
        bound = tuple((index[start], name) for start, name in parameters.items())
        taken = {i for i, _ in bound}
        fixed = tuple((i, text) for i, text in enumerate(shape.literals) if i not in taken)
        return translation, bound, fixed

    def _run(self, translation: Translation, read: list[Relation], values: Mapping[str, str] | None = None) -> Answer:
        import duckdb

        self._functions(translation.sql)
        cursor = self._cursor()
        try:
            result = cursor.execute(translation.sql, dict(values) if values else None)
            rows = result.fetchall()
            described = result.description or []
        except duckdb.Error as exc:
            message = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            if translate.DIVIDE_BY_ZERO.split(".")[0] in message:
                raise SparkError(translate.DIVIDE_BY_ZERO) from None
            raise ReadFailed(f"DuckDB: {message[:200]}") from None
        meta = tuple((column[0], duck_simple(str(column[1]))) for column in described)
        structs = [str(column[1]).upper().startswith("STRUCT") for column in described]
        converted = [tuple(python_value(v, struct) for v, struct in zip(row, structs, strict=True)) for row in rows]
        return Answer(meta, converted, sum(max(t.rows, 0) for t in read), sum(t.bytes for t in read))

    # ------------------------------------------------------------------------------------------ tables
    def _cursor(self) -> duckdb.DuckDBPyConnection:
        local = self._local
        if getattr(local, "cursor", None) is None:
            local.cursor = self._db.cursor()
        return local.cursor

    def _table(self, deployed: Deployed, name: str,
               readable: Iterable[str] | None) -> tuple[tuple[Relation, ...], dict[str, str]]:
        """The tables `name` reads (one; a datasource several pipes write: each writer's), brought to their newest
        versions, as the DuckDB view `name` (its finalizing SQL, or its declared columns, over their rows), and that
        view's columns as Spark types."""
        state, paths = self._resolve(deployed, name, readable)
        relations = tuple(self._relation(name, path) for path in paths)
        if not state.columns:  # a quarantine table: its columns are what its files hold
            state = replace(state, columns=relations[0].columns)
        found = self._views.get(name)
        if found is not None and _current(found, relations, state):
            return relations, found[2]
        with self._views_lock:  # one thread makes a view; DuckDB refuses two changing one catalog entry at once
            found = self._views.get(name)
            if found is not None and _current(found, relations, state):
                return relations, found[2]
            parts = [f"`__pf_state{i}`" for i in range(len(relations))]
            if state.kind == "shared":
                sql = state.union_sql(parts)
            else:
                sql = state.read_sql.replace("{table}", parts[0]) if state.read_sql else \
                    f"SELECT {', '.join(f'`{c}`' for c, _ in state.columns)} FROM {parts[0]}"
            view = translate.translate(translate.parse(sql), {f"__pf_state{i}": dict(r.columns)
                                                              for i, r in enumerate(relations)},
                                       renames={f"__pf_state{i}": r.name for i, r in enumerate(relations)},
                                       named=True)
            self._functions(view.sql)
            # A view's finalizing SQL (its GROUP BY over the partial rows) is run once per version of a table held
            # in memory, into a table its queries read: each query pays for its own work, not the view's merge.
            # Other tables are views over the copy (or the files), which follows every version by itself.
            kind = "TABLE" if state.read_sql and all(r.in_memory for r in relations) else "VIEW"
            cursor = self._db.cursor()
            try:
                if found is not None and found[3] != kind:
                    cursor.execute(f'DROP {found[3]} IF EXISTS "{name}"')
                cursor.execute(f'CREATE OR REPLACE {kind} "{name}" AS {view.sql}')
                columns = {c[0]: spark_type(str(c[1])) for c in cursor.execute(f'DESCRIBE "{name}"').fetchall()}
            finally:
                cursor.close()
            self._views[name] = (relations, state, columns, kind)
            if view.sketches:
                self._sketches.add(name)
        return relations, columns

    def _relation(self, name: str, path: str) -> Relation:
        """The table at `path` (read for the name `name`) at its newest version."""
        try:
            version = self.snapshots.version(path)
            if version < 0:  # deployed, but its table is gone (removed by hand, or not made yet): Spark will say
                raise Unreadable(f"the table of `{name}` is missing")
            return self.snapshots.relation(path, version)
        except Unreadable as exc:  # said of the table, never of where it is (answers show no paths)
            raise Unreadable(str(exc).replace(path, f"the table of `{name}`")) from None

    def _resolve(self, deployed: Deployed, name: str, readable: Iterable[str] | None
                 ) -> tuple[ResourceState, tuple[str, ...]]:
        """The deployed table `name` names, as Spark resolves names (in any case), with its path (a datasource several
        pipes write: its writers' paths); a datasource's quarantine is `<datasource>_quarantine`."""
        tables = [r for r in deployed.snapshot.values() if r.state.has_table and r.path is not None]
        paths = {r.state.name: r.path or "" for r in tables}
        for resource in deployed.snapshot.values():
            state = resource.state
            if state.name.lower() != name.lower():
                continue
            if state.kind == "shared" and all(w in paths for w in state.writers):
                return state, tuple(paths[w] for w in state.writers)
            if state.has_table and resource.path is not None:
                return state, (resource.path,)
        for resource in tables:
            if resource.state.kind == "datasource" and name.lower() == f"{resource.state.name}_quarantine".lower():
                return quarantine_state(resource.state.name), (self._quarantine_path(resource.state.name),)
        service = BY_RELATION.get(name.lower())
        if service is not None:
            return service_state(service), (service.path(self.uri),)
        raise UnknownTable(name, sorted(readable) if readable is not None else sorted(r.state.name for r in tables))

    def _functions(self, sql: str) -> None:
        """Register the sketch functions before the first statement that calls them (creating Python functions in
        DuckDB costs a numpy import, which a read of plain columns need not pay)."""
        if not self._functions_made and "PF_" in sql.upper():
            with self._lock:
                if not self._functions_made:
                    sketches.register(self._db)
                    self._functions_made = True

    def _remember(self, cache: OrderedDict, key: Any, value: Any, size: int) -> None:
        with self._lock:  # request threads share the caches
            cache[key] = value
            while len(cache) > size:
                cache.popitem(last=False)


def _current(found: tuple[tuple[Relation, ...], ResourceState, dict[str, str], str], relations: tuple[Relation, ...],
             state: ResourceState) -> bool:
    """Whether the DuckDB view or table made as `found` answers for `relations` as `state` defines it: made over the
    same copies from the same definition, and, when it is a table (a finalized view), from these versions or newer
    ones (it is made after the copies reached the versions it is labelled with, so it holds at least those)."""
    made, made_state, _, kind = found
    if [m.name for m in made] != [r.name for r in relations] or not (made_state is state or made_state == state):
        return False
    return kind == "VIEW" or all(m.version >= r.version for m, r in zip(made, relations, strict=True))


class UnknownTable(Exception):
    """A name the statement reads that nothing deployed has (Spark's TABLE_OR_VIEW_NOT_FOUND)."""

    def __init__(self, name: str, known: list[str]) -> None:
        super().__init__(name)
        self.name = name
        self.known = known


class SparkError(Exception):
    """An error Spark raises too, with Spark's words (a division by zero under ANSI mode)."""


def deployed_snapshot(records: list[dict], path: str) -> DeployedSnapshot:
    """The deployed resources of the rows of the state store at `path` (`record = 'resource'`), as
    `Warehouse.snapshot` reads them."""
    return DeployedSnapshot.of(
        DeployedResource(decode_state(r["state"], f"The record of `{r['key']}` in the state store at {path}"),
                         int(r["version"] or 0), r["path"], r["deployed_at"])
        for r in records if r["record"] == "resource")


def quarantine_state(datasource: str) -> ResourceState:
    """A datasource's quarantine table as a resource without columns (`<datasource>_quarantine`: every column its
    files hold is read)."""
    from pipeframe.compiler.graph import ResourceKey

    return ResourceState(ResourceKey.datasource(f"{datasource}_quarantine"), f"{datasource}_quarantine", "datasource")


def service_state(service: ServiceTable) -> ResourceState:
    """A service datasource (`pipeframe.pipe_stats`) as a resource of its declared columns."""
    from pipeframe.compiler.graph import ResourceKey

    return ResourceState(ResourceKey.datasource(service.relation), service.relation, "datasource",
                         columns=service.columns)


def python_value(value: Any, struct: bool = False) -> Any:
    """A DuckDB value as pyspark's `collect()` gives it: a TIMESTAMP (with time zone) as a naive datetime in this
    process's local time, a STRUCT (`struct`: the column is one) as a tuple of its fields, as a Row is."""
    if isinstance(value, dt.datetime) and value.tzinfo is not None:
        return value.astimezone().replace(tzinfo=None)
    if isinstance(value, dict):
        values = {k: python_value(v) for k, v in value.items()}
        return tuple(values.values()) if struct else values
    if isinstance(value, list):
        return [python_value(v) for v in value]
    return value
