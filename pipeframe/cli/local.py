"""`pipeframe local start|stop|status`: the warm local engine, a Spark Connect server with Delta Lake running in the
background for one project (like Tinybird's `tb local start`). Thin clients of `pipeframe.Project`."""

from __future__ import annotations

import json
import time

import click

from pipeframe.cli.common import PROJECT_OPTION, load_project, run


@click.group()
def local() -> None:
    """Run a local Spark engine in the background, so commands answer without starting Spark.

    While `pipeframe local start` runs it, every command of the project (`status`, `endpoint`, `append`, `serve`,
    ...) connects to it through Spark Connect instead of starting its own JVM; when it is stopped, commands start
    Spark as before. spark.remote or a non-local spark.master, when set, still win. Its log and pid file are under
    the project's .pipeframe/ (local.log, local.json).

    \b
    Examples:
      pipeframe local start -p example_project
      pipeframe status -p example_project     # answered by the local engine
      pipeframe local status -p example_project
      pipeframe local stop -p example_project
    """


@local.command()
@PROJECT_OPTION
@click.option("--port", default=None, type=click.IntRange(1, 65535),
              help="Port of the Spark Connect server on 127.0.0.1 (default: a free one).")
@click.option("--json", "as_json", is_flag=True, help="Print the server as JSON.")
def start(project_dir: str, port: int | None, as_json: bool) -> None:
    """Start the project's local engine in the background and wait until it answers."""

    def body() -> int:
        project = load_project(project_dir, None)
        if not as_json:
            click.echo(f"Starting the local engine of {project.config.name} (Spark Connect with Delta Lake) ...")
        began = time.monotonic()
        server = project.local_start(port)
        if as_json:
            click.echo(json.dumps(server.to_json()))
        else:
            click.secho(f"Local engine up at {server.url} (pid {server.pid}, {time.monotonic() - began:.1f} s); "
                        "commands of this project now use it.", fg="green")
            click.echo(f"  log: {server.log}")
            click.echo("  stop it with `pipeframe local stop`")
        return 0

    run(body)


@local.command()
@PROJECT_OPTION
def stop(project_dir: str) -> None:
    """Stop the project's local engine (commands start their own Spark again)."""

    def body() -> int:
        server = load_project(project_dir, None).local_stop()
        if server is None:
            click.echo("The local engine is not running.")
        else:
            click.secho(f"Stopped the local engine at {server.url} (pid {server.pid}).", fg="green")
        return 0

    run(body)


@local.command()
@PROJECT_OPTION
@click.option("--json", "as_json", is_flag=True, help="Print the state as JSON.")
def status(project_dir: str, as_json: bool) -> None:
    """Say whether the project's local engine is up, and its URL (`--json`: `running` true or false)."""

    def body() -> int:
        server = load_project(project_dir, None).local_status()
        if as_json:
            click.echo(json.dumps({"running": True, **server.to_json()} if server else {"running": False}))
        elif server is None:
            click.echo("The local engine is not running (commands start their own Spark); "
                       "start it with `pipeframe local start`.")
        else:
            up = time.time() - server.started_at
            click.echo(f"The local engine is running at {server.url} (pid {server.pid}, up {up:.0f} s); "
                       "commands of this project use it.")
            click.echo(f"  log: {server.log}")
        return 0

    run(body)


COMMANDS = [local]
