"""The project graph: typed resource keys and one small generic DAG (topological order, dependents,
downstream, drop order, cycles), used by the compiler, the deploy plan and the engine alike."""

from __future__ import annotations

from collections.abc import Hashable, Iterable
from dataclasses import dataclass, field
from typing import Generic, Literal, TypeVar

T = TypeVar("T", bound=Hashable)

KeyKind = Literal["datasource", "pipe"]


@dataclass(frozen=True, order=True)
class ResourceKey:
    """A resource's identity: its kind and name. A materialized pipe may share its name with its target, so the
    kind is part of the key. Written as ``datasource:sales`` / ``pipe:top_products`` in the state store."""

    kind: KeyKind
    name: str

    @classmethod
    def datasource(cls, name: str) -> ResourceKey:
        return cls("datasource", name)

    @classmethod
    def pipe(cls, name: str) -> ResourceKey:
        return cls("pipe", name)

    @classmethod
    def parse(cls, text: str) -> ResourceKey:
        kind, sep, name = text.partition(":")
        if not sep or kind not in ("datasource", "pipe"):
            raise ValueError(f"not a resource key: {text!r}")
        return cls(kind, name)  # type: ignore[arg-type]

    def __str__(self) -> str:
        return f"{self.kind}:{self.name}"


@dataclass
class DAG(Generic[T]):
    """Edges point from a node to what it depends on (``add(pipe, [datasource])``); insertion order breaks ties."""

    _deps: dict[T, list[T]] = field(default_factory=dict)

    @classmethod
    def of(cls, dependencies: Iterable[tuple[T, Iterable[T]]]) -> DAG[T]:
        """A DAG from (node, its dependencies) pairs."""
        dag: DAG[T] = cls()
        for node, deps in dependencies:
            dag.add(node, deps)
        return dag

    def add(self, node: T, dependencies: Iterable[T] = ()) -> None:
        deps = self._deps.setdefault(node, [])
        for dep in dependencies:
            self._deps.setdefault(dep, [])
            if dep not in deps:
                deps.append(dep)

    def __contains__(self, node: object) -> bool:
        return node in self._deps

    @property
    def nodes(self) -> list[T]:
        return list(self._deps)

    def dependencies(self, node: T) -> list[T]:
        return list(self._deps.get(node, ()))

    def dependents(self, node: T) -> list[T]:
        """The nodes that depend on ``node`` directly."""
        return [n for n, deps in self._deps.items() if node in deps]

    def downstream(self, nodes: Iterable[T]) -> list[T]:
        """Every node that depends on any of ``nodes``, directly or not, in topological order (``nodes`` excluded
        unless one depends on another)."""
        seen: set[T] = set()
        stack = list(nodes)
        while stack:
            for dependent in self.dependents(stack.pop()):
                if dependent not in seen:
                    seen.add(dependent)
                    stack.append(dependent)
        return [n for n in self.sorted() if n in seen]

    def drop_order(self, nodes: Iterable[T]) -> list[T]:
        """``nodes`` ordered so that nothing comes before what depends on it (dependents first)."""
        wanted = set(nodes)
        return [n for n in reversed(self.sorted()) if n in wanted]

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
