"""What is deployed: one typed, immutable snapshot of the state store, read once per command and passed down to
the plan, the deployer, the materializer, the endpoints and the lifecycle commands. Pure Python."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from functools import cached_property

from pipeframe.compiler.graph import DAG, ResourceKey
from pipeframe.errors import PipeframeError
from pipeframe.plan.state import ResourceState, dag_of


@dataclass(frozen=True)
class DeployedResource:
    """A resource as the state store records it: its definition and, for tables, its live physical version."""

    state: ResourceState
    version: int = 0
    path: str | None = None
    deployed_at: datetime | None = None

    @property
    def key(self) -> ResourceKey:
        return self.state.key


@dataclass(frozen=True)
class DeployedSnapshot(Mapping[ResourceKey, DeployedResource]):
    """Every deployed resource by key, dependencies first, with their graph.

    `fingerprint` identifies this deployed state: a plan records the fingerprint it was made from, and the
    deployer refuses it when the state found under the deploy lock has another one (SQLMesh's
    ConflictingPlanError)."""

    resources: Mapping[ResourceKey, DeployedResource] = field(default_factory=dict)

    @classmethod
    def of(cls, resources: Iterable[DeployedResource]) -> DeployedSnapshot:
        listed = list(resources)
        dag = dag_of(r.state for r in listed)
        by_key = {r.key: r for r in listed}
        return cls({key: by_key[key] for key in dag.sorted() if key in by_key})

    # Mapping protocol: the snapshot reads like the dict of resources it holds.
    def __getitem__(self, key: ResourceKey) -> DeployedResource:
        return self.resources[key]

    def __iter__(self) -> Iterator[ResourceKey]:
        return iter(self.resources)

    def __len__(self) -> int:
        return len(self.resources)

    @cached_property
    def dag(self) -> DAG[ResourceKey]:
        return dag_of(r.state for r in self.resources.values())

    @cached_property
    def flow(self) -> DAG[ResourceKey]:
        """Which table's changes trigger which view: each view depends on its source and the tables it joins
        and follows (the dimension tables it joins are read, not followed)."""
        return DAG.of((key, [ResourceKey.datasource(n) for n in (r.state.source, *r.state.joined) if n]
                       if r.state.kind == "view" else ()) for key, r in self.resources.items())

    @cached_property
    def fingerprint(self) -> str:
        parts = sorted(f"{key}|{r.state.definition_hash()}|{r.version}|{r.path}" for key, r in self.resources.items())
        return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]

    @property
    def states(self) -> dict[ResourceKey, ResourceState]:
        return {key: r.state for key, r in self.resources.items()}

    def table(self, name: str) -> DeployedResource | None:
        """The deployed datasource or view target called `name` (None when there is none)."""
        return self.resources.get(ResourceKey.datasource(name))

    def views(self) -> list[DeployedResource]:
        """Every deployed view with a table, upstream before downstream."""
        return [r for r in self.resources.values() if r.state.kind == "view" and r.path]

    def downstream(self, names: Iterable[str]) -> list[DeployedResource]:
        """The views fed (directly or through other views) by the tables `names`, in graph order."""
        keys = self.flow.downstream(ResourceKey.datasource(n) for n in names)
        return [self.resources[k] for k in keys if k in self.resources and self.resources[k].state.kind == "view"
                and self.resources[k].path]

    def dependents(self, key: ResourceKey) -> list[DeployedResource]:
        """Everything that reads `key`, directly or not, in graph order."""
        return [self.resources[k] for k in self.dag.downstream([key]) if k in self.resources]

    def replaced(self, *resources: DeployedResource) -> DeployedSnapshot:
        """This snapshot with `resources` put in (a swap after a rebuild, a deploy's outcome)."""
        merged = dict(self.resources)
        merged.update({r.key: r for r in resources})
        return DeployedSnapshot.of(merged.values())


def resolve_view(deployed: DeployedSnapshot, name: str) -> DeployedResource:
    """A deployed view by its target name or its pipe name; PF701 when there is none."""
    views = deployed.views()
    for view in views:
        if name in (view.state.name, view.state.view_pipe):
            return view
    known = ", ".join(sorted(v.state.view_pipe or v.state.name for v in views)) or "none deployed"
    hint = f"Materialized pipes: {known}."
    table = deployed.table(name)
    if table is not None and table.state.kind == "shared":
        writers = ", ".join(v.state.view_pipe or v.state.name for v in views if v.state.name in table.state.writers)
        hint = f"`{name}` is written by several materialized pipes, each its own view: name one of them ({writers})."
    elif table is not None:
        hint = f"`{name}` is a landing datasource, not a view. " + hint
    raise PipeframeError("PF701", f"No deployed materialized view `{name}`.",
                         hint + " Run `pipeframe deploy` after adding one.")
