"""`pipeframe import DATASOURCE`: the new files of an S3 import datasource's bucket imported once (a thin client of
`pipeframe.connectors.s3.import_files` over a `Project`)."""

from __future__ import annotations

import json

import click

from pipeframe.cli.common import ENV_OPTION, PROJECT_OPTION, load_project, print_refreshes, run


@click.command(name="import")
@click.argument("datasource")
@PROJECT_OPTION
@ENV_OPTION
@click.option("--no-views", "no_views", is_flag=True,
              help="Only commit the rows; a running `pipeframe serve` or `refresh --follow` (or the next "
                   "`refresh`) applies them to the views.")
@click.option("--json", "as_json", is_flag=True, help="Print what was imported as JSON.")
def import_(datasource: str, project_dir: str, env: str | None, no_views: bool, as_json: bool) -> None:
    """Import the new files of DATASOURCE's bucket (IMPORT_BUCKET_URI), each once.

    Every file matching the URI's glob that the imports ledger does not list yet is appended (CSV, NDJSON or
    Parquet by its extension, `.gz` compressed or not), its rows in one commit with the file's name and ETag; a
    file that cannot be read is quarantined whole (`<datasource>_quarantine`, its name in `source`). Run it again
    and only files added since are taken. Works for `@on-demand` datasources and `@auto` ones alike (`serve`
    imports the latter by itself). Exit status 1 if a file failed or a view did.

    \b
    Examples:
      pipeframe import daily_exports -p example_project
      pipeframe import daily_exports --json
    """

    def body() -> int:
        from pipeframe.connectors.s3 import import_files

        report = import_files(load_project(project_dir, env), datasource, views=not no_views)
        failed = report.count("failed") + report.count("retry")
        if as_json:
            click.echo(json.dumps(report.to_json(), indent=2))
            return 1 if failed else 0
        code = 0
        for outcome in report.files:
            if outcome.status == "ingested":
                line = f"  {outcome.uri}: {outcome.rows} row(s)"
                if outcome.quarantined:
                    line += ", " + click.style(f"{outcome.quarantined} quarantined", fg="yellow")
                click.echo(line + (" (landed before; recorded now)" if outcome.replayed else
                                   f" (version {outcome.version})"))
            else:
                what = "failed, quarantined whole" if outcome.status == "failed" else "failed, tried again next time"
                click.echo(f"  {outcome.uri}: " + click.style(what, fg="red") + f": {outcome.error}")
        for uri, why in report.ignored:
            click.echo(f"  {uri}: skipped ({why})")
        summary = (f"{report.datasource}: {report.count('ingested')} file(s) imported from {report.uri} "
                   f"({report.rows} row(s), {report.quarantined} quarantined), {report.count('failed')} failed, "
                   f"{report.already} already imported, {len(report.ignored)} skipped")
        if report.count("retry"):
            summary += f", {report.count('retry')} to try again"
        click.echo(summary)
        landed = [f for f in report.files if f.status == "ingested" and f.views]
        if landed:  # each file's append refreshed the views; the last one says where they are now
            code = print_refreshes(landed[-1].views)
        return max(code, 1 if failed else 0)

    run(body)


COMMANDS = [import_]
