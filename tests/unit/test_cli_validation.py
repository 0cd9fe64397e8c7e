"""Every CLI mistake that can be found without Spark is reported without Spark: no JVM start (20–35 s) before a
typo in a name, a missing file, a bad option or parameter, or a folder that is no project.

The commands run through the real CLI (click's CliRunner) in one fresh Python process, one after another; after
each, the process reports whether anything tried to import pyspark (or py4j, delta) and whether pipeframe's session
module holds a session. No session can start without pyspark, so a command that reached Spark before failing is
caught; the import is refused, so such a command fails at once instead of starting a JVM or serving forever.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

RUNNER = r"""
import json, sys

attempts = []


class Tripwire:
    # Records (and refuses) any import of Spark's packages: a command that would start Spark fails at once instead
    # of starting a JVM, and the cases after it still run in a process without pyspark.
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("pyspark", "py4j", "delta"):
            attempts.append(name)
            raise ImportError(f"tripwire: {name} imported")
        return None


sys.meta_path.insert(0, Tripwire())
from click.testing import CliRunner
from pipeframe.cli import main

results = []
for args in json.loads(sys.stdin.read()):
    before = len(attempts)
    result = CliRunner().invoke(main, args)
    session = sys.modules.get("pipeframe.engine.session")
    results.append({"args": args, "exit": result.exit_code, "output": result.output,
                    "exception": None if result.exception is None or isinstance(result.exception, SystemExit)
                    else repr(result.exception),
                    "pyspark": len(attempts) > before or any(m.split(".")[0] == "pyspark" for m in sys.modules),
                    "session": session is not None and session._live is not None})
print(json.dumps(results))
"""

# (name, args with {shop} {empty} {bare} {broken} {file} placeholders, exit status, texts the output must hold)
CASES = [
    ("deploy_in_a_folder_that_is_no_project", ["deploy", "--yes", "-p", "{empty}"], 1,
     ["PF006", "{empty} is not a pipeframe project", "-p <project dir>", "pipeframe init"]),
    ("deploy_in_a_folder_with_only_pipeframe_yaml", ["deploy", "--yes", "-p", "{bare}"], 1,
     ["PF006", "no .datasource or .pipe files", "--allow-destructive"]),
    ("plan_in_a_folder_that_is_no_project", ["plan", "-p", "{empty}"], 1, ["PF006"]),
    ("history_in_a_folder_that_is_no_project", ["deploy", "--history", "-p", "{empty}"], 1, ["PF006"]),
    ("query_in_a_folder_that_is_no_project", ["query", "SELECT 1", "-p", "{empty}"], 1, ["PF006"]),
    ("deploy_with_errors_in_the_files", ["deploy", "--yes", "-p", "{broken}"], 1, ["PF102", "fix:"]),
    ("deploy_history_with_check", ["deploy", "--history", "--check", "-p", "{shop}"], 2, ["--history"]),
    ("deploy_unknown_env", ["deploy", "--env", "nope", "-p", "{shop}"], 1, ["PF003"]),
    ("query_syntax_error", ["query", "SELEC * FROM sales", "-p", "{shop}"], 1, ["PF303"]),
    ("query_negative_limit", ["query", "SELECT 1", "--limit", "-1", "-p", "{shop}"], 2, ["--limit"]),
    ("endpoint_unknown_pipe", ["endpoint", "top_product", "-p", "{shop}"], 1, ["PF801", "Did you mean `top_products`?"]),
    ("endpoint_of_a_materialized_pipe", ["endpoint", "sales_by_hour", "-p", "{shop}"], 1, ["PF802"]),
    ("endpoint_bad_parameter", ["endpoint", "top_products", "--param", "limit=abc", "-p", "{shop}"], 1,
     ["PF202", "limit"]),
    ("endpoint_malformed_parameter", ["endpoint", "top_products", "--param", "limit", "-p", "{shop}"], 1, ["PF805"]),
    ("endpoint_bad_format", ["endpoint", "top_products", "--format", "xml", "-p", "{shop}"], 2, ["--format"]),
    ("append_missing_file", ["append", "sales", "{shop}/nope.ndjson", "-p", "{shop}"], 1,
     ["PF711", "nope.ndjson", "does not exist"]),
    ("append_unknown_format", ["append", "sales", "{file}", "-p", "{shop}"], 1, ["PF710", "--format"]),
    ("append_bad_format_option", ["append", "sales", "{file}", "--format", "xml", "-p", "{shop}"], 2, ["--format"]),
    ("append_unknown_datasource", ["append", "sale", "{shop}/fixtures/sales.ndjson", "-p", "{shop}"], 1, ["PF702"]),
    ("append_to_a_view", ["append", "sales_by_hour", "{shop}/fixtures/sales.ndjson", "-p", "{shop}"], 1, ["PF716"]),
    ("append_without_file", ["append", "sales", "-p", "{shop}"], 2, ["FILE"]),
    ("append_fixtures_with_a_name", ["append", "--fixtures", "sales", "-p", "{shop}"], 2, ["--fixtures"]),
    ("replace_missing_file", ["replace", "sales", "{shop}/nope.csv", "-p", "{shop}"], 1, ["PF711"]),
    ("truncate_unknown_datasource", ["truncate", "nope", "--yes", "-p", "{shop}"], 1, ["PF702"]),
    ("delete_unknown_datasource", ["delete", "nope", "--where", "true", "--yes", "-p", "{shop}"], 1, ["PF702"]),
    ("copy_run_unknown_pipe", ["copy", "run", "daily_snapshots", "-p", "{shop}"], 1,
     ["PF801", "Did you mean `daily_snapshot`?"]),
    ("copy_run_an_endpoint", ["copy", "run", "top_products", "-p", "{shop}"], 1, ["PF802"]),
    ("copy_run_malformed_parameter", ["copy", "run", "daily_snapshot", "--param", "x", "-p", "{shop}"], 1, ["PF805"]),
    ("copy_run_bad_mode", ["copy", "run", "daily_snapshot", "--mode", "merge", "-p", "{shop}"], 2, ["--mode"]),
    ("refresh_unknown_view", ["refresh", "nope", "-p", "{shop}"], 1, ["PF701"]),
    ("populate_unknown_view", ["populate", "nope", "-p", "{shop}"], 1, ["PF701"]),
    ("populate_chunk_by_unknown_column", ["populate", "sales_by_hour", "--truncate", "--chunk-by", "nope",
                                          "-p", "{shop}"], 1, ["PF705", "Columns:"]),
    ("populate_chunk_rows_without_chunk_by", ["populate", "sales_by_hour", "--chunk-rows", "5", "-p", "{shop}"], 2,
     ["--chunk-by"]),
    ("optimize_unknown_name", ["optimize", "sales_by_hours", "-p", "{shop}"], 1,
     ["PF702", "Did you mean `sales_by_hour`?"]),
    ("status_unknown_view", ["status", "nope", "-p", "{shop}"], 1, ["PF701"]),
    ("pause_a_datasource", ["pause", "sales", "-p", "{shop}"], 1, ["PF701", "landing datasource"]),
    ("resume_unknown_view", ["resume", "nope", "-p", "{shop}"], 1, ["PF701"]),
    ("recover_unknown_view", ["recover", "nope", "-p", "{shop}"], 1, ["PF701"]),
    ("serve_errors_in_the_files", ["serve", "--port", "0", "-p", "{broken}"], 1, ["PF102"]),
    ("serve_bad_port", ["serve", "--port", "70000", "-p", "{shop}"], 2, ["--port"]),
    ("dev_bad_port", ["dev", "--port", "70000", "-p", "{shop}"], 2, ["--port"]),
    ("test_unknown_name", ["test", "top_product", "-p", "{shop}"], 1, ["PF825"]),
    ("missing_project_folder", ["status", "-p", "{empty}/nope"], 1, ["PF004"]),
]


@pytest.fixture(scope="module")
def folders(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    base = tmp_path_factory.mktemp("cli_validation")
    shop = base / "shop"
    shutil.copytree(ROOT / "example_project", shop, ignore=shutil.ignore_patterns(".pipeframe"))
    empty, bare, broken = base / "empty", base / "bare", base / "broken"
    empty.mkdir()
    bare.mkdir()
    (bare / "pipeframe.yaml").write_text("name: bare\n", encoding="utf-8")
    (broken / "datasources").mkdir(parents=True)
    (broken / "datasources" / "events.datasource").write_text("SCHEMAS >\n    `ts` TIMESTAMP\n", encoding="utf-8")
    (base / "rows.txt").write_text('{"ts": "2024-05-01 00:00:00"}\n', encoding="utf-8")
    return {"shop": shop, "empty": empty, "bare": bare, "broken": broken, "file": base / "rows.txt"}


def fill(text: str, folders: dict[str, Path]) -> str:
    for key, path in folders.items():
        text = text.replace("{" + key + "}", str(path))
    return text


@pytest.fixture(scope="module")
def results(folders: dict[str, Path]) -> dict[str, dict]:
    """Every case run by the CLI in one fresh process (no JVM was ever started in it), by case name."""
    commands = [[fill(arg, folders) for arg in args] for _, args, _, _ in CASES]
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIPEFRAME_")}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    done = subprocess.run([sys.executable, "-c", RUNNER], input=json.dumps(commands), capture_output=True, text=True,
                          timeout=600, check=False, env=env, cwd=folders["empty"])
    assert done.returncode == 0, done.stdout + done.stderr
    return {name: result for (name, *_), result in zip(CASES, json.loads(done.stdout), strict=True)}


@pytest.mark.parametrize(("name", "args", "status", "texts"), CASES, ids=[case[0] for case in CASES])
def test_the_mistake_is_reported_before_spark_starts(results, folders, name, args, status, texts):
    result = results[name]
    out = result["output"]
    assert result["exception"] is None and "Traceback" not in out, out
    assert result["exit"] == status, out
    for text in texts:
        assert fill(text, folders) in out, out
    assert not result["pyspark"] and not result["session"], f"{name} reached Spark before failing:\n{out}"


def test_a_refused_deploy_creates_nothing_in_the_folder(results, folders):
    assert results["deploy_in_a_folder_that_is_no_project"]["exit"] == 1
    assert results["deploy_in_a_folder_with_only_pipeframe_yaml"]["exit"] == 1
    assert list(folders["empty"].iterdir()) == []
    assert sorted(p.name for p in folders["bare"].iterdir()) == ["pipeframe.yaml"]


@pytest.mark.parametrize("args", [["check", "{shop}"], ["check", "{broken}"], ["sql", "top_products", "-p", "{shop}"]],
                         ids=["check_ok", "check_errors", "sql"])
def test_output_into_a_closed_pipe_ends_quietly(folders, args):
    """`pipeframe check … | head -1`: the reader is gone before pipeframe writes; no PF999, no traceback."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIPEFRAME_")}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    process = subprocess.Popen([sys.executable, "-m", "pipeframe", *[fill(a, folders) for a in args]],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, cwd=folders["empty"])
    process.stdout.close()  # the reader stops before the first line
    try:
        _, err = process.communicate(timeout=300)
    finally:
        process.kill()
    stderr = err.decode()
    assert "PF999" not in stderr and "Traceback" not in stderr and "BrokenPipe" not in stderr, stderr
    assert process.returncode in (0, 1), stderr
