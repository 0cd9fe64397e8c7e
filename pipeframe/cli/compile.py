"""The compile commands of the `pipeframe` CLI, which never start Spark: `check`, `sql` and `graph`."""

from __future__ import annotations

import json

import click

from pipeframe.cli.common import ENV_OPTION, PROJECT_OPTION, load_project, print_diagnostic, run


@click.command()
@click.argument("path", required=False, type=click.Path(file_okay=False))
@PROJECT_OPTION
@ENV_OPTION
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON (for tools and CI).")
@click.option("--no-cache", is_flag=True,
              help="Parse and compile every file again, ignoring .pipeframe/cache/ (or set PIPEFRAME_NO_CACHE=1).")
def check(path: str | None, project_dir: str, env: str | None, as_json: bool, no_cache: bool) -> None:
    """Compile the project and report every problem at once (no Spark needed).

    Each problem is printed as `file:line:col CODE message` with a fix. Exit status: 0 when there are no
    errors (warnings allowed), 1 otherwise. Files unchanged since the last run (and everything they depend on)
    are taken from `.pipeframe/cache/`; the report is the same either way.

    \b
    Example:
      pipeframe check example_project --json
    """

    def body() -> int:
        project = load_project(path or project_dir, env, cache=not no_cache)
        report = project.check()
        if as_json:
            answer = report.to_json()
            if report.ok:  # how each endpoint is answered: DuckDB (no JVM) or Spark, and why
                answer["read_paths"] = {name: dict(zip(("engine", "detail"), project.read_path(name), strict=True))
                                        for name in answer["endpoints"]}
                for found in answer["read_paths"].values():
                    if found["engine"] == "duckdb":
                        del found["detail"]
            click.echo(json.dumps(answer, indent=2))
            return 0 if report.ok else 1
        print_check(report)
        return 0 if report.ok else 1

    run(body)


def print_check(report) -> None:
    project = report.project
    pipes = list(project.pipes.values())
    kinds = {k: sum(1 for p in pipes if p.type == k) for k in ("materialized", "endpoint", "copy", "sink")}
    generated = sum(1 for d in project.datasources.values() if d.generated)
    click.echo(f"{len(project.datasources)} datasources ({generated} generated), {len(pipes)} pipes "
               f"({kinds['materialized']} materialized, {kinds['endpoint']} endpoints, {kinds['copy']} copy"
               + (f", {kinds['sink']} sink)" if kinds["sink"] else ")"))
    if project.views:
        click.echo("\nMaterialized views:")
        colors = {"accepted": "green", "rewritten": "cyan", "rejected": "red"}
        for view in project.views:
            status = view.verdict.status
            label = "accepted with rewrite" if status == "rewritten" else status
            click.echo(f"  {view.pipe}: {view.trigger or '?'} → {view.target}  "
                       f"{click.style(label, fg=colors[status], bold=True)}")
            for rewrite in view.verdict.rewrites:
                click.echo(f"      rewrite: {rewrite}")
    if report.diagnostics:
        click.echo("")
        for d in report.diagnostics:
            print_diagnostic(d)
    errors, warnings = len(report.errors), len(report.warnings)
    click.echo("")
    if errors:
        click.secho(f"✗ {errors} error{'s' * (errors != 1)}, {warnings} warning{'s' * (warnings != 1)}",
                    fg="red", bold=True)
    else:
        click.secho(f"✓ no errors ({warnings} warning{'s' * (warnings != 1)})", fg="green", bold=True)


@click.command()
@click.argument("target")
@PROJECT_OPTION
@ENV_OPTION
def sql(target: str, project_dir: str, env: str | None) -> None:
    """Print the compiled Spark SQL of PIPE or PIPE.NODE (for an endpoint, also what answers it: DuckDB's SQL on the
    read path, or why Spark does).

    Templated nodes are shown as rendered in analysis mode (parameters at their defaults). For a
    materialized pipe, the state SQL that runs over each block of new rows is printed too.

    \b
    Example:
      pipeframe sql top_products.endpoint -p example_project
    """

    def body() -> int:
        project = load_project(project_dir, env)
        click.echo(pretty(project.sql(target)))
        pipe = project.compiled.pipes.get(target.partition(".")[0])
        if pipe is not None and pipe.view is not None and pipe.view.plan is not None and "." not in target:
            click.echo("\n-- state SQL over each block of new rows (__pf_batch):")
            click.echo(pretty(pipe.view.plan.state_sql))
            click.echo(f"\n-- reading `{pipe.view.target}` by name:")
            click.echo(pretty(pipe.view.plan.read_sql(f"`{pipe.view.target}__states`")))
        if pipe is not None and pipe.type == "endpoint" and "." not in target:
            engine, text = project.read_path(pipe.name)
            if engine == "duckdb":
                click.echo("\n-- answered by DuckDB over the tables' snapshots (no JVM), as:")
                click.echo(sqlglot_pretty(text, "duckdb"))
            else:
                click.echo(f"\n-- answered by Spark: {text}")
        return 0

    run(body)


def pretty(sql_text: str) -> str:
    return sqlglot_pretty(sql_text, "spark")


def sqlglot_pretty(sql_text: str, dialect: str) -> str:
    import sqlglot

    return sqlglot.transpile(sql_text, read=dialect, write=dialect, pretty=True)[0]


@click.command()
@PROJECT_OPTION
@ENV_OPTION
@click.option("--format", "fmt", type=click.Choice(["mermaid", "dot"]), default="mermaid", show_default=True,
              help="Output format.")
def graph(project_dir: str, env: str | None, fmt: str) -> None:
    """Print the dependency graph (datasource → pipe → target → ...).

    \b
    Example:
      pipeframe graph --format dot -p example_project | dot -Tsvg > graph.svg
    """
    run(lambda: click.echo(load_project(project_dir, env).graph(fmt), nl=False))


COMMANDS = [check, sql, graph]
