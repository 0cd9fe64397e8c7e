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
        sys.exit(1)
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
      pipeframe sql top_products -p example_project
      pipeframe graph --format mermaid -p example_project
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


if __name__ == "__main__":  # pragma: no cover
    main()
