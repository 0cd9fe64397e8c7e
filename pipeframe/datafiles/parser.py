"""Parsers for .datasource and .pipe files: statements from the lexer → model objects.

Each parse collects every problem it finds into a DiagnosticSink instead of stopping at the first.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Mapping
from pathlib import Path

from pipeframe.datafiles.lexer import CONNECTOR_PREFIXES, Lexer, SourceLine, Statement
from pipeframe.datafiles.model import Column, Connection, Datasource, Node, Pipe, Setting, Token
from pipeframe.datafiles.types import TypeProblem, parse_column_type
from pipeframe.errors import DiagnosticSink, Location

IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
NODE_TYPES = ("endpoint", "materialized", "copy", "sink")
COPY_MODES = ("append", "replace")
COUNT_DISTINCT_MODES = ("exact", "sketch")

DATASOURCE_KEYWORDS = {
    "DESCRIPTION", "TOKEN", "SCHEMA", "ENGINE", "ENGINE_PARTITION_KEY", "ENGINE_SORTING_KEY", "ENGINE_TTL",
    "ENGINE_SETTINGS", "ENGINE_PRIMARY_KEY", "ENGINE_VER", "ENGINE_SIGN", "ENGINE_VERSION", "ENGINE_IS_DELETED",
    "FORWARD_QUERY", "BACKFILL", "TAGS", "INDEXES", "SHARED_WITH", "VERSION",
}
PIPE_KEYWORDS = {"DESCRIPTION", "TOKEN", "TAGS", "VERSION", "NODE"}
NODE_KEYWORDS = {
    "SQL", "DESCRIPTION", "TYPE", "DATASOURCE", "TARGET_DATASOURCE", "COPY_MODE", "COPY_SCHEDULE",
    "DIMENSIONS", "COUNT_DISTINCT", "FOLLOW_TTL", "NODE", "TOKEN", "TAGS", "ENGINE", "ENGINE_PARTITION_KEY",
    "ENGINE_SORTING_KEY", "ENGINE_TTL", "ENGINE_SETTINGS",
}
BLOCK_KEYWORDS = {"SCHEMA", "SQL", "FORWARD_QUERY", "INDEXES"}


def is_identifier(name: str) -> bool:
    return IDENTIFIER.fullmatch(name) is not None


def unknown_keyword(sink: DiagnosticSink, st: Statement, allowed: set[str], kind: str) -> None:
    close = difflib.get_close_matches(st.keyword.upper(), sorted(allowed), n=1)
    hint = f"Did you mean {close[0]}?" if close else f"Use one of: {', '.join(sorted(allowed))}."
    sink.error("PF102", f"Unknown keyword {st.keyword} in a {kind} file.", hint, st.location)


TYPE_ANGLE_BRACKET = re.compile(r"\b(?:ARRAY|MAP|STRUCT)\s*$", re.IGNORECASE)
CLOSING_BRACKETS = {")": "(", "]": "[", ">": "<"}


def split_top_level(text: str, sep: str = ",") -> list[tuple[str, int]]:
    """Split on ``sep`` outside brackets, quotes and backticks; returns (part, offset) pairs.

    `<` only opens a bracket after ARRAY/MAP/STRUCT, and `>` only closes one, so comparisons and lambdas
    in a DEFAULT expression (`if(x > 0, 1, 2)`) do not shift the nesting.
    """
    parts: list[tuple[str, int]] = []
    stack: list[str] = []
    quote, start = "", 0
    for i, ch in enumerate(text):
        if quote:
            if ch == quote:
                quote = ""
        elif ch in "'\"`":
            quote = ch
        elif ch in "([" or (ch == "<" and TYPE_ANGLE_BRACKET.search(text, 0, i)):
            stack.append(ch)
        elif ch in CLOSING_BRACKETS:
            opener = CLOSING_BRACKETS[ch]
            if opener in stack:
                while stack.pop() != opener:
                    pass
        elif ch == sep and not stack:
            parts.append((text[start:i], start))
            start = i + 1
    parts.append((text[start:], start))
    return parts


def not_supported_yet(sink: DiagnosticSink, st: Statement, what: str, hint: str) -> None:
    """A Tinybird setting pipeframe parses but does not act on yet: a warning, never a parse error."""
    sink.warning("PF110", f"{what} is not supported yet; `{st.keyword}` is ignored.", hint, st.location)


def parse_token(st: Statement, default_scope: str, sink: DiagnosticSink) -> Token | None:
    # A name bare, or quoted (then it may hold spaces: `TOKEN "read pipes token" READ`, as Tinybird takes it).
    name = r"""(?:"([^"]+)"|'([^']+)'|([A-Za-z0-9_.:-]+))"""
    match = re.fullmatch(name + r"(?:\s+(READ|APPEND))?", st.value.strip(), re.IGNORECASE)
    scoped = re.fullmatch(name + r"\s+([A-Z_]+)", st.value.strip())
    if match is None and scoped is not None:  # Tinybird's other scopes (CREATE, DROP, ...)
        not_supported_yet(sink, st, f"Token scope {scoped.group(4)}",
                          "pipeframe tokens READ (pipes) and APPEND (datasources); grant those, or remove the line.")
        return None
    if match is None:
        sink.error("PF101", f"TOKEN line `{st.value}` is not understood.",
                   f'Write TOKEN "name" {default_scope}.', st.location)
        return None
    token = next(group for group in match.groups()[:3] if group is not None)
    return Token(token, (match.group(4) or default_scope).upper(), st.location)  # type: ignore[arg-type]


def _single_value(st: Statement, sink: DiagnosticSink) -> str:
    if st.is_block:
        return " ".join(line.text.strip() for line in st.block or () if line.text.strip())
    if not st.value:
        sink.error("PF101", f"{st.keyword} needs a value.", f"Write `{st.keyword} <value>` on one line.", st.location)
    return st.value


def _engine_value(st: Statement, sink: DiagnosticSink) -> str:
    """An ENGINE_* value; Tinybird writes them bare or quoted (`ENGINE_SORTING_KEY "hour, name"`)."""
    return _unquoted(_single_value(st, sink))


# ---------------------------------------------------------------------------------------------- columns

COLUMN_PATTERN = re.compile(
    r"""^\s*(?:`(?P<qname>[^`]+)`|(?P<name>[A-Za-z_][A-Za-z0-9_]*))\s+(?P<rest>.*?)\s*$""", re.DOTALL)
JSON_PATH_PATTERN = re.compile(r"`json:(?P<path>[^`]*)`")
DEFAULT_PATTERN = re.compile(r"\s+DEFAULT\s+(?P<default>.+)$", re.IGNORECASE | re.DOTALL)
CODEC_PATTERN = re.compile(r"\s+CODEC\s*\(.*\)\s*$", re.IGNORECASE | re.DOTALL)


def parse_schema(st: Statement, sink: DiagnosticSink) -> tuple[Column, ...]:
    lines: tuple[SourceLine, ...] = st.block or ()
    if not lines:
        sink.error("PF108", "SCHEMA is empty.", "List columns as `` `name` TYPE `` lines under SCHEMA >.", st.location)
        return ()
    # Offsets into the joined text map back to (line, col) of the original file.
    text, starts = "", []
    for line in lines:
        starts.append((len(text), line.location))
        # A `#` line between columns is a comment (Tinybird reads it so); kept as blank space, positions unchanged.
        text += (" " * len(line.text) if line.text.lstrip().startswith("#") else line.text) + "\n"

    def locate(offset: int) -> Location:
        base, loc = starts[0]
        for start, candidate in starts:
            if start > offset:
                break
            base, loc = start, candidate
        return loc.shifted(col=loc.col + offset - base)

    columns: list[Column] = []
    seen: set[str] = set()
    parts = split_top_level(text)
    for index, (part, offset) in enumerate(parts):
        if not part.strip():
            if index < len(parts) - 1:
                sink.error("PF108", "Empty column definition (two commas in a row?).",
                           "Remove the extra comma.", locate(offset))
            continue
        lead = len(part) - len(part.lstrip())
        where = locate(offset + lead)
        column = parse_column(part.strip(), where, sink)
        if column is None:
            continue
        if column.name in seen:
            sink.error("PF105", f"Column `{column.name}` is declared twice.", "Remove or rename one of them.", where)
            continue
        seen.add(column.name)
        columns.append(column)
    return tuple(columns)


def parse_column(text: str, where: Location, sink: DiagnosticSink) -> Column | None:
    match = COLUMN_PATTERN.match(text)
    if match is None:
        sink.error("PF108", f"Column definition `{text[:60]}` is not understood.",
                   "Write `` `name` TYPE `json:$.path` DEFAULT value ``.", where)
        return None
    name = match.group("qname") or match.group("name")
    rest = match.group("rest")
    if not is_identifier(name):
        sink.error("PF104", f"Column name `{name}` is not a valid identifier.",
                   "Use letters, digits and underscores, not starting with a digit.", where)
        return None
    json_path = None
    json_match = JSON_PATH_PATTERN.search(rest)
    if json_match:
        json_path = json_match.group("path").strip()
        if not json_path.startswith("$"):
            sink.error("PF108", f"JSON path `{json_path}` of column `{name}` must start with `$`.",
                       "Write e.g. `json:$.order.id`.", where)
        rest = rest[: json_match.start()] + rest[json_match.end():]
    # ClickHouse writes `DEFAULT expr CODEC(...)`; drop the codec first so it is not read as part of the default.
    rest = CODEC_PATTERN.sub("", rest)
    default = None
    default_match = DEFAULT_PATTERN.search(rest)
    if default_match:
        default = default_match.group("default").strip()
        rest = rest[: default_match.start()]
    rest = CODEC_PATTERN.sub("", rest).strip()  # and `CODEC(...) DEFAULT expr`, also seen in the wild
    if not rest:
        sink.error("PF108", f"Column `{name}` has no type.", f"Write e.g. `{name}` STRING.", where)
        return None
    try:
        ctype = parse_column_type(rest)
    except TypeProblem as exc:
        sink.error("PF109", f"Column `{name}`: {exc.message}", exc.hint, where)
        return None
    return Column(
        name=name, type=ctype.type, written_type=rest, location=where, json_path=json_path, default=default,
        nullable=ctype.nullable, aggregate_function=ctype.aggregate_function,
        aggregate_args=ctype.aggregate_args, aggregate_params=ctype.aggregate_params,
        simple_aggregate=ctype.simple_aggregate,
    )


# ------------------------------------------------------------------------------------------ datasources

def parse_datasource(path: Path, lexer: Lexer, sink: DiagnosticSink) -> Datasource:
    display = lexer.display(path)
    name = path.stem
    location = Location(display)
    fields: dict = {}
    tokens: list[Token] = []
    settings: list[tuple[str, str]] = []
    connector: list[Setting] = []
    imports: list[Statement] = []
    where: dict[str, Location] = {}
    for st in lexer.statements(path):
        kw = st.keyword.upper()
        if kw in KAFKA_DATASOURCE_SETTINGS:  # checked against the connection by connectors/spec.py
            connector.append(Setting(kw, _unquoted(st.text), st.location))
            where.setdefault("KAFKA", st.location)
            continue
        if kw.startswith("IMPORT_"):
            imports.append(st)
            continue
        if kw.startswith(CONNECTOR_PREFIXES):
            what = "This Kafka setting" if kw.startswith("KAFKA_") else f"The {kw.split('_', 1)[0].title()} connector"
            not_supported_yet(sink, st, what, "Load the rows with `pipeframe append` (or the events API) instead."
                              if not kw.startswith("KAFKA_") else "Remove the line (docs/connectors.md lists the "
                              "Kafka settings pipeframe acts on).")
            if kw.startswith("KAFKA_"):
                where.setdefault("KAFKA", st.location)
            continue
        if kw not in DATASOURCE_KEYWORDS:
            unknown_keyword(sink, st, DATASOURCE_KEYWORDS, "datasource")
            continue
        if kw in where and kw not in ("TOKEN", "ENGINE_SETTINGS"):
            sink.error("PF101", f"{kw} appears twice.", "Keep one of them.", st.location)
            continue
        where[kw] = st.location
        if kw in BLOCK_KEYWORDS and not st.is_block:
            sink.error("PF101", f"{kw} must be a block.", f"Write `{kw} >` and indent its content by 4 spaces.",
                       st.location)
            continue
        if kw == "SCHEMA":
            fields["columns"] = parse_schema(st, sink)
        elif kw == "DESCRIPTION":
            fields["description"] = st.text.strip()
        elif kw == "TOKEN":
            token = parse_token(st, "APPEND", sink)
            if token:
                tokens.append(token)
        elif kw == "ENGINE":
            fields["engine"] = _engine_value(st, sink)
        elif kw == "ENGINE_PARTITION_KEY":
            value = _engine_value(st, sink)
            fields["partition_key"] = None if value.strip() in ("", "tuple()") else value
        elif kw in ("ENGINE_SORTING_KEY", "ENGINE_PRIMARY_KEY"):
            value = _engine_value(st, sink)
            if value.lower() == "tuple()":  # ClickHouse's spelling of "no key"
                value = ""
            if value.startswith("(") and value.endswith(")"):
                value = value[1:-1]
            keys = tuple(k.strip().strip("`") for k, _ in split_top_level(value) if k.strip())
            if kw == "ENGINE_SORTING_KEY" or "sorting_key" not in fields:
                fields["sorting_key"] = keys
        elif kw == "ENGINE_TTL":
            fields["ttl"] = _engine_value(st, sink)
        elif kw == "FORWARD_QUERY":
            fields["forward_query"] = st.text
        elif kw == "BACKFILL":
            value = _single_value(st, sink).lower()
            if value not in ("skip", "auto"):
                sink.error("PF101", f"BACKFILL `{value}` is not understood.", "Write `BACKFILL skip`.", st.location)
            fields["backfill"] = value if value == "skip" else None
        elif kw == "VERSION":
            name = versioned(path.stem, st, sink)
        elif kw.startswith("ENGINE_"):
            settings.append((kw, _engine_value(st, sink)))
    connector += _import_settings(imports, sink)
    if "SCHEMA" not in where:
        sink.error("PF108", f"Datasource `{name}` has no SCHEMA.",
                   "Add a `SCHEMA >` block listing its columns, or delete the file to have it generated.", location)
    elif "KAFKA" in where:
        fields["columns"] = _with_kafka_columns(fields.get("columns", ()), where.pop("KAFKA"), sink)
    return Datasource(
        name=name, path=display, location=location, tokens=tuple(tokens), engine_settings=tuple(settings),
        keyword_locations=tuple(where.items()), connector=tuple(connector), **fields,
    )


# The Kafka settings of a datasource pipeframe acts on (the connection's are in connectors/spec.py).
KAFKA_DATASOURCE_SETTINGS = ("KAFKA_CONNECTION_NAME", "KAFKA_TOPIC", "KAFKA_GROUP_ID", "KAFKA_AUTO_OFFSET_RESET",
                             "KAFKA_STORE_RAW_VALUE")


S3_SERVICES = ("s3", "s3_iamrole")  # IMPORT_SERVICE values of Tinybird Classic's S3 connector


def _import_settings(statements: list[Statement], sink: DiagnosticSink) -> list[Setting]:
    """A datasource's `IMPORT_*` lines: those of an S3 import (Tinybird's S3 connector; no IMPORT_SERVICE, or an S3
    one) kept as connector settings, checked by connectors/spec.py; those of another service (IMPORT_SERVICE
    bigquery, snowflake, ...) warned of (PF110) and ignored."""
    service = next((_unquoted(st.text).lower() for st in statements if st.keyword.upper() == "IMPORT_SERVICE"), "s3")
    if service in S3_SERVICES:
        return [Setting(st.keyword.upper(), _unquoted(st.text), st.location) for st in statements]
    for st in statements:
        not_supported_yet(sink, st, "The Import connector", "Load the rows with `pipeframe append` (or the events "
                          "API) instead.")
    return []


def _unquoted(text: str) -> str:
    """A value as Tinybird reads it, bare or quoted: `'c'` and `"c"` are `c` (not `"a" || "b"`)."""
    text = text.strip()
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "\"'" and text[0] not in text[1:-1]:
        return text[1:-1].strip()
    return text


def parse_connection(path: Path, lexer: Lexer, sink: DiagnosticSink) -> Connection:
    """A `.connection` file: its TYPE and its settings as written (checked by connectors/spec.py)."""
    display = lexer.display(path)
    kind: str | None = None
    settings: list[Setting] = []
    seen: set[str] = set()
    for st in lexer.statements(path):
        kw = st.keyword.upper()
        if kw in seen:
            sink.error("PF101", f"{kw} appears twice.", "Keep one of them.", st.location)
            continue
        seen.add(kw)
        if kw == "TYPE":
            kind = _unquoted(st.text).lower()
        else:
            settings.append(Setting(kw, _unquoted(st.text), st.location))
    return Connection(path.stem, display, Location(display), kind, tuple(settings))


# The columns Tinybird adds to every Kafka datasource (pipes read them, keys use them) when SCHEMA does not list them.
KAFKA_COLUMNS = ("`__value` String", "`__topic` LowCardinality(String)", "`__partition` Int16", "`__offset` Int64",
                 "`__timestamp` DateTime", "`__key` String")


def _with_kafka_columns(columns: tuple[Column, ...], where: Location, sink: DiagnosticSink) -> tuple[Column, ...]:
    declared = {c.name for c in columns}
    added = [parse_column(text, where, sink) for text in KAFKA_COLUMNS if text.split("`")[1] not in declared]
    return (*columns, *(c for c in added if c is not None))


# ------------------------------------------------------------------------------------------------ pipes

def parse_pipe(path: Path, lexer: Lexer, sink: DiagnosticSink) -> Pipe:
    display = lexer.display(path)
    errors_before = len(sink.errors)  # the sink is shared by every file of the project
    pipe_fields: dict = {"description": ""}
    tokens: list[Token] = []
    nodes: list[Node] = []
    node: dict | None = None

    def finish() -> None:
        if node is None:
            return
        if "sql" not in node:
            sink.error("PF101", f"Node `{node['name']}` has no SQL.", "Add an `SQL >` block under the NODE line.",
                       node["location"])
            return
        where = node.pop("where")
        nodes.append(Node(keyword_locations=tuple(where.items()), export=tuple(node.pop("export", ())), **node))

    for st in lexer.statements(path):
        kw = st.keyword.upper()
        if kw == "NODE":
            finish()
            name = st.value.strip()
            if len(name) > 2 and name[0] == name[-1] and name[0] in "\"'":  # `NODE "daily"`, as Tinybird takes it
                name = name[1:-1]
            node = {"name": name, "location": st.location, "where": {}}
            if not is_identifier(name):
                sink.error("PF104", f"Node name `{name}` is not a valid identifier.",
                           "Name nodes with letters, digits and underscores, e.g. NODE daily_totals.", st.location)
            elif any(n.name == name for n in nodes):
                sink.error("PF105", f"Node `{name}` is defined twice in this pipe.", "Rename one of the nodes.",
                           st.location)
            continue
        if node is None:
            if kw not in PIPE_KEYWORDS:
                if kw in NODE_KEYWORDS:
                    sink.error("PF101", f"{kw} appears before any NODE.",
                               "Start the node with `NODE name` before its SQL and settings.", st.location)
                else:
                    unknown_keyword(sink, st, PIPE_KEYWORDS | NODE_KEYWORDS, "pipe")
                continue
            if kw == "DESCRIPTION":
                pipe_fields["description"] = st.text.strip()
            elif kw == "VERSION":
                pipe_fields["name"] = versioned(path.stem, st, sink)
            elif kw == "TOKEN":
                token = parse_token(st, "READ", sink)
                if token:
                    tokens.append(token)
            continue
        if kw.startswith("EXPORT_"):  # a sink's settings, checked against TYPE sink by connectors/spec.py
            node.setdefault("export", []).append(Setting(kw, _unquoted(st.text), st.location))
            continue
        if kw.startswith(CONNECTOR_PREFIXES):
            not_supported_yet(sink, st, f"`{kw}` in a pipe", "Remove the line; a sink pipe's settings start with "
                              "EXPORT_ (docs/connectors.md).")
            continue
        if kw not in NODE_KEYWORDS:
            unknown_keyword(sink, st, NODE_KEYWORDS, "pipe")
            continue
        parse_node_keyword(st, kw, node, tokens, sink)
    finish()
    if not nodes and len(sink.errors) == errors_before:
        sink.error("PF101", f"Pipe `{path.stem}` has no nodes.", "Add `NODE name` followed by an `SQL >` block.",
                   Location(display))
    typed = [n for n in nodes if n.type]
    for extra in typed[1:]:
        sink.error("PF304", f"Node `{extra.name}` has a TYPE, but node `{typed[0].name}` already has one.",
                   "Keep TYPE on one node only (usually the last).", extra.where("TYPE"))
    pipe_fields.setdefault("name", path.stem)
    return Pipe(path=display, location=Location(display), nodes=tuple(nodes), tokens=tuple(tokens), **pipe_fields)


def versioned(stem: str, st: Statement, sink: DiagnosticSink) -> str:
    """`VERSION n`: Tinybird names the resource `<file name>__v<n>`, and other pipes read it by that name."""
    value = st.value.strip()
    if not value.isdigit():
        sink.error("PF101", f"VERSION `{value}` is not a whole number.", "Write `VERSION 1`, or remove the line.",
                   st.location)
        return stem
    return f"{stem}__v{int(value)}"


def parse_node_keyword(st: Statement, kw: str, node: dict, tokens: list[Token], sink: DiagnosticSink) -> None:
    where: dict[str, Location] = node["where"]
    if kw in where:
        sink.error("PF101", f"{kw} appears twice in node `{node['name']}`.", "Keep one of them.", st.location)
        return
    where[kw] = st.location
    if kw == "SQL":
        if not st.is_block:
            if st.value and not st.value.startswith(">"):
                node["sql"], node["sql_location"] = st.value, st.value_location
                return
            if st.value.startswith(">"):
                sink.error("PF103", "The query must start on the line after `SQL >`.",
                           "Move the query to the next lines, indented by 4 spaces.", st.location)
                return
            sink.error("PF101", "SQL must be a block.", "Write `SQL >` and indent the query by 4 spaces.", st.location)
            return
        lines = list(st.block or ())
        if not lines:
            sink.error("PF101", f"SQL block of node `{node['name']}` is empty.", "Write the query under `SQL >`.",
                       st.location)
            return
        templated = lines[0].text.strip() == "%"
        node["templated"] = templated
        node["sql"] = "\n".join(line.text for line in lines)
        node["sql_location"] = lines[0].location
        return
    value = _single_value(st, sink).strip()
    if kw == "DESCRIPTION":
        node["description"] = st.text.strip()
    elif kw == "TYPE":
        lowered = value.lower()
        if lowered not in NODE_TYPES:
            close = difflib.get_close_matches(lowered, NODE_TYPES, n=1)
            sink.error("PF101", f"TYPE `{value}` is not a node type.",
                       f"Did you mean {close[0]}?" if close else "Use endpoint, materialized, copy or sink.", st.location)
            return
        node["type"] = lowered
    elif kw in ("DATASOURCE", "TARGET_DATASOURCE"):
        node["datasource" if kw == "DATASOURCE" else "target_datasource"] = value
    elif kw == "COPY_MODE":
        if value.lower() not in COPY_MODES:
            sink.error("PF101", f"COPY_MODE `{value}` is not understood.", "Use append or replace.", st.location)
            return
        node["copy_mode"] = value.lower()
    elif kw == "COPY_SCHEDULE":
        if value.lower() != "@on-demand" and not valid_cron(value):
            sink.error("PF101", f"COPY_SCHEDULE `{value}` is not a cron expression.",
                       "Use five cron fields in UTC (minute hour day month weekday), e.g. `0 1 * * *` for 01:00 "
                       "every day, or @on-demand.", st.location)
            return
        node["copy_schedule"] = value
    elif kw == "DIMENSIONS":
        names = tuple(n.strip().strip("`") for n, _ in split_top_level(value) if n.strip())
        node["dimensions"] = names
    elif kw == "COUNT_DISTINCT":
        if value.lower() not in COUNT_DISTINCT_MODES:
            sink.error("PF101", f"COUNT_DISTINCT `{value}` is not understood.",
                       "Use exact (a set state) or sketch (an HLL state).", st.location)
            return
        node["count_distinct"] = value.lower()
    elif kw == "FOLLOW_TTL":
        if value.lower() not in ("true", "false"):
            sink.error("PF101", f"FOLLOW_TTL `{value}` is not understood.",
                       "Write `FOLLOW_TTL true` (the view forgets the rows its source's ENGINE_TTL deletes) or "
                       "`FOLLOW_TTL false` (the default: it keeps their aggregates).", st.location)
            return
        node["follow_ttl"] = value.lower() == "true"
    elif kw == "TOKEN":
        token = parse_token(st, "READ", sink)
        if token:
            tokens.append(token)
    # ENGINE* and TAGS in a pipe are accepted for Tinybird compatibility; the target datasource owns them.


def parse_file(path: Path, lexer: Lexer, sink: DiagnosticSink) -> Datasource | Pipe | Connection | None:
    if path.suffix == ".datasource":
        return parse_datasource(path, lexer, sink)
    if path.suffix == ".connection":
        return parse_connection(path, lexer, sink)
    if path.suffix == ".pipe":
        return parse_pipe(path, lexer, sink)
    return None


def make_lexer(root: Path, environ: Mapping[str, str], sink: DiagnosticSink) -> Lexer:
    return Lexer(root.resolve(), environ, sink)


def valid_cron(expression: str) -> bool:
    """Five cron fields (UTC) croniter takes: COPY_SCHEDULE, EXPORT_SCHEDULE."""
    from croniter import croniter  # only projects with schedules pay for the import

    return len(expression.split()) == 5 and croniter.is_valid(expression)
