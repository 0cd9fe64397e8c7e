"""A materialized pipe's compiled form as plain data: its verdict, its target's columns and the plan that builds
their states, with node SQL parsed only on first use. Nothing here imports sqlglot when loaded, so a compiled
project read back from the check cache (`compiler/cache.py`) answers `pipeframe check` without it."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Literal, overload

from pipeframe.compiler.aggregates import BY_KIND
from pipeframe.errors import Diagnostic, Location

if TYPE_CHECKING:
    from sqlglot import exp

VerdictStatus = Literal["accepted", "rewritten", "rejected"]
BATCH_RELATION = "__pf_batch"  # the engine registers the block of new source rows under this name


@dataclass(frozen=True)
class Verdict:
    status: VerdictStatus
    rewrites: tuple[str, ...] = ()
    problems: tuple[Diagnostic, ...] = ()


@dataclass(frozen=True)
class ViewColumn:
    """A column of a materialized target: a key, a plain value, or a state."""

    name: str
    type: str | None  # physical type (the state's type for state columns); None: Spark decides at deploy
    state: str | None = None  # AggregateState.kind
    params: tuple[str, ...] = ()
    value_type: str | None = None  # the type users see when reading the target by name
    explicit: bool = False  # written as xState(...): reads return the merged state, for xMerge(...)
    # Never NULL (`infer.never_null`): a landing column that takes a default for a missing value, a value computed
    # from such columns, a count, a sum of never-NULL values. A sum that may be NULL cannot be subtracted exactly.
    not_null: bool = field(default=False, compare=False)  # what a column is, not how it is written (PF314)

    def read_sql(self) -> str:
        """How reading the target by name presents this column (over the grouped state rows)."""
        col = f"`{self.name}`"
        if self.state is None:
            return col
        state = BY_KIND[self.state]
        sql = state.combine_sql(col) if self.explicit else state.finalize_sql(col, list(self.params))
        if self.state == "sum" and self.not_null and not self.explicit:  # no value summed: 0, as in ClickHouse
            sql = f"coalesce({sql}, {f'CAST(0 AS {self.type})' if self.type else '0'})"
        return f"{sql} AS {col}"


class ParsedNodes(Sequence["tuple[str, exp.Query]"]):
    """A pipe's nodes as (name, parsed query) pairs, parsed on first use. Pickling keeps only the SQL text and
    where it starts in the file, so nothing is parsed until a caller asks for a tree or for SQL."""

    def __init__(self, texts: tuple[tuple[str, str, Location], ...], trees: Sequence[exp.Query] | None = None,
                 json_columns: frozenset[str] = frozenset(),
                 types: tuple[tuple[tuple[str, str | None], ...], ...] = (),
                 versions: tuple[tuple[str, str], ...] = ()):
        self.texts = texts  # (node name, analysis-mode SQL, where the SQL starts)
        self.json_columns = json_columns  # JSON columns of the datasources read: paths into them are translated
        self.types = types  # per node, the types of the columns it reads (ClickHouse's defaults depend on them)
        self.versions = versions  # `x` → `x__v3`: VERSION-named resources read by their unversioned name
        self._pairs = None if trees is None else [(name, tree) for (name, _, _), tree in zip(texts, trees)]

    def types_of(self, index: int) -> dict[str, str | None]:
        return dict(self.types[index]) if index < len(self.types) else {}

    def _parsed(self) -> list[tuple[str, exp.Query]]:
        if self._pairs is None:
            from pipeframe.compiler.clickhouse import json_paths
            from pipeframe.compiler.sql import parse_select, read_versions  # parsed once already: cannot fail

            self._pairs = [(name, json_paths(read_versions(parse_select(sql, base, self.types_of(index)),  # type: ignore[misc]
                                                           dict(self.versions)), self.json_columns))
                           for index, (name, sql, base) in enumerate(self.texts)]
        return self._pairs

    def __len__(self) -> int:
        return len(self.texts)

    @overload
    def __getitem__(self, index: int) -> tuple[str, exp.Query]: ...
    @overload
    def __getitem__(self, index: slice) -> list[tuple[str, exp.Query]]: ...
    def __getitem__(self, index):  # type: ignore[no-untyped-def]
        return self._parsed()[index]

    def __iter__(self) -> Iterator[tuple[str, exp.Query]]:
        return iter(self._parsed())

    def __getstate__(self) -> tuple[object, ...]:
        return self.texts, self.json_columns, self.types, self.versions

    def __setstate__(self, state: tuple) -> None:  # type: ignore[type-arg]
        (self.texts, self.json_columns, self.types, self.versions), self._pairs = state, None


@dataclass(frozen=True)
class StateSelect:
    """What the state SQL of a view is built from: the nodes up to the materialized one, the projections replaced
    by state expressions (index → SQL), the DISTINCT turned into a GROUP BY, and the trigger read as the batch
    of new rows. Calling it builds the SQL: the output node with the state expressions in place, earlier nodes
    inlined and the trigger read from the batch of new rows."""

    nodes: ParsedNodes = field(compare=False)
    replacements: tuple[tuple[int, str], ...]
    distinct_to_group: bool
    trigger: str | None

    def __call__(self) -> str:
        # sqlglot is loaded here, on first use, not with the module (see the module's docstring)
        import sqlglot
        from sqlglot import exp

        from pipeframe.compiler.dialect import DIALECT
        from pipeframe.compiler.sql import inline, rename_tables, to_sql

        *earlier, (_, tree) = self.nodes
        new_tree = tree.copy()
        if self.distinct_to_group:
            new_tree.set("distinct", None)
            new_tree.set("group", exp.Group(expressions=[exp.Literal.number(i + 1)
                                                         for i in range(len(new_tree.expressions))]))
        for index, sql in self.replacements:
            projection = new_tree.expressions[index]
            projection.replace(exp.alias_(sqlglot.parse_one(sql, read=DIALECT), projection.alias_or_name,
                                          quoted=True))
        assembled = inline(earlier, new_tree)
        for query in assembled.find_all(exp.Select, exp.SetOperation):  # ORDER BY means nothing here (PF402 warns)
            query.set("order", None)
        if self.trigger:
            assembled = rename_tables(assembled, {self.trigger: BATCH_RELATION})
        return to_sql(assembled)


PLAIN_READ = "SELECT * FROM {relation}"


@dataclass(frozen=True)
class ViewPlan:
    keys: tuple[str, ...]
    columns: tuple[ViewColumn, ...]
    rewrites: tuple[str, ...]
    aggregated: bool
    build_state_sql: Callable[[], str] = field(compare=False, repr=False)
    # The state column counting the rows of each group (a plain count() / count(*)), when there is one: a keyed
    # group whose count falls to zero after deletes is no longer read.
    row_count: str | None = None

    @cached_property
    def state_sql(self) -> str:
        """The SELECT that turns the block of new rows (`__pf_batch`) into state rows for the target."""
        return self.build_state_sql()

    def _having(self) -> str:
        return f" HAVING sum(`{self.row_count}`) > 0" if self.row_count and self.keys else ""

    def read_sql(self, relation: str) -> str:
        """SELECT over the physical target that merges state rows per key into user-visible values."""
        if not self.aggregated:
            return PLAIN_READ.format(relation=relation)
        cols = ", ".join(c.read_sql() for c in self.columns)
        group = f" GROUP BY {', '.join(f'`{k}`' for k in self.keys)}" if self.keys else ""
        return f"SELECT {cols} FROM {relation}{group}{self._having()}"

    def compact_sql(self, relation: str) -> str:
        """SELECT that folds state rows into one row per key, still as states (for optimize and retractions);
        a group whose rows were all deleted is left out."""
        if not self.aggregated:
            return PLAIN_READ.format(relation=relation)
        cols = ", ".join(
            f"`{c.name}`" if c.state is None else f"{BY_KIND[c.state].combine_sql(f'`{c.name}`')} AS `{c.name}`"
            for c in self.columns)
        group = f" GROUP BY {', '.join(f'`{k}`' for k in self.keys)}" if self.keys else ""
        return f"SELECT {cols} FROM {relation}{group}{self._having()}"

    def negate_sql(self, relation: str) -> str | None:
        """SELECT over state rows that takes their rows back out when merged (the retraction of deleted rows), or
        None when a state cannot be subtracted (a sum of values that may be NULL among them) or no column counts a
        group's rows."""
        if not self.aggregated or (self.row_count is None and self.keys) or any(
                c.state is not None and (not BY_KIND[c.state].negate or (c.state == "sum" and not c.not_null))
                for c in self.columns):
            return None  # a negated sum cannot tell "no value left" (NULL) from values that sum to zero
        cols = ", ".join(f"`{c.name}`" if c.state is None else
                         f"{BY_KIND[c.state].negate_sql(f'`{c.name}`')} AS `{c.name}`" for c in self.columns)
        return f"SELECT {cols} FROM {relation}"
