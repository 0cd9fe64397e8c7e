"""Ingest and view commands as a user runs them: counts printed, bad rows quarantined, status, clear errors."""

from __future__ import annotations

import json
import shutil

from tests.e2e.test_deploy_cli import ROOT, pipeframe


def test_append_a_mixed_file_then_status(tmp_path):
    project = tmp_path / "shop"
    shutil.copytree(ROOT / "example_project", project, ignore=shutil.ignore_patterns(".pipeframe"))
    assert pipeframe("deploy", "--yes", cwd=project).returncode == 0
    # The sample docs/quickstart.md appends: 3 good rows, a timestamp that is not one and a line that is not JSON.
    mixed = project / "samples" / "more_sales.jsonl"
    assert "samples/more_sales.jsonl" in (ROOT / "docs" / "quickstart.md").read_text(encoding="utf-8")

    appended = pipeframe("append", "sales", str(mixed), cwd=project)
    out = appended.stdout + appended.stderr
    assert appended.returncode == 0, out
    assert "sales: 3 row(s) accepted" in out and "2 quarantined → sales_quarantine" in out
    assert 'column `ts`: cannot read "soon" as TIMESTAMP' in out and "line is not valid JSON" in out
    assert "sales_by_hour: applied" in out and "Traceback" not in out

    status = pipeframe("status", "sales_by_hour", "--json", cwd=project)
    [view] = json.loads(status.stdout)
    assert view["status"] == "active" and view["lag_versions"] == 0 and view["rows"] > 0
    assert view["applied_version"] == view["source_version"]

    missing = pipeframe("append", "nope", str(mixed), cwd=project)
    assert missing.returncode == 1 and "PF702" in missing.stdout and "Traceback" not in missing.stderr
    not_a_view = pipeframe("pause", "sales", cwd=project)
    assert not_a_view.returncode == 1 and "`sales` is a landing datasource" in not_a_view.stdout
