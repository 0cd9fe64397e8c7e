"""The `pipeframe` command line: thin click commands over `pipeframe.Project`.

Output is for people by default and JSON with `--json`; exit codes: 0 ok, 1 errors, 2 usage/changes.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable

import click

from pipeframe.errors import Diagnostic, PipeframeError

PROJECT_OPTION = click.option(
    "-p", "--project", "project_dir", default=".", envvar="PIPEFRAME_PROJECT", show_default=True,
    type=click.Path(file_okay=False), help="Project folder (or set PIPEFRAME_PROJECT).")
ENV_OPTION = click.option("--env", "env", default=None, envvar="PIPEFRAME_ENV",
                          help="Environment from pipeframe.yaml `environments:` (or PIPEFRAME_ENV).")


def _project(project_dir: str, env: str | None):
    from pipeframe.project import Project

    return Project(project_dir, env=env)


def print_diagnostic(d: Diagnostic) -> None:
    color = {"error": "red", "warning": "yellow"}.get(d.severity, "cyan")
    where = f"{d.location} " if d.location else ""
    click.echo(f"{where}{click.style(d.code, fg=color, bold=True)} {click.style(d.severity, fg=color)}: {d.message}",
               err=False)
    if d.hint:
        click.echo(f"    {click.style('fix:', fg='green')} {d.hint}")


def run(action: Callable[[], int | None]) -> None:
    """Run a command body: PipeframeErrors print as diagnostics (exit 1), never as tracebacks."""
    try:
        code = action()
    except PipeframeError as err:
        for d in err.diagnostics:
            print_diagnostic(d)
        sys.exit(err.exit_code)
    except KeyboardInterrupt:
        click.echo("interrupted", err=True)
        sys.exit(130)
    except click.exceptions.Exit:
        raise
    except Exception as exc:
        if os.environ.get("PIPEFRAME_DEBUG"):
            raise
        click.echo(f"PF999 internal error: {type(exc).__name__}: {exc}", err=True)
        click.echo("    fix: this is a pipeframe bug; rerun with PIPEFRAME_DEBUG=1 and report the traceback.",
                   err=True)
        sys.exit(70)
    sys.exit(code or 0)


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(package_name="pipeframe")
def main() -> None:
    """pipeframe: declarative real-time analytics on Spark + Delta Lake.

    A project is a folder of .datasource and .pipe files. Start with `pipeframe check` to compile it.

    \b
    Examples:
      pipeframe check example_project
      pipeframe deploy -p example_project --yes
      pipeframe append sales example_project/fixtures/sales.ndjson -p example_project
      pipeframe status -p example_project
      pipeframe endpoint top_products --param limit=3 -p example_project
      pipeframe dev -p example_project        # deploy, serve HTTP and follow every save
    """


@main.command()
@click.argument("path", required=False, type=click.Path(file_okay=False))
@PROJECT_OPTION
@ENV_OPTION
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON (for tools and CI).")
def check(path: str | None, project_dir: str, env: str | None, as_json: bool) -> None:
    """Compile the project and report every problem at once (no Spark needed).

    Each problem is printed as `file:line:col CODE message` with a fix. Exit status: 0 when there are no
    errors (warnings allowed), 1 otherwise.

    \b
    Example:
      pipeframe check example_project --json
    """

    def body() -> int:
        report = _project(path or project_dir, env).check()
        if as_json:
            click.echo(json.dumps(report.to_json(), indent=2))
            return 0 if report.ok else 1
        print_check(report)
        return 0 if report.ok else 1

    run(body)


def print_check(report) -> None:
    project = report.project
    pipes = list(project.pipes.values())
    kinds = {k: sum(1 for p in pipes if p.type == k) for k in ("materialized", "endpoint", "copy")}
    generated = sum(1 for d in project.datasources.values() if d.generated)
    click.echo(f"{len(project.datasources)} datasources ({generated} generated), {len(pipes)} pipes "
               f"({kinds['materialized']} materialized, {kinds['endpoint']} endpoints, {kinds['copy']} copy)")
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


@main.command()
@click.argument("target")
@PROJECT_OPTION
@ENV_OPTION
def sql(target: str, project_dir: str, env: str | None) -> None:
    """Print the compiled Spark SQL of PIPE or PIPE.NODE.

    Templated nodes are shown as rendered in analysis mode (parameters at their defaults). For a
    materialized pipe, the state SQL that runs over each block of new rows is printed too.

    \b
    Example:
      pipeframe sql top_products.endpoint -p example_project
    """

    def body() -> int:
        project = _project(project_dir, env)
        click.echo(pretty(project.sql(target)))
        pipe = project.compiled.pipes.get(target.partition(".")[0])
        if pipe is not None and pipe.view is not None and pipe.view.plan is not None and "." not in target:
            click.echo("\n-- state SQL over each block of new rows (__pf_batch):")
            click.echo(pretty(pipe.view.plan.state_sql))
            click.echo(f"\n-- reading `{pipe.view.target}` by name:")
            click.echo(pretty(pipe.view.plan.read_sql(f"`{pipe.view.target}__states`")))
        return 0

    run(body)


def pretty(sql_text: str) -> str:
    import sqlglot

    return sqlglot.transpile(sql_text, read="spark", write="spark", pretty=True)[0]


@main.command()
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
    run(lambda: click.echo(_project(project_dir, env).graph(fmt), nl=False))


def _console():
    from rich.console import Console

    # Long lines stay whole in CI logs, and tables get room there instead of an 80-column squeeze.
    console = Console(highlight=False, soft_wrap=True)
    return console if console.is_terminal else Console(highlight=False, soft_wrap=True, width=160)


@main.command()
@PROJECT_OPTION
@ENV_OPTION
@click.option("--allow-destructive", is_flag=True, help="Allow drops and changes that lose data.")
@click.option("--json", "as_json", is_flag=True, help="Print the plan as JSON.")
def plan(project_dir: str, env: str | None, allow_destructive: bool, as_json: bool) -> None:
    """Show what `deploy` would change, without changing anything.

    Each resource gets one line: + create, ~ alter, ± rebuild, - drop, and what happens to its data.
    Exit status: 0 no changes, 2 changes, 3 refused changes, 1 errors (same as `deploy --check`).

    \b
    Example:
      pipeframe plan -p example_project --env prod
    """
    run(lambda: _show_plan(_project(project_dir, env).plan(allow_destructive), as_json))


def _show_plan(the_plan, as_json: bool) -> int:
    if as_json:
        click.echo(json.dumps(the_plan.to_json(), indent=2, default=str))
    else:
        from pipeframe.plan.render import print_plan

        print_plan(the_plan, _console())
    return the_plan.exit_code()


@main.command()
@PROJECT_OPTION
@ENV_OPTION
@click.option("--check", is_flag=True,
              help="Only print the plan; exit 0 (no changes), 2 (changes), 3 (refused changes) or 1 (errors).")
@click.option("--allow-destructive", is_flag=True, help="Allow drops and changes that lose data.")
@click.option("--yes", "-y", is_flag=True, help="Do not ask for confirmation on a terminal.")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output (for CI).")
@click.option("--history", is_flag=True, help="List past deploys (time, git commit, result) and exit.")
def deploy(project_dir: str, env: str | None, check: bool, allow_destructive: bool, yes: bool, as_json: bool,
           history: bool) -> None:
    """Apply the difference between the files and what is deployed, onto Delta tables.

    Creates new resources, alters metadata and additive changes in place, rebuilds changed views (a new
    version is built and backfilled beside the live one, then swapped in atomically) and drops removed
    resources (only with --allow-destructive). A failed deploy leaves the previous version live. Deploys on
    one warehouse are serialized.

    \b
    Examples:
      pipeframe deploy -p example_project --yes
      pipeframe deploy --check --json --env prod     # in CI: exit 2 when there is something to deploy
      pipeframe deploy --history
    """

    def body() -> int:
        project = _project(project_dir, env)
        if history:
            return _show_history(project.history(), as_json)
        the_plan = project.plan(allow_destructive)
        if check or the_plan.refused or not the_plan.has_changes:
            code = _show_plan(the_plan, as_json)
            return code if check or the_plan.refused else 0
        if not as_json:
            _show_plan(the_plan, False)
            if not yes and sys.stdin.isatty() and not click.confirm("Deploy these changes?", default=False):
                click.echo("Nothing deployed.")
                return 1
        console = _console()

        def progress(step: str, change) -> None:
            if not as_json and step == "start" and change.action != "unchanged":
                console.print(f"  {change.action} {change.kind} [bold]{change.name}[/bold] ...")
            elif not as_json and step == "backfill":
                console.print(f"    backfilling from `{change.desired.source}` ...")

        result = project.deploy(allow_destructive, on_step=progress)
        if as_json:
            click.echo(json.dumps({"deployment": result.deployment, "changes": result.changes,
                                   "plan": result.plan.to_json()}, indent=2, default=str))
        else:
            click.secho(f"✓ deployed {result.changes} change(s) (deployment {result.deployment})", fg="green",
                        bold=True)
        return 0

    run(body)


def _show_history(deployments, as_json: bool) -> int:
    if as_json:
        click.echo(json.dumps([{"id": d.id, "started_at": d.started_at, "finished_at": d.finished_at,
                                "git_commit": d.git_commit, "result": d.result, "error": d.error,
                                "changes": len([c for c in d.plan.get("changes", []) if c.get("action") != "unchanged"])}
                               for d in deployments], indent=2, default=str))
        return 0
    if not deployments:
        click.echo("No deploys yet.")
        return 0
    from rich.table import Table

    table = Table("deployment", "started (UTC)", "git commit", "changes", "result")
    for d in deployments:
        changes = len([c for c in d.plan.get("changes", []) if c.get("action") != "unchanged"])
        result = d.result if d.result != "running" else "interrupted or running"
        table.add_row(d.id, f"{d.started_at:%Y-%m-%d %H:%M:%S}" if d.started_at else "", (d.git_commit or "")[:10],
                      str(changes), result + (f": {d.error}" if d.error else ""))
    _console().print(table)
    return 0


@main.command()
@click.argument("sql_text", metavar="SQL")
@PROJECT_OPTION
@ENV_OPTION
@click.option("--format", "fmt", type=click.Choice(["table", "json", "csv", "ndjson"]), default="table",
              show_default=True)
@click.option("--limit", type=int, default=1000, show_default=True, help="Print at most this many rows.")
def query(sql_text: str, project_dir: str, env: str | None, fmt: str, limit: int) -> None:
    """Run ad-hoc Spark SQL over the deployed resources, by name.

    Views read as finalized values (merged states); `uniqMerge(col)`-style calls work on explicit states.

    \b
    Example:
      pipeframe query "SELECT product, sum(revenue) FROM sales_by_hour GROUP BY 1" -p example_project
    """

    def body() -> int:
        frame = _project(project_dir, env).query(sql_text)
        columns = frame.columns
        rows = [row.asDict(recursive=True) for row in frame.limit(limit).collect()]
        print_rows(columns, rows, fmt)
        return 0

    run(body)


def parse_params(pairs: tuple[str, ...]) -> dict[str, str]:
    """`--param k=v` options as a dict; a malformed one is a usage error naming it."""
    params = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or not name.strip():
            raise PipeframeError("PF805", f"`--param {pair}` is not of the form name=value.",
                                 "Write each parameter as --param name=value, e.g. --param limit=10.")
        params[name.strip()] = value
    return params


@main.command()
@click.argument("pipe")
@click.option("--param", "params", multiple=True, metavar="NAME=VALUE",
              help="A request parameter (repeatable), validated against the pipe's typed parameters.")
@click.option("--format", "fmt", type=click.Choice(["table", "json", "csv", "ndjson"]), default="table",
              show_default=True, help="json is the HTTP API's answer: meta, data, rows, statistics.")
@PROJECT_OPTION
@ENV_OPTION
def endpoint(pipe: str, params: tuple[str, ...], fmt: str, project_dir: str, env: str | None) -> None:
    """Call an endpoint pipe with parameters, as `GET /v0/pipes/PIPE.json` would.

    \b
    Example:
      pipeframe endpoint top_products --param limit=3 --param start="2024-05-15 00:00:00" -p example_project
    """

    def body() -> int:
        result = _project(project_dir, env).endpoint(pipe, **parse_params(params))
        if fmt == "json":
            click.echo(json.dumps(result.to_json(), indent=2))
        else:
            print_rows(result.columns, result.data, fmt)
        return 0

    run(body)


def print_rows(columns: list[str], rows: list[dict], fmt: str) -> None:
    if fmt == "json":
        click.echo(json.dumps({"meta": [{"name": c} for c in columns], "data": rows, "rows": len(rows)},
                              indent=2, default=str))
    elif fmt == "ndjson":
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
        _console().print(table)
        click.echo(f"{len(rows)} row(s)")


from pipeframe import (
    cli_data,  # noqa: F401 — registers the data commands on `main`
    cli_dev,  # noqa: F401 — registers `init` and `test` on `main`
    cli_serve,  # noqa: F401 — registers `serve` on `main`
)

if __name__ == "__main__":  # pragma: no cover
    # `python -m pipeframe.cli`: run the importable module's group, the one cli_data registered commands on.
    from pipeframe.cli import main as _main

    _main()
