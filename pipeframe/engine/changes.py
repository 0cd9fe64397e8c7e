"""What one refresh applies to one view: its source's new commits (`Change`), or the new commits of a table it
joins and follows (`JoinChange`), with what the write strategies (`engine/strategies.py`) decide by."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pipeframe.plan import records

if TYPE_CHECKING:
    from pipeframe.compiler.maintenance import MaintenancePlan
    from pipeframe.engine.commits import Commit
    from pipeframe.plan.snapshot import DeployedResource


@dataclass(frozen=True)
class Change:
    """The source commits one refresh applies to one view, and what the strategies need to know around them."""

    view: DeployedResource
    source: DeployedResource
    plan: MaintenancePlan
    commits: tuple[Commit, ...]  # oldest first, as the view follows them (`tables.as_followed`)
    watermark: Mapping[str, Any]  # recorded with the commit: source_version, source_path, after
    joined: Mapping[str, int] = field(default_factory=dict)  # the joined tables' versions the view's rows agree with
    pins: Mapping[str, Any] = field(default_factory=dict)  # those tables as of those versions (the store's frames)
    read_by_views: bool = False  # other views read this view's rows

    @property
    def rows(self) -> int:
        """The source rows the commits changed, as they counted them."""
        return sum(c.changed_rows for c in self.commits)

    @property
    def rewrites(self) -> bool:
        """Whether some commit deleted or updated rows in place (adding states no longer follows it)."""
        return any(c.rewrites_rows() for c in self.commits)

    @property
    def adds(self) -> bool:
        """Whether the commits may have added rows (a DELETE's change feed has only removed ones)."""
        return any(c.operation != "DELETE" for c in self.commits if c.changes_data)

    @property
    def settled(self) -> bool:
        """Whether no row can be among both the added and the removed rows of the commits (the change feed does not
        net them out): at most one commit removes rows, and none before it added any (it could remove those)."""
        changing = [c for c in self.commits if c.changes_data]
        rewriting = [i for i, c in enumerate(changing) if c.rewrites_rows()]
        return rewriting in ([], [0])

    @property
    def every_group_holds(self) -> bool:
        """Whether recomputing every group of the view from its source gives each group the value it holds: not
        when rows landed before it was deployed were left out (BACKFILL skip), nor when it keeps the aggregates of
        rows a source TTL deleted (the TTL not followed)."""
        state = self.view.state
        return state.backfill != "skip" and (state.follow_ttl or not self.source.state.ttl)

    def record(self, path: str) -> records.ViewCommit:
        """The view commit's record for the strategy `path`."""
        return records.ViewCommit(self.view.state.name, rows=self.rows, path=path, joined=dict(self.joined))


@dataclass(frozen=True)
class JoinChange:
    """The commits of one table a view joins and follows, after the version its rows agree with (`start`; -1: never
    recorded, all of it), applied with the view's source as of the version the view has applied."""

    view: DeployedResource
    source: DeployedResource
    plan: MaintenancePlan
    table: DeployedResource
    commits: tuple[Commit, ...]
    start: int
    source_version: int
    watermark: Mapping[str, Any]  # recorded with the commit: the source's (unchanged) and the table's transaction
    joined: Mapping[str, int]  # the joined tables' versions the view's rows agree with after this change
    pins: Mapping[str, Any] = field(default_factory=dict)  # the joined tables as of the versions before it
    read_by_views: bool = False

    @property
    def name(self) -> str:
        return self.table.state.name

    @property
    def adds(self) -> bool:
        return any(c.operation != "DELETE" for c in self.commits if c.changes_data)

    def record(self, path: str, partials: bool = False) -> records.ViewCommit:
        return records.ViewCommit(self.view.state.name, path=path, joined=dict(self.joined), partials=partials,
                                  rows=sum(c.changed_rows for c in self.commits))
