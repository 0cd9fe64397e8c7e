"""The `pipeframe` command line: thin click commands over `pipeframe.Project`, one module per command group.

Output is for people by default and JSON with `--json`; exit codes: 0 ok, 1 errors, 2 usage/changes.
This package builds the group; the command modules import only `pipeframe.cli.common`, and nothing imports the CLI.
"""

from __future__ import annotations

import click

from pipeframe.cli import compile, data, deploy, dev, imports, local, query, serve, sinks, tokens, views


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


for _group in (compile, deploy, query, data, imports, sinks, views, dev, serve, local, tokens):
    for _command in _group.COMMANDS:
        main.add_command(_command)
