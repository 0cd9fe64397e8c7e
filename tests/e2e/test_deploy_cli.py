"""`pipeframe deploy` as CI runs it: exit codes of --check, --json output and the history."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def pipeframe(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in __import__("os").environ.items() if not k.startswith("PIPEFRAME_")}
    return subprocess.run([sys.executable, "-m", "pipeframe.cli", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=600, check=False, env=env, stdin=subprocess.DEVNULL)


def test_deploy_check_then_deploy_then_nothing_to_do(tmp_path):
    project = tmp_path / "starter"
    shutil.copytree(ROOT / "pipeframe" / "templates", project)
    check = pipeframe("deploy", "--check", "--json", cwd=project)
    assert check.returncode == 2, check.stdout + check.stderr
    planned = json.loads(check.stdout)
    assert planned["has_changes"] and {c["action"] for c in planned["changes"]} == {"create"}

    applied = pipeframe("deploy", "--yes", cwd=project)
    assert applied.returncode == 0, applied.stdout + applied.stderr
    assert "✓ deployed" in applied.stdout and "Traceback" not in applied.stdout + applied.stderr

    # A local warehouse's plan and history are read from its files: no JVM starts (the project's spark.log is
    # written by an embedded Spark start only).
    log = project / ".pipeframe" / "spark.log"
    assert log.exists()
    log.unlink()
    again = pipeframe("deploy", "--check", cwd=project)
    assert again.returncode == 0, again.stdout + again.stderr
    assert "No changes" in again.stdout

    history = pipeframe("deploy", "--history", "--json", cwd=project)
    assert history.returncode == 0
    [record] = json.loads(history.stdout)
    assert record["result"] == "succeeded" and record["changes"] == len(planned["changes"])
    assert not log.exists()
