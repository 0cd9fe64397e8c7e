"""Views over the in-memory store (`serving/memstore.py`) for JVM-free tests of view maintenance: a pipe file
for a view, the view built as deploy builds it, its answer, the answer of one recomputation, and a refresh."""

from __future__ import annotations

import math

from pipeframe.engine.refresh import ViewRefresh, pinned, refresh_view
from pipeframe.plan import records
from pipeframe.plan.snapshot import DeployedResource, DeployedSnapshot
from pipeframe.serving.memstore import MemoryStore


def pipe(name: str, sql: str) -> str:
    body = "\n".join("    " + line for line in sql.splitlines())
    return f"NODE agg\nSQL >\n{body}\nTYPE materialized\nDATASOURCE {name}_mv\n"


def built(store: MemoryStore, view: DeployedResource, source: DeployedResource, deployed: DeployedSnapshot) -> None:
    """The view's table made and populated from its source (and the tables it joins) as they are, as deploy does."""
    store.create(view)
    version = store.history(source.path)[0].version
    joined = {name: store.history(deployed.table(name).path)[0].version for name in view.state.joined}
    store.append(view, store.run(view, view.state.maintenance.state_sql, store.snapshot(source, version),
                                 pinned(store, view, deployed, joined)),
                 metadata=records.ViewCommit(view.state.name, path="populate", joined=joined),
                 watermark={"source_version": version, "source_path": source.path})


def answer(store: MemoryStore, view: DeployedResource, frame) -> list[tuple]:
    """The view's finalized rows read from state rows `frame`, in a stable order (floats rounded to 9 digits)."""
    rows = store.fetch(store.run(view, view.state.read_sql or "", frame))

    def plain(value):
        if isinstance(value, float):
            return None if math.isnan(value) else round(value, 9)
        return value

    return sorted((tuple(plain(row[n]) for n, _ in view.state.columns) for row in rows), key=repr)


def recomputed(store: MemoryStore, view: DeployedResource, deployed: DeployedSnapshot) -> list[tuple]:
    """The view's answer from one aggregation of the source (and the tables it joins) as they are now."""
    latest = {name: store.history(deployed.table(name).path)[0].version
              for name in (view.state.source, *view.state.joined)}
    rows = store.snapshot(deployed.table(view.state.source), latest[view.state.source])
    return answer(store, view, store.run(view, view.state.maintenance.state_sql, rows,
                                         pinned(store, view, deployed, latest)))


def refresh(store: MemoryStore, view: DeployedResource, deployed: DeployedSnapshot,
            read_by_views: bool = False) -> ViewRefresh:
    return refresh_view(store, view, deployed.table(view.state.source), view.state.maintenance, deployed,
                        read_by_views=read_by_views)
