"""Plain, typed model objects for parsed datafiles: what a .datasource, .pipe or .incl file says.

The parser produces these; the compiler reads them. Nothing here knows about SQL semantics or Spark.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from pipeframe.errors import Location

NodeType = Literal["endpoint", "materialized", "copy", "sink"]
TokenScope = Literal["READ", "APPEND"]


@dataclass(frozen=True)
class Token:
    """A named access token that may read a pipe (READ) or append to a datasource (APPEND)."""

    name: str
    scope: TokenScope
    location: Location


@dataclass(frozen=True)
class Column:
    """One SCHEMA column. ``type`` is the Spark SQL type; ``written_type`` is what the file says."""

    name: str
    type: str
    written_type: str
    location: Location
    json_path: str | None = None
    default: str | None = None
    nullable: bool = True
    # For `AggregateFunction(func, T)` columns: the state function and its argument types.
    aggregate_function: str | None = None
    aggregate_args: tuple[str, ...] = ()
    aggregate_params: tuple[str, ...] = ()  # e.g. quantiles(0.5, 0.9) -> ('0.5', '0.9')
    simple_aggregate: bool = False

    @property
    def never_null(self) -> bool:
        """Whether ingest never stores NULL here: a missing value (or a JSON null) takes the column's DEFAULT, or a
        non-Nullable ClickHouse type's default (Spark-spelled types and `Nullable(T)` keep NULL)."""
        from pipeframe.datafiles.types import value_rules

        if self.default is not None:
            return self.default.strip().upper() != "NULL"
        return self.aggregate_function is None and value_rules(self.written_type).takes_default


@dataclass(frozen=True)
class Datasource:
    name: str
    path: str
    location: Location
    columns: tuple[Column, ...] = ()
    description: str = ""
    tokens: tuple[Token, ...] = ()
    engine: str | None = None
    partition_key: str | None = None
    sorting_key: tuple[str, ...] = ()
    ttl: str | None = None
    engine_settings: tuple[tuple[str, str], ...] = ()
    forward_query: str | None = None
    backfill: str | None = None  # "skip" or None
    # Where each keyword appeared, for diagnostics (keyword -> location).
    keyword_locations: tuple[tuple[str, Location], ...] = ()
    # The connector settings it reads rows with (`KAFKA_CONNECTION_NAME`, `KAFKA_TOPIC`, ...), as written.
    connector: tuple[Setting, ...] = ()

    def column(self, name: str) -> Column | None:
        return next((c for c in self.columns if c.name == name), None)

    def where(self, keyword: str) -> Location:
        return dict(self.keyword_locations).get(keyword, self.location)

    def setting(self, keyword: str) -> str | None:
        """An ENGINE_* value kept in `engine_settings` (`ENGINE_VER`, `ENGINE_IS_DELETED`, ...), unquoted."""
        return dict(self.engine_settings).get(keyword)


@dataclass(frozen=True)
class Setting:
    """One `KEYWORD value` line of a connection (or a datasource's connector settings), as written: a value may
    call `tb_secret("NAME", "default")`, resolved only where the connector runs (pipeframe/connectors/)."""

    keyword: str
    value: str
    location: Location


@dataclass(frozen=True)
class Connection:
    """A `.connection` file: how to reach a Kafka cluster or an object store, named by its file."""

    name: str
    path: str
    location: Location
    type: str | None = None  # kafka | s3, as written (lower case); None: no TYPE line
    settings: tuple[Setting, ...] = ()

    def setting(self, keyword: str) -> Setting | None:
        return next((s for s in self.settings if s.keyword == keyword), None)


@dataclass(frozen=True)
class Node:
    """One ``NODE name`` + ``SQL >`` block of a pipe, with its node-level settings."""

    name: str
    sql: str
    location: Location  # the NODE line
    sql_location: Location  # first line of the SQL text (the line after `SQL >`)
    description: str = ""
    type: NodeType | None = None
    datasource: str | None = None  # TYPE materialized target
    target_datasource: str | None = None  # TYPE copy target
    copy_mode: str | None = None  # append | replace
    copy_schedule: str | None = None  # cron or @on-demand
    # TYPE sink: its EXPORT_* lines as written (checked by connectors/spec.py, run by connectors/sink.py)
    export: tuple[Setting, ...] = ()
    dimensions: tuple[str, ...] = ()  # tables joined as dimension lookups (no trigger)
    count_distinct: str | None = None  # opt-in rewrite of count(DISTINCT x): exact | sketch
    follow_ttl: bool = False  # a materialized node: retract the rows its sources' ENGINE_TTL deletes
    templated: bool = False  # first line was `%` (templates are detected anyway)
    keyword_locations: tuple[tuple[str, Location], ...] = ()

    def where(self, keyword: str) -> Location:
        return dict(self.keyword_locations).get(keyword, self.location)

    def export_setting(self, keyword: str) -> str | None:
        """An EXPORT_* value as written (quotes taken off), None when the line is missing."""
        return next((s.value for s in self.export if s.keyword == keyword), None)


@dataclass(frozen=True)
class Pipe:
    name: str
    path: str
    location: Location
    nodes: tuple[Node, ...] = ()
    description: str = ""
    tokens: tuple[Token, ...] = ()

    @property
    def typed_node(self) -> Node | None:
        """The node carrying the pipe's TYPE, if any (the checker reports more than one)."""
        return next((n for n in self.nodes if n.type is not None), None)

    @property
    def type(self) -> NodeType | None:
        node = self.typed_node
        return node.type if node else None

    @property
    def output_node(self) -> Node | None:
        """The node whose result the pipe exposes: the typed one, else the last."""
        return self.typed_node or (self.nodes[-1] if self.nodes else None)

    def node(self, name: str) -> Node | None:
        return next((n for n in self.nodes if n.name == name), None)


@dataclass(frozen=True)
class Resources:
    """Everything parsed from a project folder, in discovery order."""

    datasources: tuple[Datasource, ...] = ()
    pipes: tuple[Pipe, ...] = ()
    fixtures: tuple[str, ...] = ()
    tests: tuple[str, ...] = ()
    files: tuple[str, ...] = field(default_factory=tuple)
    connections: tuple[Connection, ...] = ()
