"""S3 imports without a JVM or a bucket: a datasource's `IMPORT_*` settings as `pipeframe check` judges them (file:line,
did-you-mean), the bucket URI's glob, a file's format from its name, and `pipeframe import`'s refusals before Spark
starts (an unknown datasource, one without import settings, a bucket that cannot be reached)."""

from __future__ import annotations

import socket

import pytest
from click.testing import CliRunner

from pipeframe.cli import main
from pipeframe.connectors.s3 import bucket_glob, file_format, import_datasources, schedule_of
from pipeframe.errors import PipeframeError
from pipeframe.project import Project
from tests.conftest import write_project

S3 = """\
TYPE s3
S3_REGION us-east-1
S3_ACCESS_KEY {{ tb_secret("S3_KEY", "key") }}
S3_SECRET {{ tb_secret("S3_SECRET", "secret") }}
S3_ENDPOINT {{ tb_secret("S3_ENDPOINT", "http://127.0.0.1:1") }}
"""
SALES = """\
SCHEMA >
    `id` Int64,
    `product` String

IMPORT_CONNECTION_NAME landing
IMPORT_BUCKET_URI s3://exports/sales/*.csv
IMPORT_SCHEDULE @on-demand
"""
KAFKA = "TYPE kafka\nKAFKA_BOOTSTRAP_SERVERS 127.0.0.1:9092\n"


def checked(tmp_path, files: dict[str, str]) -> list[str]:
    root = write_project(tmp_path / "proj", files)
    return sorted(f"{d.location} {d.code}{'' if d.is_error else ' (warning)'} {d.message} | {d.hint}"
                  for d in Project(root, environ={}).check().diagnostics)


def test_an_s3_import_datasource_checks_clean_and_keeps_its_settings(tmp_path):
    root = write_project(tmp_path / "proj", {"connections/landing.connection": S3, "datasources/sales.datasource": SALES})
    project = Project(root, environ={})
    assert project.check().diagnostics == ()
    ds = project.compiled.resources.datasources[0]
    assert [(s.keyword, s.value, s.location.line) for s in ds.connector] == [
        ("IMPORT_CONNECTION_NAME", "landing", 5), ("IMPORT_BUCKET_URI", "s3://exports/sales/*.csv", 6),
        ("IMPORT_SCHEDULE", "@on-demand", 7)]
    assert [c.name for c in ds.columns] == ["id", "product"]  # no Kafka metadata columns
    assert schedule_of(ds) == "@on-demand"
    assert list(import_datasources(project.compiled.resources)) == ["sales"]
    assert import_datasources(project.compiled.resources, schedule="@auto") == {}
    # Without IMPORT_SCHEDULE a datasource is imported by serve (@auto); quoted values read as Tinybird reads them.
    write_project(root, {"datasources/sales.datasource": SALES.replace("IMPORT_SCHEDULE @on-demand\n", "").replace(
        "s3://exports/sales/*.csv", '"s3a://exports/sales/**"') + "IMPORT_FROM_TIMESTAMP '2024-01-31T00:00:00Z'\n"})
    project = Project(root, environ={})
    assert project.check().diagnostics == ()
    assert schedule_of(project.compiled.resources.datasources[0]) == "@auto"


@pytest.mark.parametrize("datasource, connection, expected", [
    (SALES.replace("IMPORT_CONNECTION_NAME landing", "IMPORT_CONNECTION_NAME landin"), S3,
     [("datasources/sales.datasource:5:1 PF113 (warning) `sales` reads from connection `landin`, which no .connection "
      "file defines: it is deployed but not imported. | Did you mean `landing`?")]),
    (SALES, KAFKA,
     [("datasources/sales.datasource:5:1 PF113 `sales` imports files from connection `landing`, which is TYPE kafka. "
      "| Name a `TYPE s3` connection.")]),
    (SALES.replace("IMPORT_BUCKET_URI s3://exports/sales/*.csv\n", ""), S3,
     [("datasources/sales.datasource:1:1 PF113 An S3 import datasource `sales` needs IMPORT_BUCKET_URI. | Add a "
      "`IMPORT_BUCKET_URI <value>` line.")]),
    (SALES.replace("s3://exports/sales/*.csv", "gs://exports/sales/*.csv"), S3,
     [("datasources/sales.datasource:6:1 PF113 IMPORT_BUCKET_URI `gs://exports/sales/*.csv` is not an S3 URI. | Write "
      "`s3://bucket/prefix/*.csv` (s3a:// too; `*`, `**` and `?` match in the key).")]),
    (SALES.replace("@on-demand", "@daily"), S3,
     [("datasources/sales.datasource:7:1 PF113 IMPORT_SCHEDULE `@daily` is not one of @auto, @on-demand. | Write one "
      "of: @auto, @on-demand.")]),
    (SALES + "IMPORT_BUCKET_URL s3://x/y\n", S3,
     [("datasources/sales.datasource:8:1 PF113 `IMPORT_BUCKET_URL` is not a setting of an S3 import datasource `sales`. "
      "| Did you mean `IMPORT_BUCKET_URI`?")]),
    (SALES + "IMPORT_STRATEGY replace\n", S3,
     [("datasources/sales.datasource:8:1 PF113 IMPORT_STRATEGY `replace` is not one of append. | Write one of: "
      "append.")]),
    (SALES + "IMPORT_FROM_TIMESTAMP yesterday\n", S3,
     [("datasources/sales.datasource:8:1 PF113 IMPORT_FROM_TIMESTAMP `yesterday` is not a timestamp. | Write an ISO "
      "8601 time, e.g. `2024-01-31T00:00:00Z` (UTC unless it says).")]),
    (SALES + "KAFKA_TOPIC clicks\n", S3,
     [("datasources/sales.datasource:5:1 PF113 `sales` has both Kafka (KAFKA_*) and S3 import (IMPORT_*) settings. | "
      "A datasource reads from one connector: keep the settings of one of them.")]),
])
def test_import_settings_are_checked_at_their_line(tmp_path, datasource, connection, expected):
    assert checked(tmp_path, {"connections/landing.connection": connection,
                              "datasources/sales.datasource": datasource}) == expected


def test_another_import_service_is_a_warning_and_not_an_s3_import(tmp_path):
    found = checked(tmp_path, {"datasources/bq.datasource": (
        "SCHEMA >\n    `x` INT\nIMPORT_SERVICE bigquery\nIMPORT_CONNECTION_NAME bq\nIMPORT_SCHEDULE '5 * * * *'\n")})
    assert [line.split(" | ")[0] for line in found] == [
        ("datasources/bq.datasource:3:1 PF110 (warning) The Import connector is not supported yet; `IMPORT_SERVICE` is "
        "ignored."),
        ("datasources/bq.datasource:4:1 PF110 (warning) The Import connector is not supported yet; "
        "`IMPORT_CONNECTION_NAME` is ignored."),
        ("datasources/bq.datasource:5:1 PF110 (warning) The Import connector is not supported yet; `IMPORT_SCHEDULE` is "
        "ignored.")]


@pytest.mark.parametrize("uri, keys, others", [
    ("s3://b/sales/*.csv", ["sales/a.csv", "sales/.csv"], ["sales/x/a.csv", "sales/a.csv.gz", "other/a.csv"]),
    ("s3://b/sales/**/*.csv", ["sales/a.csv", "sales/2024/01/a.csv"], ["sales/a.ndjson", "salesa.csv"]),
    ("s3://b/sales/**", ["sales/a.csv", "sales/x/y.parquet"], ["other/a.csv"]),
    ("s3a://b/day-??.ndjson.gz", ["day-01.ndjson.gz"], ["day-1.ndjson.gz", "x/day-01.ndjson.gz"]),
    ("s3://b/exports/", ["exports/a.csv", "exports/x/b.csv"], ["export/a.csv"]),  # no wildcard: the prefix
    ("s3://b", ["a.csv", "x/y.csv"], []),
    ("s3://b/a+b (1).csv", ["a+b (1).csv"], ["aab (1).csv"]),  # regex characters are literal
])
def test_the_bucket_uri_is_a_glob_over_keys(uri, keys, others):
    glob = bucket_glob(uri)
    assert glob.bucket == "b"
    assert all(k.startswith(glob.prefix) for k in keys)
    assert [k for k in keys if not glob.matches(k)] == []
    assert [k for k in others if glob.matches(k)] == []


def test_a_files_format_comes_from_its_extension():
    assert [file_format(k) for k in ("a.csv", "a.CSV.gz", "a.ndjson", "a.jsonl.gz", "a.json", "a.parquet",
                                     "a.parquet.gz", "a.txt", "a.gz", "csv")] == [
        "csv", "csv", "ndjson", "ndjson", "ndjson", "parquet", "parquet", None, None, None]


def imported(root, *args: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, ["import", *args, "-p", str(root)], env={"PIPEFRAME_NO_CACHE": "1"})
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    return result.exit_code, result.output


def test_pipeframe_import_refuses_what_it_cannot_import_before_spark_starts(tmp_path):
    root = write_project(tmp_path / "proj", {
        "connections/landing.connection": S3, "datasources/sales.datasource": SALES,
        "datasources/events.datasource": "SCHEMA >\n    `x` INT\n",
        "datasources/orphan.datasource": SALES.replace("IMPORT_CONNECTION_NAME landing", "IMPORT_CONNECTION_NAME gone")})
    code, out = imported(root, "sale")
    assert code == 1 and "PF702 error: No datasource `sale` in the project." in out and "Did you mean `sales`?" in out
    code, out = imported(root, "events")
    assert code == 1 and "PF114 error: `events` is not an S3 import datasource" in out and "pipeframe append" in out
    code, out = imported(root, "orphan")
    assert code == 1 and "orphan.datasource:5:1 PF114 error: `orphan` imports from connection `gone`, which no " \
        ".connection file defines." in out
    # A bucket that cannot be reached (nothing listens on the endpoint): the error names it; no traceback.
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    write_project(root, {".env": f"S3_ENDPOINT=http://127.0.0.1:{port}\n"})
    code, out = imported(root, "sales")
    assert code == 1 and "PF115 error: S3 import `sales`: cannot list s3://exports/sales/:" in out, out
    assert "Traceback" not in out and "S3_ENDPOINT" in out


def test_an_unset_secret_without_default_stops_the_import_with_pf112(tmp_path):
    root = write_project(tmp_path / "proj", {"connections/landing.connection": S3.replace(
        '"S3_KEY", "key"', '"S3_KEY"'), "datasources/sales.datasource": SALES})
    with pytest.raises(PipeframeError) as raised:
        from pipeframe.connectors.s3 import import_files

        import_files(Project(root, environ={}), "sales")
    assert raised.value.code == "PF112" and "S3_KEY" in str(raised.value)
