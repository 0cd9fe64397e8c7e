"""Spark's analyzer over what `check` accepts in a corpus project: every resource is registered as an EMPTY
temporary view of its compiled schema (a materialized view's target is read through its finalizing SQL over an
empty table of its state columns, as the engine reads it by name), then Spark analyzes — resolves, types, never
runs — every compiled pipe and node (templates rendered in analysis mode, what `pipeframe sql` shows), every
view's state, read and compaction queries, every partition key and every TTL.

`analyze_project(spark, root)` answers per file; tests/spark/test_compat_analysis.py asserts that every file that
checks clean analyzes, and `python -m tests.compat.report --spark` adds the "analyzed" column.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pipeframe.compiler.compile import CompiledDatasource, CompiledProject
from pipeframe.compiler.viewplan import BATCH_RELATION
from pipeframe.sqltext import quote_identifier
from tests.compat.report import ProjectReport, compile_corpus_project


@dataclass(frozen=True)
class Analysis:
    """One corpus project through `check` and then Spark's analyzer: the files that check clean and analyze, and
    for the clean files that do not, what Spark said (file → messages)."""

    report: ProjectReport
    analyzed: tuple[str, ...]
    failures: dict[str, tuple[str, ...]]
    # Clean files that Spark rejects only because a resource they read (directly or through others) is in a file
    # that fails `check` (a pipe reading a pipe with a PF309): file → those upstream files. Not a translation gap
    # of their own; `check` has already refused the project.
    blocked: dict[str, tuple[str, ...]]


def _ddl(columns) -> str:
    return ", ".join(f"{quote_identifier(c.name)} {c.type}" for c in columns)


def _message(err: Exception) -> str:
    text = str(err).strip()
    return text.splitlines()[0][:400] if text else type(err).__name__


def _file_of(resource: Any) -> str | None:
    location = getattr(resource, "location", None)
    return location.path if location is not None else None


def _register(spark, name: str, ds: CompiledDatasource, project: CompiledProject) -> None:
    view = project.pipes[ds.view].view if ds.view and ds.view in project.pipes else None
    frame = spark.createDataFrame([], _ddl(ds.columns))
    if view is not None and view.plan is not None:
        frame.createOrReplaceTempView(f"{name}__states")
        spark.sql(view.plan.read_sql(quote_identifier(f"{name}__states"))).createOrReplaceTempView(name)
    else:
        frame.createOrReplaceTempView(name)


def _queries(project: CompiledProject, file_of: dict[str, str]) -> Iterator[tuple[str, str, str, str | None]]:
    """(file, what, SQL, batch relation's datasource) for everything Spark must accept."""
    for name, ds in project.datasources.items():
        definition = ds.definition
        if definition is None:
            continue
        path = file_of.get(name)
        if path is None:
            continue
        relation = quote_identifier(name)
        if ds.view is not None:  # a view's target is read by name through its finalizing SQL: keys use the states
            relation = quote_identifier(f"{name}__states")
        if definition.partition_key:
            yield path, "ENGINE_PARTITION_KEY", f"SELECT ({definition.partition_key}) AS p FROM {relation}", None
        if definition.ttl:
            yield path, "ENGINE_TTL", \
                f"SELECT * FROM {relation} WHERE ({definition.ttl}) < current_timestamp()", None
    for name, pipe in project.pipes.items():
        path = file_of.get(name)
        if path is None:
            continue
        yield path, name, pipe.sql, None
        for node, sql in pipe.node_sql[:-1]:
            yield path, f"{name}.{node}", sql, None
        view = pipe.view
        if view is not None and view.plan is not None:
            yield path, f"{name} (state SQL)", view.plan.state_sql, view.trigger
            target = quote_identifier(f"{view.target}__states")
            yield path, f"{name} (read SQL)", view.plan.read_sql(target), None
            yield path, f"{name} (compaction SQL)", view.plan.compact_sql(target), None


def analyze_project(spark, root: Path) -> Analysis:
    report, project = compile_corpus_project(root)
    file_of: dict[str, str] = {}
    for resource in (*project.resources.datasources, *project.resources.pipes):
        path = _file_of(resource)
        if path is not None:
            file_of[resource.name] = path
    failures: dict[str, list[str]] = {}
    clean = set(report.files) - set(report.failing)
    for name, ds in project.datasources.items():
        path = file_of.get(name) or file_of.get(ds.view or "")
        if any(c.type is None for c in ds.columns):
            if path in clean:
                failures.setdefault(path, []).append(f"{name}: a column's type was not inferred")
            continue
        try:
            _register(spark, name, ds, project)
        except Exception as err:  # noqa: BLE001 - Spark's own message is the answer
            if path in clean:
                failures.setdefault(path, []).append(f"{name} (schema): {_message(err)}")
    for path, what, sql, batch in _queries(project, file_of):
        if path not in clean:
            continue
        try:
            if batch is not None:
                trigger = project.datasources[batch]
                spark.createDataFrame([], _ddl(trigger.columns)).createOrReplaceTempView(BATCH_RELATION)
            spark.sql(sql).schema  # noqa: B018 - analysis only: resolves and types the plan, runs nothing
        except Exception as err:  # noqa: BLE001
            failures.setdefault(path, []).append(f"{what}: {_message(err)}")
    for name in [*project.datasources, BATCH_RELATION]:
        spark.catalog.dropTempView(name)
        spark.catalog.dropTempView(f"{name}__states")
    blocked = {path: upstream for path in failures if (upstream := _failing_upstream(project, path, file_of,
                                                                                       report.failing))}
    analyzed = tuple(f for f in report.files if f in clean and f not in failures)
    return Analysis(report, analyzed, {f: tuple(m) for f, m in failures.items() if f not in blocked}, blocked)


def _failing_upstream(project: CompiledProject, path: str, file_of: dict[str, str],
                      failing: Mapping[str, object]) -> tuple[str, ...]:
    """The files failing `check` that the resources of `path` read, directly or through other resources."""
    from pipeframe.compiler.graph import ResourceKey

    keys = [key for key in project.graph.nodes if file_of.get(key.name) == path]
    if any(key.kind == "datasource" for key in keys):  # a view's declared target is written by its pipe
        keys += [ResourceKey.pipe(ds.view) for ds in project.datasources.values()
                 if file_of.get(ds.name) == path and ds.view]
    seen: set[ResourceKey] = set()
    stack = list(keys)
    found = set()
    while stack:
        key = stack.pop()
        for dependency in project.graph.dependencies(key):
            if dependency in seen:
                continue
            seen.add(dependency)
            upstream = file_of.get(dependency.name)
            if upstream in failing:
                found.add(upstream)
            stack.append(dependency)
    return tuple(sorted(found))


def spark_analyses(roots: list[Path]) -> list[Analysis]:
    """Every project in `roots` analyzed on an embedded session of a throwaway project (for the report's CLI)."""
    import tempfile

    from pipeframe.config import load_config
    from pipeframe.engine.session import get_session, stop_session

    with tempfile.TemporaryDirectory(prefix="pf_compat_") as folder:
        (Path(folder) / "pipeframe.yaml").write_text(
            "name: compat\nspark:\n  conf:\n    spark.sql.shuffle.partitions: 2\n", encoding="utf-8")
        spark = get_session(load_config(Path(folder), environ={}))
        try:
            return [analyze_project(spark, root) for root in roots]
        finally:
            stop_session()
