"""`FROM t FINAL`: ClickHouse's deduplicated read of a ReplacingMergeTree, as a Spark subquery.

ClickHouse keeps, for each sorting key, the row with the greatest `ENGINE_VER` and drops it when its
`ENGINE_IS_DELETED` column is 1. `dedupe_final` (a pure tree transform, in the style of sqlglot's optimizer rules)
replaces each table read with FINAL by

    (SELECT <columns> FROM (SELECT *, ROW_NUMBER() OVER (PARTITION BY <key> ORDER BY <ver> DESC, ...) AS rank
     FROM t) WHERE rank = 1 AND <is_deleted> = 0) AS t

The ClickHouse reader (`clickhouse.final_reads`) drops the FINAL keyword and marks the table in its `meta`; the
compiler knows the datasources and applies this transform to an endpoint's or copy pipe's statement. A
materialized pipe reading FINAL is rejected (PF417): each block of new rows cannot see the rows it replaces.

Nothing here imports sqlglot when loaded: a `Deduplication` travels in the check cache with its compiled pipe.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sqlglot import exp

    from pipeframe.datafiles.model import Datasource

FINAL_MARK = "pipeframe_final"  # meta key of a table read with FINAL (and of the subquery that replaces it)
RANK = "__pf_final_rank"

# Engines whose FINAL read changes nothing: a plain MergeTree merges nothing. (A view target, whatever its
# ENGINE, is always read merged per key, through its finalizing SQL: the compiler accepts FINAL on it too.)
NO_OP_ENGINES = frozenset({"", "mergetree"})


@dataclass(frozen=True)
class Deduplication:
    """How a ReplacingMergeTree datasource is read with FINAL: one row per `key`, the one with the greatest
    `version` (ties: the greatest by `tiebreak`, the other columns Spark can order, so the answer is the same on
    every run), dropped when its `is_deleted` column is 1. `columns` are what the read returns."""

    key: tuple[str, ...]
    version: str
    columns: tuple[str, ...]
    is_deleted: str | None = None
    tiebreak: tuple[str, ...] = ()


def engine_name(ds: Datasource) -> str:
    """The engine without its arguments, lower case (`ReplacingMergeTree(ver)` → `replacingmergetree`)."""
    return (ds.engine or "").split("(")[0].strip().lower()


def is_replacing(ds: Datasource) -> bool:
    return engine_name(ds) == "replacingmergetree"


def deduplication(ds: Datasource) -> Deduplication | None:
    """A ReplacingMergeTree datasource's FINAL read; None when it is not one, or when it lacks what the read needs
    (a sorting key and an ENGINE_VER column that exist: `check` reports which)."""
    if not is_replacing(ds) or not ds.sorting_key:
        return None
    names = {c.name for c in ds.columns}
    version, deleted = ds.setting("ENGINE_VER"), ds.setting("ENGINE_IS_DELETED")
    if not version or version not in names or (deleted and deleted not in names) \
            or any(k not in names for k in ds.sorting_key):
        return None
    used = {*ds.sorting_key, version}
    tiebreak = tuple(c.name for c in ds.columns if c.name not in used and "MAP<" not in c.type.upper()
                     and not c.aggregate_function)
    return Deduplication(tuple(ds.sorting_key), version, tuple(c.name for c in ds.columns), deleted or None,
                         tiebreak)


def _quoted(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def dedupe_final(tree: exp.Expression, replacing: Mapping[str, Deduplication]) -> exp.Expression:
    """Each table marked FINAL that names a ReplacingMergeTree datasource in `replacing` → its deduplicating
    subquery, under the table's alias (or name), so that `t.col` still resolves. Other marked tables (a FINAL that
    changes nothing) stay as they are."""
    import sqlglot
    from sqlglot import exp

    from pipeframe.compiler.dialect import DIALECT

    for table in list(tree.find_all(exp.Table)):
        spec = replacing.get(table.name)
        if not table.meta_get(FINAL_MARK) or spec is None or table.args.get("db"):
            continue
        order = ", ".join(f"{_quoted(c)} DESC" for c in (spec.version, *spec.tiebreak))
        keep = f"{RANK} = 1" + (f" AND {_quoted(spec.is_deleted)} = 0" if spec.is_deleted else "")
        query = sqlglot.parse_one(
            f"SELECT {', '.join(_quoted(c) for c in spec.columns)} FROM (SELECT *, ROW_NUMBER() OVER (PARTITION BY "
            f"{', '.join(_quoted(k) for k in spec.key)} ORDER BY {order}) AS {RANK} FROM {_quoted(table.name)}) "
            f"AS __pf_final WHERE {keep}", read=DIALECT)
        alias = table.args.get("alias")
        subquery = exp.Subquery(this=query, alias=alias.copy() if alias is not None else exp.TableAlias(
            this=exp.to_identifier(table.name)))
        subquery.meta[FINAL_MARK] = table.name
        if table is tree:
            return subquery
        table.replace(subquery)
    return tree


def final_tables(tree: exp.Expression) -> list[exp.Expression]:
    """The tables (or deduplicating subqueries) of a tree read with FINAL."""
    return [node for node in tree.walk() if node.meta_get(FINAL_MARK)]
