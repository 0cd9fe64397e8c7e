"""The development commands of the `pipeframe` CLI: `init` (a starter project), `test` (endpoint tests
against a temporary warehouse) and `dev` (a local copy that follows the files). Thin clients of
`pipeframe.Project`, `pipeframe.testing` and `pipeframe.dev`."""

from __future__ import annotations

import json
import re
import shutil
import time
from pathlib import Path

import click

from pipeframe.cli.common import ENV_OPTION, PROJECT_OPTION, load_project, run
from pipeframe.errors import PipeframeError

TEMPLATES = Path(__file__).parent.parent / "templates"

# Written by pipeframe into a project folder (and by Python next to the package); never part of a template.
NOT_TEMPLATE = {".pipeframe", "__pycache__"}


@click.command()
@click.option("--host", default="127.0.0.1", show_default=True, help="Address the HTTP API listens on.")
@click.option("--port", type=click.IntRange(0, 65535), default=7181, show_default=True,
              help="Port of the HTTP API (0: any free one).")
@PROJECT_OPTION
@click.option("--env", "env", default="dev", show_default=True, envvar="PIPEFRAME_ENV",
              help="Environment from pipeframe.yaml to build into.")
def dev(host: str, port: int, project_dir: str, env: str) -> None:
    """Work on the project against a local copy that follows the files.

    Deploys the project into the `dev` environment, loads fixtures/*, serves the HTTP API (as `pipeframe
    serve`), then watches the folder: every save recompiles, prints errors without exiting (the last good
    version keeps serving), applies the plan and serves the new version. A saved fixture file replaces its
    datasource's rows. One warm Spark session serves the whole run; Ctrl-C stops it.

    \b
    Example:
      pipeframe dev -p example_project
      curl 'http://127.0.0.1:7181/v0/pipes/top_products.json?limit=3'
    """
    from pipeframe.dev import DevLoop

    run(lambda: DevLoop(project_dir, env=env, echo=click.echo, style=click.style).run(host, port), long_lived=True)


@click.command()
@click.argument("names", nargs=-1, metavar="[NAMES]...")
@click.option("--update", is_flag=True,
              help="Rewrite each failing case's expectation (rows or HTTP status) with the current answer.")
@PROJECT_OPTION
@ENV_OPTION
def test(names: tuple[str, ...], update: bool, project_dir: str, env: str | None) -> None:
    """Run the endpoint tests in tests/*.yaml against a temporary warehouse built from fixtures/.

    The project is deployed into a fresh warehouse, every fixtures/<datasource>.* file is appended (so the
    materialized views fill as they would in production), and each case calls its endpoint with its
    `params`: the rows must equal `expected_result` (NDJSON, in order) or the error must have
    `expected_http_status`. The warehouse is removed afterwards; the project's own is never touched.
    NAMES select test files (`top_products`) or single cases (`top_products.top_3`).
    Exit status: 0 when every case passes, 1 otherwise.

    \b
    Examples:
      pipeframe test -p example_project
      pipeframe test top_products.top_3 --update
    """

    def body() -> int:
        from pipeframe.testing import run_tests

        start = time.perf_counter()
        current_file: list[str] = []

        def on_step(step: str) -> None:
            if step == "deploy":
                click.echo("Building a temporary warehouse: deploying, then appending fixtures/ ...")

        def on_result(result) -> None:
            if current_file != [result.case.file]:
                current_file[:] = [result.case.file]
                click.secho(result.case.file, bold=True)
            _print_result(result)

        report = run_tests(load_project(project_dir, env), names, update, on_result, on_step)
        if not report.results:
            click.echo("No endpoint tests found: add tests/<endpoint>.yaml (see `pipeframe init`).")
            return 0
        for rel in report.updated_files:
            click.echo(f"rewrote {rel}")
        _print_summary(report, time.perf_counter() - start)
        return 0 if report.ok else 1

    run(body)


def _print_result(result) -> None:
    timing = click.style(f"({result.elapsed:.2f}s)", dim=True)
    if result.updated:
        click.echo(f"  {click.style('↻', fg='yellow', bold=True)} {result.case.name} {timing}  "
                   f"expectation updated:")
    elif result.passed:
        click.echo(f"  {click.style('✓', fg='green', bold=True)} {result.case.name} {timing}")
        return
    else:
        click.echo(f"  {click.style('✗', fg='red', bold=True)} {result.case.name} {timing}  "
                   f"{result.case.location}")
    for line in result.failure.splitlines():
        color = {"+": "green", "-": "red", "@": "cyan"}.get(line[:1]) if not line.startswith(("+++", "---")) \
            else None
        click.echo("      " + click.style(line, fg=color))


def _print_summary(report, elapsed: float) -> None:
    failed = len(report.failed)
    updated = sum(1 for r in report.results if r.updated)
    passed = len(report.results) - failed - updated
    parts = [f"{passed} passed"] + ([f"{updated} updated"] if updated else []) + ([f"{failed} failed"] if failed else [])
    click.echo("")
    click.secho(f"{'✗' if failed else '✓'} {', '.join(parts)} in {elapsed:.1f}s "
                f"(warehouse built in {report.build_seconds:.1f}s)", fg="red" if failed else "green", bold=True)
    if failed and not updated:
        click.echo("    Rerun with --update to accept the current answers as the expectations.")


@click.command()
@click.argument("directory", default=".", type=click.Path(file_okay=False))
def init(directory: str) -> None:
    """Create a working starter project in DIRECTORY (default: the current folder).

    It holds a landing datasource with sample fixtures, a materialized view, an endpoint and its tests.
    Existing files are never overwritten: init refuses and names them.

    \b
    Example:
      pipeframe init shop && cd shop && pipeframe check
    """

    def body() -> int:
        target = Path(directory)
        created = copy_starter(target)
        click.secho(f"✓ Created a pipeframe project in {target}/ ({len(created)} files)", fg="green", bold=True)
        cd = [] if target.resolve() == Path.cwd().resolve() else [("cd " + directory, "")]
        steps = [*cd,
                 ("pipeframe check", "compile every file (no Spark needed)"),
                 ("pipeframe deploy --yes", "create the Delta tables under .pipeframe/warehouse"),
                 ("pipeframe append --fixtures", "load fixtures/; the materialized view follows"),
                 ("pipeframe endpoint top_events --param limit=3", "call the endpoint"),
                 ("pipeframe test", "run tests/*.yaml against a temporary warehouse")]
        click.echo("\nNext steps:")
        for command, why in steps:
            click.echo(f"  {command:<48}{click.style('# ' + why, dim=True)}" if why else f"  {command}")
        return 0

    run(body)


def copy_starter(target: Path) -> list[Path]:
    """Copy the starter project into `target` (created if missing); existing files are a PF007 error."""
    files = sorted(p for p in TEMPLATES.rglob("*")
                   if p.is_file() and not NOT_TEMPLATE.intersection(p.relative_to(TEMPLATES).parts))
    if not files:
        raise PipeframeError("PF999", f"The starter project is missing from the installed package ({TEMPLATES}).",
                             "Reinstall pipeframe; its templates/ folder is package data.")
    if target.exists() and not target.is_dir():
        raise PipeframeError("PF007", f"{target} is a file, not a folder.", "Pass a folder to create the project in.")
    clashes = [str(p.relative_to(TEMPLATES)) for p in files if (target / p.relative_to(TEMPLATES)).exists()]
    if clashes:
        shown = ", ".join(clashes[:5]) + (f" and {len(clashes) - 5} more" if len(clashes) > 5 else "")
        raise PipeframeError("PF007", f"{target}/ already has {shown}; `pipeframe init` never overwrites files.",
                             "Run it in a new or empty folder (`pipeframe init my_project`), or move those files "
                             "away first.")
    name = target.resolve().name or "starter"
    created = []
    for source in files:
        rel = source.relative_to(TEMPLATES)
        destination = target / rel
        destination.parent.mkdir(parents=True, exist_ok=True)
        if str(rel) in NAMED:
            destination.write_text(named(source.read_text(encoding="utf-8"), str(rel), name), encoding="utf-8")
        else:
            shutil.copyfile(source, destination)
        created.append(destination)
    return created


# Starter files that name the project: `starter` in them becomes the folder's name.
NAMED = ("pipeframe.yaml", "README.md")


def named(text: str, rel: str, name: str) -> str:
    """A starter file's text with the project named `name` (the folder `pipeframe init` creates it in)."""
    if rel == "README.md":
        return re.sub(r"^# starter\b", lambda _: f"# {name}", text, count=1)
    # A plain name stays bare; anything YAML could read otherwise (`yes`, `1.0`, `a: b`, `#x`) is quoted.
    plain = re.fullmatch(r"[A-Za-z_][A-Za-z0-9_.-]*", name) and name.lower() not in YAML_WORDS
    value = name if plain else json.dumps(name)
    text = re.sub(r"^name: starter$", lambda _: f"name: {value}", text, count=1, flags=re.MULTILINE)
    return text.replace("s3a://my-bucket/starter", f"s3a://my-bucket/{name}")


YAML_WORDS = {"y", "yes", "n", "no", "true", "false", "on", "off", "null", "nan", "inf"}


COMMANDS = [dev, test, init]
