"""The query commands of the `pipeframe` CLI: `query` (ad-hoc Spark SQL over the deployed resources) and
`endpoint` (an endpoint pipe called as its HTTP route would be). Both answer without starting Spark where the read
path can (`--engine`)."""

from __future__ import annotations

import json
import sys

import click

from pipeframe.cli.common import (
    ENGINE_OPTION,
    ENV_OPTION,
    PROJECT_OPTION,
    load_project,
    parse_params,
    rich_console,
    run,
)


@click.command()
@click.argument("sql_text", metavar="SQL")
@PROJECT_OPTION
@ENV_OPTION
@click.option("--format", "fmt", type=click.Choice(["table", "json", "csv", "ndjson"]), default="table",
              show_default=True)
@click.option("--limit", type=click.IntRange(min=0), default=1000, show_default=True,
              help="Print at most this many rows.")
@ENGINE_OPTION
def query(sql_text: str, project_dir: str, env: str | None, fmt: str, limit: int, engine: str) -> None:
    """Run ad-hoc Spark SQL over the deployed resources, by name.

    Views read as finalized values (merged states); `uniqMerge(col)`-style calls work on explicit states. DuckDB
    answers from the tables' current snapshots without starting Spark, unless the SQL uses what it cannot answer
    with Spark's meaning (then Spark does; `--format json` says which in `statistics.engine`).

    \b
    Example:
      pipeframe query "SELECT product, sum(revenue) FROM sales_by_hour GROUP BY 1" -p example_project
    """

    def body() -> int:
        result = load_project(project_dir, env, engine=engine).read(sql_text, limit)
        if fmt == "json":
            click.echo(json.dumps(result.to_json(), indent=2, default=str))
        else:
            print_rows(result.columns, result.data, fmt)
        return 0

    run(body)


@click.command()
@click.argument("pipe")
@click.option("--param", "params", multiple=True, metavar="NAME=VALUE",
              help="A request parameter (repeatable), validated against the pipe's typed parameters.")
@click.option("--format", "fmt", type=click.Choice(["table", "json", "csv", "ndjson"]), default="table",
              show_default=True, help="json is the HTTP API's answer: meta, data, rows, statistics.")
@PROJECT_OPTION
@ENV_OPTION
@ENGINE_OPTION
def endpoint(pipe: str, params: tuple[str, ...], fmt: str, project_dir: str, env: str | None, engine: str) -> None:
    """Call an endpoint pipe with parameters, as `GET /v0/pipes/PIPE.json` would.

    DuckDB answers from the tables' current snapshots without starting Spark, unless the pipe uses what it cannot
    answer with Spark's meaning (then Spark does; `--format json` says which in `statistics.engine`).

    \b
    Example:
      pipeframe endpoint top_products --param limit=3 --param start="2024-05-15 00:00:00" -p example_project
    """

    def body() -> int:
        result = load_project(project_dir, env, engine=engine).endpoint(pipe, **parse_params(params))
        if fmt == "json":
            click.echo(json.dumps(result.to_json(), indent=2))
        else:
            print_rows(result.columns, result.data, fmt)
        return 0

    run(body)


def print_rows(columns: list[str], rows: list[dict], fmt: str) -> None:
    if fmt == "ndjson":
        for row in rows:
            click.echo(json.dumps(row, default=str))
    elif fmt == "csv":
        import csv

        writer = csv.DictWriter(sys.stdout, fieldnames=columns)
        writer.writeheader()
        writer.writerows(rows)
    else:
        from rich.table import Table

        table = Table(*columns)
        for row in rows:
            table.add_row(*("" if row[c] is None else str(row[c]) for c in columns))
        rich_console().print(table)
        click.echo(f"{len(rows)} row(s)")


COMMANDS = [query, endpoint]
