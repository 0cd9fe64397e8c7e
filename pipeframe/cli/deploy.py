"""The deploy commands of the `pipeframe` CLI: `plan` (what would change) and `deploy` (apply it, or list past
deploys)."""

from __future__ import annotations

import json
import sys

import click

from pipeframe.cli.common import ENV_OPTION, PROJECT_OPTION, load_project, rich_console, run


@click.command()
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
    run(lambda: _show_plan(load_project(project_dir, env).plan(allow_destructive), as_json))


def _show_plan(the_plan, as_json: bool) -> int:
    if as_json:
        click.echo(json.dumps(the_plan.to_json(), indent=2, default=str))
    else:
        from pipeframe.plan.render import print_plan

        print_plan(the_plan, rich_console())
    return the_plan.exit_code()


@click.command()
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

    if history and (check or allow_destructive):
        raise click.UsageError("--history lists past deploys; it takes no --check or --allow-destructive.")

    def body() -> int:
        project = load_project(project_dir, env)
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
        console = rich_console()

        def progress(step: str, change) -> None:
            if not as_json and step == "start" and change.action != "unchanged":
                console.print(f"  {change.action} {change.kind} [bold]{change.name}[/bold] ...")
            elif not as_json and step == "backfill":
                console.print(f"    backfilling from `{change.desired.source}` ...")

        result = project.deploy(on_step=progress, plan=the_plan)  # the plan shown, or nothing (PF608)
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
    rich_console().print(table)
    return 0


COMMANDS = [plan, deploy]
