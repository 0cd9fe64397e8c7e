"""ResourceState: the deployable description of one resource, as recorded in the warehouse's state store.

`desired_state(compiled)` derives it from a CompiledProject; deploy stores it as JSON and diffs against it.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field, replace
from typing import Literal

from pipeframe.compiler.compile import CompiledDatasource, CompiledProject, writer_table
from pipeframe.compiler.graph import DAG, ResourceKey
from pipeframe.compiler.maintenance import MaintenancePlan
from pipeframe.compiler.viewplan import PLAIN_READ, ViewPlan

# "shared": a datasource several materialized pipes write. It owns no table: each writer is a view of its own
# (`writer_table(target, pipe)`, with its own state table and watermark) and a read of the shared name reads the
# union of the writers' state rows through `read_sql`.
Kind = Literal["datasource", "view", "endpoint", "copy", "materialized", "pipe", "shared"]


@dataclass(frozen=True)
class ResourceState:
    """One resource as deploy sees it.

    `key` is unique across kinds (`datasource:sales`, `pipe:top_products`): a materialized pipe may share
    its name with its target. Datasource-like resources (kind datasource or view) own a physical table;
    pipes own none.
    """

    key: ResourceKey
    name: str
    kind: Kind
    # Physical definition of a table (changing it needs a rebuild or an ALTER):
    columns: tuple[tuple[str, str], ...] = ()  # (name, Spark type) as stored (states as state types)
    partition_key: str | None = None
    sorting_key: tuple[str, ...] = ()
    # For view targets: what fills the table.
    view_pipe: str | None = None
    source: str | None = None  # the datasource that triggers the view
    joined: tuple[str, ...] = ()  # the other datasources it joins whose changes it follows (not dimensions)
    state_sql: str | None = None
    keys: tuple[str, ...] = ()
    read_sql: str | None = None  # SELECT over `{table}` that returns finalized values
    compact_sql: str | None = None  # SELECT over `{table}` that folds state rows into one row per key
    negate_sql: str | None = None  # SELECT over state rows `{table}` that subtracts them; None: not invertible
    backfill: str | None = None  # "skip" or None
    follow_ttl: bool = False  # retract the rows its source's (and joined tables') ENGINE_TTL deletes
    # How the engine maintains it (views; None in a record written before plans were recorded: deploy records it)
    maintenance: MaintenancePlan | None = None
    # Metadata (an ALTER without moving data):
    description: str = ""
    ttl: str | None = None
    tokens: tuple[tuple[str, str], ...] = ()
    engine: str | None = None
    forward_query: str | None = None
    # Pipes: the compiled statement (analysis mode) is their whole definition.
    sql: str | None = None
    depends_on: tuple[ResourceKey, ...] = field(default_factory=tuple)  # the resources read
    writers: tuple[str, ...] = ()  # a shared datasource: the views (by name) whose state rows it reads

    @property
    def has_table(self) -> bool:
        return self.kind in ("datasource", "view")

    @property
    def schema(self) -> str:
        """The table's columns as a Spark DDL schema (`name` TYPE, ...), for empty frames and rows read as files."""
        return ", ".join(f"`{name}` {type_}" for name, type_ in self.columns)

    @property
    def aggregated(self) -> bool:
        """A view whose rows are states merged per key (not one row per source row)."""
        return self.kind == "view" and self.read_sql != PLAIN_READ.format(relation="{table}")

    def physical_hash(self) -> str:
        """What, when changed, means the table's rows must be rebuilt."""
        return _hash([self.columns, self.partition_key, self.source, self.state_sql, self.keys])

    def definition_hash(self) -> str:
        """Everything recorded; equal hashes mean the resource is unchanged."""
        return _hash(self.to_json())

    def to_json(self) -> dict:
        """The stored form (`records.encode_state` adds its format): keys as `kind:name` text."""
        data = asdict(self)
        data["key"] = str(self.key)
        data["depends_on"] = [str(k) for k in self.depends_on]
        if not self.writers:  # recorded only where there are some: the states of other resources hash as before
            del data["writers"]
        return data

    def union_sql(self, paths: Iterable[str]) -> str:
        """A shared datasource's `read_sql` with its `{table}` read as the union of its writers' state rows
        (`paths`: their tables, as the reader names them)."""
        columns = ", ".join(f"`{name}`" for name, _ in self.columns)
        union = " UNION ALL ".join(f"SELECT {columns} FROM {path}" for path in paths)
        return (self.read_sql or "SELECT * FROM {table}").replace("{table}", f"({union}) AS `__pf_union`")


def _hash(value: object) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True, default=list).encode()).hexdigest()[:16]


def dag_of(states: Iterable[ResourceState]) -> DAG[ResourceKey]:
    """The dependency graph of a set of resources (what each reads), dependencies first."""
    return DAG.of((s.key, s.depends_on) for s in states)


def _maintenance(plan: ViewPlan, joined: tuple[str, ...], source: str | None, depends_on: tuple[ResourceKey, ...],
                 states: dict[ResourceKey, ResourceState]) -> MaintenancePlan:
    """A view's maintenance plan, from its SQL and the columns of the tables it reads (states made already: the
    resources are made in dependency order)."""
    from pipeframe.compiler.maintenance_sql import maintenance_plan  # parses SQL: only when a deploy is planned

    source_state = states.get(ResourceKey.datasource(source or ""))
    others = {s.name: [n for n, _ in s.columns] for key in depends_on
              if (s := states.get(key)) is not None and s.name != source}
    # a pipe read by the view has no columns here: its columns are not known, and so no partial states
    known = source_state is not None and all(others.values())
    return maintenance_plan(plan.state_sql, plan.compact_sql("{table}"), plan.negate_sql("{table}"), joined,
                            source_state.columns if source_state else [], others if known else None,
                            plan.keys if plan.aggregated else (),
                            tuple((c.name, c.state) for c in plan.columns if c.state is not None))


def desired_state(compiled: CompiledProject) -> dict[ResourceKey, ResourceState]:
    """Every resource of a valid compiled project by key, in dependency order."""
    graph = compiled.graph
    # A materialized pipe is deployed as part of its target (kind "view"): the view depends on what the
    # pipe reads, and the pipe itself is not a separate resource.
    folded = {ResourceKey.pipe(p.name) for p in compiled.pipes.values() if p.type == "materialized"}
    deps = {key: [d for s in graph.dependencies(key) for d in (graph.dependencies(s) if s in folded else [s])]
            for key in graph.nodes}
    states: dict[ResourceKey, ResourceState] = {}
    for ref in compiled.order:
        key = ref
        if key in folded:
            continue
        depends_on = tuple(dict.fromkeys(deps.get(key, ())))
        if ref.kind == "datasource":
            ds = compiled.datasources.get(ref.name)
            if ds is None:
                continue
            if ds.writers:
                states.update(_shared(compiled, ds, key, states))
                continue
            states[key] = _table_state(compiled, ds, key, ds.view, depends_on, states)
        else:
            pipe = compiled.pipes.get(ref.name)
            if pipe is None:
                continue
            states[key] = ResourceState(
                key=key, name=ref.name, kind=pipe.type or "pipe", description=pipe.definition.description,
                tokens=tuple((t.name, t.scope) for t in pipe.definition.tokens), sql=pipe.sql,
                depends_on=depends_on,
            )
    return states


def _shared(compiled: CompiledProject, ds: CompiledDatasource, key: ResourceKey,
            states: dict[ResourceKey, ResourceState]) -> dict[ResourceKey, ResourceState]:
    """A datasource several materialized pipes write: one view per writer (its own table, named
    `writer_table(target, pipe)`), then the shared name reading their union, finalized as the target is."""
    made: dict[ResourceKey, ResourceState] = {}
    for pipe in ds.writers:
        name = writer_table(ds.name, pipe)
        depends_on = tuple(dict.fromkeys(compiled.graph.dependencies(ResourceKey.pipe(pipe))))
        made[ResourceKey.datasource(name)] = _table_state(compiled, replace(ds, name=name), ResourceKey.datasource(
            name), pipe, depends_on, states)
    first = next(iter(made.values()))
    made[key] = ResourceState(
        key=key, name=ds.name, kind="shared", columns=first.columns, keys=first.keys, read_sql=first.read_sql,
        description=first.description, tokens=first.tokens, engine=first.engine,
        writers=tuple(s.name for s in made.values()), depends_on=tuple(made))
    return made


def _table_state(compiled: CompiledProject, ds: CompiledDatasource, key: ResourceKey, writer: str | None,
                 depends_on: tuple[ResourceKey, ...], states: dict[ResourceKey, ResourceState]) -> ResourceState:
    """A datasource's table: a landing datasource, or the target of the materialized pipe `writer`."""
    definition = ds.definition
    view = compiled.pipes[writer].view if writer else None
    plan = view.plan if view is not None else None
    return ResourceState(
        key=key, name=ds.name, kind="view" if plan is not None else "datasource",
        columns=tuple((c.name, c.type or "STRING") for c in ds.columns),
        partition_key=definition.partition_key if definition else None,
        sorting_key=definition.sorting_key if definition else (),
        view_pipe=writer if plan is not None else None,
        source=view.trigger if view is not None else None,
        joined=view.joined if view is not None else (),
        state_sql=plan.state_sql if plan is not None else None,
        keys=plan.keys if plan is not None else (),
        read_sql=plan.read_sql("{table}") if plan is not None else None,
        compact_sql=plan.compact_sql("{table}") if plan is not None else None,
        negate_sql=plan.negate_sql("{table}") if plan is not None else None,
        backfill=definition.backfill if definition else None,
        follow_ttl=view.follow_ttl if view is not None else False,
        maintenance=_maintenance(plan, view.joined, view.trigger, depends_on, states)
        if plan is not None and view is not None else None,
        description=definition.description if definition else "",
        ttl=definition.ttl if definition else None,
        tokens=tuple((t.name, t.scope) for t in definition.tokens) if definition else (),
        engine=definition.engine if definition else None,
        forward_query=definition.forward_query if definition else None,
        depends_on=depends_on,
    )
