"""Renders the project's dependency graph as Mermaid or Graphviz dot text (`pipeframe graph`)."""

from __future__ import annotations

from pipeframe.compiler.compile import CompiledProject
from pipeframe.compiler.graph import ResourceKey


def _kind(project: CompiledProject, ref: ResourceKey) -> str:
    if ref.kind == "pipe":
        return project.pipes[ref.name].type or "pipe" if ref.name in project.pipes else "pipe"
    ds = project.datasources.get(ref.name)
    if ds is not None and ds.view:
        return "view target"
    return "datasource"


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
