"""Column resolution for `check` (PF310): every column a node reads, resolved with sqlglot's scopes against what
each scope reads — relations of known columns (datasources, views' targets, earlier nodes, pipes), CTEs, subqueries,
lateral views, the SELECT's own aliases and, in a correlated subquery, the outer query's sources.

A column is judged only where every source it could come from is known, never a guess: a table whose columns are
unknown (a pipe that fails check, a table function, `SELECT *` over one of those) leaves its scope unjudged. Names
compare case-insensitively, as in Spark.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from dataclasses import dataclass

from sqlglot import exp
from sqlglot.optimizer.scope import Scope, traverse_scope

from pipeframe.compiler.service import BY_RELATION
from pipeframe.templating.identifiers import PLACEHOLDER_COLUMN

Columns = tuple[str, ...]


@dataclass(frozen=True)
class UnknownColumn:
    """A column no source of its scope has: where it is, what was read, and the closest name there is."""

    node: exp.Column
    qualifier: str | None  # the alias as written for `alias.column`
    relation: str  # what was searched: "`events`", "none of `events`, `earlier`", "the subquery"
    close: str | None
    aliases: bool  # in ORDER BY, GROUP BY or HAVING, where the SELECT's own aliases were searched too

    @property
    def message(self) -> str:
        written = f"{self.qualifier}.{self.node.name}" if self.qualifier else self.node.name
        if self.relation.startswith("none of "):
            missing = f"{self.relation} has such a column"
        else:
            missing = f"{self.relation} has no such column"
        also = " and no SELECT item is named so" if self.aliases else ""
        return f"Unknown column `{written}`: {missing}{also}."

    @property
    def hint(self) -> str:
        if self.close:
            return f"Did you mean `{self.qualifier}.{self.close}`?" if self.qualifier else \
                f"Did you mean `{self.close}`?"
        if self.relation == "no table":
            return "Read a table that has it, or fix the name."
        if self.relation.startswith("none of "):
            return f"Use a column one of {self.relation.removeprefix('none of ')} has."
        return f"Use a column {self.relation} has."


@dataclass(frozen=True)
class Resolution:
    """A node's unknown columns, and its output columns (None when they cannot be known)."""

    unknown: tuple[UnknownColumn, ...]
    outputs: Columns | None


class _Resolver:
    """Outputs and source columns of one tree's scopes, computed once each (scopes come innermost first)."""

    def __init__(self, relations: Mapping[str, Columns | None]) -> None:
        self.relations = relations
        self.outputs: dict[int, Columns | None] = {}

    def source_columns(self, scope: Scope, name: str) -> Columns | None:
        source = scope.sources.get(name)
        if isinstance(source, exp.Table):
            if source.args.get("db") or not isinstance(source.this, exp.Identifier):
                return None  # another catalog's table, or a table function: columns unknown
            columns = self.relations.get(source.name.lower())
            node = source
        elif isinstance(source, Scope):
            columns = self.scope_outputs(source)
            node = scope.selected_sources.get(name, (source.expression, None))[0]
            node = node.expression if isinstance(node, Scope) else node
        else:
            return None
        aliased = node.alias_column_names if isinstance(node, exp.Expression) else []
        if aliased and columns is not None:  # `AS t(a, b)`: the alias names the columns
            columns = tuple(alias or column for column, alias in zip(columns, [*aliased, *[""] * len(columns)]))
        return columns

    def scope_outputs(self, scope: Scope) -> Columns | None:
        key = id(scope)
        if key not in self.outputs:
            self.outputs[key] = self._outputs(scope)
        return self.outputs[key]

    def _outputs(self, scope: Scope) -> Columns | None:
        expression = scope.expression
        if isinstance(expression, exp.Subquery):
            expression = expression.unnest()
        if isinstance(expression, exp.SetOperation):
            return self.scope_outputs(scope.set_operation_scopes[0]) if scope.set_operation_scopes else None
        if isinstance(expression, (exp.Lateral, exp.Values, exp.Unnest)):
            return tuple(expression.named_selects) or None
        if not isinstance(expression, exp.Select):
            return None
        names: list[str] = []
        for projection in expression.selects:
            if isinstance(projection, exp.Star):
                if projection.args.get("except_") or projection.args.get("replace") or \
                        projection.args.get("rename"):
                    return None
                for source in self.visible(scope):
                    columns = self.source_columns(scope, source)
                    if columns is None:
                        return None
                    names.extend(columns)
            elif isinstance(projection, exp.Column) and projection.is_star:
                columns = self.source_columns(scope, projection.table) if projection.table in scope.sources \
                    else None
                if columns is None:
                    return None
                names.extend(columns)
            else:
                names.append(projection.alias_or_name)
        return tuple(names)

    @staticmethod
    def visible(scope: Scope) -> list[str]:
        """The sources whose columns an unqualified name of `scope` may take: FROM, JOINs, lateral views."""
        return [*scope.selected_sources, *(n for n in scope.lateral_sources if n not in scope.selected_sources)]

    def names_in(self, scope: Scope) -> set[str] | None:
        """Every column name an unqualified reference in `scope` may take (lower case), None when one source of
        it is unknown."""
        found: set[str] = set()
        for source in self.visible(scope):
            columns = self.source_columns(scope, source)
            if columns is None:
                return None
            found.update(c.lower() for c in columns)
        return found


def _aliases(scope: Scope) -> set[str]:
    expression = scope.expression
    if not isinstance(expression, exp.Select):
        return set()
    return {p.alias.lower() for p in expression.selects if isinstance(p, exp.Alias)}


def _own_columns(scope: Scope) -> list[exp.Column]:
    """The columns written in `scope` itself (not in a nested query, not a table function's argument)."""
    found = []
    for node in scope.walk():
        if type(node) is exp.Column and not isinstance(node.this, exp.Star) and \
                node.find_ancestor(exp.Table) is None:
            found.append(node)
    return found


def _close(name: str, candidates: list[str]) -> str | None:
    by_lower = {c.lower(): c for c in candidates}
    match = difflib.get_close_matches(name.lower(), list(by_lower), n=1)
    return by_lower[match[0]] if match else None


def resolve(tree: exp.Expression, relations: Mapping[str, Columns | None]) -> Resolution:
    """The unknown columns of a query and its outputs. `relations`: table name (lower case) → its columns, None
    when unknown; a name missing from it is unknown too."""
    resolver = _Resolver(relations)
    try:
        scopes = traverse_scope(tree)
        for scope in scopes:  # built lazily: raises here for two tables under one alias (`t AS x JOIN u AS x`)
            scope.selected_sources  # noqa: B018
    except Exception:  # noqa: BLE001 - a tree sqlglot's scope builder cannot walk is not judged
        return Resolution((), None)
    unknown: list[UnknownColumn] = []
    seen: set[tuple[int, str | None, str]] = set()
    for scope in scopes:
        if scope.pivots or isinstance(scope.expression, exp.Lateral):
            continue  # a lateral view's arguments belong to the query it joins, judged there
        for column in _own_columns(scope):
            found = _judge(resolver, scope, column)
            if found is not None and (id(scope), found.qualifier, column.name.lower()) not in seen:
                seen.add((id(scope), found.qualifier, column.name.lower()))
                unknown.append(found)
    return Resolution(tuple(unknown), resolver.scope_outputs(scopes[-1]) if scopes else None)


def _judge(resolver: _Resolver, scope: Scope, column: exp.Column) -> UnknownColumn | None:
    name = column.name.lower()
    if column.args.get("db") or name == PLACEHOLDER_COLUMN:
        return None
    qualifier = column.table
    if qualifier:
        owner = _owner(scope, qualifier)
        if owner is None:
            return None  # `struct.field`, or a name this scope cannot see: not judged
        columns = resolver.source_columns(owner, qualifier)
        if columns is None or name in {c.lower() for c in columns}:
            return None
        source = owner.sources[qualifier]
        relation = f"`{shown(source)}`" if isinstance(source, exp.Table) else "the subquery"
        return UnknownColumn(column, qualifier, relation, _close(column.name, list(columns)), False)
    if isinstance(scope.expression, exp.SetOperation):  # ORDER BY of a UNION: the first branch's outputs
        outputs = resolver.scope_outputs(scope)
        if outputs is None or name in {c.lower() for c in outputs}:
            return None
        return UnknownColumn(column, None, "the UNION", _close(column.name, list(outputs)), False)
    candidates: list[str] = []
    searched: list[str] = []
    current: Scope | None = scope
    while current is not None:
        names = resolver.names_in(current)
        if names is None:
            return None
        aliases = _aliases(current) if current is scope else set()
        if name in names or name in aliases:
            return None
        for source in resolver.visible(current):
            candidates.extend(resolver.source_columns(current, source) or ())
            table = current.sources[source]
            searched.append(f"`{shown(table)}`" if isinstance(table, exp.Table) else "the subquery")
        if current is scope and isinstance(current.expression, exp.Select):
            candidates.extend(p.alias for p in current.expression.selects if isinstance(p, exp.Alias))
        current = current.parent if current.can_be_correlated else None
    by_alias = column.find_ancestor(exp.Order, exp.Group, exp.Having, exp.Select)
    return UnknownColumn(column, None, _searched(searched), _close(column.name, candidates),
                         isinstance(by_alias, (exp.Order, exp.Group, exp.Having)) and bool(_aliases(scope)))


def _searched(relations: list[str]) -> str:
    unique = list(dict.fromkeys(relations))
    if not unique:
        return "no table"
    return unique[0] if len(unique) == 1 else f"none of {', '.join(unique)}"


def _owner(scope: Scope, qualifier: str) -> Scope | None:
    """The scope whose source `qualifier` names: this one, or an outer one for a correlated subquery."""
    current: Scope | None = scope
    while current is not None:
        if qualifier in current.sources and qualifier in _Resolver.visible(current):
            return current
        current = current.parent if current.can_be_correlated else None
    return None


def shown(table: exp.Table) -> str:
    """A table's name as its query wrote it (a service datasource's qualified name, not its relation)."""
    service = BY_RELATION.get(table.name)
    return service.qualified if service is not None else table.name
