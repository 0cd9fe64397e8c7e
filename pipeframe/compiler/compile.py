"""The compiler driver: parsed datafiles → CompiledProject (SQL per pipe, target schemas, the graph and
each materialized pipe's verdict), with every problem collected as a located diagnostic. No JVM here."""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from sqlglot import exp

from pipeframe.compiler.aggregates import BY_KIND, explicit_column_state, state_type_for
from pipeframe.compiler.graph import DAG
from pipeframe.compiler.incremental import NodeTree, Verdict, ViewContext, check_view
from pipeframe.compiler.infer import Scope, infer
from pipeframe.compiler.sql import inline, locate, parse_select, rename_tables, table_names, to_sql
from pipeframe.compiler.states import ViewColumn, ViewPlan, plan_view, translate_merges
from pipeframe.compiler.types import is_safe_cast
from pipeframe.datafiles.model import Datasource, NodeType, Pipe, Resources
from pipeframe.errors import Diagnostic, DiagnosticSink, Location, PipeframeError
from pipeframe.templating import Analysis, Parameter, analyze, render

FROM_JOIN = re.compile(r"\b(?:FROM|JOIN)\s+`?([A-Za-z_][A-Za-z0-9_]*)`?", re.IGNORECASE)


@dataclass(frozen=True, order=True)
class Ref:
    """A node of the project graph. A materialized pipe may share its name with its target datasource."""

    kind: str  # "datasource" | "pipe"
    name: str

    def __str__(self) -> str:
        return self.name


@dataclass(frozen=True)
class CompiledView:
    """A materialized pipe: what triggers it, where it writes, its verdict and (if accepted) its plan."""

    pipe: str
    target: str
    trigger: str | None
    dimensions: tuple[str, ...]
    verdict: Verdict
    plan: ViewPlan | None


@dataclass(frozen=True)
class CompiledDatasource:
    name: str
    definition: Datasource | None  # None when the schema is generated from the materialized pipe
    columns: tuple[ViewColumn, ...]
    view: str | None = None  # the materialized pipe writing here

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
    # Parsed nodes up to the output node, and pipes read by name (inlined as CTEs). SQL text is generated on
    # first use so `check` never pays for it.
    trees: tuple[tuple[str, exp.Query], ...] = field(compare=False, repr=False)
    upstream: tuple[CompiledPipe, ...] = field(compare=False, repr=False)
    view: CompiledView | None = None
    target: str | None = None  # DATASOURCE (materialized) or TARGET_DATASOURCE (copy)
    variables: Mapping[str, Any] = field(default_factory=dict, compare=False, repr=False)

    def _statement(self, upto: int, trees_of: Callable[[CompiledPipe], list[tuple[str, exp.Query]]]) -> exp.Query:
        own = trees_of(self)
        ctes = _upstream_ctes(self, trees_of, set()) + own[:upto]
        return translate_merges(inline(ctes, own[upto][1]))  # type: ignore[return-value]

    @cached_property
    def statement(self) -> exp.Query:
        return self._statement(len(self.trees) - 1, _static_trees)

    @cached_property
    def sql(self) -> str:
        """One Spark SQL statement (templates rendered in analysis mode, Merge calls translated)."""
        return to_sql(self.statement)

    @cached_property
    def node_sql(self) -> tuple[tuple[str, str], ...]:
        """Each node compiled on its own, with earlier nodes inlined."""
        return tuple((name, to_sql(self._statement(i, _static_trees))) for i, (name, _) in enumerate(self.trees))

    def render(self, params: Mapping[str, Any]) -> str:
        """The statement for one request; parameters are validated and rendered as SQL literals."""
        if not self.templated:
            return self.sql

        def rendered(pipe: CompiledPipe) -> list[tuple[str, exp.Query]]:
            if not pipe.templated:
                return list(pipe.trees)
            trees = []
            for name, _ in pipe.trees:
                node = pipe.definition.node(name)
                assert node is not None
                text = render(node.sql, params, variables=pipe.variables, location=node.sql_location)
                trees.append((name, parse_select(text, node.sql_location)))
            return trees

        return to_sql(self._statement(len(self.trees) - 1, rendered))


def _static_trees(pipe: CompiledPipe) -> list[tuple[str, exp.Query]]:
    return list(pipe.trees)


def _upstream_ctes(pipe: CompiledPipe, trees_of: Callable[[CompiledPipe], list[tuple[str, exp.Query]]],
                   seen: set[str]) -> list[tuple[str, exp.Query]]:
    """Pipes read by name become CTEs named after the pipe; their nodes are renamed `pipe__node` so that
    node names never clash (Spark SQL hoists nested CTEs), and a pipe read twice is inlined once."""
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
class CompiledProject:
    datasources: Mapping[str, CompiledDatasource]
    pipes: Mapping[str, CompiledPipe]
    order: tuple[Ref, ...]  # every resource, dependencies first
    edges: tuple[tuple[Ref, Ref], ...]  # (from, to): data flows from → to
    diagnostics: tuple[Diagnostic, ...]
    resources: Resources

    @property
    def errors(self) -> list[Diagnostic]:
        return [d for d in self.diagnostics if d.is_error]

    @property
    def views(self) -> list[CompiledView]:
        return [p.view for p in self.pipes.values() if p.view is not None]

    def dependents(self, ref: Ref) -> list[Ref]:
        return [b for a, b in self.edges if a == ref]


class Compiler:
    """Compiles Resources into a CompiledProject; one instance per compile."""

    def __init__(self, resources: Resources, variables: Mapping[str, Any], diagnostics: list[Diagnostic]) -> None:
        self.resources = resources
        self.variables = variables
        self.sink = DiagnosticSink()
        self.sink.extend(diagnostics)
        self.datasource_defs = {d.name: d for d in resources.datasources}
        self.pipe_defs = {p.name: p for p in resources.pipes}
        self.analyses: dict[tuple[str, str], Analysis] = {}
        self.trees: dict[tuple[str, str], NodeTree] = {}
        self.reads: dict[str, list[str]] = {}
        self.datasources: dict[str, CompiledDatasource] = {}
        self.pipes: dict[str, CompiledPipe] = {}

    # ------------------------------------------------------------------------------------------ driver
    def compile(self) -> CompiledProject:
        targets = self._targets()
        self.known_names = set(self.datasource_defs) | set(self.pipe_defs) | set(targets)
        for pipe in self.resources.pipes:
            if pipe.name in self.datasource_defs and targets.get(pipe.name) != pipe.name:
                self.sink.error("PF105", f"Pipe `{pipe.name}` has the name of datasource `{pipe.name}` but does not "
                                "write it.", "Rename one of them; only a materialized or copy pipe may share the name "
                                "of the datasource it writes.", pipe.location)
        for pipe in self.resources.pipes:
            self._parse_pipe(pipe, targets)
        graph = self._graph(targets)
        cycle = graph.find_cycle()
        if cycle:
            first = next((r for r in cycle if r.kind == "pipe"), cycle[0])
            start = self.pipe_defs.get(first.name) if first.kind == "pipe" else self.datasource_defs.get(first.name)
            self.sink.error("PF302", f"Dependency cycle: {' → '.join(str(r) for r in reversed(cycle))}.",
                            "Break the cycle: a pipe cannot read, directly or not, the datasource it writes.",
                            start.location if start else None)
        order = graph.sorted()
        for ref in order:
            if ref.kind == "datasource" and ref.name in self.datasource_defs:
                self._compile_landing(self.datasource_defs[ref.name])
            elif ref.kind == "pipe" and not cycle:
                self._compile_pipe(self.pipe_defs[ref.name], targets)
        edges = tuple((dep, node) for node in graph.nodes for dep in graph.dependencies(node))
        return CompiledProject(self.datasources, self.pipes, tuple(order), edges, tuple(self.sink.sorted()),
                               self.resources)

    def _targets(self) -> dict[str, str]:
        """target datasource -> the pipe that writes it (materialized or copy)."""
        targets: dict[str, str] = {}
        for pipe in self.resources.pipes:
            node = pipe.typed_node
            if node is None or node.type == "endpoint":
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
                self.sink.error("PF305", f"Datasource `{target}` is already written by pipe `{targets[target]}`.",
                                "Give each materialized or copy pipe its own target datasource.",
                                node.where(keyword))
                continue
            targets[target] = pipe.name
        return targets

    def _unknown(self, name: str, where: Location, what: str, candidates: set[str]) -> None:
        close = difflib.get_close_matches(name, sorted(candidates), n=1)
        hint = f"Did you mean `{close[0]}`?" if close else "Create the resource, or fix the name."
        self.sink.error("PF301", f"Unknown {what} `{name}`.", hint, where)

    # -------------------------------------------------------------------------------------- parsing
    def _parse_pipe(self, pipe: Pipe, targets: Mapping[str, str]) -> None:
        known = self.known_names
        reads: list[str] = []
        seen_nodes: list[str] = []
        output = pipe.output_node
        # Reading its own target is reported by the PF409 rule, not as a graph cycle.
        own_target = output.datasource if output is not None and output.type == "materialized" else None
        for node in pipe.nodes:
            try:
                analysis = analyze(node.sql, variables=self.variables, location=node.sql_location)
                tree = parse_select(analysis.sql, node.sql_location)
            except PipeframeError as err:
                self.sink.extend(err.diagnostics)
                seen_nodes.append(node.name)
                continue
            self.analyses[(pipe.name, node.name)] = analysis
            nt = NodeTree(node, tree, analysis.sql, node.sql_location)
            self.trees[(pipe.name, node.name)] = nt
            for table in table_names(tree):
                name = table.name
                if name in seen_nodes or name == own_target:
                    continue
                if name == node.name:
                    self.sink.error("PF301", f"Node `{node.name}` reads itself.", "Read an earlier node or a "
                                    "datasource.", locate(table, nt.sql, nt.base))
                elif name in known:
                    if name in self.pipe_defs and self.pipe_defs[name].type in ("materialized", "copy") \
                            and name not in targets and name not in self.datasource_defs:
                        target_pipe = self.pipe_defs[name]
                        target = target_pipe.typed_node.datasource or target_pipe.typed_node.target_datasource  # type: ignore[union-attr]
                        self.sink.error("PF301", f"`{name}` is a {target_pipe.type} pipe; it has no rows to read.",
                                        f"Read its target datasource `{target}` instead.",
                                        locate(table, nt.sql, nt.base))
                    elif name == pipe.name and name not in targets:
                        self.sink.error("PF302", f"Pipe `{pipe.name}` reads itself.",
                                        "Read an earlier node or a datasource.", locate(table, nt.sql, nt.base))
                    elif name not in reads:
                        reads.append(name)
                else:
                    self._unknown(name, locate(table, nt.sql, nt.base), "table or node", known | set(seen_nodes))
            if analysis.sql != node.sql:
                # Tables read only in a template branch not taken in analysis mode still are dependencies.
                for match in FROM_JOIN.finditer(node.sql):
                    name = match.group(1)
                    if name in known and name not in reads and name not in seen_nodes and name != own_target \
                            and name != pipe.name:
                        reads.append(name)
            seen_nodes.append(node.name)
            if node is output:
                break
        self.reads[pipe.name] = reads

    def _ref(self, name: str, targets: Mapping[str, str]) -> Ref:
        """What a name in SQL means: a datasource (or view target) wins over a pipe of the same name."""
        return Ref("datasource", name) if name in self.datasource_defs or name in targets else Ref("pipe", name)

    def _graph(self, targets: Mapping[str, str]) -> DAG[Ref]:
        graph: DAG[Ref] = DAG()
        for ds in self.resources.datasources:
            graph.add(Ref("datasource", ds.name))
        for pipe in self.resources.pipes:
            graph.add(Ref("pipe", pipe.name), [self._ref(n, targets) for n in self.reads.get(pipe.name, [])])
        for target, pipe_name in targets.items():
            graph.add(Ref("datasource", target), [Ref("pipe", pipe_name)])
        return graph

    # ---------------------------------------------------------------------------------- datasources
    def _compile_landing(self, ds: Datasource) -> None:
        if ds.name in self.datasources:
            return
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
                columns.append(ViewColumn(col.name, col.type, value_type=col.type))
        self._check_keys(ds, {c.name for c in ds.columns})
        self.datasources[ds.name] = CompiledDatasource(ds.name, ds, tuple(columns))

    def _check_keys(self, ds: Datasource, names: set[str]) -> None:
        for key in ds.sorting_key:
            if key not in names:
                self._not_a_column(ds, key, "ENGINE_SORTING_KEY", names)
        for keyword, text in (("ENGINE_PARTITION_KEY", ds.partition_key), ("ENGINE_TTL", ds.ttl)):
            if not text:
                continue
            try:
                tree = parse_select(f"SELECT {text}", ds.where(keyword))
            except PipeframeError:
                self.sink.error("PF307", f"{keyword} `{text}` is not a valid SQL expression.",
                                "Write a Spark SQL expression over the columns, e.g. to_date(ts).", ds.where(keyword))
                continue
            for column in tree.find_all(exp.Column):
                if column.name not in names:
                    self._not_a_column(ds, column.name, keyword, names)

    def _not_a_column(self, ds: Datasource, name: str, keyword: str, names: set[str]) -> None:
        close = difflib.get_close_matches(name, sorted(names), n=1)
        self.sink.error("PF307", f"{keyword} uses `{name}`, which is not a column of `{ds.name}`.",
                        f"Did you mean `{close[0]}`?" if close else "Use columns declared in SCHEMA.",
                        ds.where(keyword))

    # ---------------------------------------------------------------------------------------- pipes
    def _scope(self, names: list[str]) -> tuple[dict[str, str | None], list[tuple[str, str | None]]]:
        scope: dict[str, str | None] = {}
        star: list[tuple[str, str | None]] = []
        for name in names:
            ds = self.datasources.get(name)
            if ds is None:
                continue
            for col in ds.columns:
                scope.setdefault(col.name, col.type)
                scope[f"{name}.{col.name}"] = col.type
                if name == names[0]:
                    star.append((col.name, col.type))
        return scope, star

    def _node_scope(self, pipe: Pipe, base_scope: dict[str, str | None], upto: int) -> dict[str, str | None]:
        """Add the outputs of earlier nodes (as `node.col` and bare names) to a scope."""
        scope = dict(base_scope)
        for node in pipe.nodes[:upto]:
            nt = self.trees.get((pipe.name, node.name))
            if nt is None or not isinstance(nt.tree, exp.Select):
                continue
            node_scope = dict(scope)
            for projection in nt.tree.expressions:
                if isinstance(projection, exp.Star):
                    continue
                col_type = infer(projection, node_scope)
                scope[projection.alias_or_name] = col_type
                scope[f"{node.name}.{projection.alias_or_name}"] = col_type
        return scope

    def _compile_pipe(self, pipe: Pipe, targets: Mapping[str, str]) -> None:
        output = pipe.output_node
        node_trees = []
        for node in pipe.nodes:
            nt = self.trees.get((pipe.name, node.name))
            if nt is None:
                return
            node_trees.append(nt)
            if node is output:
                break
        if output is None:
            return
        parameters = self._parameters(pipe)
        templated = any(self.analyses[(pipe.name, nt.node.name)].sql != nt.node.sql for nt in node_trees) or any(
            self._ref(other, targets).kind == "pipe" and other in self.pipes and self.pipes[other].templated
            for other in self.reads.get(pipe.name, []))
        upstream = tuple(self.pipes[name] for name in self.reads.get(pipe.name, [])
                         if self._ref(name, targets).kind == "pipe" and name in self.pipes)
        view = None
        target = None
        if output.type == "materialized":
            target = output.datasource
            view = self._compile_view(pipe, node_trees, parameters)
        elif output.type == "copy":
            target = output.target_datasource
        self.pipes[pipe.name] = CompiledPipe(
            pipe.name, pipe, output.type, tuple(self.reads.get(pipe.name, [])), parameters, templated,
            tuple((nt.node.name, nt.tree) for nt in node_trees), upstream, view, target, self.variables)

    def _parameters(self, pipe: Pipe) -> tuple[Parameter, ...]:
        params: dict[str, Parameter] = {}
        for node in pipe.nodes:
            analysis = self.analyses.get((pipe.name, node.name))
            for param in analysis.parameters if analysis else ():
                params.setdefault(param.name, param)
        for name in self.reads.get(pipe.name, []):
            if name in self.datasource_defs or name not in self.pipes or self.pipes[name].view is not None:
                continue
            for param in self.pipes[name].parameters:
                params.setdefault(param.name, param)
        return tuple(params.values())

    def _compile_view(self, pipe: Pipe, node_trees: list[NodeTree], parameters: tuple[Parameter, ...]) -> CompiledView:
        output = node_trees[-1].node
        target = output.datasource or ""
        for param in parameters:
            self.sink.error("PF205", f"Materialized pipe uses request parameter `{param.name}`; it has no request.",
                            "Use a project variable (pipeframe.yaml `vars`) or a constant instead.",
                            output.sql_location)
        tables = [(t.name, nt, t) for nt in node_trees for t in table_names(nt.tree)
                  if t.name not in {n.node.name for n in node_trees}]
        trigger = tables[0][0] if tables else None
        upstream = self.datasources.get(trigger) if trigger else None
        upstream_states = {c.name: _state(c) for c in upstream.columns if c.state} if upstream else {}
        ctx = ViewContext(pipe, node_trees, target, trigger, [t for t in tables if t[0] != trigger],
                          {k: v for k, v in upstream_states.items() if v is not None}, trigger)
        problems = check_view(ctx)
        self.sink.extend(problems)
        rejected = any(p.is_error for p in problems)
        plan = None
        if not rejected and not parameters:
            base_scope, star = self._scope([t[0] for t in tables])
            scope = self._node_scope(pipe, base_scope, len(node_trees) - 1)
            try:
                plan = plan_view(ctx, scope, star)
            except PipeframeError as err:
                self.sink.extend(err.diagnostics)
                rejected = True
        if plan is not None:
            self._materialize_target(pipe, target, plan)
        status = "rejected" if rejected or plan is None else ("rewritten" if plan.rewrites else "accepted")
        verdict = Verdict(status, plan.rewrites if plan else (), tuple(problems))  # type: ignore[arg-type]
        dims = tuple(dict.fromkeys(d for nt in node_trees for d in nt.node.dimensions))
        return CompiledView(pipe.name, target, trigger, dims, verdict, plan)

    def _materialize_target(self, pipe: Pipe, target: str, plan: ViewPlan) -> None:
        declared = self.datasource_defs.get(target)
        if declared is None:
            self.datasources[target] = CompiledDatasource(target, None, plan.columns, pipe.name)
            return
        node = pipe.output_node
        where = node.where("DATASOURCE") if node else pipe.location
        declared_names = [c.name for c in declared.columns]
        columns: list[ViewColumn] = []
        for col in plan.columns:
            decl = declared.column(col.name)
            if decl is None:
                self.sink.error("PF308", f"The pipe writes column `{col.name}`, which target `{target}` does not "
                                "declare.", f"Add `{col.name}` to {declared.path} or drop it from the SELECT.", where)
                continue
            if decl.aggregate_function and not decl.simple_aggregate:
                state = explicit_column_state(decl.aggregate_function)
                if col.state is None or state is None or state.kind != col.state:
                    got = col.state or "a plain value"
                    self.sink.error("PF306", f"Column `{col.name}` is declared {decl.written_type} but the pipe "
                                    f"produces {got}.", f"Produce it with {decl.aggregate_function}State(...), or "
                                    "change the declared type.", decl.location)
                columns.append(ViewColumn(col.name, col.type, col.state, col.params or decl.aggregate_params,
                                          col.value_type, explicit=True))
                continue
            produced = col.value_type
            if produced is not None and not is_safe_cast(produced, decl.type):
                self.sink.error("PF306", f"Column `{col.name}` of `{target}` is declared {decl.type} but the pipe "
                                f"produces {produced}.", f"Cast it in the SELECT (CAST(... AS {decl.type})) or "
                                "declare a type it safely widens to.", decl.location)
            physical = col.type if col.state else decl.type
            columns.append(ViewColumn(col.name, physical, col.state, col.params, decl.type, col.explicit))
        produced_names = {c.name for c in plan.columns}
        for name in declared_names:
            if name not in produced_names:
                decl = declared.column(name)
                self.sink.error("PF308", f"Target `{target}` declares `{name}`, which the pipe does not produce.",
                                f"Add `{name}` to the SELECT of {pipe.name} or remove it from {declared.path}.",
                                decl.location if decl else declared.location)
        self._check_keys(declared, set(declared_names))
        self.datasources[target] = CompiledDatasource(target, declared, tuple(columns), pipe.name)


def _state(column: ViewColumn):
    return BY_KIND.get(column.state) if column.state else None


def compile_project(resources: Resources, variables: Mapping[str, Any] | None = None,
                    diagnostics: list[Diagnostic] | None = None) -> CompiledProject:
    """Compile parsed resources; every problem lands in ``CompiledProject.diagnostics``."""
    return Compiler(resources, variables or {}, diagnostics or []).compile()


__all__ = ["CompiledDatasource", "CompiledPipe", "CompiledProject", "CompiledView", "Scope", "compile_project"]


def compile_query(sql: str) -> str:
    """An ad-hoc query (`pipeframe query`) as Spark SQL: State/Merge combinators translated."""
    from pipeframe.errors import Location as _Location

    return to_sql(translate_merges(parse_select(sql, _Location("<query>"))))
