"""Service datasources: the tables pipeframe writes about itself, which a project's pipes read like any table.

`pipeframe.pipe_stats` holds one row per endpoint request a server answered, `pipeframe.ops_log` one row per operation
(a group commit, a view's refresh, a populate, a deploy...). Their columns follow Tinybird's `tinybird.pipe_stats_rt`
and `tinybird.datasources_ops_log` (whose names read them too), plus what pipeframe adds (`engine`, `error_code`,
`strategy`). pipeframe keeps them at fixed places in the warehouse (engine/servicelog.py writes them); a pipe's SQL
names them by their qualified name, which the compiler turns into the one relation name each has (`relation`).
Endpoints and copy pipes may read them; a materialized view may not (no commit of theirs triggers a refresh)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ServiceTable:
    name: str  # as written in SQL after `pipeframe.`
    relation: str  # the one name the compiled SQL reads it by, in Spark and DuckDB
    columns: tuple[tuple[str, str], ...]  # (name, Spark SQL type)
    aliases: tuple[str, ...]  # other qualified names that read it (Tinybird's)
    description: str

    @property
    def qualified(self) -> str:
        return f"pipeframe.{self.name}"

    def path(self, warehouse_uri: str) -> str:
        """Where the warehouse at `warehouse_uri` keeps it (beside the state store, `_pipeframe/`)."""
        return f"{warehouse_uri.rstrip('/')}/_pipeframe/service/{self.name}"


PIPE_STATS = ServiceTable(
    "pipe_stats", "pipeframe_pipe_stats", (
        ("start_datetime", "TIMESTAMP"),
        ("request_id", "STRING"),
        ("pipe_id", "STRING"),
        ("pipe_name", "STRING"),
        ("token_name", "STRING"),
        ("method", "STRING"),
        ("url", "STRING"),
        ("parameters", "MAP<STRING, STRING>"),
        ("status_code", "INT"),
        ("error", "INT"),
        ("error_code", "STRING"),
        ("duration", "DOUBLE"),
        ("read_rows", "BIGINT"),
        ("read_bytes", "BIGINT"),
        ("result_rows", "BIGINT"),
        ("engine", "STRING"),
        ("user_agent", "STRING"),
    ), ("tinybird.pipe_stats_rt",),
    "One row per endpoint request answered: its pipe, parameters, status, duration (seconds), rows and bytes read, "
    "rows answered, the engine that answered (duckdb, spark, or none when refused first) and the token's name.")

OPS_LOG = ServiceTable(
    "ops_log", "pipeframe_ops_log", (
        ("timestamp", "TIMESTAMP"),
        ("event_type", "STRING"),
        ("datasource_id", "STRING"),
        ("datasource_name", "STRING"),
        ("pipe_id", "STRING"),
        ("pipe_name", "STRING"),
        ("result", "STRING"),
        ("error", "STRING"),
        ("error_code", "STRING"),
        ("elapsed_time", "DOUBLE"),
        ("rows", "BIGINT"),
        ("rows_quarantine", "BIGINT"),
        ("strategy", "STRING"),
        ("operation_id", "STRING"),
    ), ("tinybird.datasources_ops_log",),
    "One row per operation: append (a group commit), refresh (a view's, with its strategy), populate, rebuild, "
    "optimize, deploy, delete, truncate, replace; `result` ok or error, with the error's code and message.")

SERVICE_TABLES = (PIPE_STATS, OPS_LOG)
SERVICE_DATABASES = ("pipeframe", "tinybird")  # a table qualified by one of these is a service datasource or a typo
EVENT_TYPES = ("append", "refresh", "populate", "rebuild", "optimize", "deploy", "delete", "truncate", "replace")
_BY_QUALIFIED = {name: t for t in SERVICE_TABLES for name in (t.qualified, *t.aliases)}
BY_RELATION = {t.relation: t for t in SERVICE_TABLES}


def service_table(qualified: str) -> ServiceTable | None:
    """The service table a qualified name (`pipeframe.pipe_stats`, `tinybird.pipe_stats_rt`) reads, in any case."""
    return _BY_QUALIFIED.get(qualified.lower())
