"""Parsing node SQL with sqlglot (Spark dialect) and mapping AST nodes back to file positions.

Also owns the ClickHouse-isms pipeframe accepts in SQL: parametric calls like `quantilesMerge(0.5)(x)`.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping

import sqlglot
from sqlglot import exp
from sqlglot.errors import ParseError, TokenError

from pipeframe.compiler.clickhouse import (
    boolean_aggregates,
    distinct_ifs,
    from_clickhouse,
    looks_clickhouse,
    resolve_defaults,
    select_aliases,
    spark_intervals,
    translate_calls,
    unknown_functions,
)
from pipeframe.compiler.dialect import DIALECT
from pipeframe.compiler.service import ServiceTable, service_table
from pipeframe.errors import Diagnostic, Location, PipeframeError

# `quantilesState(0.5, 0.9)(x)` → `quantilesState(x, 0.5, 0.9)`: the catalog knows the first argument is x.
# `quantile(0.5)(x)` → `quantiles(x, 0.5)`, the KLL sketch aggregate.
PARAMETRIC_CALL = re.compile(r"\b(quantiles?(?:TDigest)?(?:State|Merge|MergeState|If|StateIf)?)\s*\(([^()]*)\)\s*\(")


# `interval` as a name (`... AS interval`, `interval + INTERVAL 1 DAY`, `GROUP BY interval`), which the parsers would
# read as the INTERVAL keyword: written quoted. The keyword is followed by an amount (`interval -7 day`), never these.
INTERVAL_NAME = re.compile(r"(?i)(?<![\w`'\"])interval(?=\s*(?:[*/,)=<>]|$)|\s+(?:AS|FROM|ASC|DESC|WHERE)\b"
                           r"|\s*[-+]\s*(?:INTERVAL\b|toInterval))", re.MULTILINE)
INTERVAL_ALIAS = re.compile(r"(?i)(\bAS\s+)interval\b")


def preprocess(sql: str) -> str:
    """Rewrite ClickHouse parametric aggregate syntax into plain calls Spark's grammar accepts, and quote `interval`
    where it is a name."""
    if "nterval" in sql or "NTERVAL" in sql:
        sql = INTERVAL_ALIAS.sub(r"\1`interval`", INTERVAL_NAME.sub("`interval`", sql))
    if "(" not in sql or not PARAMETRIC_CALL.search(sql):
        return sql
    out, pos = [], 0
    for match in PARAMETRIC_CALL.finditer(sql):
        depth, i = 1, match.end()
        while i < len(sql) and depth:
            depth += {"(": 1, ")": -1}.get(sql[i], 0)
            i += 1
        if depth:
            break
        inner = sql[match.end(): i - 1]
        out.append(sql[pos: match.start()])
        # ClickHouse's plain quantile(p)(x) is approximate; Spark's quantile(x, p) would be the exact percentile.
        name = "quantiles" if match.group(1).lower() == "quantile" else match.group(1)
        # quantiles…(p, ...)(x) returns an array, also of one quantile: its levels stay an array.
        levels = f"array({match.group(2)})" if match.group(1).lower().startswith("quantiles") else match.group(2)
        out.append(f"{name}({inner}, {levels})")
        pos = i
    out.append(sql[pos:])
    return "".join(out)


def position(sql: str, offset: int, base: Location) -> Location:
    """The file location of character ``offset`` of a SQL block that starts at ``base``."""
    line = sql.count("\n", 0, offset)
    col = offset - (sql.rfind("\n", 0, offset) + 1)
    return Location(base.path, base.line + line, base.col + col)


ColumnTypes = Mapping[str, str | None]  # column name, lower case → its Spark type
# The column types of a node: given, or found from the tables it reads once they are known.
TypesOf = ColumnTypes | Callable[[list[str]], ColumnTypes] | None


def parse_select(sql: str, base: Location, types: TypesOf = None) -> exp.Expression:
    """Parse one SQL statement as Spark SQL, or as ClickHouse SQL translated to Spark (compiler/clickhouse.py) when
    Spark cannot read it or it shows ClickHouse; raises PipeframeError PF303 (syntax) or PF309 (no translation)
    located at the offending token. `types`, the types of the columns it reads, complete what ClickHouse's meaning
    depends on (a type's default, how a float rounds)."""
    text = preprocess(sql)
    spark_error: ParseError | None = None
    tree: exp.Expression | None = None
    try:
        tree = _one_query(sqlglot.parse(text, read=DIALECT), base)
    except ParseError as exc:
        spark_error = exc
    except TokenError as exc:
        raise PipeframeError("PF303", f"SQL cannot be tokenized: {str(exc).splitlines()[0]}.",
                             "Check for an unclosed quote or comment.", base) from None
    except (RecursionError, ValueError) as exc:  # pathological input
        raise PipeframeError("PF303", f"SQL cannot be parsed: {type(exc).__name__}.",
                             "Simplify the query.", base) from None
    # `f(params)(args)` is ClickHouse syntax: such a node is read as ClickHouse (`quantilesMerge(0.9)(x)[1]`).
    if tree is not None and text == sql and not looks_clickhouse(tree) and not _quoted_names(text, tree, types):
        tree = spark_intervals(distinct_ifs(boolean_aggregates(select_aliases(tree, [], spark_read=True), []), []))
        problems = unknown_functions(tree)
        if callable(types):
            types = types([table.name for table in table_names(tree)])
        tree = resolve_defaults(tree, dict(types or {}))
    else:
        try:
            translated, problems = from_clickhouse(text)
        except (ParseError, TokenError, RecursionError, ValueError):
            if spark_error is not None:
                raise _syntax_error(spark_error, base, text) from None
            # Spark read it but ClickHouse cannot: translate its calls on the Spark reading.
            problems = []
            translated = translate_calls(tree, problems)  # type: ignore[arg-type]
            problems.extend(unknown_functions(translated))
        tree = _one_query([translated], base)
        if callable(types):
            types = types([table.name for table in table_names(tree)])
        tree = resolve_defaults(tree, dict(types or {}))
    if problems:
        raise PipeframeError.many(Diagnostic("PF309", p.message, p.hint, locate(
            p.node, sql, base, None if "line" in (p.node.meta or {}) else p.keyword)) for p in problems)
    return tree


DOUBLE_QUOTED = re.compile(r'"([A-Za-z_][A-Za-z0-9_]*)"')


def _quoted_names(text: str, tree: exp.Expression, types: TypesOf) -> bool:
    """Whether the query double-quotes a column name of a table it reads (`SELECT "to" FROM email`): ClickHouse's
    quoted identifier, where Spark would read a string."""
    if '"' not in text or types is None:
        return False
    columns = types([table.name for table in table_names(tree)]) if callable(types) else types
    return any(match.group(1).lower() in columns for match in DOUBLE_QUOTED.finditer(text))


def _syntax_error(exc: ParseError, base: Location, text: str) -> PipeframeError:
    err = exc.errors[0] if exc.errors else {}
    line, col = err.get("line") or 1, err.get("col") or 1
    desc = (err.get("description") or str(exc)).split("\n")[0]
    lines = text.splitlines()
    if 0 < line <= len(lines) and lines[line - 1].strip() == "%":  # Tinybird's marker is the SQL's first line only
        return PipeframeError("PF303", "A `%` line inside the SQL: it marks a templated node only as the SQL's first "
                              "line.", "Move the `%` to the first line of the node's SQL.",
                              Location(base.path, base.line + line - 1, base.col + max(col - 1, 0)))
    return PipeframeError("PF303", f"SQL syntax error: {desc.rstrip('.')}.",
                          "Fix the SQL near this position (Spark SQL syntax).",
                          Location(base.path, base.line + line - 1, base.col + max(col - 1, 0)))


def _one_query(statements: list, base: Location) -> exp.Expression:
    statements = [s for s in statements if s is not None]
    if len(statements) != 1:
        raise PipeframeError("PF303", f"A node must hold exactly one SQL statement, found {len(statements)}.",
                             "Remove the extra `;`-separated statements or split them into nodes.", base)
    tree = statements[0]
    if not isinstance(tree, exp.Query):
        raise PipeframeError("PF303", f"A node must be a query (SELECT ...), found {tree.key.upper()}.",
                             "Write a SELECT; pipeframe manages tables itself.", base)
    return tree


def locate(node: exp.Expression, sql: str, base: Location, keyword: str | None = None) -> Location:
    """Best-effort position of an AST node in the SQL block: token metadata, else a text search."""
    for candidate in (node, next(node.find_all(exp.Identifier), None)):
        meta = (getattr(candidate, "meta", None) or {}) if candidate is not None else {}
        if "line" in meta and "col" in meta and not keyword:
            # sqlglot's `col` is where the token ends; step back to where it starts.
            start = meta["col"] - (meta["end"] - meta["start"]) if "start" in meta and "end" in meta else meta["col"]
            return Location(base.path, base.line + meta["line"] - 1, base.col + max(start - 1, 0))
    probes = [keyword] if keyword else []
    if isinstance(node, exp.Func):
        probes.append(node.sql_name() if not isinstance(node, exp.Anonymous) else node.name)
    probes.append(node.sql(dialect=DIALECT)[:40])
    lowered = sql.lower()
    for probe in probes:
        if probe:
            found = lowered.find(probe.lower())
            if found >= 0:
                return position(sql, found, base)
    return base


def locate_name(name: str, node: exp.Expression, sql: str, written: str, base: Location) -> Location:
    """Where the name `name` (a column, `alias.column` as written) is in the file: `written` is the node's text as in
    the file (a template before rendering), `sql` what was parsed. A whole-word match on the line the parser saw it
    on, else the first in the text outside quotes, else the first at all (a `column()` default is a string)."""
    pattern = re.compile(rf"(?<![\w.$]){re.escape(name)}(?!\w)", re.IGNORECASE)
    parsed = locate(node, sql, base)
    line = parsed.line - base.line
    lines = written.split("\n")
    if 0 <= line < len(lines) and (match := pattern.search(lines[line])):
        return position(written, sum(len(text) + 1 for text in lines[:line]) + match.start(), base)
    matches = list(pattern.finditer(written))
    unquoted = [m for m in matches if written.count("'", 0, m.start()) % 2 == 0]
    for match in unquoted or matches:
        return position(written, match.start(), base)
    return parsed


def table_names(tree: exp.Expression) -> list[exp.Table]:
    """Tables a query reads, excluding names defined by its own CTEs."""
    ctes: set[str] = set()
    tables: list[exp.Table] = []
    for node in tree.find_all(exp.CTE, exp.Table):
        if isinstance(node, exp.CTE):
            ctes.add(node.alias_or_name.lower())
        elif node.name and not node.args.get("db"):
            tables.append(node)
    return [t for t in tables if t.name.lower() not in ctes]


def to_sql(tree: exp.Expression, pretty: bool = False) -> str:
    return tree.sql(dialect=DIALECT, pretty=pretty)


def inline(ctes: list[tuple[str, exp.Query]], final: exp.Query) -> exp.Query:
    """One statement: earlier nodes become CTEs (in order) ahead of the final node's own CTEs."""
    final = final.copy()
    if not ctes:
        return final
    new = [exp.CTE(this=tree.copy(), alias=exp.TableAlias(this=exp.to_identifier(name))) for name, tree in ctes]
    existing = final.args.get("with_")
    if existing is not None:
        existing.set("expressions", new + list(existing.expressions))
    else:
        final.set("with_", exp.With(expressions=new))
    return final


def read_versions(tree: exp.Expression, versions: Mapping[str, str]) -> exp.Expression:
    """A read of `x` where the project has `x` only as a versioned resource (`VERSION 3` in x.datasource: named
    `x__v3`) reads that one, as Tinybird resolves it; a read of a service datasource (`pipeframe.pipe_stats`) reads its
    relation (compiler/service.py)."""
    tree = read_service_tables(tree)
    if versions and any(t.name in versions and not t.args.get("db") for t in tree.find_all(exp.Table)):
        return rename_tables(tree, dict(versions))
    return tree


def rename_tables(tree: exp.Expression, renames: dict[str, str]) -> exp.Expression:
    """Point table references at other relations (e.g. a source at its batch of new rows)."""
    tree = tree.copy()
    for table in tree.find_all(exp.Table):
        if table.name in renames and not table.args.get("db"):
            alias = table.alias or table.name
            table.set("this", exp.to_identifier(renames[table.name]))
            if not table.alias:
                table.set("alias", exp.TableAlias(this=exp.to_identifier(alias)))
    return tree


def read_service_tables(tree: exp.Expression) -> exp.Expression:
    """Reads of service tables by their qualified names turned into reads of their relations (the alias stays the
    name written, so `pipe_stats.duration` still resolves)."""
    if not any(_service_of(t) for t in tree.find_all(exp.Table)):
        return tree
    tree = tree.copy()
    for table in tree.find_all(exp.Table):
        service = _service_of(table)
        if service is None:
            continue
        written = table.name
        table.set("db", None)
        table.set("this", exp.to_identifier(service.relation))
        if not table.alias:
            table.set("alias", exp.TableAlias(this=exp.to_identifier(written)))
    return tree


def _service_of(table: exp.Table) -> ServiceTable | None:
    if not table.args.get("db") or table.args.get("catalog"):
        return None
    return service_table(f"{table.db}.{table.name}")
