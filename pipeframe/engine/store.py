"""The storage seam of view maintenance: what a refresh asks of the tables it reads and writes, whatever keeps them.

A refresh (`engine/refresh.py`) reads a view's watermark and its source's new commits, hands the change to a
write strategy (`engine/strategies.py`), and the strategy makes one commit. None of them touches Spark or Delta:
they ask a `TableStore`. Two stores implement it:

- `engine/sparkstore.SparkStore`: Delta tables through Spark (embedded or Connect), with the local `_delta_log`
  fast paths (`deltalog`, `deltaappend`) where a table lives in a local folder;
- `serving/memstore.MemoryStore`: tables held in memory as Arrow, queries run by DuckDB over the view plan's SQL
  (translated as the read path translates it): the strategies' differential tests run on it without a JVM.

A store's frames (`F`) are its own relations (a Spark DataFrame, an Arrow table); the strategies only pass them
back to the store. Every SQL statement a strategy runs comes from the view's maintenance plan or its recorded
state (`state_sql`, `negate_sql`, `compact_sql`, `GroupKey.sql`): Spark SQL over `{table}` (the given rows) and
`{table:<name>}` (a joined table as of a pinned version), which the store runs in its own engine."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Protocol, TypeVar

if TYPE_CHECKING:
    from pipeframe.engine.changes import Change, JoinChange
    from pipeframe.engine.commits import Commit, Watermark
    from pipeframe.plan import records
    from pipeframe.plan.snapshot import DeployedResource

F = TypeVar("F")
# The source history a refresh reads at once, newest first; a view further behind reads the rest.
RECENT_COMMITS = 50


class TableStore(Protocol[F]):
    """The tables of one warehouse, as view maintenance reads and writes them."""

    # ------------------------------------------------------------------ history
    def history(self, path: str, limit: int | None = RECENT_COMMITS) -> list[Commit]:
        """The table's newest `limit` commits (all with None), newest first."""

    def commits_between(self, path: str, after: int, upto: int) -> list[Commit]:
        """The table's commits with after < version <= upto, oldest first."""

    def watermark(self, path: str) -> Watermark:
        """The newest watermark the view table at `path` records (`Watermark(None)` when none)."""

    # ------------------------------------------------------------------ reads
    def appended(self, source: DeployedResource, commits: Sequence[Commit]) -> F:
        """The rows `commits` (appends only) added to `source`."""

    def change_rows(self, source: DeployedResource, commits: Sequence[Commit]) -> tuple[F, F]:
        """(added, removed): the rows `commits` inserted (and the new images of updated rows), and the rows they
        deleted (and the old images of updated rows); neutral commits skipped."""

    def snapshot(self, table: DeployedResource, version: int) -> F:
        """The table's rows as of `version`, in its columns."""

    def current(self, view: DeployedResource) -> F:
        """The view table's rows now, in its columns."""

    def none(self, table: DeployedResource) -> F:
        """No rows, in the table's columns."""

    # ------------------------------------------------------------------ queries
    def run(self, view: DeployedResource, sql: str, rows: F, pins: Mapping[str, F] | None = None) -> F:
        """`sql` (Spark SQL of the view's plan) with `{table}` read from `rows` and each `{table:<name>}` from
        `pins[name]` (by name when not pinned)."""

    def select(self, frame: F, expressions: Sequence[str]) -> F:
        """`frame` projected to Spark SQL `expressions` over its columns."""

    def union(self, first: F, second: F) -> F:
        """The rows of both (`second`'s columns matched by name)."""

    def except_all(self, rows: F, gone: F) -> F:
        """`rows` less one occurrence of each row of `gone`."""

    def semi(self, rows: F, keys: Sequence[str], wanted: F) -> F:
        """The rows of `rows` whose `keys` equal (NULL matching NULL) those of a row of `wanted`; all of them
        without keys (a global aggregate is one group)."""

    def witnesses(self, change: Change, limit: int) -> list[dict]:
        """On the driver, as dicts: the plan's `Absorb.sql` over the removed rows of `change` (each row with SIGN -1)
        and over its added rows (SIGN 1), a row per group and side, each side netted of the other's rows (multisets)
        where a row may be on both (`Change.settled`). Where a side has more groups than `limit`, not every row need
        be given, but more than `limit` of one side are."""

    def extremes(self, view: DeployedResource, groups: Sequence[Mapping[str, object]],
                 rules: Sequence[tuple[str, str]]) -> list[dict]:
        """On the driver, as dicts: for each of `groups` (the view's keys) the view holds, its keys and the merged
        value of each state column of `rules` ((column, "max" | "min"): the largest, the smallest of its rows)."""

    def narrowed(self, change: Change, version: int, groups: Sequence[Mapping[str, object]] | None = None,
                 ) -> tuple[F, F | None] | None:
        """For recomputing the groups `change` touched (their keys computed from its changed rows by the plan's
        `group_keys`), or `groups` (the view's keys of some of them) where given: (the keys to replace, the source
        rows as of `version` whose states replace them; None for all of them: every group is replaced, where
        `change.every_group_holds` and most groups were touched), or None when this store cannot narrow the source
        (the caller aggregates all of it and keeps the touched groups)."""

    def partial_states(self, change: JoinChange) -> F | None:
        """The view's states for the joined table's changed rows, joined with the partial states of the view's source
        that this store keeps (engine/partials.py), signed; None when it keeps none for the view (the caller joins
        the source's rows instead)."""

    # ------------------------------------------------------------------ commits
    def append(self, view: DeployedResource, rows: F, *, metadata: records.ViewCommit | records.PopulateChunk,
               watermark: Mapping[str, object], few: bool = True) -> bool:
        """Append state rows to the view in one commit recording `metadata` and the `watermark` (source_version,
        source_path, after; or a transaction of its own: app_id, txn_version; empty for none); False when the commit
        was skipped as a replay (another refresher applied the same range). `few`: the rows are bounded by the
        change's rows (not a join's fan-out)."""

    def replace_groups(self, view: DeployedResource, keys: Sequence[str], touched: F, rows: F, *,
                       metadata: records.ViewCommit, watermark: Mapping[str, object], few: bool = False) -> bool:
        """In one commit: delete the view rows whose `keys` equal (NULL-safe) a row of `touched` (every row without
        keys), insert `rows`, record `metadata` and the `watermark`; False when skipped as a replay. `few`: both
        frames are small (at most a few thousand groups)."""

    def forget(self, path: str) -> None:
        """The table at `path` was written: what this store remembers of its history is stale."""
