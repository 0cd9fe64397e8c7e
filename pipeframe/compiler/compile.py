"""The compiler driver: parsed datafiles → CompiledProject (SQL per pipe, target schemas, the graph and
each materialized pipe's verdict), with every problem collected as a located diagnostic. No JVM here."""

from __future__ import annotations

import difflib
import hashlib
import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from functools import cached_property, lru_cache
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from pipeframe.compiler.aggregates import BY_KIND, explicit_column_state, state_type_for
from pipeframe.compiler.final import NO_OP_ENGINES, Deduplication, deduplication, engine_name, is_replacing
from pipeframe.compiler.graph import DAG, ResourceKey
from pipeframe.compiler.service import BY_RELATION, SERVICE_DATABASES, SERVICE_TABLES
from pipeframe.compiler.viewplan import ParsedNodes, Verdict, ViewColumn, ViewPlan
from pipeframe.datafiles.model import Datasource, Node, NodeType, Pipe, Resources
from pipeframe.errors import Diagnostic, DiagnosticSink, Location, PipeframeError

# The AST side (sqlglot, Jinja) is imported where it is used: a check answered from the cache never loads it.
if TYPE_CHECKING:
    from sqlglot import exp

    from pipeframe.compiler.incremental import NodeTree
    from pipeframe.templating import Parameter

_T = TypeVar("_T")

FROM_JOIN = re.compile(r"\b(?:FROM|JOIN)\s+`?([A-Za-z_][A-Za-z0-9_]*)`?", re.IGNORECASE)


@dataclass(frozen=True)
class CompiledView:
    """A materialized pipe: what triggers it, where it writes, its verdict and (if accepted) its plan."""

    pipe: str
    target: str
    trigger: str | None
    dimensions: tuple[str, ...]
    verdict: Verdict
    plan: ViewPlan | None
    # The other datasources it joins whose changes it follows (every joined table not declared a dimension, for
    # a view with GROUP BY): their appends, updates and deletes recompute the groups they touch.
    joined: tuple[str, ...] = ()
    follow_ttl: bool = False  # FOLLOW_TTL true: its sources' ENGINE_TTL deletes are retracted like any delete


@dataclass(frozen=True)
class CompiledDatasource:
    name: str
    definition: Datasource | None  # None when the schema is generated from the materialized pipe
    columns: tuple[ViewColumn, ...]
    view: str | None = None  # the materialized pipe writing here (the first, when several do)
    # Every materialized pipe writing here, when several do: each keeps its own state table (named
    # `writer_table(name, pipe)`), and a read of the datasource reads the union of their rows, finalized once.
    writers: tuple[str, ...] = ()

    @property
    def generated(self) -> bool:
        return self.definition is None

    def column(self, name: str) -> ViewColumn | None:
        return next((c for c in self.columns if c.name == name), None)


@dataclass(frozen=True)
class CompiledPipe:
    name: str
    definition: Pipe
    type: NodeType | None
    reads: tuple[str, ...]  # datasources and pipes it reads
    parameters: tuple[Parameter, ...]
    templated: bool
    # Parsed nodes up to the output node (parsed on first use), and pipes read by name (inlined as CTEs). SQL
    # text is generated on first use so `check` never pays for it.
    trees: ParsedNodes = field(compare=False, repr=False)
    upstream: tuple[CompiledPipe, ...] = field(compare=False, repr=False)
    view: CompiledView | None = None
    target: str | None = None  # DATASOURCE (materialized) or TARGET_DATASOURCE (copy)
    variables: Mapping[str, Any] = field(default_factory=dict, compare=False, repr=False)
    # ReplacingMergeTree datasources of the project: how a `FROM t FINAL` read of each deduplicates.
    replacing: Mapping[str, Deduplication] = field(default_factory=dict, compare=False, repr=False)

    def _statement(self, upto: int, trees_of: Callable[[CompiledPipe], list[tuple[str, exp.Query]]]) -> exp.Query:
        from pipeframe.compiler.sql import inline
        from pipeframe.compiler.states import translate_merges

        own = trees_of(self)
        ctes = _upstream_ctes(self, trees_of, set()) + own[:upto]
        statement = translate_merges(inline(ctes, own[upto][1]))
        if self.replacing:
            from pipeframe.compiler.final import dedupe_final

            statement = dedupe_final(statement, self.replacing)
        return statement  # type: ignore[return-value]

    @cached_property
    def statement(self) -> exp.Query:
        return self._statement(len(self.trees) - 1, _static_trees)

    @cached_property
    def sql(self) -> str:
        """One Spark SQL statement (templates rendered in analysis mode, Merge calls translated)."""
        from pipeframe.compiler.sql import to_sql

        return to_sql(self.statement)

    @cached_property
    def node_sql(self) -> tuple[tuple[str, str], ...]:
        """Each node compiled on its own, with earlier nodes inlined."""
        from pipeframe.compiler.sql import to_sql

        return tuple((name, to_sql(self._statement(i, _static_trees))) for i, (name, _) in enumerate(self.trees))

    @cached_property
    def limit_parameters(self) -> dict[str, tuple[str, Location]]:
        """Request parameters this pipe, or a pipe it reads, renders into LIMIT or OFFSET → which of the two, and
        the node that does."""
        from pipeframe.compiler.limits import limit_parameters

        found: dict[str, tuple[str, Location]] = {}
        for upstream in self.upstream:
            found.update(upstream.limit_parameters)
        for name, _, _ in self.trees.texts:
            node = self.definition.node(name)
            assert node is not None
            found.update(limit_parameters(node.sql, self.variables, node.sql_location))
        return found

    def render(self, params: Mapping[str, Any]) -> str:
        """The statement for one request; parameters are validated and rendered as SQL literals."""
        from pipeframe.compiler.clickhouse import json_paths
        from pipeframe.compiler.limits import check_limit_values
        from pipeframe.compiler.sql import parse_select, read_versions, to_sql
        from pipeframe.templating import render

        if not self.templated:
            return self.sql

        def rendered(pipe: CompiledPipe) -> list[tuple[str, exp.Query]]:
            if not pipe.templated:
                return list(pipe.trees)
            trees = []
            for index, (name, _) in enumerate(pipe.trees):
                node = pipe.definition.node(name)
                assert node is not None
                text = render(node.sql, params, variables=pipe.variables, location=node.sql_location)
                tree = read_versions(parse_select(text, node.sql_location, pipe.trees.types_of(index)),
                                     dict(pipe.trees.versions))
                trees.append((name, json_paths(tree, pipe.trees.json_columns)))
            return trees

        statement = self._statement(len(self.trees) - 1, rendered)  # type errors first, as each node renders
        check_limit_values(self.limit_parameters, self.parameters, params)
        return to_sql(statement)


def _static_trees(pipe: CompiledPipe) -> list[tuple[str, exp.Query]]:
    return list(pipe.trees)


def _upstream_ctes(pipe: CompiledPipe, trees_of: Callable[[CompiledPipe], list[tuple[str, exp.Query]]],
                   seen: set[str]) -> list[tuple[str, exp.Query]]:
    """Pipes read by name become CTEs named after the pipe; their nodes are renamed `pipe__node` so that
    node names never clash (Spark SQL hoists nested CTEs), and a pipe read twice is inlined once."""
    from pipeframe.compiler.sql import rename_tables

    ctes: list[tuple[str, exp.Query]] = []
    for upstream in pipe.upstream:
        if upstream.name in seen:
            continue
        seen.add(upstream.name)
        ctes.extend(_upstream_ctes(upstream, trees_of, seen))
        nodes = trees_of(upstream)
        renames = {name: f"{upstream.name}__{name}" for name, _ in nodes[:-1]}
        for name, tree in nodes[:-1]:
            ctes.append((renames[name], rename_tables(tree, renames)))  # type: ignore[arg-type]
        ctes.append((upstream.name, rename_tables(nodes[-1][1], renames) if renames else nodes[-1][1]))
    return ctes


@dataclass(frozen=True)
class UnresolvedRead:
    """A pipe reading a name that is neither a resource nor an earlier node (a PF301 error). Kept as data so a
    deploy can tell "a removed datasource is still read" (a refused drop) from a plain typo."""

    reader: str  # the pipe
    name: str  # what it reads
    diagnostic: Diagnostic


@dataclass(frozen=True)
class CompiledProject:
    datasources: Mapping[str, CompiledDatasource]
    pipes: Mapping[str, CompiledPipe]
    graph: DAG[ResourceKey]  # datasource → pipe → target datasource → ...; edges point at dependencies
    diagnostics: tuple[Diagnostic, ...]
    resources: Resources
    unresolved: tuple[UnresolvedRead, ...] = ()

    @property
    def order(self) -> list[ResourceKey]:
        """Every resource, dependencies first."""
        return self.graph.sorted()

    @property
    def edges(self) -> list[tuple[ResourceKey, ResourceKey]]:
        """(from, to) pairs: data flows from → to."""
        return [(dep, node) for node in self.graph.nodes for dep in self.graph.dependencies(node)]

    @property
    def errors(self) -> list[Diagnostic]:
        return [d for d in self.diagnostics if d.is_error]

    @property
    def views(self) -> list[CompiledView]:
        return [p.view for p in self.pipes.values() if p.view is not None]


def writer_table(target: str, pipe: str) -> str:
    """The name of the state table one of several materialized pipes writing `target` keeps: `target__pipe`."""
    return f"{target}__{pipe}"


@dataclass(frozen=True)
class NodeScan:
    """A node rendered in analysis mode and parsed: its SQL, its request parameters and the tables it names
    (with where each is named). Plain data: the check cache keeps it."""

    sql: str
    parameters: tuple[Parameter, ...]
    tables: tuple[tuple[str, Location], ...]
    json_columns: frozenset[str] = frozenset()  # JSON columns of the datasources it reads (paths translated)
    # The columns it reads (of datasources, and the names earlier nodes output) and their types, None when unknown:
    # what ClickHouse's meaning depends on (defaults, rounding, "quoted" names); a parse again uses the same.
    types: tuple[tuple[str, str | None], ...] = ()


class CompileMemo(Protocol):
    """Where the costly compile steps' results are kept between runs: the check cache (`compiler/cache.py`)."""

    def get(self, kind: str, name: str, key: str) -> Any | None: ...

    def put(self, kind: str, name: str, key: str, value: Any) -> None: ...

    def source_key(self, path: str) -> str | None:
        """A digest of everything the resource parsed from `path` was made from, if known."""


def fingerprint(inputs: object) -> str:
    """A digest of a step's inputs (plain values and frozen dataclasses, whose repr shows every field)."""
    return hashlib.blake2b(repr(inputs).encode(), digest_size=16).hexdigest()


class Compiler:
    """Compiles Resources into a CompiledProject; one instance per compile.

    With a memo, the costly steps (rendering and parsing a pipe's nodes, a datasource's checks, a materialized
    pipe's verdict and plan) are looked up by a digest of exactly what they read; resolving names and building
    the graph, which are cheap and read the whole project, always run."""

    def __init__(self, resources: Resources, variables: Mapping[str, Any], diagnostics: list[Diagnostic],
                 memo: CompileMemo | None = None) -> None:
        self.resources = resources
        self.variables = variables
        self.memo = memo
        self.sink = DiagnosticSink()
        self.sink.extend(diagnostics)
        self.datasource_defs = {d.name: d for d in resources.datasources}
        self.pipe_defs = {p.name: p for p in resources.pipes}
        self.scans: dict[tuple[str, str], NodeScan] = {}
        self.parsed: dict[tuple[str, str], exp.Query] = {}  # trees parsed in this run, by (pipe, node)
        self.reads: dict[str, list[str]] = {}
        self.datasources: dict[str, CompiledDatasource] = {}
        self.pipes: dict[str, CompiledPipe] = {}
        self.outputs: dict[str, tuple[str, ...] | None] = {}  # pipe -> the columns it outputs, when known
        self.unresolved: list[UnresolvedRead] = []
        self.writers: dict[str, list[str]] = {}  # target -> its materialized pipes, when several write it
        # Datasource -> its ClickHouse JSON columns (stored as STRING; paths into them read as JSON).
        self.json_columns = {d.name: tuple(c.name for c in d.columns if c.written_type.upper().startswith("JSON"))
                             for d in resources.datasources}
        self.json_columns = {name: cols for name, cols in self.json_columns.items() if cols}
        self.replacing = {d.name: dedup for d in resources.datasources if (dedup := deduplication(d)) is not None}
        # `x` -> `x__v3` where x.datasource (or .pipe) says VERSION 3 and nothing else is named `x`: reads of `x` read it.
        names = set(self.datasource_defs) | set(self.pipe_defs)
        self.versions = {stem: name for name in sorted(names) if (stem := _unversioned(name)) and stem not in names}
        # Datasource -> its columns' Spark types, by lower-case name: what ClickHouse's defaults and rounding depend on.
        self.table_types = {d.name: {c.name.lower(): c.type for c in d.columns if not c.aggregate_function}
                            for d in resources.datasources}
        self.table_types.update({t.relation: {c.lower(): type_ for c, type_ in t.columns} for t in SERVICE_TABLES})
        self.types_key = fingerprint(self.table_types)  # a scan depends on the columns of what its nodes read

    # ------------------------------------------------------------------------------------------ driver
    def compile(self) -> CompiledProject:
        targets = self.targets = self._targets()
        self.known_names = set(self.datasource_defs) | set(self.pipe_defs) | set(targets)
        for name in sorted(self.known_names & set(BY_RELATION)):
            where = (self.datasource_defs.get(name) or self.pipe_defs[name]).location
            self.sink.error("PF105", f"`{name}` is the name of pipeframe's service datasource "
                            f"`{BY_RELATION[name].qualified}`.", "Rename the resource.", where)
        self.known_names |= set(BY_RELATION)
        for pipe in self.resources.pipes:
            if pipe.name in self.datasource_defs and targets.get(pipe.name) != pipe.name \
                    and pipe.name not in self.writers.get(pipe.name, ()):
                self.sink.error("PF105", f"Pipe `{pipe.name}` has the name of datasource `{pipe.name}` but does not "
                                "write it.", "Rename one of them; only a materialized or copy pipe may share the name "
                                "of the datasource it writes.", pipe.location)
        self.service_reads: dict[str, str] = {}  # pipe → a service datasource it reads itself
        for pipe in self.resources.pipes:
            self._parse_pipe(pipe, targets)
        for pipe in self.resources.pipes:
            via = self._service_through(pipe.name, {pipe.name}) if pipe.type == "materialized" and \
                pipe.name not in self.service_reads else None
            if via is not None:
                self.sink.error("PF312", f"Materialized pipe `{pipe.name}` reads the service datasource "
                                f"`{BY_RELATION[self.service_reads[via]].qualified}` through pipe `{via}`, whose "
                                "rows trigger no refresh.", "Read it from an endpoint, or from a copy pipe on a "
                                "schedule (TYPE copy, COPY_SCHEDULE) that fills a datasource a view can read.",
                                pipe.location)
        from pipeframe.connectors.spec import check_connections

        self.sink.extend(check_connections(self.resources.connections, self.resources.datasources))
        graph = self._graph(targets)
        cycle = graph.find_cycle()
        if cycle:
            first = next((r for r in cycle if r.kind == "pipe"), cycle[0])
            start = self.pipe_defs.get(first.name) if first.kind == "pipe" else self.datasource_defs.get(first.name)
            self.sink.error("PF302", f"Dependency cycle: {' → '.join(r.name for r in reversed(cycle))}.",
                            "Break the cycle: a pipe cannot read, directly or not, the datasource it writes.",
                            start.location if start else None)
        order = graph.sorted()
        for ref in order:
            if ref.kind == "datasource" and ref.name in self.datasource_defs:
                self._compile_landing(self.datasource_defs[ref.name])
            elif ref.kind == "pipe" and not cycle:
                self._compile_pipe(self.pipe_defs[ref.name], targets)
        from pipeframe.connectors.export import check_sinks

        self.sink.extend(check_sinks(self.resources.connections, self.resources.pipes, self.outputs))
        return CompiledProject(self.datasources, self.pipes, graph, tuple(self.sink.sorted()), self.resources,
                               tuple(self.unresolved))

    def _targets(self) -> dict[str, str]:
        """target datasource -> the pipe that writes it (materialized or copy)."""
        targets: dict[str, str] = {}
        for pipe in self.resources.pipes:
            node = pipe.typed_node
            if node is None or node.type in ("endpoint", "sink"):  # a sink writes outside the warehouse
                continue
            keyword = "DATASOURCE" if node.type == "materialized" else "TARGET_DATASOURCE"
            target = node.datasource if node.type == "materialized" else node.target_datasource
            if not target:
                self.sink.error("PF305", f"A {node.type} pipe needs a {keyword}.",
                                f"Add `{keyword} <datasource name>` after TYPE {node.type}.", node.where("TYPE"))
                continue
            if target in self.pipe_defs and target != pipe.name:
                self.sink.error("PF305", f"{keyword} `{target}` is a pipe, not a datasource.",
                                "Name a datasource to write into.", node.where(keyword))
                continue
            if node.type == "copy" and target not in self.datasource_defs:
                self._unknown(target, node.where(keyword), "copy target datasource", set(self.datasource_defs))
                continue
            if target in targets:
                first = self.pipe_defs[targets[target]]
                if node.type == "materialized" and first.type == "materialized":
                    self.writers.setdefault(target, [targets[target]]).append(pipe.name)
                    continue
                self.sink.error("PF305", f"Datasource `{target}` is already written by pipe `{targets[target]}`.",
                                "Give each copy pipe its own target datasource (only materialized pipes may share "
                                "one).", node.where(keyword))
                continue
            targets[target] = pipe.name
        for target, pipes in self.writers.items():
            for name in pipes:
                table = writer_table(target, name)
                if table in self.datasource_defs or table in self.pipe_defs:
                    node = self.pipe_defs[name].typed_node
                    assert node is not None
                    self.sink.error("PF305", f"Pipe `{name}` writes `{target}` with other pipes, and keeps its rows "
                                    f"in a table named `{table}`, which is already a resource.",
                                    f"Rename the pipe or the resource `{table}`.", node.where("DATASOURCE"))
        return targets

    def _unknown(self, name: str, where: Location, what: str, candidates: set[str]) -> Diagnostic:
        close = difflib.get_close_matches(name, sorted(candidates), n=1)
        hint = f"Did you mean `{close[0]}`?" if close else "Create the resource, or fix the name."
        diagnostic = Diagnostic("PF301", f"Unknown {what} `{name}`.", hint, where)
        self.sink.add(diagnostic)
        return diagnostic

    # -------------------------------------------------------------------------------------- parsing
    def _parse_pipe(self, pipe: Pipe, targets: Mapping[str, str]) -> None:
        known = self.known_names
        reads: list[str] = []
        seen_nodes: list[str] = []
        output = pipe.output_node
        # Reading its own target is reported by the PF409 rule, not as a graph cycle.
        own_target = output.datasource if output is not None and output.type == "materialized" else None
        for node, scan in zip(pipe.nodes, self._scan_pipe(pipe)):
            if not isinstance(scan, NodeScan):
                self.sink.extend(scan)
                seen_nodes.append(node.name)
                continue
            self.scans[(pipe.name, node.name)] = scan
            for name, where in scan.tables:
                if name in seen_nodes or name == own_target:
                    continue
                if name == node.name:
                    self.sink.error("PF301", f"Node `{node.name}` reads itself.", "Read an earlier node or a "
                                    "datasource.", where)
                elif name in BY_RELATION:  # pipeframe's own table: not a resource of the graph
                    self.service_reads.setdefault(pipe.name, name)
                    if pipe.type == "materialized":
                        self.sink.error("PF312", f"Materialized pipe `{pipe.name}` reads the service datasource "
                                        f"`{BY_RELATION[name].qualified}`, whose rows trigger no refresh.",
                                        "Read it from an endpoint, or from a copy pipe on a schedule "
                                        "(TYPE copy, COPY_SCHEDULE) that fills a datasource a view can read.", where)
                elif name in known:
                    if name in self.pipe_defs and self.pipe_defs[name].type in ("materialized", "copy") \
                            and name not in targets and name not in self.datasource_defs:
                        target_pipe = self.pipe_defs[name]
                        target = target_pipe.typed_node.datasource or target_pipe.typed_node.target_datasource  # type: ignore[union-attr]
                        self.sink.error("PF301", f"`{name}` is a {target_pipe.type} pipe; it has no rows to read.",
                                        f"Read its target datasource `{target}` instead.", where)
                    elif name == pipe.name and name not in targets:
                        self.sink.error("PF302", f"Pipe `{pipe.name}` reads itself.",
                                        "Read an earlier node or a datasource.", where)
                    elif name not in reads:
                        reads.append(name)
                else:
                    diagnostic = self._unknown(name, where, "table or node", known | set(seen_nodes))
                    self.unresolved.append(UnresolvedRead(pipe.name, name, diagnostic))
            if scan.sql != node.sql:
                # Tables read only in a template branch not taken in analysis mode still are dependencies.
                for match in FROM_JOIN.finditer(node.sql):
                    name = match.group(1)
                    if name in known and name not in reads and name not in seen_nodes and name != own_target \
                            and name != pipe.name and name not in BY_RELATION:
                        reads.append(name)
            seen_nodes.append(node.name)
        self.reads[pipe.name] = reads

    def _service_through(self, name: str, seen: set[str]) -> str | None:
        """The pipe `name` reads (or a pipe those read, ...) that reads a service datasource itself, if any."""
        for read in self.reads.get(name, []):
            if read in self.pipe_defs and read not in self.datasource_defs and read not in seen:
                seen.add(read)
                if read in self.service_reads:
                    return read
                if (found := self._service_through(read, seen)) is not None:
                    return found
        return None

    def _scan_pipe(self, pipe: Pipe) -> tuple[NodeScan | tuple[Diagnostic, ...], ...]:
        """Each node rendered and parsed (or its problems), stopping after the output node; the same for the
        same pipe definition and project vars."""
        return self._memo("scan", pipe.name, (self._source(pipe), self.variables, self.json_columns, self.versions,
                                              self.types_key),
                          lambda: tuple(self._scan(pipe)))

    def _scan(self, pipe: Pipe) -> Iterator[NodeScan | tuple[Diagnostic, ...]]:
        from sqlglot import exp

        from pipeframe.compiler.clickhouse import json_paths
        from pipeframe.compiler.sql import locate, parse_select, read_versions, table_names
        from pipeframe.templating import analyze

        output = pipe.output_node
        earlier: dict[str, dict[str, str | None]] = {}  # earlier node -> its output names (types unknown)
        for node in pipe.nodes:
            seen: dict[str, str | None] = {}

            def types_of(tables: list[str], seen: dict[str, str | None] = seen) -> dict[str, str | None]:
                found = self._types_for(tables)
                for table in tables:
                    for name in earlier.get(table, {}):
                        found.setdefault(name, None)
                seen.update(found)
                return found

            try:
                analysis = analyze(node.sql, variables=self.variables, location=node.sql_location)
                tree = read_versions(parse_select(analysis.sql, node.sql_location, types_of), self.versions)
            except PipeframeError as err:
                yield tuple(err.diagnostics)
                continue
            unknown = [Diagnostic("PF301", f"Unknown service datasource `{t.db}.{t.name}`.", "pipeframe records "
                                  f"{' and '.join(s.qualified for s in SERVICE_TABLES)} (also read as "
                                  f"{' and '.join(a for s in SERVICE_TABLES for a in s.aliases)}); see "
                                  "docs/operations.md.", locate(t, analysis.sql, node.sql_location))
                       for t in tree.find_all(exp.Table) if t.db.lower() in SERVICE_DATABASES]
            if unknown:
                yield tuple(unknown)
                continue
            tables = table_names(tree)
            json = frozenset(c for t in tables for c in self.json_columns.get(t.name, ()))
            self.parsed[(pipe.name, node.name)] = tree = json_paths(tree, json)
            earlier[node.name] = {name.lower(): None for name in _named_selects(tree) if name != "*"}
            yield NodeScan(analysis.sql, analysis.parameters, tuple(
                (table.name, locate(table, analysis.sql, node.sql_location)) for table in tables), json,
                tuple(sorted(seen.items())))
            if node is output:
                break

    def _types_for(self, tables: list[str]) -> dict[str, str | None]:
        """The column types a node reading `tables` sees (a name two tables type differently: unknown)."""
        found: dict[str, str | None] = {}
        for table in tables:
            for name, type_ in self.table_types.get(table, {}).items():
                found[name] = type_ if found.get(name, type_) == type_ else None
        return found

    def _node_tree(self, pipe: Pipe, node: Node) -> NodeTree:
        """A scanned node with its tree, parsed again when the scan came from the check cache."""
        from pipeframe.compiler.incremental import NodeTree
        from pipeframe.compiler.sql import parse_select, read_versions

        scan = self.scans[(pipe.name, node.name)]
        tree = self.parsed.get((pipe.name, node.name))
        if tree is None:
            from pipeframe.compiler.clickhouse import json_paths

            tree = read_versions(parse_select(scan.sql, node.sql_location, self._scan_types(scan)), self.versions)
            tree = json_paths(tree, scan.json_columns)
            self.parsed[(pipe.name, node.name)] = tree
        return NodeTree(node, tree, scan.sql, node.sql_location, scan.json_columns, scan.types)

    @staticmethod
    def _scan_types(scan: NodeScan) -> dict[str, str | None]:
        return dict(scan.types)

    # ------------------------------------------------------------------------------------------ memo
    def _memo(self, kind: str, name: str, inputs: object, step: Callable[[], _T]) -> _T:
        """`step()`, or its value and the diagnostics it reported as the memo kept them for the same inputs."""
        if self.memo is None:
            return step()
        key = fingerprint(inputs)
        kept = self.memo.get(kind, name, key)
        if kept is None:
            outer, self.sink = self.sink, DiagnosticSink()
            try:
                value = step()
            finally:
                reported, self.sink = self.sink.items, outer
            kept = (value, tuple(reported))
            self.memo.put(kind, name, key, kept)
        self.sink.extend(kept[1])
        return kept[0]

    def _source(self, resource: Datasource | Pipe | None) -> str | None:
        """What a definition was parsed from, as a digest (its own content when the memo does not know it)."""
        if resource is None:
            return None
        return (self.memo.source_key(resource.path) if self.memo else None) or fingerprint(resource)

    def _upstream_key(self, name: str, depth: int = 0) -> list:
        """What a pipe's view plan reads through the pipes it reads: their definitions and their tables' columns (and
        TTL)."""
        if depth > 8:
            return []
        key = []
        for other in sorted(self.reads.get(name, [])):
            if other in self.pipe_defs and other not in self.datasource_defs:
                key.append((other, self._source(self.pipe_defs[other]),
                            [(n, self._columns_key(n), self._ttl(n)) for n in sorted(self.reads.get(other, []))],
                            self._upstream_key(other, depth + 1)))
        return key

    def _ttl(self, name: str) -> str | None:
        """The ENGINE_TTL of the datasource `name` (FOLLOW_TTL's warning, PF418, reads it)."""
        declared = self.datasource_defs.get(name)
        return declared.ttl if declared is not None else None

    def _columns_key(self, name: str) -> str | None:
        compiled = self.datasources.get(name)
        if compiled is None:  # a pipe read by name: its output columns
            return fingerprint(self.outputs[name]) if name in self.outputs else None
        return fingerprint((compiled.columns, compiled.writers)) if compiled.writers else fingerprint(compiled.columns)

    def _ref(self, name: str, targets: Mapping[str, str]) -> ResourceKey:
        """What a name in SQL means: a datasource (or view target) wins over a pipe of the same name."""
        return ResourceKey.datasource(name) if name in self.datasource_defs or name in targets else ResourceKey.pipe(name)

    def _graph(self, targets: Mapping[str, str]) -> DAG[ResourceKey]:
        graph: DAG[ResourceKey] = DAG()
        for ds in self.resources.datasources:
            graph.add(ResourceKey.datasource(ds.name))
        for pipe in self.resources.pipes:
            graph.add(ResourceKey.pipe(pipe.name), [self._ref(n, targets) for n in self.reads.get(pipe.name, [])])
        for target, pipe_name in targets.items():
            graph.add(ResourceKey.datasource(target), [ResourceKey.pipe(p) for p in self.writers.get(target, [pipe_name])])
        return graph

    # ---------------------------------------------------------------------------------- datasources
    def _compile_landing(self, ds: Datasource) -> None:
        if ds.name in self.datasources:
            return
        compiled = self._memo("datasource", ds.name, self._source(ds), lambda: self._landing(ds))
        definition = spark_keys(ds)
        self.datasources[ds.name] = compiled if compiled.definition is definition else \
            replace(compiled, definition=definition)

    def _landing(self, ds: Datasource) -> CompiledDatasource:
        columns = []
        for col in ds.columns:
            if col.aggregate_function and not col.simple_aggregate:
                state = explicit_column_state(col.aggregate_function)
                if state is None:
                    self.sink.error("PF109", f"AggregateFunction({col.aggregate_function}, ...) has no state in "
                                    "pipeframe.", "Use one of: count, sum, min, max, avg, uniq, uniqExact, "
                                    "quantiles, argMax, argMin, varSamp, stddevSamp.", col.location)
                    continue
                columns.append(ViewColumn(col.name, state_type_for(state, col.aggregate_args), state.kind,
                                          col.aggregate_params, None, explicit=True))
            else:
                columns.append(ViewColumn(col.name, col.type, value_type=col.type, not_null=col.never_null))
        self._check_keys(ds, {c.name for c in ds.columns})
        return CompiledDatasource(ds.name, ds, tuple(columns))

    def _check_keys(self, ds: Datasource, names: set[str]) -> None:
        for key in ds.sorting_key:
            if key not in names:
                self._not_a_column(ds, key, "ENGINE_SORTING_KEY", names)
        for keyword in ("ENGINE_VER", "ENGINE_IS_DELETED"):
            column = ds.setting(keyword)
            if column and column not in names:
                self._not_a_column(ds, column, keyword, names)
        if is_replacing(ds) and not ds.sorting_key:
            self.sink.error("PF307", f"ReplacingMergeTree datasource `{ds.name}` has no ENGINE_SORTING_KEY: a FINAL "
                            "read keeps one row per sorting key.", "Add `ENGINE_SORTING_KEY <columns>` (the key whose "
                            "rows replace each other).", ds.where("ENGINE"))
        for keyword, text in (("ENGINE_PARTITION_KEY", ds.partition_key), ("ENGINE_TTL", ds.ttl)):
            if not text:
                continue
            columns = _key_columns(text)
            if columns is None:
                self.sink.error("PF307", f"{keyword} `{text}` is not a valid SQL expression.",
                                "Write a Spark SQL expression over the columns, e.g. to_date(ts).", ds.where(keyword))
                continue
            for column in columns:
                if column not in names:
                    self._not_a_column(ds, column, keyword, names)

    def _not_a_column(self, ds: Datasource, name: str, keyword: str, names: set[str]) -> None:
        close = difflib.get_close_matches(name, sorted(names), n=1)
        self.sink.error("PF307", f"{keyword} uses `{name}`, which is not a column of `{ds.name}`.",
                        f"Did you mean `{close[0]}`?" if close else "Use columns declared in SCHEMA.",
                        ds.where(keyword))

    # ---------------------------------------------------------------------------------------- pipes
    def _scope(self, names: list[str]) -> tuple[dict[str, str | None], set[str], list[tuple[str, str | None]]]:
        """The types of the columns of the tables `names` (bare and as `table.column`), the `table.column` names that
        hold no NULL, and the first table's columns (what `*` reads)."""
        scope: dict[str, str | None] = {}
        not_null: set[str] = set()
        star: list[tuple[str, str | None]] = []
        for name in names:
            ds = self.datasources.get(name)
            if ds is None:
                continue
            for col in ds.columns:
                scope.setdefault(col.name, col.type)
                scope[f"{name}.{col.name}"] = col.type
                if col.not_null:
                    not_null.add(f"{name}.{col.name}")
                if name == names[0]:
                    star.append((col.name, col.type))
        return scope, not_null, star

    @staticmethod
    def _trees_scope(base_scope: dict[str, str | None], not_null: set[str], trees: list[NodeTree]
                     ) -> tuple[dict[str, str | None], set[str]]:
        """Add the outputs of `trees` (earlier nodes, as `node.col` and bare names) to a scope, and to the names that
        hold no NULL those of them that never are (as `node.col`)."""
        from sqlglot import exp

        from pipeframe.compiler.infer import infer, never_null, nulls_of

        scope, not_null = dict(base_scope), set(not_null)
        for nt in trees:
            node = nt.node
            if not isinstance(nt.tree, exp.Select):
                continue
            node_scope, nulls = dict(scope), nulls_of(nt.tree, frozenset(not_null))
            for projection in nt.tree.expressions:
                if isinstance(projection, exp.Star):
                    continue
                col_type = infer(projection, node_scope)
                scope[projection.alias_or_name] = col_type
                scope[f"{node.name}.{projection.alias_or_name}"] = col_type
                if never_null(projection, node_scope, nulls):
                    not_null.add(f"{node.name}.{projection.alias_or_name}")
        return scope, not_null

    def _compile_pipe(self, pipe: Pipe, targets: Mapping[str, str]) -> None:
        output = pipe.output_node
        nodes: list[Node] = []
        for node in pipe.nodes:
            if (pipe.name, node.name) not in self.scans:
                return
            nodes.append(node)
            if node is output:
                break
        if output is None:
            return
        scans = [self.scans[(pipe.name, node.name)] for node in nodes]
        parameters = self._parameters(pipe)
        templated = any(scan.sql != node.sql for node, scan in zip(nodes, scans)) or any(
            self._ref(other, targets).kind == "pipe" and other in self.pipes and self.pipes[other].templated
            for other in self.reads.get(pipe.name, []))
        upstream = tuple(self.pipes[name] for name in self.reads.get(pipe.name, [])
                         if self._ref(name, targets).kind == "pipe" and name in self.pipes)
        view = None
        target = None
        if output.type == "materialized":
            target = output.datasource
            declared = self.datasource_defs.get(target or "")
            # Everything the verdict and plan read: the pipe, the vars, its parameters, the columns (and TTL) of
            # every table it names and the declared target. A changed upstream schema changes the key.
            inputs = (self._source(pipe), self.variables, parameters, self._source(declared),
                      [(name, self._columns_key(name), self._ttl(name))
                       for name in sorted({n for s in scans for n, _ in s.tables})],
                      self._upstream_key(pipe.name))
            view, written = self._memo("view", pipe.name, inputs, lambda: self._compile_view(pipe, nodes, parameters))
            if written is not None:  # a kept view carries an equal copy of the declared target: use this run's
                definition = spark_keys(declared) if declared is not None else None
                written = written if written.definition is definition else replace(written, definition=definition)
                self.datasources[target] = self._shared_target(pipe, view, written)  # type: ignore[index]
        elif output.type == "copy":
            target = output.target_datasource
        if output.type != "materialized":
            self._check_finals(pipe, [n for n, scan in zip(nodes, scans) if "final" in scan.sql.lower()])
        tables = sorted({n for s in scans for n, _ in s.tables})
        self.outputs[pipe.name] = self._memo("columns", pipe.name, (
            self._source(pipe), self.variables, [(name, self._columns_key(name)) for name in tables]),
            lambda: self._check_columns(pipe, nodes))
        parsed = [self.parsed.get((pipe.name, node.name)) for node in nodes]
        trees = ParsedNodes(tuple((node.name, scan.sql, node.sql_location) for node, scan in zip(nodes, scans)),
                            None if None in parsed else parsed,  # type: ignore[arg-type]
                            frozenset().union(*(scan.json_columns for scan in scans)),
                            tuple(scan.types for scan in scans), tuple(self.versions.items()))
        # A pipe without TYPE publishes its last node, as in Tinybird Classic.
        self.pipes[pipe.name] = CompiledPipe(
            pipe.name, pipe, output.type or "endpoint", tuple(self.reads.get(pipe.name, [])), parameters, templated,
            trees, upstream, view, target, self.variables, self.replacing)

    def _shared_target(self, pipe: Pipe, view: CompiledView, written: CompiledDatasource) -> CompiledDatasource:
        """The target as this pipe writes it, or, when several pipes write it, as they all do: each keeps its own
        state table and a read of the target merges the union of their rows with one finalizing GROUP BY, so every
        writer must produce the same columns (names, types, states) grouped by the same keys (PF314)."""
        writers = self.writers.get(view.target)
        if not writers:
            return written
        first = self.datasources.get(view.target)
        if first is None or first.view is None:  # the first writer compiled (or the only one accepted so far)
            return replace(written, writers=tuple(writers))
        first_plan = self.pipes[first.view].view.plan if first.view in self.pipes else None  # type: ignore[union-attr]
        mine, theirs = {c.name: c for c in written.columns}, {c.name: c for c in first.columns}
        for name, column in mine.items():
            other = theirs.get(name)
            if other == column:
                continue
            what = "does not write it" if other is None else f"writes it as {_shown(other)}"
            self.sink.error("PF314", f"Pipe `{pipe.name}` writes column `{name}` of `{view.target}` as "
                            f"{_shown(column)}, but pipe `{first.view}`, which writes `{view.target}` too, {what}.",
                            "Every pipe writing one datasource must produce the same columns with the same types and "
                            "aggregate states: cast or aggregate this SELECT item as the other pipe does.",
                            self._select_item(pipe, name))
        missing = [name for name in theirs if name not in mine]
        node = pipe.typed_node
        assert node is not None
        for name in missing:
            self.sink.error("PF314", f"Pipe `{pipe.name}` does not write column `{name}` of `{view.target}`, which "
                            f"pipe `{first.view}` writes.", f"Add `{name}` to the SELECT of {pipe.name}, as "
                            f"{first.view} produces it.", node.where("DATASOURCE"))
        plan = view.plan
        if not missing and mine == theirs and plan is not None and first_plan is not None \
                and plan.read_sql("{table}") != first_plan.read_sql("{table}"):
            self.sink.error("PF314", f"Pipe `{pipe.name}` writes `{view.target}` {_merged(plan)}, but pipe "
                            f"`{first.view}`, which writes it too, {_merged(first_plan)}.", "Make every pipe writing "
                            "one datasource group by the same columns and count its rows alike (`count()` in each, "
                            "or in none): a read of it merges their rows with one GROUP BY.", node.where("DATASOURCE"))
        return first

    def _check_finals(self, pipe: Pipe, nodes: list[Node]) -> None:
        """PF311: `FROM t FINAL` where pipeframe cannot answer as ClickHouse: `t` is not a datasource, its engine has
        no FINAL read in pipeframe, or it is a ReplacingMergeTree without the ENGINE_VER the read orders by."""
        from pipeframe.compiler.final import final_tables
        from pipeframe.compiler.sql import locate

        for node in nodes:
            nt = self._node_tree(pipe, node)
            for table in final_tables(nt.tree):
                problem = self._final_problem(table.name)
                if problem is not None:
                    self.sink.error("PF311", f"`{table.name} FINAL`: {problem[0]}", problem[1],
                                    locate(table, nt.sql, nt.base, "final"))

    def _final_problem(self, name: str) -> tuple[str, str] | None:
        """Why `name FINAL` cannot be read as ClickHouse reads it (what, and the fix); None when it can."""
        ds = self.datasource_defs.get(name)
        if ds is None:
            if name in self.targets:  # a generated view target: read merged per key already
                return None
            what = "FINAL applies to a datasource, and this is not one."
            return what, f"Remove FINAL after `{name}`."
        if name in self.replacing:
            return None
        if is_replacing(ds):
            if ds.setting("ENGINE_VER"):
                return None  # a key or ENGINE_VER that is not a column: PF307 on the datasource already
            what = (f"ReplacingMergeTree datasource `{name}` has no ENGINE_VER, so the row FINAL keeps per key would "
                    "be the last one inserted, and a pipeframe (Delta) table keeps no insertion order a query can "
                    "read.")
            fix = (f"Add `ENGINE_VER <column>` (a version or update timestamp that grows with each replacing row) to "
                   f"{ds.path}: FINAL then keeps the row with the greatest version.")
            return what, fix
        if engine_name(ds) in NO_OP_ENGINES or name in self.targets:
            return None
        what = f"FINAL on a {ds.engine} datasource is not supported yet (only ReplacingMergeTree deduplicates)."
        return what, "Read it without FINAL and aggregate in the query."

    def _check_columns(self, pipe: Pipe, nodes: list[Node]) -> tuple[str, ...] | None:
        """PF310: a column that no table, earlier node, CTE, subquery or alias a node reads has; the columns the pipe
        outputs (None when they cannot be known), for the pipes that read it."""
        from pipeframe.compiler.columns import resolve
        from pipeframe.compiler.sql import locate_name

        relations: dict[str, tuple[str, ...] | None] = {}
        for node in nodes:
            for name, _ in self.scans[(pipe.name, node.name)].tables:
                if name.lower() not in relations:
                    relations[name.lower()] = self._relation_columns(name)
        outputs = None
        for node in nodes:
            nt = self._node_tree(pipe, node)
            resolution = resolve(nt.tree, relations)
            for unknown in resolution.unknown:
                written = f"{unknown.qualifier}.{unknown.node.name}" if unknown.qualifier else unknown.node.name
                self.sink.error("PF310", unknown.message, unknown.hint,
                                locate_name(written, unknown.node, nt.sql, node.sql, nt.base))
            outputs = relations[node.name.lower()] = resolution.outputs
        return outputs

    def _relation_columns(self, name: str) -> tuple[str, ...] | None:
        """The columns a name in FROM reads, by name: a datasource's (a view's target as read), a pipe's output."""
        if name in self.datasources:
            return tuple(c.name for c in self.datasources[name].columns)
        if name in BY_RELATION:
            return tuple(c for c, _ in BY_RELATION[name].columns)
        return self.outputs.get(name)

    def _parameters(self, pipe: Pipe) -> tuple[Parameter, ...]:
        params: dict[str, Parameter] = {}
        for node in pipe.nodes:
            scan = self.scans.get((pipe.name, node.name))
            for param in scan.parameters if scan else ():
                params.setdefault(param.name, param)
        for name in self.reads.get(pipe.name, []):
            if name in self.datasource_defs or name not in self.pipes or self.pipes[name].view is not None:
                continue
            for param in self.pipes[name].parameters:
                params.setdefault(param.name, param)
        return tuple(params.values())

    def _compile_view(self, pipe: Pipe, nodes: list[Node], parameters: tuple[Parameter, ...]
                      ) -> tuple[CompiledView, CompiledDatasource | None]:
        """The verdict and plan of a materialized pipe, and its target as the plan writes it (None if rejected)."""

        from pipeframe.compiler.incremental import ViewContext, check_view, fold_projection
        from pipeframe.compiler.sql import table_names
        from pipeframe.compiler.states import plan_view

        node_trees = [self._node_tree(pipe, node) for node in nodes]
        inlined = self._inline_trigger_pipe(node_trees)
        if inlined:  # the inlined pipe runs without a request: its parameters are not this pipe's
            own = {param.name for node in nodes for param in self.scans[(pipe.name, node.name)].parameters}
            parameters = tuple(param for param in parameters if param.name in own)
        node_trees, folded = fold_projection(inlined + node_trees)
        output = node_trees[-1].node
        target = output.datasource or ""
        for param in parameters:
            self.sink.error("PF205", f"Materialized pipe uses request parameter `{param.name}`; it has no request.",
                            "Use a project variable (pipeframe.yaml `vars`) or a constant instead.",
                            output.sql_location)
        tables = [(t.name, nt, t) for nt in node_trees for t in table_names(nt.tree)
                  if t.name not in {n.node.name for n in node_trees}]
        shared = [(name, nt, table) for name, nt, table in tables if name in self.writers]
        if shared:
            from pipeframe.compiler.sql import locate

            name, nt, table = shared[0]
            self.sink.error("PF420", f"Materialized pipe `{pipe.name}` reads `{name}`, which several materialized "
                            f"pipes write ({', '.join(self.writers[name])}); a view over it is not supported yet.",
                            "Read the sources of those pipes in this pipe instead, or make it an endpoint or a copy "
                            "pipe.", locate(table, nt.sql, nt.base))
            return CompiledView(pipe.name, target, name, (), Verdict("rejected"), None), None
        trigger = tables[0][0] if tables else None
        upstream = self.datasources.get(trigger) if trigger else None
        upstream_states = {c.name: _state(c) for c in upstream.columns if c.state} if upstream else {}
        dims = tuple(dict.fromkeys(d for nt in node_trees for d in nt.node.dimensions))
        joinable = tuple(dict.fromkeys(name for name, _, _ in tables if name != trigger and name not in dims
                                       and name in self.datasources))
        declared = self.datasource_defs.get(target)
        ctx = ViewContext(pipe, node_trees, target, trigger, [t for t in tables if t[0] != trigger],
                          {k: v for k, v in upstream_states.items() if v is not None}, trigger,
                          versions=tuple(self.versions.items()),
                          trigger_pipe=(tables[0][1], tables[0][2]) if trigger is not None and self._ref(
                              trigger, self.targets).kind == "pipe" and trigger in self.pipe_defs else None,
                          joinable=joinable,
                          ttl_tables=frozenset(n for n, _, _ in tables if self._ttl(n)),
                          target_backfill_skip=declared is not None and declared.backfill == "skip")
        problems = check_view(ctx)
        self.sink.extend(problems)
        rejected = any(p.is_error for p in problems)
        plan = None
        if not rejected and not parameters:
            base_scope, base_not_null, star = self._scope([t[0] for t in tables])
            scope, not_null = self._trees_scope(base_scope, base_not_null, node_trees[:-1])
            try:
                plan = plan_view(ctx, scope, not_null, star)
                if folded is not None:
                    plan = replace(plan, rewrites=(folded, *plan.rewrites))
            except PipeframeError as err:
                self.sink.extend(err.diagnostics)
                rejected = True
        written = self._materialize_target(pipe, target, plan) if plan is not None else None
        status = "rejected" if rejected or plan is None else ("rewritten" if plan.rewrites else "accepted")
        verdict = Verdict(status, plan.rewrites if plan else (), tuple(problems))  # type: ignore[arg-type]
        joined = joinable if plan is not None and plan.aggregated else ()
        follow_ttl = any(node.follow_ttl for node in nodes)  # its own nodes, not an inlined pipe's
        return CompiledView(pipe.name, target, trigger, dims, verdict, plan, joined, follow_ttl), written

    def _trigger_pipe(self, node_trees: list[NodeTree]) -> CompiledPipe | None:
        """The pipe a materialized pipe's first table names, when it is a compiled pipe whose nodes can run on each
        block of new rows in its place: not materialized, not a copy, without request parameters."""
        from pipeframe.compiler.sql import table_names

        names = {nt.node.name for nt in node_trees}
        first = next((t.name for nt in node_trees for t in table_names(nt.tree) if t.name not in names), None)
        if first is None or first in self.datasource_defs or first in self.targets:
            return None
        upstream = self.pipes.get(first)
        if upstream is None or upstream.type != "endpoint" or upstream.target:
            return None
        return upstream

    def _unrequested_trees(self, upstream: CompiledPipe) -> list[NodeTree] | None:
        """The nodes of a pipe as they run with no request (what Tinybird materializes: `{% if defined(x) %}`
        filters are left out); None when a node needs a parameter."""
        from pipeframe.compiler.clickhouse import json_paths
        from pipeframe.compiler.incremental import NodeTree
        from pipeframe.compiler.sql import parse_select, read_versions
        from pipeframe.templating import render

        if not upstream.templated:
            return [self._node_tree(upstream.definition, upstream.definition.node(name))  # type: ignore[arg-type]
                    for name, _ in upstream.trees]
        trees = []
        for index, (name, _) in enumerate(upstream.trees):
            node = upstream.definition.node(name)
            assert node is not None
            types = upstream.trees.types_of(index)
            try:
                text = render(node.sql, {}, variables=upstream.variables, location=node.sql_location)
                tree = read_versions(parse_select(text, node.sql_location, types), self.versions)
                tree = json_paths(tree, upstream.trees.json_columns)
            except PipeframeError:
                return None
            trees.append(NodeTree(node, tree, text, node.sql_location, upstream.trees.json_columns, tuple(types.items())))
        return trees

    def _inline_trigger_pipe(self, node_trees: list[NodeTree], depth: int = 0) -> list[NodeTree]:
        """A materialized pipe reading another pipe (`FROM analytics_hits`, an endpoint over `analytics_events`) is
        triggered by that pipe's datasource, as in Tinybird: the pipe's nodes become earlier nodes of the view
        (`analytics_hits__parsed_hits`, ..., its last one named `analytics_hits`), so that every rule and the state
        SQL see what runs on each block of new rows."""
        from pipeframe.compiler.sql import rename_tables

        upstream = self._trigger_pipe(node_trees)
        trees = self._unrequested_trees(upstream) if upstream is not None and depth <= 8 else None
        if upstream is None or not trees:
            return []
        trees = self._inline_trigger_pipe(trees, depth + 1) + trees
        own = trees[-len(upstream.trees):]
        renames = {nt.node.name: f"{upstream.name}__{nt.node.name}" for nt in own[:-1]}
        renames[own[-1].node.name] = upstream.name
        return [*trees[:-len(own)], *(replace(nt, node=replace(nt.node, name=renames[nt.node.name]),
                                              tree=rename_tables(nt.tree, renames)) for nt in own)]

    def _select_item(self, pipe: Pipe, name: str) -> Location:
        """Where the materialized node's SELECT writes the output column `name` (its alias, or the `*` it comes
        from)."""
        from sqlglot import exp

        from pipeframe.compiler.sql import locate, locate_name

        node = pipe.output_node
        assert node is not None
        nt = self._node_tree(pipe, node)
        for projection in nt.tree.selects if isinstance(nt.tree, exp.Query) else []:
            if projection.alias_or_name == name:
                return locate_name(name, projection, nt.sql, node.sql, nt.base)
        star = nt.tree.find(exp.Star)
        return locate(star, nt.sql, nt.base, "*") if star is not None else node.where("DATASOURCE")

    def _materialize_target(self, pipe: Pipe, target: str, plan: ViewPlan) -> CompiledDatasource:
        from pipeframe.compiler.types import is_safe_cast

        declared = self.datasource_defs.get(target)
        if declared is None:
            return CompiledDatasource(target, None, plan.columns, pipe.name)
        declared_names = [c.name for c in declared.columns]
        produced_names = {c.name for c in plan.columns}
        unwritten = [name for name in declared_names if name not in produced_names]
        renamed: set[str] = set()  # declared columns a misspelt SELECT item stands for: reported there
        columns: list[ViewColumn] = []
        for col in plan.columns:
            decl = declared.column(col.name)
            if decl is None:
                close = difflib.get_close_matches(col.name, [n for n in unwritten if n not in renamed], n=1)
                renamed.update(close)
                hint = f"Did you mean `{close[0]}` (declared in {declared.path}, not written)? Rename the SELECT " \
                    "item." if close else f"Add `{col.name}` to {declared.path} or drop it from the SELECT."
                self.sink.error("PF308", f"The pipe writes column `{col.name}`, which target `{target}` does not "
                                "declare.", hint, self._select_item(pipe, col.name))
                continue
            if decl.aggregate_function and not decl.simple_aggregate:
                state = explicit_column_state(decl.aggregate_function)
                if col.state is None or state is None or state.kind != col.state:
                    got = col.state or "a plain value"
                    self.sink.error("PF306", f"Column `{col.name}` is declared {decl.written_type} but the pipe "
                                    f"produces {got}.", f"Produce it with {decl.aggregate_function}State(...), or "
                                    "change the declared type.", decl.location)
                columns.append(ViewColumn(col.name, col.type, col.state, col.params or decl.aggregate_params,
                                          col.value_type, explicit=True, not_null=col.not_null))
                continue
            produced = col.value_type
            if produced is not None and not is_safe_cast(produced, decl.type):
                self.sink.error("PF306", f"Column `{col.name}` of `{target}` is declared {decl.type} but the pipe "
                                f"produces {produced}.", f"Cast it in the SELECT (CAST(... AS {decl.type})) or "
                                "declare a type it safely widens to.", decl.location)
            physical = col.type if col.state else decl.type
            columns.append(ViewColumn(col.name, physical, col.state, col.params, decl.type, col.explicit,
                                      col.not_null))
        for name in unwritten:
            if name not in renamed:
                decl = declared.column(name)
                self.sink.error("PF308", f"Target `{target}` declares `{name}`, which the pipe does not produce.",
                                f"Add `{name}` to the SELECT of {pipe.name} or remove it from {declared.path}.",
                                decl.location if decl else declared.location)
        self._check_keys(declared, set(declared_names))
        return CompiledDatasource(target, spark_keys(declared), tuple(columns), pipe.name)


def _shown(column: ViewColumn) -> str:
    """A target column as a writer produces it, for PF314: its type and, for a state, which one."""
    return f"{column.state} state {column.type}" if column.state else f"{column.type or 'an unknown type'}"


def _merged(plan: ViewPlan) -> str:
    """How a read merges a view's rows, for PF314: its group keys and the count that keeps a group."""
    keys = f"grouped by {', '.join(plan.keys)}" if plan.keys else "as one group"
    return f"{keys}, a group kept while its `{plan.row_count}` (a count()) is above 0" if plan.row_count and plan.keys \
        else f"{keys}, with no count() keeping a group"


_VERSIONED = re.compile(r"^(?P<stem>.+)__v\d+$")


def _unversioned(name: str) -> str | None:
    """`page_views__v3` → `page_views` (a VERSION-named resource), else None."""
    match = _VERSIONED.match(name)
    return match.group("stem") if match else None


def _state(column: ViewColumn):
    return BY_KIND.get(column.state) if column.state else None


@lru_cache(maxsize=1024)
def _key_columns(text: str) -> tuple[str, ...] | None:
    """The columns an ENGINE_PARTITION_KEY / ENGINE_TTL expression uses, None if it is not valid SQL (the same
    few expressions recur across datasources, so each is parsed once)."""
    from sqlglot import exp

    from pipeframe.compiler.sql import parse_select

    try:
        tree = parse_select(f"SELECT {text}", Location("<key>"))
    except PipeframeError:
        return None
    return tuple(column.name for column in tree.find_all(exp.Column))


# Delta clusters a table by at most this many columns: a longer ENGINE_SORTING_KEY clusters by its leading ones.
MAX_CLUSTERING_COLUMNS = 4


def spark_keys(ds: Datasource) -> Datasource:
    """The datasource as deploy writes it: a partition key or TTL written in ClickHouse (`toYYYYMM(ts)`,
    `toDateTime(ts) + toIntervalDay(90)`) as its Spark SQL translation, the sorting key as the clustering Delta takes
    (its first 4 columns; ClickHouse prunes by the leading ones too); the same object when nothing changes. FINAL
    reads keep the whole sorting key (they dedupe by the definition as written)."""
    changes: dict[str, Any] = {name: _spark_key(text, name == "partition_key")
                               for name, text in (("partition_key", ds.partition_key), ("ttl", ds.ttl))
                               if text and _spark_key(text, name == "partition_key") != text}
    if len(ds.sorting_key) > MAX_CLUSTERING_COLUMNS:
        changes["sorting_key"] = ds.sorting_key[:MAX_CLUSTERING_COLUMNS]
    return replace(ds, **changes) if changes else ds


# A partition key is a Delta generated column, which may not call timestamp_millis & co.: from_unixtime may.
_GENERATED_EPOCHS = {"timestamp_seconds": "CAST(from_unixtime({0}) AS TIMESTAMP)",
                     "timestamp_millis": "CAST(from_unixtime({0} DIV 1000) AS TIMESTAMP)",
                     "timestamp_micros": "CAST(from_unixtime({0} DIV 1000000) AS TIMESTAMP)"}


@lru_cache(maxsize=1024)
def _spark_key(text: str, generated: bool = False) -> str:
    """A key expression in Spark SQL (`generated`: as a Delta generated column may compute it); Spark SQL (and what
    cannot be read: `check` reports it) is kept as written."""
    import sqlglot
    from sqlglot.errors import ParseError, TokenError

    from pipeframe.compiler.clickhouse import looks_clickhouse
    from pipeframe.compiler.sql import DIALECT, parse_select, to_sql

    try:
        if not looks_clickhouse(sqlglot.parse_one(f"SELECT {text}", read=DIALECT)):
            return text
    except (ParseError, TokenError):
        pass
    try:
        tree = parse_select(f"SELECT {text}", Location("<key>"))
    except PipeframeError:
        return text
    projections = tree.expressions if hasattr(tree, "expressions") else []
    if len(projections) != 1:
        return text
    if generated:
        from sqlglot import exp

        for call in list(projections[0].find_all(exp.Anonymous)):
            template = _GENERATED_EPOCHS.get(str(call.this).lower())
            if template is not None and len(call.expressions) == 1:
                call.replace(sqlglot.parse_one(template.format(call.expressions[0].sql(dialect=DIALECT)), read=DIALECT))
    return to_sql(projections[0])


def compile_project(resources: Resources, variables: Mapping[str, Any] | None = None,
                    diagnostics: list[Diagnostic] | None = None, memo: CompileMemo | None = None) -> CompiledProject:
    """Compile parsed resources; every problem lands in ``CompiledProject.diagnostics``. With a `memo` (the check
    cache), unchanged steps are not run again; the result is the same."""
    return Compiler(resources, variables or {}, diagnostics or [], memo).compile()


__all__ = ["CompiledDatasource", "CompiledPipe", "CompiledProject", "CompiledView", "compile_project"]


def compile_query(sql: str) -> str:
    """An ad-hoc query (`pipeframe query`) as Spark SQL: State/Merge combinators translated, service datasources
    (`pipeframe.pipe_stats`) read by their relations."""
    from pipeframe.compiler.sql import parse_select, read_service_tables, to_sql
    from pipeframe.compiler.states import translate_merges
    from pipeframe.errors import Location as _Location

    return to_sql(translate_merges(read_service_tables(parse_select(sql, _Location("<query>")))))


def _named_selects(tree: exp.Expression) -> list[str]:
    """The output names of a node's query; none where sqlglot parsed a set operation with a side that is not a query
    (hypothesis found one in tests/unit/test_compile_fuzz.py): it then raises TypeError instead of naming them."""
    try:
        return list(getattr(tree, "named_selects", ()))
    except TypeError:
        return []
