"""The long-running parts of one pipeframe process, built in one place (`Runtime`): the group committer that appends,
the events API and the Kafka consumers (connectors/kafka.py) share, the continuous materializer each commit wakes,
the S3 imports (connectors/s3.py), and the background jobs beside them (COPY_SCHEDULE crons). A `Project` has one
(`Project.runtime`), kept across the project's reloads; `serve`, `run` and `dev` work with it (`server.Service`),
`pipeframe refresh --follow` runs its rounds in the calling thread (`follow`).

One shutdown path (`stop`): the committer commits what it holds and answers its waiters, the jobs stop, then the
materializer, after the round under way."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from pipeframe.engine.continuous import ContinuousMaterializer
    from pipeframe.engine.groupcommit import GroupCommitter
    from pipeframe.engine.materialize import Materializer, ViewRefresh


class Project(Protocol):
    """What the runtime asks of the project it works for (`pipeframe.project.Project`, which builds it)."""

    config: Any
    spark: Any
    warehouse: Any

    def materializer(self) -> Materializer: ...

    def landing_target(self, name: str) -> Any: ...

    def deployed_version(self) -> int: ...


class Job(Protocol):
    """Work that runs beside the runtime (e.g. COPY_SCHEDULE crons): started with it, stopped before it stops.
    `start` is given the server's Service when there is one (its project and write lock), else None."""

    def start(self, service: Any) -> None: ...

    def stop(self) -> None: ...


class Runtime:
    """The committer, the materializer it wakes and the jobs of one process. `current()` gives the project they
    work for now: the one that built the runtime, until a server serves another (`serve`: the dev loop swaps in a
    new one after each deploy, a deploy made elsewhere is followed)."""

    def __init__(self, project: Project) -> None:
        from pipeframe.engine.servicelog import ServiceLog

        self.current: Callable[[], Project] = lambda: project
        self.jobs: list[Job] = []
        self.serving = False  # a server decides the project (`serve`)
        # pipeframe.pipe_stats and pipeframe.ops_log: what this process records about itself (kept across a stop:
        # the requests a server answers while it shuts down are written by its last flush)
        self.service_log = ServiceLog(lambda: self.current().warehouse, project.config.service_log)
        self._build(project)

    def _build(self, project: Project) -> None:
        from pipeframe.connectors.kafka import KafkaIngest
        from pipeframe.connectors.kafka_stream import KafkaStream
        from pipeframe.connectors.s3 import S3Imports
        from pipeframe.engine.continuous import ContinuousMaterializer
        from pipeframe.engine.groupcommit import GroupCommitter

        self.materializer: ContinuousMaterializer = ContinuousMaterializer(lambda: self.current().materializer(),
                                                                           project.config.ingest.poll_ms)
        self.materializer.on_round.append(self.service_log.refreshed)
        self.committer: GroupCommitter = GroupCommitter(
            project.spark, project.warehouse, lambda name: self.current().landing_target(name),
            project.config.ingest, on_commit=self.materializer.committed, record=self.service_log.operation)
        self.kafka = KafkaIngest(self, KafkaStream)  # every Kafka datasource consumed into the committer
        self.s3 = S3Imports(self)  # every @auto S3 import datasource's new files appended

    def serve(self, current: Callable[[], Project], jobs: Iterable[Job] = ()) -> None:
        """Work for the project `current()` gives from now on (a server's), with `jobs` beside it."""
        self.current, self.jobs, self.serving = current, list(jobs), True

    def reloaded(self, project: Project) -> None:
        """`project` is the same folder read again (`Project.reload`): outside a server (which decides what it
        serves) the runtime works for it from now on, so an append reads the datasource as its file says now."""
        if not self.serving:
            self.current = lambda: project

    def start(self, service: Any = None) -> None:
        """Start the materializer, then the jobs."""
        for job in self._order():
            job.start(service)

    def stop(self) -> None:
        """The one shutdown path: what the committer holds is committed and its waiters answered (a request whose
        rows were committed is answered as committed), the jobs stop, then the materializer after its round."""
        for job in reversed(self._order()):
            job.stop()
        self._build(self.current())  # stopped for good: a later server or append of this process starts afresh

    def _order(self) -> list[Job]:
        # Stopped in reverse: the consumers stop sending (their requests in flight land), then the committer commits
        # what it holds, then the jobs and the materializer.
        return [self.service_log, self.materializer, *self.jobs, _Flush(self.committer), self.kafka, self.s3]

    def follow(self, stop: threading.Event, on_round: Callable[[list[ViewRefresh]], None] | None = None,
               on_error: Callable[[Exception], None] | None = None) -> None:
        """Keep every view in step with its sources until `stop` is set (`pipeframe refresh --follow`): the
        materializer's rounds, run in this thread, every `ingest.poll_ms`. Deploys made meanwhile by other processes
        are followed; a round that fails is reported to `on_error` and the next one tries again."""
        project = self.current()
        seen = project.deployed_version()
        while not stop.is_set():
            try:
                version = project.deployed_version()
                if version != seen:
                    seen = version
                    project.warehouse.snapshot(fresh=True)
                results = self.materializer.run_round()
            except Exception as exc:  # e.g. a table dropped by a deploy under way: the next round tries again
                if on_error is None:
                    raise
                on_error(exc)
                results = []
            if on_round is not None and results:
                on_round(results)
            stop.wait(self.materializer.poll)


class _Flush:
    """Stops the group committer with the runtime: the requests waiting are committed first."""

    def __init__(self, committer: GroupCommitter) -> None:
        self.committer = committer

    def start(self, service: Any) -> None:
        pass

    def stop(self) -> None:
        self.committer.stop()
