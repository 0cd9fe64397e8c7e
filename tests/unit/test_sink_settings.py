"""Sink pipes without a JVM or a bucket: `TYPE sink` with Tinybird's EXPORT_* settings as `pipeframe check` judges them
(file:line, did-you-mean, the file template against the pipe's columns), the files a run plans from its rows and its
time (names, extensions, `{N}` splits, the run's time: the same run names the same files), and `pipeframe sink run`'s
refusals before Spark starts."""

from __future__ import annotations

import gzip
import json
from datetime import UTC, date, datetime

import pyarrow as pa
import pytest
from click.testing import CliRunner

from pipeframe.cli import main
from pipeframe.connectors.export import file_template
from pipeframe.connectors.sink import SinkScheduler, encoded, planned, sink_settings
from pipeframe.errors import PipeframeError
from pipeframe.project import Project
from tests.conftest import write_project

S3 = "TYPE s3\nS3_REGION us-east-1\nS3_ENDPOINT http://127.0.0.1:1\n"
SALES = "SCHEMA >\n    `day` Date,\n    `product` String,\n    `amount` Float64\n"
SINK = """\
NODE totals
SQL >
    SELECT day, product, sum(amount) AS revenue FROM sales GROUP BY day, product

TYPE sink
EXPORT_CONNECTION_NAME "landing"
EXPORT_BUCKET_URI "s3://exports/sales/"
EXPORT_FILE_TEMPLATE "sales_{day, '%Y%m%d'}"
EXPORT_FORMAT "ndjson"
EXPORT_COMPRESSION "gz"
EXPORT_SCHEDULE "0 * * * *"
"""


def project_of(tmp_path, sink: str = SINK, **more: str) -> Project:
    root = write_project(tmp_path / "proj", {"connections/landing.connection": S3, "datasources/sales.datasource": SALES,
                                             "pipes/export_sales.pipe": sink, **more})
    return Project(root, environ={})


def checked(tmp_path, sink: str, **more: str) -> list[str]:
    found = sorted(project_of(tmp_path, sink, **more).check().diagnostics, key=lambda d: (d.location, d.message))
    return [f"{d.location} {d.code}{'' if d.is_error else ' (warning)'} {d.message} | {d.hint}" for d in found]


def test_a_sink_pipe_checks_clean_and_keeps_its_settings(tmp_path):
    project = project_of(tmp_path)
    assert project.check().diagnostics == ()  # no PF110 any more: the EXPORT_* lines are acted on
    pipe = project.compiled.pipes["export_sales"]
    assert pipe.type == "sink" and pipe.target is None
    settings = sink_settings(project, "export_sales")
    assert (settings.bucket, settings.prefix, settings.format, settings.compression, settings.strategy,
            settings.schedule) == ("exports", "sales/", "ndjson", "gzip", "new", "0 * * * *")
    assert SinkScheduler().schedules(project) == {"export_sales": "0 * * * *"}
    assert SinkScheduler().schedules(project_of(tmp_path, SINK.replace('"0 * * * *"', "@on-demand"))) == {}


def test_check_reports_each_bad_setting_at_its_line(tmp_path):
    bad = SINK.replace('"ndjson"', '"csvv"').replace("EXPORT_COMPRESSION", "EXPORT_COMPRESION").replace(
        '"0 * * * *"', '"0 * * *"').replace("{day, '%Y%m%d'}", "{dya}_{prodct")
    assert checked(tmp_path, bad) == [
        ("pipes/export_sales.pipe:8:1 PF116 EXPORT_FILE_TEMPLATE `sales_{dya}_{prodct` does not parse: a brace in "
        "`_{prodct` is not closed. | Write names with `{column}`, `{column, '%Y-%m-%d'}`, `{8}` (eight files) or "
        "`{run_time, '%Y%m%d'}` (the run's time, UTC) between literal text."),
        ("pipes/export_sales.pipe:9:1 PF116 EXPORT_FORMAT `csvv` is not one of csv, ndjson, parquet. | Write one of: "
        "csv, ndjson, parquet."),
        ("pipes/export_sales.pipe:10:1 PF116 `EXPORT_COMPRESION` is not a setting of an S3 sink pipe `export_sales`. | "
        "Did you mean `EXPORT_COMPRESSION`?"),
        ("pipes/export_sales.pipe:11:1 PF116 EXPORT_SCHEDULE `0 * * *` is not a cron expression. | Use five cron "
        "fields in UTC (minute hour day month weekday), e.g. `0 * * * *` for every hour, or @on-demand.")]
    unknown = SINK.replace("{day, '%Y%m%d'}", "{dya}_{8}_{run_time, '%H'}")
    assert checked(tmp_path, unknown) == [
        ("pipes/export_sales.pipe:8:1 PF116 EXPORT_FILE_TEMPLATE names `{dya}`, which is no column of pipe "
        "`export_sales`. | Did you mean `day`?")]
    missing = SINK.replace('EXPORT_BUCKET_URI "s3://exports/sales/"\n', "").replace(
        '"s3://exports', "").replace("EXPORT_FILE_TEMPLATE", "EXPORT_FILE_TEMPLATE") \
        .replace("EXPORT_FORMAT \"ndjson\"", "EXPORT_FORMAT ndjson\nEXPORT_FORMAT csv")
    assert checked(tmp_path, missing) == [
        ("pipes/export_sales.pipe:5:1 PF116 An S3 sink pipe `export_sales` needs EXPORT_BUCKET_URI. | Add a "
        "`EXPORT_BUCKET_URI <value>` line."),
        "pipes/export_sales.pipe:9:1 PF116 EXPORT_FORMAT appears twice. | Keep one of them."]
    glob = SINK.replace("s3://exports/sales/", "s3://exports/sales/*.csv")
    assert checked(tmp_path, glob) == [
        ("pipes/export_sales.pipe:7:1 PF116 EXPORT_BUCKET_URI `s3://exports/sales/*.csv` is not an S3 bucket and "
        "prefix. | Write `s3://bucket/prefix/` (s3a:// too; no wildcards).")]


def test_check_judges_the_connection_and_where_export_lines_stand(tmp_path):
    assert checked(tmp_path, SINK.replace('"landing"', "landin")) == [
        ("pipes/export_sales.pipe:6:1 PF116 (warning) Sink pipe `export_sales` exports through connection `landin`, "
        "which no .connection file defines: it is deployed but not exported. | Did you mean `landing`?")]
    kafka = {"connections/landing.connection": "TYPE kafka\nKAFKA_BOOTSTRAP_SERVERS 127.0.0.1:9092\n"}
    assert checked(tmp_path, SINK, **kafka)[:2] == [
        ("pipes/export_sales.pipe:5:1 PF116 A Kafka sink pipe `export_sales` needs EXPORT_KAFKA_TOPIC. | Add a "
        "`EXPORT_KAFKA_TOPIC <value>` line."),
        ("pipes/export_sales.pipe:7:1 PF116 EXPORT_BUCKET_URI is a setting of S3 sinks, but pipe `export_sales` "
        "exports to Kafka. | Name a `TYPE s3` connection in EXPORT_CONNECTION_NAME, or remove the line.")]
    topic = "NODE n\nSQL >\n    SELECT product FROM sales\n\nTYPE sink\nEXPORT_CONNECTION_NAME landing\n" \
            "EXPORT_KAFKA_TOPIC sales_out\n"
    assert checked(tmp_path, topic, **kafka) == []  # a Kafka sink: exported through a transactional producer
    endpoint = SINK.replace("TYPE sink", "TYPE endpoint")
    assert checked(tmp_path, endpoint)[0] == (
        "pipes/export_sales.pipe:6:1 PF116 EXPORT_CONNECTION_NAME is a sink's setting, but pipe `export_sales` is "
        "not TYPE sink. | Add `TYPE sink` after the node's SQL, or remove the EXPORT_* lines.")


def test_a_run_plans_its_files_from_its_rows_and_its_time(tmp_path):
    settings = sink_settings(project_of(tmp_path), "export_sales")
    rows = pa.table({"day": [date(2024, 6, 1), date(2024, 6, 2), date(2024, 6, 1)], "product": ["a", "b", "c"],
                     "revenue": [1.0, 2.0, 3.0]})
    at = datetime(2024, 6, 3, 1, 0, tzinfo=UTC)
    files = planned(settings, rows, at)
    assert [(key, t.column("product").to_pylist()) for key, t in files] == [
        ("sales/sales_20240601_20240603010000.ndjson.gz", ["a", "c"]),
        ("sales/sales_20240602_20240603010000.ndjson.gz", ["b"])]
    assert [key for key, _ in planned(settings, rows, at)] == [key for key, _ in files]  # the same run: same keys
    body = gzip.decompress(encoded(files[0][1], settings)).decode()
    assert [json.loads(line) for line in body.splitlines()] == [
        {"day": "2024-06-01", "product": "a", "revenue": 1.0}, {"day": "2024-06-01", "product": "c", "revenue": 3.0}]
    split = sink_settings(project_of(tmp_path, SINK.replace("{day, '%Y%m%d'}", "part_{2}").replace(
        '"ndjson"', "csv").replace('"gz"', "none").replace("EXPORT_SCHEDULE", "EXPORT_WRITE_STRATEGY truncate\n"
                                                                           "EXPORT_SCHEDULE")), "export_sales")
    assert [(key, t.num_rows) for key, t in planned(split, rows, at)] == [
        ("sales/sales_part_0.csv", 1), ("sales/sales_part_1.csv", 2)]  # truncate: the run's time is not in the names
    assert encoded(rows.slice(0, 1), split).decode().splitlines() == ['"day","product","revenue"', '2024-06-01,"a",1']
    assert [(key, t.num_rows) for key, t in planned(split, rows.slice(0, 0), at)] == [("sales/sales_part_0.csv", 0)]
    with pytest.raises(PipeframeError) as err:  # a column check could not see is refused when the run has the rows
        planned(settings, rows.drop_columns(["day"]), at)
    assert err.value.diagnostics[0].code == "PF116" and "names {day, '%Y%m%d'}" in err.value.diagnostics[0].message
    stamped = file_template("{run_time, '%Y/%m/%d'}/all.parquet")
    assert stamped.render({}, 0, at) == "2024/06/03/all.parquet"


def test_sink_run_refuses_before_spark_starts(tmp_path):
    root = project_of(tmp_path).root
    runner = CliRunner()
    result = runner.invoke(main, ["sink", "run", "export_sale", "-p", str(root)])
    assert result.exit_code == 1 and "PF801" in result.output and "Did you mean `export_sales`?" in result.output
    result = runner.invoke(main, ["sink", "run", "export_sales", "--run-time", "yesterday", "-p", str(root)])
    assert result.exit_code == 1 and "PF119" in result.output and "ISO 8601" in result.output
    (root / "connections" / "landing.connection").unlink()  # a warning at check; running it is refused
    result = runner.invoke(main, ["sink", "run", "export_sales", "-p", str(root)])
    assert result.exit_code == 1 and "PF117" in result.output and "Sink pipe `export_sales` has no S3 connection" \
        in result.output and "Traceback" not in result.output


@pytest.mark.parametrize("template", ["{}", "a{b c}", "{0}", "{1}_{2}"])
def test_templates_that_do_not_parse(template):
    with pytest.raises(ValueError):
        file_template(template)


def test_rows_whose_values_format_alike_share_one_file_and_values_stay_inside_the_prefix(tmp_path):
    """`{day, '%Y%m%d'}` over timestamps: the rows of one day are one file (grouped by the raw timestamps, each
    would overwrite the one before under the same key, keeping one row); a value's `/` or `..` never leaves the
    prefix."""
    from pipeframe.connectors.export import key_safe

    settings = sink_settings(project_of(tmp_path), "export_sales")
    at = datetime(2024, 6, 3, 1, 0, tzinfo=UTC)
    hours = [datetime(2024, 6, 1, h, tzinfo=UTC) for h in (1, 2, 23)] + [datetime(2024, 6, 2, 0, tzinfo=UTC)]
    rows = pa.table({"day": hours, "product": ["a", "b", "c", "d"], "revenue": [1.0, 2.0, 3.0, 4.0]})
    assert [(key, t.column("product").to_pylist()) for key, t in planned(settings, rows, at)] == [
        ("sales/sales_20240601_20240603010000.ndjson.gz", ["a", "b", "c"]),
        ("sales/sales_20240602_20240603010000.ndjson.gz", ["d"])]
    by_product = sink_settings(project_of(tmp_path, SINK.replace("{day, '%Y%m%d'}", "{product}")), "export_sales")
    odd = pa.table({"day": [date(2024, 6, 1)] * 4, "product": ["../../etc/x", "a/b", "", "ok-1.5"],
                    "revenue": [1.0, 2.0, 3.0, 4.0]})
    keys = [key for key, _ in planned(by_product, odd, at)]
    assert keys == ["sales/sales_______etc_x_20240603010000.ndjson.gz", "sales/sales_a_b_20240603010000.ndjson.gz",
                    "sales/sales___20240603010000.ndjson.gz", "sales/sales_ok-1.5_20240603010000.ndjson.gz"]
    assert all(key.startswith("sales/") and key.count("/") == 1 and ".." not in key for key in keys)
    assert [key_safe(v) for v in ("..", ".", "x\ny", "é")] == ["__", ".", "x_y", "_"]
