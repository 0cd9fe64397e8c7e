"""The `TableStore` (engine/store.py) of Delta tables through Spark, embedded or Connect, with the local
`_delta_log` fast paths (`deltalog` reads, `deltaappend` commits) where a table lives in a local folder.

Within one refresh round (`begin_round` … `end_round`) it reads each table's recent history once until the table
is written, and the rows of a commit range once (cached) when several views at the same watermark read them."""

from __future__ import annotations

import json
import logging
import threading
import uuid
import weakref
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from functools import reduce
from typing import TYPE_CHECKING, Any

from pipeframe.compiler.maintenance import CHANGED, SIGN, fill
from pipeframe.engine import deltalog, partials, recompute, tables
from pipeframe.engine.conflicts import is_cancelled, local_folder
from pipeframe.engine.store import RECENT_COMMITS
from pipeframe.sqltext import first_line

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame, SparkSession

    from pipeframe.engine.changes import Change, JoinChange
    from pipeframe.engine.commits import Commit, Watermark
    from pipeframe.engine.warehouse import Warehouse
    from pipeframe.plan import records
    from pipeframe.plan.snapshot import DeployedResource, DeployedSnapshot


log = logging.getLogger("pipeframe.materialize")


class SparkStore:
    """Delta tables read and written by one Spark session. `direct_commit`: increments of local views are
    appended by `deltaappend` (no Spark write job) where they fit the driver (the ingest setting). `on_step` hears
    the steps a crash test stops at ("partials kept <view>:<table>")."""

    def __init__(self, spark: SparkSession, warehouse: Warehouse, deployed: DeployedSnapshot,
                 direct_commit: bool = True, on_step: Callable[[str], None] = lambda _step: None) -> None:
        self.spark, self.warehouse, self.deployed, self.direct_commit = spark, warehouse, deployed, direct_commit
        self.on_step = on_step
        self._recent: dict[str, list[Commit]] = {}
        self._batches: dict[tuple[str, int, int], DataFrame] = {}
        self._readers: Counter[str] = Counter()
        self._lock = threading.Lock()  # the caches above, shared by the refresh threads
        self._temp_views: list[str] = []  # registered for one round (unique names: Spark Connect resolves late)
        self._looked_up: set[str] = set()  # views whose lookup tables were registered this round
        # Relations `narrowed` made of rows the driver holds (the touched keys): `replace_groups` commits those
        # rows without a Spark job to bring them back.
        self._on_driver: weakref.WeakKeyDictionary[DataFrame, pa.Table] = weakref.WeakKeyDictionary()

    # ------------------------------------------------------------------ a round
    def begin_round(self, views: Sequence[DeployedResource]) -> None:
        """A refresh of `views` starts: the rows of a source's commits are cached when several of them read it."""
        self._readers = Counter(v.state.source or "" for v in views)

    def end_round(self) -> None:
        for batch in self._batches.values():
            batch.unpersist()
        with self._lock:
            self._recent, self._batches, self._readers = {}, {}, Counter()
            names, self._temp_views, self._looked_up = self._temp_views, [], set()
        for name in names:
            self.spark.catalog.dropTempView(name)

    # ------------------------------------------------------------------ history
    def history(self, path: str, limit: int | None = RECENT_COMMITS) -> list[Commit]:
        """The table's newest commits (newest first); within a round the recent ones are read once until the
        table is written (`forget`)."""
        if not self._readers or limit != RECENT_COMMITS:  # not inside a round: always read afresh
            return tables.history(self.spark, path, limit)
        with self._lock:
            if path not in self._recent:
                self._recent[path] = tables.history(self.spark, path, RECENT_COMMITS)
            return self._recent[path]

    def forget(self, path: str) -> None:
        with self._lock:
            self._recent.pop(path, None)

    def commits_between(self, path: str, after: int, upto: int) -> list[Commit]:
        return tables.commits_between(self.spark, path, after, upto)

    def watermark(self, path: str) -> Watermark:
        return tables.read_watermark(self.spark, path)

    # ------------------------------------------------------------------ reads
    def appended(self, source: DeployedResource, commits: Sequence[Commit]) -> DataFrame:
        """Read once for the round when other views read the same commits."""
        key = (source.path or "", commits[0].version, commits[-1].version)
        with self._lock:
            if key in self._batches:
                return self._batches[key]
            shared = self._readers[source.state.name] > 1
            batch = tables.read_changes(self.spark, source.state, source.path or "", commits, persist=shared)
            if shared:
                self._batches[key] = batch
            return batch

    def change_rows(self, source: DeployedResource, commits: Sequence[Commit]) -> tuple[DataFrame, DataFrame]:
        return tables.read_change_rows(self.spark, source.state, source.path or "", commits)

    def snapshot(self, table: DeployedResource, version: int) -> DataFrame:
        return tables.read_snapshot(self.spark, table.state, table.path or "", version, from_files=True)

    def current(self, view: DeployedResource) -> DataFrame:
        return self.spark.read.format("delta").load(view.path or "").select(*[f"`{n}`" for n, _ in view.state.columns])

    def none(self, table: DeployedResource) -> DataFrame:
        return self.spark.createDataFrame([], table.state.schema)

    # ------------------------------------------------------------------ queries
    def run(self, view: DeployedResource, sql: str, rows: DataFrame,
            pins: Mapping[str, DataFrame] | None = None) -> DataFrame:
        """Each relation under a name of its own: views are refreshed at once in one session."""
        self._register_lookups(view)
        relation = self.register(rows, f"__pf_batch_{view.state.name}")
        named = {name: self.register(frame, f"__pf_joined_{view.state.name}_{name}")
                 for name, frame in (pins or {}).items()}
        return self.spark.sql(fill(sql, relation, named))

    def select(self, frame: DataFrame, expressions: Sequence[str]) -> DataFrame:
        return frame.selectExpr(*expressions)

    def union(self, first: DataFrame, second: DataFrame) -> DataFrame:
        return first.unionByName(second)

    def except_all(self, rows: DataFrame, gone: DataFrame) -> DataFrame:
        return rows.exceptAll(gone)

    def semi(self, rows: DataFrame, keys: Sequence[str], wanted: DataFrame) -> DataFrame:
        if not keys:
            return rows
        right = wanted.selectExpr(*[f"`{k}` AS `__pf_key{i}`" for i, k in enumerate(keys)]).distinct()
        condition = reduce(lambda a, b: a & b, [rows[f"`{k}`"].eqNullSafe(right[f"__pf_key{i}"])
                                                for i, k in enumerate(keys)])
        return rows.join(right, condition, "left_semi")

    def witnesses(self, change: Change, limit: int) -> list[dict]:
        """Without a Spark job where `changed_witnesses` can; else one job over the change feed's two sides, at most
        2 * limit + 1 rows of them: a side of more than `limit` rows shows more than `limit`, or the other side does."""
        found = changed_witnesses(self.spark, change, limit)
        if found is not None:
            return found
        absorb = change.plan.absorb
        assert absorb is not None
        added, removed = self.change_rows(change.source, change.commits)
        if not change.settled:
            added, removed = added.exceptAll(removed), removed.exceptAll(added)
        both = self.run(change.view, absorb.sql, removed, change.pins).selectExpr("*", f"-1 AS `{SIGN}`").unionByName(
            self.run(change.view, absorb.sql, added, change.pins).selectExpr("*", f"1 AS `{SIGN}`"))
        return both.limit(2 * limit + 1).toArrow().to_pylist()

    def extremes(self, view: DeployedResource, groups: Sequence[Mapping[str, object]],
                 rules: Sequence[tuple[str, str]]) -> list[dict]:
        """From a local view's files without a Spark job where `tables.held_extremes` can; else one Spark job."""
        from pyspark.sql import functions as F

        keys = list(view.state.keys)
        wanted = _key_table(groups, keys)
        found = tables.held_extremes(view.path or "", keys, wanted, rules) if wanted is not None else None
        if found is not None:
            return found
        types = dict(view.state.columns)
        rows = self.current(view)
        if keys:
            rows = self.semi(rows, keys, self.spark.createDataFrame(
                [tuple(g[k] for k in keys) for g in groups], ", ".join(f"`{k}` {types[k]}" for k in keys)))
        merged = [(F.max if rule == "max" else F.min)(F.col(f"`{column}`")).alias(column) for column, rule in rules]
        return rows.groupBy(*[F.col(f"`{k}`") for k in keys]).agg(*merged).toArrow().to_pylist()

    def narrowed(self, change: Change, version: int, groups: Sequence[Mapping[str, object]] | None = None,
                 ) -> tuple[DataFrame, DataFrame | None] | None:
        """engine/recompute.py: the touched keys come to the driver (from the change feed's files by delta-rs and
        DuckDB where `changed_keys` can, else by a Spark job; or as `groups`); the source's files outside their range
        are not read. The view's keys are read from its files (to tell whether most groups were touched) only where
        its increments are committed directly (a local view)."""
        view, source, plan = change.view, change.source, change.plan
        types = dict(view.state.columns)
        schema = ", ".join(f"`{k.name}` {types[k.name]}" for k in plan.group_keys)
        if groups is not None:
            keys = _key_table(groups, [k.name for k in plan.group_keys])
            if keys is None:
                return None
        else:
            keys = changed_keys(self.spark, change, recompute.NARROW_GROUPS + 1)
        if keys is not None:
            def made_of(found: pa.Table) -> DataFrame:
                if found.num_rows == 0:
                    return self.spark.createDataFrame([], schema)
                return self.spark.createDataFrame(found).selectExpr(
                    *[f"CAST(`{k.name}` AS {types[k.name]}) AS `{k.name}`" for k in plan.group_keys])
        else:
            added, removed = self.change_rows(source, change.commits)
            touched = self.union(added, removed).selectExpr(*[f"{k.sql} AS `{k.name}`" for k in plan.group_keys])
            keys = touched.distinct().limit(recompute.NARROW_GROUPS + 1).toArrow()

            def made_of(found: pa.Table) -> DataFrame:
                return self.spark.createDataFrame(found, schema=touched.schema)

        def frame_of(found: pa.Table) -> DataFrame:
            frame = made_of(found)
            if all(_same_kind(found.schema.field(k.name).type, types[k.name]) for k in plan.group_keys):
                self._on_driver[frame] = found  # else only Spark's CAST to the view's types says what they are
            return frame

        def snapshot(keep):
            return tables.read_snapshot(self.spark, source.state, source.path or "", version, from_files=True,
                                        keep=keep)

        whole = self.direct_commit and change.every_group_holds
        return recompute.narrowed(plan.group_keys, keys, frame_of, snapshot,
                                  lambda: tables.held_keys(view.path or "", view.state.keys) if whole else None)

    def partial_states(self, change: JoinChange) -> DataFrame | None:
        """engine/partials.py: the partial states of the source as of the view's watermark, kept in a table of
        their own beside it and brought up to that version. A query Spark refuses over them (a shape the
        derivation let through by mistake) is logged and the view joins its source instead."""
        view, name = change.view, change.name
        derived = partials.derive(view, self.deployed, change.plan)
        signed = dict(derived.signed_sql).get(name) if derived else None
        if derived is None or signed is None:
            return None
        try:
            kept = partials.current(self.spark, lambda sql, rows: self.run(view, sql, rows), self.warehouse.uri,
                                    change.source, change.source_version, derived)
            if kept is None:
                return None
            self.on_step(f"partials kept {view.state.name}:{name}")
            changed = tables.read_signed_rows(self.spark, change.table.state, change.table.path or "", change.commits)
            return self.run(view, signed, kept, {**change.pins, name: changed})  # analysed here, run when written
        except Exception as exc:
            if is_cancelled(exc) or tables.history_gone(exc):
                raise
            log.warning("view %s: its source's partial states could not be used (%s); it joins the source instead",
                        view.state.name, first_line(exc))
            return None

    # ------------------------------------------------------------------ commits
    def append(self, view: DeployedResource, rows: DataFrame, *,
               metadata: records.ViewCommit | records.PopulateChunk, watermark: Mapping[str, object],
               few: bool = True) -> bool:
        return tables.write_states(rows, view.state, view.path or "", metadata=metadata,
                                   direct=self.direct_commit and few, **watermark)

    def replace_groups(self, view: DeployedResource, keys: Sequence[str], touched: DataFrame, rows: DataFrame, *,
                       metadata: records.ViewCommit, watermark: Mapping[str, object], few: bool = False) -> bool:
        return tables.replace_groups(self.spark, view.state, view.path or "", tuple(keys), touched, rows,
                                     metadata=metadata, direct=self.direct_commit and few,
                                     touched_rows=self._on_driver.get(touched), **watermark)

    # ------------------------------------------------------------------ Spark's own
    def register(self, frame: DataFrame, prefix: str) -> str:
        """`frame` as a temporary view of its own until the round ends; its name."""
        name = f"{prefix}_{uuid.uuid4().hex[:8]}"
        frame.createOrReplaceTempView(name)
        with self._lock:
            self._temp_views.append(name)
        return name

    def _register_lookups(self, view: DeployedResource) -> None:
        """The tables a view's query joins besides its trigger (DIMENSIONS) must be readable by name."""
        state = view.state
        with self._lock:
            if state.name in self._looked_up:
                return
        lookups = [r for k, r in self.deployed.items() if k in state.depends_on and r.state.name != state.source]
        if lookups:
            self.warehouse.register(lookups)
        if self._readers:  # within a round: once
            with self._lock:
                self._looked_up.add(state.name)


def _key_table(groups: Sequence[Mapping[str, object]], keys: Sequence[str]) -> pa.Table | None:
    """Groups' `keys` (values as the driver holds them) as an Arrow table; None where Arrow cannot type a column (all
    of its values NULL, or of mixed kinds)."""
    import pyarrow as pa

    try:
        table = pa.table({k: pa.array([g[k] for g in groups]) for k in keys}) if keys else None
    except (pa.ArrowException, TypeError, ValueError):
        return None
    return None if table is None or any(pa.types.is_null(t) for t in table.schema.types) else table


def _same_kind(arrow: pa.DataType, spark_type: str) -> bool:
    """Whether values of the Arrow type keep their meaning as the Spark type when Arrow casts them (an instant, a
    date, an integer, a string as such: a cast between kinds, such as a date to a timestamp, is Spark's to make)."""
    import pyarrow as pa

    kind = spark_type.upper()
    if kind in ("TINYINT", "SMALLINT", "INT", "INTEGER", "BIGINT"):
        return pa.types.is_integer(arrow)
    return {"TIMESTAMP": pa.types.is_timestamp(arrow) and arrow.tz is not None, "DATE": pa.types.is_date32(arrow),
            "STRING": pa.types.is_string(arrow) or pa.types.is_large_string(arrow)}.get(kind, False)


def changed_keys(spark: SparkSession, change: Change, limit: int) -> pa.Table | None:
    """The distinct group keys of the rows `change`'s commits changed in a local source (at most `limit` of them),
    without a Spark job: the plan's `keys_duckdb` run by DuckDB over the change feed (`_over_feed`). None where that
    cannot answer as Spark would (`_over_feed`), or the plan has no such query (a key DuckDB does not translate, a
    plan recorded before it)."""
    sql = change.plan.keys_duckdb
    if sql is None:
        return None
    return _over_feed(spark, change, lambda db: db.sql(f"{sql} LIMIT {int(limit)}").to_arrow_table())


def changed_witnesses(spark: SparkSession, change: Change, limit: int) -> list[dict] | None:
    """`TableStore.witnesses` without a Spark job: the plan's `Absorb.duckdb` run by DuckDB over the removed and over
    the added rows of the change feed (`_over_feed`; each netted of the other where a row may be on both), each
    side's rows marked with SIGN; None where that cannot answer as Spark would, or the plan has no such query."""
    sql = change.plan.absorb.duckdb if change.plan.absorb is not None else None
    if sql is None:
        return None

    columns = ", ".join(f'"{name}"' for name, _ in change.source.state.columns)
    sides = {sign: f"SELECT {columns} FROM __pf_changes WHERE _change_type IN {kinds}"
             for sign, kinds in ((-1, tables.REMOVED_CHANGES), (1, "('insert', 'update_postimage')"))}

    def both(db) -> list[dict]:
        found: list[dict] = []
        for sign in (-1, 1):
            rows = sides[sign] if change.settled else f"{sides[sign]} EXCEPT ALL {sides[-sign]}"
            db.execute(f"CREATE OR REPLACE TEMP VIEW {CHANGED} AS {rows}")
            found += [{**row, SIGN: sign} for row in db.sql(f"{sql} LIMIT {int(limit) + 1}").to_arrow_table()
                      .to_pylist()]
        return found

    return _over_feed(spark, change, both, changes=True)


def _over_feed(spark: SparkSession, change: Change, query: Callable, changes: bool = False) -> Any:
    """What `query(db)` answers over the rows `change`'s commits changed in a local source, read without a Spark
    job: the change data feed read by delta-rs (`DeltaTable.load_cdf`: the change files Delta wrote, the rows of
    files a commit added or removed whole), held by DuckDB as the relation CHANGED (the source's columns; with
    `changes`, as `__pf_changes` with its `_change_type` as well, for `query` to split). None where that cannot
    answer as Spark would: a source elsewhere than a local folder, a session time zone other than UTC (the
    translations compute in UTC), a reader that fails (a table feature delta-rs lacks)."""
    folder = local_folder(change.source.path or "")
    zone = (spark.conf.get("spark.sql.session.timeZone") or "").upper()
    if folder is None or zone not in ("UTC", "ETC/UTC", "Z", "+00:00", "GMT"):
        return None
    versions = sorted(c.version for c in change.commits if c.changes_data)
    if not versions or not _feed_readable(folder):
        return None
    columns = ", ".join(f'"{name}"' for name, _ in change.source.state.columns)
    try:
        import duckdb
        import pyarrow as pa
        from deltalake import DeltaTable

        feed = pa.table(DeltaTable(folder).load_cdf(starting_version=versions[0], ending_version=versions[-1]))
        with duckdb.connect() as db:
            db.execute("SET TimeZone = 'UTC'")
            db.register("__pf_feed", feed)
            db.execute(f"CREATE VIEW {'__pf_changes' if changes else CHANGED} AS SELECT {columns}"
                       f"{', _change_type' if changes else ''} FROM __pf_feed "
                       f"WHERE _commit_version IN ({', '.join(map(str, versions))})")  # neutral commits left out
            return query(db)
    except Exception as exc:  # noqa: BLE001 — the Spark job answers instead
        log.info("changed rows of %s read by Spark: %s", change.view.state.name, first_line(exc))
        return None


def _feed_readable(folder: str) -> bool:
    """Whether delta-rs reads the table's change feed exactly as Spark does: no deletion vectors or column mapping
    (which its feed reader lacks or reads otherwise), and no timestamp partition column (delta-rs reads a logged
    partition timestamp as UTC, Spark wrote it in its session's zone)."""
    state = deltalog.table_state(folder)
    if state is None:
        return False
    features = {*state.protocol.get("readerFeatures", ()), *state.protocol.get("writerFeatures", ())}
    if features & {"deletionVectors", "columnMapping"} or \
            str(state.configuration().get("delta.columnMapping.mode", "none")).lower() != "none":
        return False
    try:
        fields = {f["name"]: f["type"] for f in json.loads(state.metadata.get("schemaString") or "{}")["fields"]}
    except (KeyError, TypeError, ValueError):
        return False
    return not any(fields.get(c) in ("timestamp", "timestamp_ntz") for c in state.metadata.get("partitionColumns", ()))
