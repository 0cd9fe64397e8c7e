"""A small generic dependency graph: nodes, edges, a stable topological order and cycle detection.

Used for the project graph (datasource → pipe → target datasource → ...) and for node order inside a pipe.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

T = TypeVar("T", bound=Hashable)


@dataclass
class DAG(Generic[T]):
    """Edges point from a node to what it depends on (``add(pipe, [datasource])``)."""

    _deps: dict[T, list[T]] = field(default_factory=dict)

    def add(self, node: T, dependencies: Iterable[T] = ()) -> None:
        deps = self._deps.setdefault(node, [])
        for dep in dependencies:
            self._deps.setdefault(dep, [])
            if dep not in deps:
                deps.append(dep)

    @property
    def nodes(self) -> list[T]:
        return list(self._deps)

    def dependencies(self, node: T) -> list[T]:
        return list(self._deps.get(node, ()))

    def dependents(self, node: T) -> list[T]:
        return [n for n, deps in self._deps.items() if node in deps]

    def downstream(self, node: T) -> list[T]:
        """Every node that depends on ``node``, directly or not, in topological order."""
        seen: set[T] = set()
        stack = [node]
        while stack:
            for dependent in self.dependents(stack.pop()):
                if dependent not in seen:
                    seen.add(dependent)
                    stack.append(dependent)
        return [n for n in self.sorted() if n in seen]

    def find_cycle(self) -> list[T] | None:
        """One cycle as a path whose last element repeats the first, or None."""
        WHITE, GREY, BLACK = 0, 1, 2
        color = {n: WHITE for n in self._deps}
        for start in self._deps:
            if color[start] != WHITE:
                continue
            path: list[T] = [start]
            iters = [iter(self._deps[start])]
            color[start] = GREY
            while iters:
                nxt = next(iters[-1], None)
                if nxt is None:
                    color[path.pop()] = BLACK
                    iters.pop()
                elif color[nxt] == GREY:
                    return path[path.index(nxt):] + [nxt]
                elif color[nxt] == WHITE:
                    color[nxt] = GREY
                    path.append(nxt)
                    iters.append(iter(self._deps[nxt]))
        return None

    def sorted(self) -> list[T]:
        """Dependencies before dependents; insertion order breaks ties. Nodes on cycles come last."""
        remaining = {n: len(deps) for n, deps in self._deps.items()}
        dependents: dict[T, list[T]] = {n: [] for n in self._deps}
        for n, deps in self._deps.items():
            for d in deps:
                dependents[d].append(n)
        order = [n for n, count in remaining.items() if count == 0]
        i = 0
        while i < len(order):
            for dependent in dependents[order[i]]:
                remaining[dependent] -= 1
                if remaining[dependent] == 0:
                    order.append(dependent)
            i += 1
        placed = set(order)
        return order + [n for n in self._deps if n not in placed]
