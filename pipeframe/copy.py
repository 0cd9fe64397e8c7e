"""Copy pipes: a snapshot query written into its TARGET_DATASOURCE, on demand or on its COPY_SCHEDULE.

A copy goes through the same ingest path as `pipeframe append` (append) or `pipeframe replace` (replace): rows
that do not fit the target's schema are quarantined, and the target's own materialized views follow.
`CopyScheduler` runs the cron schedules (UTC) inside `pipeframe serve`, `run` and `dev` (scheduler.py's loop).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from pipeframe.errors import PipeframeError
from pipeframe.scheduler import CronScheduler

if TYPE_CHECKING:
    from pipeframe.engine.ingest import IngestResult
    from pipeframe.project import Project

log = logging.getLogger("pipeframe.copy")
COPY_MODES = ("append", "replace")


@dataclass(frozen=True)
class CopyResult:
    pipe: str
    target: str
    mode: str
    ingest: IngestResult
    elapsed: float


def run_copy(project: Project, pipe: str, params: Mapping[str, Any] | None = None,
             mode: str | None = None) -> CopyResult:
    """Run the copy pipe `pipe` once (as deployed) and write its rows into its target datasource."""
    start = time.perf_counter()
    endpoints = project.endpoints()
    compiled = endpoints.pipe(pipe, kind="copy")
    node = compiled.definition.typed_node
    mode = mode or (node.copy_mode if node else None) or "append"
    if mode not in COPY_MODES:
        raise PipeframeError("PF806", f"Copy mode `{mode}` is not understood.", "Use append or replace.")
    frame = endpoints.frame(pipe, params or {}, kind="copy")
    target = compiled.target or ""
    result = project.append(target, frame) if mode == "append" else project.replace(target, frame)
    return CopyResult(pipe, target, mode, result, time.perf_counter() - start)


def schedules(project: Project) -> dict[str, str]:
    """Copy pipe name → its cron expression, for the pipes that have one (not @on-demand)."""
    found = {}
    for name, pipe in project.compiled.pipes.items():
        node = pipe.definition.typed_node
        if pipe.type == "copy" and node and node.copy_schedule and node.copy_schedule.lower() != "@on-demand":
            found[name] = node.copy_schedule
    return found


class CopyScheduler(CronScheduler):
    """Runs each scheduled copy pipe at its COPY_SCHEDULE cron times (UTC) while the server runs."""

    what = "copy"

    def schedules(self, project: Project) -> dict[str, str]:
        return schedules(project)

    def run(self, project: Project, name: str, at: datetime) -> CopyResult:
        return run_copy(project, name)

    def logged(self, name: str, outcome: CopyResult | PipeframeError) -> None:
        if isinstance(outcome, PipeframeError):
            super().logged(name, outcome)
        else:
            log.info("copy %s: %d row(s) %s into %s in %.1f s", name, outcome.ingest.accepted,
                     "appended" if outcome.mode == "append" else "replaced", outcome.target, outcome.elapsed)
