"""Renders the project's dependency graph: as Mermaid or Graphviz dot text (`pipeframe graph`), and as nodes and
edges with what each edge means (`GET /v0/graph`, drawn by the web console)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from pipeframe.compiler.compile import CompiledProject
from pipeframe.compiler.graph import ResourceKey

# What an edge means, in the direction data flows: a source whose new rows a materialized pipe applies (`triggers`),
# a dimension it only looks up (`lookup`), a materialized pipe writing its target (`writes`), a copy pipe writing
# its target (`copies`), any other read (`reads`: an endpoint or a copy pipe reading a table or another pipe).
Relation = Literal["triggers", "lookup", "writes", "copies", "reads"]


@dataclass(frozen=True)
class DiagramNode:
    key: ResourceKey
    kind: str  # datasource, view target, materialized, endpoint, copy or pipe

    def to_json(self) -> dict:
        return {"id": str(self.key), "name": self.key.name, "kind": self.kind}


@dataclass(frozen=True)
class DiagramEdge:
    source: ResourceKey  # data flows from source to target
    target: ResourceKey
    relation: Relation

    def to_json(self) -> dict:
        return {"from": str(self.source), "to": str(self.target), "relation": self.relation}


@dataclass(frozen=True)
class Diagram:
    """Every resource (dependencies first) and every edge of the project's graph."""

    nodes: tuple[DiagramNode, ...]
    edges: tuple[DiagramEdge, ...]

    def to_json(self) -> dict:
        return {"nodes": [n.to_json() for n in self.nodes], "edges": [e.to_json() for e in self.edges]}


def diagram(project: CompiledProject) -> Diagram:
    """The project's graph as nodes of a kind and edges of a relation."""
    return Diagram(tuple(DiagramNode(ref, _kind(project, ref)) for ref in project.order),
                   tuple(DiagramEdge(a, b, _relation(project, a, b)) for a, b in project.edges))


def _kind(project: CompiledProject, ref: ResourceKey) -> str:
    if ref.kind == "pipe":
        return project.pipes[ref.name].type or "pipe" if ref.name in project.pipes else "pipe"
    ds = project.datasources.get(ref.name)
    if ds is not None and ds.view:
        return "view target"
    return "datasource"


def _relation(project: CompiledProject, source: ResourceKey, target: ResourceKey) -> Relation:
    if source.kind == "pipe" and target.kind == "datasource":
        pipe = project.pipes.get(source.name)
        return "copies" if pipe is not None and pipe.type == "copy" else "writes"
    reader = project.pipes.get(target.name) if target.kind == "pipe" else None
    if reader is not None and reader.view is not None:
        return "lookup" if source.name in reader.view.dimensions else "triggers"
    return "reads"


def _id(ref: ResourceKey) -> str:
    return f"{ref.kind}_{ref.name}"


def mermaid(project: CompiledProject) -> str:
    shapes = {"datasource": ("[(", ")]"), "view target": ("[(", ")]"), "materialized": ("[[", "]]"),
              "endpoint": ("([", "])"), "copy": ("[/", "/]"), "pipe": ("[", "]")}
    lines = ["flowchart LR"]
    for name in project.order:
        left, right = shapes[_kind(project, name)]
        lines.append(f"    {_id(name)}{left}\"{name}<br/><small>{_kind(project, name)}</small>\"{right}")
    lines.extend(f"    {_id(a)} --> {_id(b)}" for a, b in project.edges)
    return "\n".join(lines) + "\n"


def dot(project: CompiledProject) -> str:
    shapes = {"datasource": "cylinder", "view target": "cylinder", "materialized": "box3d", "endpoint": "oval",
              "copy": "parallelogram", "pipe": "box"}
    lines = ["digraph pipeframe {", "  rankdir=LR;"]
    for name in project.order:
        kind = _kind(project, name)
        lines.append(f'  "{_id(name)}" [shape={shapes[kind]}, label="{name}\\n({kind})"];')
    lines.extend(f'  "{_id(a)}" -> "{_id(b)}";' for a, b in project.edges)
    lines.append("}")
    return "\n".join(lines) + "\n"
