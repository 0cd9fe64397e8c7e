"""The example project's whole life through Spark Connect, on the warm local engine that `pipeframe local start`
runs from pyspark's own jars (a SparkConnectServer with Delta Lake on 127.0.0.1).

One Connect server for the module, started and stopped through the CLI (with a kill fallback so nothing leaks).
Every command runs as a CLI subprocess, a thin Connect client: none of them starts a JVM of its own (the project's
`.pipeframe/spark.log`, written only by an embedded start, never appears). Answers are compared with values
computed in Python from the rows appended (tests/cluster/shop.py).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from pipeframe.engine.localserver import free_port
from pipeframe.testing import same
from tests.cluster.shop import (
    UNITS_COLUMN,
    event_sales,
    expected_top_products,
    expected_units,
    fixture_sales,
    sample_sales,
)

pytestmark = pytest.mark.connect

ROOT = Path(__file__).resolve().parents[2]
SERVER_CLASS = "org.apache.spark.sql.connect.service.SparkConnectServer"


def clean_env(**extra: str) -> dict[str, str]:
    """This environment without pipeframe's settings (but pre-downloaded jars) and without SPARK_REMOTE."""
    env = {k: v for k, v in os.environ.items()
           if not (k.startswith("PIPEFRAME_") and k != "PIPEFRAME_SPARK_JARS") and k != "SPARK_REMOTE"}
    return {**env, **extra}


def pipeframe(*args: str, cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    done = subprocess.run([sys.executable, "-m", "pipeframe.cli", *args], cwd=cwd, env=env or clean_env(),
                          stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=900, check=False)
    assert "Traceback" not in done.stdout + done.stderr, done.stdout + done.stderr
    return done


def ok(*args: str, cwd: Path, env: dict[str, str] | None = None) -> str:
    done = pipeframe(*args, cwd=cwd, env=env)
    assert done.returncode == 0, f"pipeframe {' '.join(args)}: {done.stdout}{done.stderr}"
    return done.stdout



def is_connect_server(pid: int) -> bool:
    try:
        return SERVER_CLASS in Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
    except OSError:
        return False


@pytest.fixture(scope="module")
def engine(tmp_path_factory):
    """A copy of the example project with its local engine up: (project folder, `local start --json` answer)."""
    project = tmp_path_factory.mktemp("connect") / "shop"
    shutil.copytree(ROOT / "example_project", project, ignore=shutil.ignore_patterns(".pipeframe"))
    started = pipeframe("local", "start", "--json", cwd=project)
    server = json.loads(started.stdout) if started.returncode == 0 else None
    try:
        assert server is not None, started.stdout + started.stderr
        yield project, server
    finally:
        stopped = pipeframe("local", "stop", cwd=project)
        pid = server["pid"] if server else None
        if pid and is_connect_server(pid):  # the fallback: nothing outlives the module
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGKILL)
        assert stopped.returncode == 0, stopped.stdout + stopped.stderr


def top_products(project: Path) -> list[dict]:
    out = ok("endpoint", "top_products", "--param", "limit=100", "--format", "json", cwd=project)
    return json.loads(out)["data"]


def test_status_and_a_second_start(engine):
    project, server = engine
    assert server["url"] == f"sc://127.0.0.1:{server['port']}" and is_connect_server(server["pid"])
    # The server's JVM starts on the embedded driver's class archive (it maps it, or writes it when it stops).
    command = Path(f"/proc/{server['pid']}/cmdline").read_bytes().decode().split("\0")
    assert any(a.startswith(("-XX:SharedArchiveFile=", "-XX:ArchiveClassesAtExit=")) for a in command), command
    status = json.loads(ok("local", "status", "--json", cwd=project))
    assert status["running"] is True and status["url"] == server["url"]
    assert server["url"] in ok("local", "status", cwd=project)
    again = pipeframe("local", "start", cwd=project)
    assert again.returncode == 1 and "PF511" in again.stdout and server["url"] in again.stdout


def test_the_example_projects_life_through_spark_connect(engine):
    project, _ = engine
    rows = fixture_sales(project)
    assert "no errors" in ok("check", str(project), cwd=project)
    assert "deployed 16 change(s)" in ok("deploy", "--yes", cwd=project)
    loaded = ok("append", "--fixtures", cwd=project)
    assert f"sales: {len(rows)} row(s) accepted" in loaded and "sales_by_hour: applied" in loaded
    assert same(expected_top_products(rows), top_products(project))

    # rows landed without their views, then `refresh` applies them
    more = project / "more_sales.ndjson"
    more.write_text("".join(json.dumps(r) + "\n" for r in sample_sales()))
    ok("append", "sales", str(more), "--no-views", cwd=project)
    lag = {v["name"]: v["lag_versions"] for v in json.loads(ok("status", "--json", cwd=project))}
    assert lag["sales_by_hour"] == 1, lag
    rows += sample_sales()
    assert "sales_by_hour: applied" in ok("refresh", cwd=project)
    assert same(expected_top_products(rows), top_products(project))

    assert "sales_by_category: rebuilt" in ok("populate", "sales_by_category", "--truncate", cwd=project)
    assert "optimized sales_by_hour" in ok("optimize", "sales_by_hour", cwd=project)

    # a change to the view's query forces a rebuild (of it and of the cascading sales_by_day)
    pipe = project / "pipes" / "sales_by_hour.pipe"
    pipe.write_text(pipe.read_text().replace("max(amount) AS max_ticket",
                                             f"max(amount) AS max_ticket,\n        sum(quantity) AS {UNITS_COLUMN}"))
    rebuilt = ok("deploy", "--yes", cwd=project)
    assert "rebuild view sales_by_hour" in rebuilt and "rebuild view sales_by_day" in rebuilt, rebuilt
    units = json.loads(ok("query", f"SELECT product, sum({UNITS_COLUMN}) AS units FROM sales_by_hour "
                          "GROUP BY product", "--format", "json", cwd=project))["data"]
    assert same(expected_units(rows), {r["product"]: r["units"] for r in units})

    # `serve`: events through the HTTP API, visible in the endpoint once ?wait=true answers
    port = free_port()
    server = subprocess.Popen([sys.executable, "-m", "pipeframe.cli", "serve", "--port", str(port)], cwd=project,
                              env=clean_env(), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
    base = f"http://127.0.0.1:{port}"
    try:
        while True:
            try:
                httpx.get(f"{base}/v0/pipes", timeout=60)
                break
            except httpx.TransportError:
                assert server.poll() is None, server.communicate()
                time.sleep(0.5)
        events = event_sales()
        posted = httpx.post(f"{base}/v0/events", params={"name": "sales", "wait": "true"},
                            content="".join(json.dumps(e) + "\n" for e in events), timeout=300)
        assert posted.status_code == 200 and posted.json()["successful_rows"] == len(events), posted.text
        rows += events
        # after refresh, populate, optimize, the rebuild and the events: the endpoint answers as computed
        answer = httpx.get(f"{base}/v0/pipes/top_products.json", params={"limit": 100}, timeout=120)
        assert answer.status_code == 200 and same(expected_top_products(rows), answer.json()["data"]), answer.text
        views = httpx.get(f"{base}/v0/views", timeout=120)
        assert views.status_code == 200, views.text
        assert {v["status"] for v in views.json()["views"]} == {"active"}, views.text
    finally:
        server.terminate()
        out, err = server.communicate(timeout=120)
    assert server.returncode == 0 and "stopped" in out, out + err
    assert "Traceback" not in out + err
    # every command was a thin client: no embedded Spark started for this project
    assert not (project / ".pipeframe" / "spark.log").exists()


def test_the_prod_environment_on_connect_ignores_launch_settings(engine, tmp_path):
    """`--env prod` deep-merges the top level's spark.driver.memory with the prod block's remote: under Connect the
    server owns it (said once on stderr, never an error), and the session settings (the prod block's shuffle
    partitions, the time zone) still apply. The copy asks for another driver memory than the engine was launched with,
    so the setting really reaches the server and is refused there."""
    _, server = engine
    project = tmp_path / "shop"
    shutil.copytree(ROOT / "example_project", project, ignore=shutil.ignore_patterns(".pipeframe"))
    config = project / "pipeframe.yaml"
    assert "spark.driver.memory: 2g" in config.read_text()
    config.write_text(config.read_text().replace("spark.driver.memory: 2g", "spark.driver.memory: 3g"))
    env = clean_env(PIPEFRAME_SPARK_REMOTE=server["url"], PIPEFRAME_WAREHOUSE=str(tmp_path / "prod"))
    done = pipeframe("query", 'SELECT "${spark.sql.shuffle.partitions}" AS partitions, current_timezone() AS tz',
                     "--env", "prod", "--format", "json", cwd=project, env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    assert json.loads(done.stdout)["data"] == [{"partitions": "64", "tz": "UTC"}]
    assert "owns spark.driver.memory" in done.stderr and server["url"] in done.stderr, done.stderr
