"""`Project`: the public Python API of pipeframe. The CLI, the dev loop and the HTTP server are clients of it.

A Project is a folder of datafiles plus its settings for one environment; compiling it needs no JVM.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pipeframe.config import ProjectConfig, load_config
from pipeframe.errors import Diagnostic, Location, PipeframeError

if TYPE_CHECKING:  # the compiler and the engine are imported lazily so `import pipeframe` stays cheap
    import threading

    from pipeframe.compiler.compile import CompiledProject
    from pipeframe.datafiles.model import Datasource
    from pipeframe.endpoints import EndpointResult, Endpoints
    from pipeframe.engine.deploy import DeployResult
    from pipeframe.engine.groupcommit import GroupCommitter
    from pipeframe.engine.ingest import IngestResult
    from pipeframe.engine.lifecycle import ViewStatus
    from pipeframe.engine.localstate import LocalServer
    from pipeframe.engine.materialize import BackfillProgress, Materializer, ViewRefresh
    from pipeframe.engine.query import DataFrame
    from pipeframe.engine.session import SparkSession
    from pipeframe.engine.warehouse import Deployment, Warehouse
    from pipeframe.plan import records
    from pipeframe.plan.diff import Change, Plan
    from pipeframe.plan.snapshot import DeployedResource, DeployedSnapshot
    from pipeframe.runtime import Runtime
    from pipeframe.serving.reader import Reader

INGEST_WINDOW = 100  # a landing datasource's newest commits `status` reads to say how its group commits were made


@dataclass(frozen=True)
class CheckReport:
    """The outcome of `pipeframe check`: every diagnostic plus a summary of the project."""

    project: CompiledProject
    diagnostics: tuple[Diagnostic, ...]

    @property
    def errors(self) -> list[Diagnostic]:
        return [d for d in self.diagnostics if d.is_error]

    @property
    def warnings(self) -> list[Diagnostic]:
        return [d for d in self.diagnostics if d.severity == "warning"]

    @property
    def ok(self) -> bool:
        return not self.errors

    def to_json(self) -> dict:
        project = self.project
        return {
            "ok": self.ok,
            "errors": len(self.errors),
            "warnings": len(self.warnings),
            "diagnostics": [d.to_json() for d in self.diagnostics],
            "datasources": sorted(project.datasources),
            "pipes": {name: p.type or "pipe" for name, p in sorted(project.pipes.items())},
            "views": [
                {"pipe": v.pipe, "target": v.target, "trigger": v.trigger, "verdict": v.verdict.status,
                 "rewrites": list(v.verdict.rewrites), "dimensions": list(v.dimensions)}
                for v in project.views
            ],
            "endpoints": {
                name: [p.to_json() for p in pipe.parameters]
                for name, pipe in sorted(project.pipes.items()) if pipe.type == "endpoint"
            },
        }


class Project:
    """A pipeframe project folder in one environment.

    >>> project = Project("example_project")
    >>> report = project.check()
    """

    def __init__(self, root: str | os.PathLike[str] = ".", env: str | None = None,
                 environ: Mapping[str, str] | None = None, spark: SparkSession | None = None,
                 cache: bool = True, engine: str = "auto") -> None:
        from pipeframe.endpoints import ENGINES

        if engine not in ENGINES:
            raise PipeframeError("PF809", f"Unknown engine `{engine}`.", f"Use one of {', '.join(ENGINES)}.")
        self._spark = spark
        # Which engine answers reads (endpoints, `read`, `status`): DuckDB over the tables' snapshots, with Spark
        # where it cannot answer as Spark would ("auto"), DuckDB alone ("duckdb"), or Spark alone ("spark").
        self.engine = engine
        self.root = Path(root).resolve()
        self.env = env
        self.environ = dict(os.environ if environ is None else environ)
        # Reuse unchanged files' parse and compile results from `.pipeframe/cache/` (compiler/cache.py).
        self.cache = cache and not self.environ.get("PIPEFRAME_NO_CACHE")
        if not self.root.is_dir():
            raise PipeframeError("PF004", f"Project folder `{root}` does not exist.",
                                 "Pass the folder that holds your .datasource and .pipe files, "
                                 "or create one with `pipeframe init`.", Location(str(root)))

    def reload(self) -> Project:
        """The same folder read again (after a save): a new compile, sharing this project's Spark session and, while
        the warehouse setting is unchanged, its warehouse and deployed snapshot (no state-store read)."""
        fresh = Project(self.root, self.env, self.environ, self._spark or self.__dict__.get("spark"), self.cache,
                        self.engine)
        warehouse = self.__dict__.get("warehouse")
        if warehouse is not None and fresh.config.warehouse_uri.rstrip("/") == warehouse.uri:
            fresh.__dict__["warehouse"] = warehouse
        reader = self.__dict__.get("reader")
        if reader is not None and fresh.config.warehouse_uri.rstrip("/") == reader.uri:
            fresh.__dict__["reader"] = reader  # its file and answer caches stay warm across saves
        runtime = self.__dict__.get("runtime")
        if runtime is not None and fresh.__dict__.get("warehouse") is warehouse:
            fresh.__dict__["runtime"] = runtime  # one committer and materializer per process, whatever is compiled
            runtime.reloaded(fresh)
        return fresh

    @cached_property
    def config(self) -> ProjectConfig:
        return load_config(self.root, self.env, self.environ)

    def compile(self) -> CompiledProject:
        """Parse and compile every datafile; problems are in the result's diagnostics (never raised). Files and
        steps unchanged since the last run come from the check cache; the result is the same."""
        import gc

        from pipeframe.compiler.cache import CheckCache
        from pipeframe.compiler.compile import compile_project
        from pipeframe.datafiles.loader import load_resources

        # A compile makes ~100 objects per file that live on; the collector's passes over them (reading and
        # writing the cache above all) cost more than the few cycles it would free meanwhile. Afterwards they go
        # to the oldest generation as they are (freeze, unfreeze), not through one pass over all of them.
        collecting = gc.isenabled()
        gc.disable()
        try:
            cache = CheckCache.open(self.root, self.environ, self.config.environment) if self.cache else None
            resources, diagnostics = load_resources(self.root, self.config.ignore, self.environ, cache)
            compiled = compile_project(resources, self.config.vars, diagnostics, cache)
            if cache is not None:
                cache.save()
        finally:
            gc.freeze()
            gc.unfreeze()
            if collecting:
                gc.enable()
        return compiled

    @cached_property
    def compiled(self) -> CompiledProject:
        return self.compile()

    def check(self) -> CheckReport:
        project = self.compiled
        return CheckReport(project, project.diagnostics)

    def require_valid(self) -> CompiledProject:
        """The compiled project, or a PipeframeError carrying every error."""
        project = self.compiled
        if project.errors:
            raise PipeframeError.many(project.errors)
        return project

    def _known_view(self, name: str) -> None:
        """Refuse, before Spark starts, a view name the files do not declare (a materialized pipe or its target)."""
        compiled = self.compiled
        views = {n for v in compiled.views for n in (v.pipe, v.target)}
        if name in views:
            return
        hint = "Materialized pipes: " + (", ".join(sorted(v.pipe for v in compiled.views)) or "none") + "."
        if name in compiled.datasources:
            hint = f"`{name}` is a landing datasource, not a view. " + hint
        raise PipeframeError("PF701", f"No materialized view `{name}` in the project.", hint)

    def _known_landing(self, name: str) -> None:
        """Refuse, before Spark starts, writing to a name that is no landing datasource in the files."""
        compiled = self.compiled
        ds = compiled.datasources.get(name)
        if ds is None:
            known = ", ".join(sorted(n for n, d in compiled.datasources.items() if not d.view)) or "none"
            raise PipeframeError("PF702", f"No datasource `{name}` in the project.", f"Datasources: {known}.")
        view = compiled.pipes[ds.view].view if ds.view else None
        if view is not None and ds.writers:
            writers = [v for v in compiled.views if v.pipe in ds.writers]
            raise PipeframeError("PF716", f"`{name}` is the target of the materialized pipes "
                                 f"{', '.join(f'`{v.pipe}`' for v in writers)}; only they write to it.",
                                 f"Append to one of their sources ({', '.join(f'`{v.trigger}`' for v in writers)}) "
                                 "instead.")
        if view is not None:
            raise PipeframeError("PF716", f"`{name}` is the target of the materialized pipe `{view.pipe}`; only its "
                                 "pipe writes to it.", f"Append to its source `{view.trigger}` instead.")

    def _known_table(self, name: str) -> None:
        """Refuse, before Spark starts, a name that is neither a datasource nor a materialized pipe in the files."""
        compiled = self.compiled
        if name in compiled.datasources or any(v.pipe == name for v in compiled.views):
            return
        import difflib

        close = difflib.get_close_matches(name, sorted(compiled.datasources), n=1)
        hint = f"Did you mean `{close[0]}`?" if close else \
            "Datasources: " + (", ".join(sorted(compiled.datasources)) or "none") + "."
        raise PipeframeError("PF702", f"No datasource or materialized view `{name}` in the project.", hint)

    def require_pipe(self, name: str, kind: str = "endpoint", params: Mapping[str, Any] | None = None) -> None:
        """Refuse, before Spark starts, a pipe the files do not declare as a `kind` pipe (PF801, PF802, as
        `Endpoints.pipe` answers) and parameter values its templates reject (PF202, naming the parameter)."""
        from pipeframe.endpoints import RESERVED_PARAMS, declared_pipe

        pipe = declared_pipe(self.compiled, name, kind)
        if params is not None:
            pipe.render({k: v for k, v in params.items() if k not in RESERVED_PARAMS})

    def _check_input(self, data: object, format: str | None) -> None:
        """Refuse, before Spark starts, an input file that does not exist or whose format cannot be told."""
        from pipeframe.engine.ingest import detect_format

        if isinstance(data, str | os.PathLike):
            path = str(data)
            if "://" not in path and not Path(path).exists():
                raise PipeframeError("PF711", f"File `{path}` does not exist.",
                                     "Check the path (it is relative to the current folder, not the project).")
            detect_format(path, format)

    def _known_chunk_column(self, view: str, chunk_by: str | None) -> None:
        """Refuse, before Spark starts, a `--chunk-by` that is not a column of the view's landing source (PF705; a
        view reading another view's states is checked by Spark)."""
        compiled = self.compiled
        found = next((v for v in compiled.views if view in (v.pipe, v.target)), None)
        source = compiled.datasources.get(found.trigger or "") if found and chunk_by else None
        if source is None or source.view or source.definition is None:
            return
        columns = [c.name for c in source.columns]
        if chunk_by.strip("`").lower() not in {c.lower() for c in columns}:
            raise PipeframeError("PF705", f"--chunk-by `{chunk_by}` is not a column of `{found.trigger}`.",
                                 f"Columns: {', '.join(columns)}.")

    def require_datafiles(self, allow_empty: bool = False) -> None:
        """Refuse, before Spark starts and before anything is written, a folder without a .datasource or .pipe file
        (PF006): deploying it would plan nothing, or drop every table deployed from the project. `allow_empty`
        (deploy --allow-destructive) lets a folder with a pipeframe.yaml deploy an empty project on purpose; a
        folder with neither datafiles nor pipeframe.yaml is never taken for a project."""
        from pipeframe.config import CONFIG_FILE
        from pipeframe.datafiles.loader import RESOURCE_SUFFIXES, discover

        if any(path.suffix in RESOURCE_SUFFIXES for path in discover(self.root, self.config.ignore)):
            return
        if not (self.root / CONFIG_FILE).is_file():
            raise PipeframeError("PF006", f"{self.root} is not a pipeframe project: it has no {CONFIG_FILE} and no "
                                 ".datasource or .pipe files.",
                                 "Pass the project folder with `-p <project dir>` (or PIPEFRAME_PROJECT), or create "
                                 f"a starter project here with `pipeframe init {self.root}`.")
        if not allow_empty:
            raise PipeframeError("PF006", f"{self.root} has a {CONFIG_FILE} but no .datasource or .pipe files: there "
                                 "is nothing to deploy.",
                                 "Add datafiles, or pass the project folder with `-p <project dir>`; to drop "
                                 "everything deployed from this project on purpose, deploy with --allow-destructive.")

    def sql(self, target: str) -> str:
        """The compiled Spark SQL of `pipe` or `pipe.node`; materialized pipes also show their state SQL."""
        project = self.compiled
        pipe_name, _, node_name = target.partition(".")
        pipe = project.pipes.get(pipe_name)
        if pipe is None:
            import difflib

            close = difflib.get_close_matches(pipe_name, sorted(project.pipes), n=1)
            if pipe_name in project.datasources:
                hint = f"`{pipe_name}` is a datasource; query it with `pipeframe query`."
            else:
                hint = f"Did you mean `{close[0]}`?" if close else "Run `pipeframe check` to list the pipes."
            errors = [d for d in project.errors if d.location and d.location.path.endswith(f"{pipe_name}.pipe")]
            if errors:
                raise PipeframeError.many(errors)
            raise PipeframeError("PF301", f"Unknown pipe `{pipe_name}`.", hint)
        if node_name:
            nodes = dict(pipe.node_sql)
            if node_name not in nodes:
                raise PipeframeError("PF301", f"Pipe `{pipe_name}` has no node `{node_name}`.",
                                     f"Nodes: {', '.join(nodes)}.")
            return nodes[node_name]
        return pipe.sql

    def read_path(self, pipe: str) -> tuple[str, str]:
        """How an endpoint pipe is answered, judged from the files alone (its statement in analysis mode): ("duckdb",
        its DuckDB SQL) on the read path, or ("spark", why not) where DuckDB cannot answer with Spark's meaning."""
        from pipeframe.compiler.service import SERVICE_TABLES
        from pipeframe.endpoints import declared_pipe
        from pipeframe.serving import translate

        compiled = declared_pipe(self.compiled, pipe, "endpoint")
        schema = {name: {c.name: (c.value_type if c.state and not c.explicit else c.type) or "STRING"
                         for c in ds.columns} for name, ds in self.compiled.datasources.items()}
        schema.update({t.relation: dict(t.columns) for t in SERVICE_TABLES})  # pipeframe.pipe_stats, ...
        try:
            return "duckdb", translate.translate(translate.parse(compiled.sql), schema, named=True).sql
        except translate.Untranslatable as refused:
            return "spark", str(refused)

    def graph(self, fmt: str = "mermaid") -> str:
        from pipeframe.compiler import diagram

        renderers = {"mermaid": diagram.mermaid, "dot": diagram.dot}
        if fmt not in renderers:
            raise PipeframeError("PF005", f"Unknown graph format `{fmt}`.", "Use mermaid or dot.")
        return renderers[fmt](self.compiled)

    # ------------------------------------------------------------------------------ engine side
    @cached_property
    def spark(self) -> SparkSession:
        """The SparkSession for this project (started on first use; pass `spark=` to share one)."""
        if self._spark is not None:
            return self._spark
        from pipeframe.engine.session import get_session

        self.require_datafiles(allow_empty=True)  # a folder that is no project starts no JVM

        return get_session(self.config)

    # ------------------------------------------------------------------------ the warm local engine
    def local_start(self, port: int | None = None) -> LocalServer:
        """Start this project's local Spark Connect engine in the background (`pipeframe local start`): while it
        is up, every command of the project uses it instead of starting Spark."""
        from pipeframe.engine.localserver import start

        self.require_datafiles(allow_empty=True)
        return start(self.config, port)

    def local_stop(self) -> LocalServer | None:
        """Stop this project's local engine; the one stopped, or None when none was running."""
        from pipeframe.engine.localserver import stop

        return stop(self.root)

    def local_status(self) -> LocalServer | None:
        """This project's local engine while it is up, else None."""
        from pipeframe.engine.localstate import running

        return running(self.root)

    @cached_property
    def warehouse(self) -> Warehouse:
        from pipeframe.engine.warehouse import Warehouse

        return Warehouse(lambda: self.spark, self.config.warehouse_uri)  # Spark starts when a step needs it

    @property
    def snapshot(self) -> DeployedSnapshot:
        """What is deployed: read from the warehouse's state store once, and kept up to date by this project's own
        deploys and rebuilds."""
        return self.warehouse.snapshot()

    @cached_property
    def reader(self) -> Reader:
        """The read path without a JVM (`pipeframe.serving`): DuckDB over the warehouse's Delta tables."""
        from pipeframe.serving.reader import Reader
        from pipeframe.serving.snapshots import storage_options

        self.require_datafiles(allow_empty=True)  # a folder that is no project is read by nothing
        conf = dict(self.config.spark.conf)
        return Reader(self.config.warehouse_uri, storage_options(conf),
                      str(conf.get("spark.sql.session.timeZone") or "UTC"))

    def deployed_version(self) -> int:
        """The Delta version of the state store: it moves with every deploy, drop and view rebuild, whichever
        process made it, so a long-running server can tell that what is deployed changed. -1 before any deploy.

        A local warehouse is looked at without Spark (the newest commit file of the state table's `_delta_log`);
        any other URI asks Delta for the table's last version."""
        from pipeframe.engine.warehouse import local_version, state_path

        local = local_version(state_path(self.config.warehouse_uri))
        return local if local is not None else self.warehouse.version_of(self.warehouse.state_path)

    def plan(self, allow_destructive: bool = False) -> Plan:
        """What `deploy` would do: the files (desired) against the deployed snapshot."""
        from pipeframe.plan.diff import diff, refuse_dropping_what_is_read
        from pipeframe.plan.state import desired_state

        self.require_datafiles(allow_empty=allow_destructive)
        compiled = self.compiled
        if compiled.errors and not compiled.unresolved:  # no removed datasource to explain: no need for Spark
            raise PipeframeError.many(compiled.errors)
        deployed = self.snapshot
        if compiled.errors:
            removed = {r.state.name for r in deployed.values() if r.state.has_table} - set(compiled.datasources)
            refusal = refuse_dropping_what_is_read(removed, compiled.unresolved, compiled.errors)
            raise refusal or PipeframeError.many(compiled.errors)
        return diff(desired_state(compiled), deployed.states, allow_destructive=allow_destructive,
                    base=deployed.fingerprint)

    def deploy(self, allow_destructive: bool = False, on_step: Callable[[str, Change], None] | None = None,
               plan: Plan | None = None) -> DeployResult:
        """Apply `plan` (by default `self.plan(allow_destructive)`): create, alter, rebuild (beside the live
        version, then swap) and drop resources. A plan made from a deployed state that has changed since is
        refused (PF608) and nothing is applied."""
        from pipeframe.engine.deploy import Deployer, DeployResult

        plan = self.plan(allow_destructive) if plan is None else plan
        if not plan.has_changes and not plan.refused:
            return DeployResult("", 0, plan)
        with self._logged("deploy"):
            result = Deployer(self.spark, self.warehouse, on_step).apply(plan, git_commit(self.root))
        self.runtime.service_log.ensure()  # pipes may read pipeframe.pipe_stats and pipeframe.ops_log at once
        return result

    @contextmanager
    def _logged(self, event: str, datasource: str = "", pipe: str = "") -> Iterator[dict[str, Any]]:
        """An operation, into `pipeframe.ops_log` as it ends: with the error it raised, or with what the body put in
        the dict it is given (`rows`, `rows_quarantine`, `strategy`)."""
        started, done = time.perf_counter(), {}
        try:
            yield done
        except Exception as exc:
            session = sys.modules.get("pipeframe.engine.session")
            if session is not None and session.started():  # refused before Spark started (a missing file): not
                self.runtime.service_log.operation(event, datasource=datasource, pipe=pipe,  # an operation yet
                                                   seconds=time.perf_counter() - started, error=exc)
            raise
        self.runtime.service_log.operation(event, datasource=datasource, pipe=pipe,
                                           seconds=time.perf_counter() - started, **done)

    def history(self) -> list[Deployment]:
        return self.warehouse.history()

    # --------------------------------------------------------------------------- ingest and views
    def materializer(self, on_step: Callable[[str], None] | None = None,
                     on_progress: Callable[[BackfillProgress], None] | None = None) -> Materializer:
        from pipeframe.engine.materialize import Materializer

        return Materializer(self.spark, self.warehouse, self.snapshot, on_step=on_step, on_progress=on_progress,
                            direct_commit=self.config.ingest.direct_commit)

    def append(self, name: str, data: object, format: str | None = None,
               on_step: Callable[[str], None] | None = None, idempotency_key: str | None = None,
               views: bool = True) -> IngestResult:
        """Append rows to a landing datasource and flow them through its views (unless `views` is False: then the
        continuous materializer of a `serve`/`run`, or the next `refresh`, applies them).

        `data` is a file path (NDJSON, CSV or Parquet; `format` overrides the extension), a Spark or pandas
        DataFrame, or a list of dicts or of NDJSON lines (read like NDJSON events). Lists appended from several
        threads at once share one Delta commit (group commit). Rows that do not fit the schema go to
        `<name>_quarantine`; the result counts both. With `idempotency_key`, a key this datasource has committed
        already lands nothing and answers what it landed then (`replayed`)."""
        if isinstance(data, list | tuple):
            from pipeframe.engine.ingest import ndjson_lines

            self._known_landing(name)
            result = self.committer.append(name, ndjson_lines(data), idempotency_key)  # logged by the committer
            return self._apply_views(name, result, on_step, views)
        with self._logged("append", datasource=name) as done:
            result = self._ingest(name, data, format, "append", None, on_step, key=idempotency_key, views=views)
            done.update(rows=result.accepted, rows_quarantine=result.quarantined)
        return result

    @cached_property
    def runtime(self) -> Runtime:
        """This process's committer, continuous materializer and background jobs (`pipeframe.runtime`)."""
        from pipeframe.runtime import Runtime

        return Runtime(self)

    @property
    def committer(self) -> GroupCommitter:
        """The group commits of this project's appends of rows held in memory (see `engine.groupcommit`)."""
        return self.runtime.committer

    def landing_target(self, name: str) -> tuple[DeployedResource, Datasource]:
        """A landing datasource's deployed table and its definition (as its file defines it), for writing rows."""
        self._known_landing(name)
        table = self._landing(self.materializer(), name)
        return table, self._definition(name, table.state.columns)

    def _apply_views(self, name: str, result: IngestResult, on_step: Callable[[str], None] | None,
                     views: bool, full: bool = False) -> IngestResult:
        from dataclasses import replace

        materializer = self.materializer(on_step=on_step)
        materializer.on_step("source committed")
        if not views or result.replayed:
            return result
        return replace(result, views=tuple(materializer.refresh(materializer.downstream([name]), full=full)))

    def load_fixtures(self, on_step: Callable[[str], None] | None = None,
                      reload: set[str] | frozenset[str] = frozenset()) -> list[IngestResult]:
        """Append every `fixtures/<datasource>.<ndjson|csv|parquet>` file to its datasource, lookup tables
        (DIMENSIONS) first. A file whose exact contents were loaded before is skipped, so this is safe to rerun.
        Datasources named in `reload` are replaced by their fixture file instead (the dev loop, on a save)."""
        import hashlib

        from pipeframe.engine import tables
        from pipeframe.engine.ingest import IngestResult
        from pipeframe.plan import records

        compiled = self.compiled
        dimensions = {d for v in compiled.views for d in v.dimensions}
        files = [f for f in compiled.resources.fixtures if Path(f).name.split(".")[0] in compiled.datasources]
        files.sort(key=lambda f: (Path(f).name.split(".")[0] not in dimensions, f))
        results = []
        for rel in files:
            name = Path(rel).name.split(".")[0]
            digest = hashlib.sha256((self.root / rel).read_bytes()).hexdigest()[:16]
            table = self.materializer().table(name)
            loaded = any(isinstance(c.metadata, records.FixtureLoad) and c.metadata.fixture == digest
                         for c in tables.history(self.spark, table.path or ""))
            if loaded and name not in reload:
                results.append(IngestResult(name, 0, 0, None, ("already loaded",)))
                continue
            mode = "overwrite" if name in reload else "append"
            results.append(self._ingest(name, str(self.root / rel), None, mode, None, on_step,
                                        records.FixtureLoad(fixture=digest, file=rel)))
        return results

    def replace(self, name: str, data: object, where: str | None = None, format: str | None = None) -> IngestResult:
        """Replace every row of a datasource (or those matching `where`) with `data`. With `where`, the views
        retract the replaced rows and add the new ones; replacing every row rebuilds them."""
        with self._logged("replace", datasource=name) as done:
            result = self._ingest(name, data, format, "overwrite", where, None)
            done.update(rows=result.accepted, rows_quarantine=result.quarantined)
        return result

    def delete(self, name: str, where: str | None = None) -> tuple[int, list[ViewRefresh]]:
        """Delete the rows matching `where` (all rows without it). With `where`, the views retract the deleted
        rows (docs/views.md, "Deletes and updates"); deleting every row rebuilds them."""
        from pipeframe.engine.ingest import Ingestor

        with self._logged("delete" if where else "truncate", datasource=name) as done:
            self._known_landing(name)
            materializer = self.materializer()
            table = self._landing(materializer, name)
            deleted = done["rows"] = Ingestor(self.spark, self.warehouse).delete(table, where)
        return deleted, materializer.refresh(materializer.downstream([name]), full=where is None)

    def truncate(self, name: str) -> tuple[int, list[ViewRefresh]]:
        return self.delete(name, None)

    def _ingest(self, name: str, data: object, format: str | None, mode: str, where: str | None,
                on_step: Callable[[str], None] | None, metadata: records.IngestRecord | None = None,
                key: str | None = None,
                views: bool = True) -> IngestResult:
        from dataclasses import replace

        from pipeframe.engine.ingest import Ingestor, committed_keys, conform_data, detect_format, read_file

        self._known_landing(name)
        self._check_input(data, format)
        table, definition = self.landing_target(name)
        if key is not None and (known := committed_keys(self.spark, table.path or "").get(key)):
            return replace(known, datasource=name)
        if isinstance(data, str | os.PathLike):
            path = str(data)
            batch = read_file(self.spark, path, detect_format(path, format), definition)
        else:
            batch = conform_data(self.spark, data, definition)
        result = Ingestor(self.spark, self.warehouse).write(table, batch, mode, where, metadata, key,
                                                            direct=self.config.ingest.direct_commit)
        return self._apply_views(name, result, on_step, views, full=mode == "overwrite" and where is None)

    def _landing(self, materializer: Materializer, name: str):
        table = materializer.table(name)
        if table.state.kind != "datasource":
            raise PipeframeError("PF716", f"`{name}` is the target of the materialized pipe "
                                 f"`{table.state.view_pipe}`; only its pipe writes to it.",
                                 f"Append to its source `{table.state.source}` instead.")
        return table

    def _definition(self, name: str, deployed_columns: tuple[tuple[str, str], ...]):
        """The datasource as the files define it (json paths, defaults), which must match what is deployed."""
        compiled = self.compiled.datasources.get(name)
        if compiled is None or compiled.definition is None:
            raise PipeframeError("PF717", f"Datasource `{name}` is deployed but its .datasource file is missing.",
                                 "Restore the file, or deploy the removal first.")
        columns = tuple((c.name, c.type or "STRING") for c in compiled.columns)
        if columns != tuple(deployed_columns):
            raise PipeframeError("PF717", f"The schema of `{name}` in its file differs from the deployed one.",
                                 "Run `pipeframe deploy` first, so rows are read with the schema they are "
                                 "stored with.", compiled.definition.location)
        return compiled.definition

    def refresh(self, view: str | None = None, full: bool = False,
                on_step: Callable[[str], None] | None = None) -> list[ViewRefresh]:
        """Apply source commits the views have not seen yet (e.g. from other Spark jobs); `full` rebuilds."""
        if view:
            self._known_view(view)
        materializer = self.materializer(on_step=on_step)
        views = None
        if view:
            found = materializer.resolve(view)
            views = [found, *materializer.downstream([found.state.name])]
        started = time.perf_counter()
        results = materializer.refresh(views, full=full)
        self.runtime.service_log.refreshed(time.perf_counter() - started, results)
        return results

    def follow(self, stop: threading.Event, on_round: Callable[[list[ViewRefresh]], None] | None = None,
               on_error: Callable[[Exception], None] | None = None) -> None:
        """Keep every view in step with its sources until `stop` is set (`pipeframe refresh --follow`; see
        `Runtime.follow`)."""
        self.runtime.follow(stop, on_round, on_error)

    def populate(self, pipe: str, truncate: bool = False, where: str | None = None, chunk_by: str | None = None,
                 chunk_rows: int | None = None, on_progress: Callable[[BackfillProgress], None] | None = None,
                 on_step: Callable[[str], None] | None = None) -> list[ViewRefresh]:
        """Backfill a materialized view from its source, pinned to one source version (see `Materializer`)."""
        from pipeframe.engine.materialize import DEFAULT_CHUNK_ROWS

        with self._logged("populate", pipe=pipe) as done:
            self._known_view(pipe)
            self._known_chunk_column(pipe, chunk_by)
            materializer = self.materializer(on_step=on_step, on_progress=on_progress)
            results = materializer.populate(pipe, truncate, where, chunk_by, chunk_rows or DEFAULT_CHUNK_ROWS)
            done["rows"] = sum(r.rows or 0 for r in results)
        return results

    def optimize(self, name: str | None = None) -> list[str]:
        """Compact view states to one row per key, apply TTL, OPTIMIZE and VACUUM (config `retention_hours`)."""
        if name:
            self._known_table(name)
        materializer = self.materializer()
        table = materializer.deployed.table(name) if name else None
        names = None if not name else [materializer.resolve(name).state.name] if table is None else \
            list(table.state.writers) or [name]  # a datasource several pipes write: each one's table
        with self._logged("optimize", datasource=name or ""):
            return materializer.optimize(names, self.config.retention_hours)

    def status(self, view: str | None = None) -> list[ViewStatus]:
        """Each view's status, lag, size and backfill progress (`pipeframe status`): read from the tables' logs and
        snapshots without starting Spark where they can say it (see `engine`)."""
        from pipeframe.engine.lifecycle import Lifecycle

        if view:
            self._known_view(view)
        found = self._status_without_spark(view) if self.engine != "spark" else None
        if found is None:
            materializer = self.materializer()
            found = Lifecycle(materializer).status(view), materializer.deployed, self.spark
        statuses, deployed, spark = found
        return self._with_ingest_paths(self._with_kafka_lag(statuses, deployed, spark), deployed, spark)

    def _status_without_spark(self, view: str | None) -> tuple[list[ViewStatus], DeployedSnapshot, None] | None:
        """`status` from the logs and the read path; None where only Spark can say it (engine "auto")."""
        from pipeframe.engine.lifecycle import TableDetail, view_statuses
        from pipeframe.engine.tables import NeedsSpark
        from pipeframe.engine.warehouse import VIEW_COLUMNS, view_record
        from pipeframe.serving.snapshots import Unreadable

        reader = self.reader
        try:
            deployed = reader.deployed().snapshot
            records = {r["name"]: view_record(r) for r in reader.rows(f"{reader.uri}/_pipeframe/views", VIEW_COLUMNS)}
            return view_statuses(deployed, records, view, None,
                                 lambda path: TableDetail(*reader.figures(path))), deployed, None
        except (NeedsSpark, Unreadable) as exc:
            if self.engine == "duckdb":
                raise PipeframeError("PF809", f"`status` needs Spark here: {exc}.",
                                     "Run it with --engine auto (or spark).") from None
            return None

    def _with_kafka_lag(self, statuses: list[ViewStatus], deployed: DeployedSnapshot,
                        spark: SparkSession | None) -> list[ViewStatus]:
        """Each view over a Kafka datasource (directly or through other views) with that topic's lag per partition:
        as this process's consumer sees it when it consumes the datasource (`serve`), else the table's offsets
        against the broker's high watermarks (connectors/kafka.py `topic_lag`). Histories that only Spark reads
        (object storage) are read when the caller has a session; without one, the lag says so rather than start
        Spark."""
        from dataclasses import replace

        from pipeframe.connectors.kafka import kafka_datasources, lag_of, topic_lag, topic_of
        from pipeframe.connectors.spec import environment
        from pipeframe.engine.ingest import committed_keys
        from pipeframe.engine.tables import NeedsSpark

        kafka = kafka_datasources(self.compiled.resources, deployed)
        if not kafka:
            return statuses
        runtime = self.__dict__.get("runtime")  # built only by a process that ingests (`serve`, `run`, `dev`)
        lags: dict[str, dict] = {}
        landing = _landing(deployed)

        def lag(view_source: str | None) -> dict | None:
            name = landing(view_source)
            if name not in kafka:
                return None
            if name not in lags:
                datasource, connection = kafka[name]
                lags[name] = runtime.kafka.consumed(name) if runtime is not None else None
                if lags[name] is None:
                    try:
                        keys = committed_keys(spark, deployed.table(name).path, limit=None)
                    except NeedsSpark:
                        lags[name] = lag_of(name, topic_of(datasource), {}, {}, (
                            "its table's history is on object storage, which only Spark reads: "
                            "`pipeframe status --engine spark` shows the lag"))
                    else:
                        lags[name] = topic_lag(name, datasource, connection, environment(self.root, self.environ),
                                               keys)
            return lags[name]

        return [replace(s, kafka=lag(s.source)) for s in statuses]

    @staticmethod
    def _with_ingest_paths(statuses: list[ViewStatus], deployed: DeployedSnapshot,
                           spark: SparkSession | None) -> list[ViewStatus]:
        """Each view over a landing datasource (directly or through other views) with how that datasource's newest
        INGEST_WINDOW commits' group commits were made (engine/ingest.py `ingest_paths`), read from its log; None
        where the log is on object storage and this process has no Spark session, or where it cannot be read (the
        view's status says why)."""
        from dataclasses import replace

        from pipeframe.engine import tables
        from pipeframe.engine.ingest import ingest_paths

        found: dict[str, dict | None] = {}
        landing = _landing(deployed)

        def paths(view_source: str | None) -> dict | None:
            name = landing(view_source)
            table = deployed.table(name or "")
            if name is None or table is None or not table.path:
                return None
            if name not in found:
                try:
                    commits = tables.history(spark, table.path, INGEST_WINDOW)
                    found[name] = {"datasource": name, **ingest_paths(commits)}
                except Exception:  # noqa: BLE001 — NeedsSpark, or a log the view's own status says it cannot read
                    found[name] = None
            return found[name]

        return [replace(s, ingest=paths(s.source)) for s in statuses]

    def pause(self, view: str, permanent: bool = False) -> None:
        from pipeframe.engine.lifecycle import Lifecycle

        self._known_view(view)
        Lifecycle(self.materializer()).pause(view, permanent)

    def resume(self, view: str) -> list[ViewRefresh]:
        from pipeframe.engine.lifecycle import Lifecycle

        self._known_view(view)
        return Lifecycle(self.materializer()).resume(view)

    def recover(self, view: str) -> list[ViewRefresh]:
        from pipeframe.engine.lifecycle import Lifecycle

        self._known_view(view)
        with self._logged("rebuild", pipe=view):
            return Lifecycle(self.materializer()).recover(view)

    def query(self, sql_or_pipe: str, **params: Any) -> DataFrame:
        """Ad-hoc Spark SQL over the deployed resources by name (views read as finalized values), or, given
        an endpoint pipe's name, that endpoint with `params`: `project.query("top_products", limit=3)`. A Spark
        DataFrame (`read` answers the same SQL without Spark)."""
        from pipeframe.compiler.compile import compile_query
        from pipeframe.engine.query import run_sql

        if sql_or_pipe in self.compiled.pipes:
            self.require_pipe(sql_or_pipe, "endpoint", params)
            return self.endpoints().frame(sql_or_pipe, params)
        if params:
            raise PipeframeError("PF801", f"There is no pipe `{sql_or_pipe}`; parameters need an endpoint pipe.",
                                 "Pass an endpoint pipe's name, or SQL without parameters.")
        sql = compile_query(sql_or_pipe)  # a syntax error is a PF303 before Spark starts
        deployed = self.snapshot
        self.warehouse.register(deployed.values())
        return run_sql(self.spark, sql, self.readable_names(deployed))

    def read(self, sql: str, limit: int = 1000) -> EndpointResult:
        """Ad-hoc Spark SQL over the deployed resources by name, answered as `query` would (at most `limit` rows):
        by DuckDB over the tables' current snapshots without starting Spark, or by Spark where the read path cannot
        answer with Spark's meaning (see `engine`). The answer says which (`engine`, `engine_reason`)."""
        import time

        from pipeframe.compiler.compile import compile_query
        from pipeframe.endpoints import ReadPathRefused, answer_result, read_answer

        started = time.perf_counter()
        compiled = compile_query(sql)  # a syntax error is a PF303, whichever engine answers
        reason = None
        if self.engine != "spark":
            bounded = f"SELECT * FROM ({compiled}) AS `__pf_query` LIMIT {int(limit)}"
            try:
                answer = read_answer(self.reader, bounded, None, self.readable_names(self.reader.deployed().snapshot))
                return answer_result("query", answer, time.perf_counter() - started, None)
            except ReadPathRefused as refused:
                if self.engine == "duckdb":
                    raise PipeframeError("PF809", f"The read path cannot answer this query as Spark would: "
                                         f"{refused.reason}.", "Run it with --engine auto (or spark).") from None
                reason = refused.reason
        from pipeframe.engine.query import collect_query

        answer = collect_query(self.query(sql).limit(limit), self.readable_names())
        return answer_result("query", answer, time.perf_counter() - started, reason)

    def quarantine(self, datasource: str, limit: int = 100) -> EndpointResult:
        """The newest rows that did not fit the landing datasource `datasource` (its `<datasource>_quarantine`: the
        raw row, the reason, its source and when), newest first, at most `limit`; read as `read` reads. No rows (and
        no columns) while none was ever quarantined."""
        from pipeframe.endpoints import EndpointResult

        self._known_landing(datasource)
        if not self.reader.has_quarantine(datasource):
            return EndpointResult(f"{datasource}_quarantine", (), [], 0.0, 0, 0, "duckdb")
        return self.read(f"SELECT * FROM `{datasource}_quarantine` ORDER BY ingested_at DESC", limit)

    def readable_names(self, deployed: DeployedSnapshot | None = None) -> list[str]:
        """The names ad-hoc SQL can read: every deployed table (datasources and views), and the service datasources."""
        from pipeframe.compiler.service import SERVICE_TABLES

        deployed = self.snapshot if deployed is None else deployed
        return sorted(r.state.name for r in deployed.values() if r.state.has_table or r.state.kind == "shared") + \
            [t.qualified for t in SERVICE_TABLES]

    def endpoints(self, deployed: DeployedSnapshot | None = None) -> Endpoints:
        """The project's endpoint pipes over the deployed tables; `deployed` is what pipes are checked against
        (default: what the warehouse records when each is called)."""
        from pipeframe.endpoints import Endpoints

        reader = self.reader if self.engine != "spark" else None
        return Endpoints(self.compiled, reader, self, deployed, self.engine)

    def endpoint(self, pipe: str, **params: Any) -> EndpointResult:
        """Call an endpoint pipe: its rows and Tinybird's `meta`/`statistics`, as the HTTP API answers."""
        self.require_pipe(pipe, "endpoint", params)
        return self.endpoints().run(pipe, params)

    def create_token(self, pipes: list[str], fixed_params: Mapping[str, Any], expires_in: float,
                     rps: int | None = None, name: str | None = None) -> str:
        """A signed tenant token (JWT, pipeframe/tokens.py) that may read the endpoint pipes `pipes`, with
        `fixed_params` pinned on each, for `expires_in` seconds, at most `rps` requests per second (per `name`).
        Signed with pipeframe.yaml `signing_key:` (or PIPEFRAME_SIGNING_KEY); the pipes must be endpoint pipes of
        the files (PF801/PF802). No JVM, no warehouse read."""
        import uuid

        from pipeframe.endpoints import declared_pipe
        from pipeframe.tokens import MIN_KEY_BYTES, PipeScope, empty, mint

        key = self.config.signing_key
        if not key:
            raise PipeframeError("PF834", "The project has no signing key to sign tokens with.",
                                 "Set the PIPEFRAME_SIGNING_KEY environment variable (or `signing_key:` in "
                                 "pipeframe.yaml, e.g. `${JWT_SIGNING_KEY}`): the key the server checks tokens with.")
        if not pipes:
            raise PipeframeError("PF834", "A token must name the pipes it may read.", "Pass --pipe NAME.")
        if expires_in <= 0 or (rps is not None and rps < 1):
            raise PipeframeError("PF834", "A token's expiry and rate limit must be positive.",
                                 "Pass e.g. --expires-in 1h --rps 10.")
        if len(key.encode()) < MIN_KEY_BYTES:
            raise PipeframeError("PF834", f"The signing key is shorter than {MIN_KEY_BYTES} bytes: its tokens could "
                                 "be forged by trying keys.", "Use a random key of 32 bytes or more, e.g. "
                                 "`python -c 'import secrets; print(secrets.token_urlsafe(32))'`.")
        blank = sorted(k for k, v in fixed_params.items() if empty(v))
        if blank:
            raise PipeframeError("PF834", f"Fixed parameter {', '.join(map(repr, blank))} has no value: a token "
                                 "fixing it to nothing would pin nothing.", "Pass --fixed-param NAME=VALUE.")
        scopes = []
        for pipe in pipes:
            declared = declared_pipe(self.compiled, pipe)
            unknown = sorted(set(fixed_params) - {p.name for p in declared.parameters})
            if unknown:
                raise PipeframeError("PF834", f"Pipe `{pipe}` takes no parameter {', '.join(map(repr, unknown))}: "
                                     "the token would pin nothing.",
                                     f"Fix one of: {', '.join(p.name for p in declared.parameters) or '(none)'}.")
            scopes.append(PipeScope(declared.name, dict(fixed_params)))
        return mint(key, self.config.name, name or f"tenant-{uuid.uuid4().hex[:8]}", scopes, expires_in, rps)

    def delete_view(self, view: str, force: bool = False) -> DeployResult:
        """Drop a deployed view's table, through a deploy of drop changes (locked, and listed by `deploy --history`).

        Refused with the dependents listed (PF707, HTTP 409) while other views or pipes read it, unless `force`,
        which drops them too. The files still declare them: the next `deploy` creates them again."""
        from pipeframe.engine.lifecycle import Lifecycle

        return Lifecycle(self.materializer()).delete(view, force, git_commit(self.root))


def git_commit(root: Path) -> str | None:
    """The commit the project folder is at, for the deploy history (None outside git)."""
    import subprocess

    try:
        out = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True,
                             timeout=10, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None if out.returncode == 0 else None


def _landing(deployed: DeployedSnapshot) -> Callable[[str | None], str | None]:
    """For a view's source: the datasource it is, or reads through other views (their first sources)."""
    upstream = {v.state.name: v.state.source for v in deployed.views()}

    def landing(name: str | None) -> str | None:
        while name in upstream:
            name = upstream[name]
        return name
    return landing
