"""The CLI as a user runs it: a subprocess, its exit code and what it prints."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "example_project"


def pipeframe(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "pipeframe.cli", *args], cwd=cwd, capture_output=True, text=True, check=False,
                          timeout=120)


def assert_no_traceback(result: subprocess.CompletedProcess[str]) -> None:
    assert "Traceback" not in result.stdout + result.stderr


def test_check_example_project_summarises_resources_and_verdicts():
    result = pipeframe("check", str(EXAMPLE))
    assert result.returncode == 0, result.stdout + result.stderr
    out = result.stdout
    assert "12 pipes (5 materialized, 6 endpoints, 1 copy)" in out
    assert "sales_by_hour: sales → sales_by_hour" in out and "accepted with rewrite" in out
    assert "sales_by_day: sales_by_hour → sales_by_day" in out
    assert "avg_ticket: avg(…) → avg state" in out
    assert "✓ no errors" in out


def test_check_json_lists_views_and_endpoint_parameters():
    result = pipeframe("check", str(EXAMPLE), "--json")
    assert result.returncode == 0
    report = json.loads(result.stdout)
    assert report["ok"] is True and report["errors"] == 0
    verdicts = {v["pipe"]: v["verdict"] for v in report["views"]}
    assert verdicts["customers_by_country"] == "accepted"
    assert verdicts["latency_by_path"] == "rewritten"
    params = {p["name"]: p for p in report["endpoints"]["top_products"]}
    assert params["start"]["type"] == "DateTime" and params["limit"]["default"] == 10


def test_check_reports_every_error_with_location_and_exits_1(tmp_path):
    (tmp_path / "datasources").mkdir()
    (tmp_path / "pipes").mkdir()
    (tmp_path / "datasources/events.datasource").write_text("SCHEMA >\n    `ts` DateTime,\n    `v` Strng\n")
    (tmp_path / "pipes/bad.pipe").write_text(
        "NODE n\nSQL >\n    SELECT ts, rand() AS r FROM events\n    ORDER BY ts\nTYPE materialized\nDATASOURCE t\n")
    (tmp_path / "pipes/typo.pipe").write_text("NODE n\nSQL >\n    SELECT * FROM evnts\nTYPE endpoint\n")
    result = pipeframe("check", str(tmp_path))
    assert result.returncode == 1
    assert_no_traceback(result)
    out = result.stdout
    assert "datasources/events.datasource:3:5 PF109" in out and "String" in out
    assert "pipes/bad.pipe:3:" in out and "PF407" in out
    assert "pipes/bad.pipe:4:5 PF402" in out
    assert "pipes/typo.pipe:3:" in out and "PF301" in out and "Did you mean `events`?" in out
    assert "fix:" in out


def test_check_never_imports_pyspark():
    probe = ("import sys; from pipeframe.project import Project; r = Project(sys.argv[1]).check(); "
             "assert r.ok; print(any(m.split('.')[0] == 'pyspark' for m in sys.modules))")
    result = subprocess.run([sys.executable, "-c", probe, str(EXAMPLE)], capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "False"


def test_sql_prints_compiled_statement_and_state_sql():
    result = pipeframe("sql", "sales_by_hour", "-p", str(EXAMPLE))
    assert result.returncode == 0, result.stderr
    assert "HLL_SKETCH_AGG" in result.stdout and "__pf_batch" in result.stdout
    node = pipeframe("sql", "top_products.filtered", "-p", str(EXAMPLE))
    assert node.returncode == 0 and "FROM sales_by_hour" in node.stdout


def test_sql_unknown_pipe_suggests_a_name():
    result = pipeframe("sql", "top_product", "-p", str(EXAMPLE))
    assert result.returncode == 1
    assert_no_traceback(result)
    assert "PF301" in result.stdout and "top_products" in result.stdout


def test_graph_formats():
    mermaid = pipeframe("graph", "-p", str(EXAMPLE))
    assert mermaid.returncode == 0 and mermaid.stdout.startswith("flowchart LR")
    assert "datasource_sales --> pipe_sales_by_hour" in mermaid.stdout
    assert "pipe_sales_by_hour --> datasource_sales_by_hour" in mermaid.stdout
    assert "datasource_sales_by_day --> pipe_sales_timeseries" in mermaid.stdout  # read only in a template branch
    dot = pipeframe("graph", "--format", "dot", "-p", str(EXAMPLE))
    assert dot.returncode == 0 and dot.stdout.startswith("digraph pipeframe")


def test_missing_project_folder_is_a_clear_error(tmp_path):
    result = pipeframe("check", str(tmp_path / "nope"))
    assert result.returncode == 1
    assert_no_traceback(result)
    assert "PF004" in result.stdout


@pytest.mark.parametrize("command", ["check", "sql", "graph"])
def test_help_has_an_example(command):
    result = pipeframe(command, "--help")
    assert result.returncode == 0 and "Example" in result.stdout
