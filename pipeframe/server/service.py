"""What the HTTP server serves: the current compiled + deployed Project and its Endpoints, swapped whole by `reload`
after a deploy, and the lock that serializes writes. No HTTP here: routes call it."""

from __future__ import annotations

import threading
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from pipeframe.compiler.graph import ResourceKey
from pipeframe.server import auth

if TYPE_CHECKING:
    from pipeframe.compiler.compile import CompiledPipe
    from pipeframe.datafiles.model import TokenScope
    from pipeframe.endpoints import EndpointResult, Endpoints
    from pipeframe.engine.ingest import IngestResult
    from pipeframe.engine.materialize import ViewRefresh
    from pipeframe.plan.snapshot import DeployedResource, DeployedSnapshot
    from pipeframe.project import Project


class BackgroundJob(Protocol):
    """Work that runs beside the server (e.g. COPY_SCHEDULE crons): started once it listens, stopped before it
    stops."""

    def start(self, service: Service) -> None: ...

    def stop(self) -> None: ...


@dataclass(frozen=True)
class Snapshot:
    """One compiled + deployed project and its endpoints; a request uses one snapshot from start to end."""

    project: Project
    endpoints: Endpoints


class Service:
    """What the server serves: the current Project (swapped by `reload` after each deploy of the dev loop), its
    Endpoints, the token rules, and a lock that serializes writes (events, pause/resume, delete) and reloads."""

    def __init__(self, project: Project, jobs: Iterable[BackgroundJob] = ()) -> None:
        self.lock = threading.RLock()
        self.jobs: list[BackgroundJob] = list(jobs)
        self.current: Snapshot
        self.reload(project)

    def reload(self, project: Project, deployed: DeployedSnapshot | None = None) -> None:
        """Serve `project` (compiled and deployed) from now on; requests already running finish on the old one.
        `deployed`: the deployed state when the caller knows it (the dev loop), instead of reading it."""
        with self.lock:
            self.current = Snapshot(project, project.endpoints(deployed))

    @property
    def project(self) -> Project:
        return self.current.project

    # -------------------------------------------------------------------------------------- tokens
    @property
    def tokens_enforced(self) -> bool:
        return bool(self.project.config.tokens)

    def authenticate(self, secret: str | None) -> str | None:
        """The name of the token whose secret this is; None when no tokens are configured (everything is open)."""
        return auth.authenticate(self.project.config.tokens, secret)

    def authorize(self, caller: str | None, key: ResourceKey, scope: TokenScope) -> None:
        auth.authorize(caller, key, self.current.endpoints.deployed.get(key), scope)

    # ------------------------------------------------------------------------------------ reading
    def readable_pipes(self, caller: str | None) -> list[CompiledPipe]:
        """The deployed endpoint pipes the token may read."""
        endpoints = self.current.endpoints
        deployed = {name: endpoints.deployed.get(ResourceKey.pipe(name)) for name in endpoints.names}
        return [endpoints.compiled.pipes[name] for name, resource in deployed.items()
                if resource is not None and auth.may(caller, resource, "READ")]

    def call(self, pipe: str, params: dict[str, Any], caller: str | None) -> EndpointResult:
        self.authorize(caller, ResourceKey.pipe(pipe), "READ")
        return self.current.endpoints.run(pipe, params)

    # ------------------------------------------------------------------------------------ writing
    def ingest(self, datasource: str, lines: list[str]) -> IngestResult:
        """NDJSON lines through `Project.append`, as `pipeframe append` does: quarantine, then the views."""
        with self.lock:
            return self.project.append(datasource, lines)

    def pause(self, view: str, permanent: bool) -> None:
        with self.lock:
            self.project.pause(view, permanent)

    def resume(self, view: str) -> list[ViewRefresh]:
        with self.lock:
            return self.project.resume(view)

    def delete_view(self, view: str, force: bool) -> list[DeployedResource]:
        """Drop a view (and with `force` what reads it); returns what was dropped."""
        with self.lock:
            before = self.current.endpoints.deployed
            result = self.project.delete_view(view, force)
            self.current.endpoints.refresh(self.project.snapshot)  # dropped endpoints answer "not deployed"
            return [before[c.key] for c in result.plan.pending if c.key in before]
