"""Qualified columns a query names that its source does not have (`tx.product_ID` where `tx` is a datasource
without that column, `p.event` where `p` is a subquery that does not select it): Spark rejects them at analysis, so
`check` reports them (PF310). Only `alias.column` references are judged, and only against sources whose columns
are known — a datasource's schema, an earlier node's or a subquery's named SELECT list — never a guess."""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from dataclasses import dataclass

from sqlglot import exp
from sqlglot.optimizer.scope import Scope, traverse_scope


@dataclass(frozen=True)
class UnknownColumn:
    node: exp.Column
    source: str  # the alias as written
    relation: str  # what it names: a datasource, a node, or "a subquery"
    close: str | None


def _outputs(scope: Scope) -> set[str] | None:
    select = scope.expression
    if not isinstance(select, exp.Select) or any(isinstance(p, exp.Star) or
                                                 (isinstance(p, exp.Column) and isinstance(p.this, exp.Star))
                                                 for p in select.expressions):
        return None
    return {name.lower() for name in select.named_selects}


def unknown_columns(tree: exp.Expression, known: Mapping[str, tuple[str, ...] | None]) -> list[UnknownColumn]:
    """`known`: table name → its columns (None when unknown). Names compare case-insensitively, as in Spark."""
    found: list[UnknownColumn] = []
    seen: set[tuple[int, str, str]] = set()
    try:
        scopes = traverse_scope(tree)
    except Exception:  # noqa: BLE001 - a tree sqlglot's scope builder cannot walk is not judged
        return found
    for scope in scopes:
        for column in scope.columns:
            qualifier = column.table
            if not qualifier or column.args.get("db") or qualifier not in scope.sources:
                continue
            source = scope.sources[qualifier]
            if isinstance(source, exp.Table):
                if source.args.get("db") or not isinstance(source.this, exp.Identifier):
                    continue
                columns = known.get(source.name)
                names = {c.lower() for c in columns} if columns is not None else None
                relation = f"`{source.name}`"
            elif isinstance(source, Scope):
                names = _outputs(source)
                columns = tuple(sorted(names or ()))
                relation = "the subquery"
            else:
                continue
            if names is None or column.name.lower() in names:
                continue
            if (id(scope), qualifier, column.name.lower()) in seen:
                continue
            seen.add((id(scope), qualifier, column.name.lower()))
            close = difflib.get_close_matches(column.name, list(columns or ()), n=1)
            found.append(UnknownColumn(column, qualifier, relation, close[0] if close else None))
    return found
