"""`pipeframe serve` as a user runs it: refused before a deploy (as `pipeframe run` is), then serving the example project until terminated."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import httpx

from pipeframe.engine.localserver import free_port
from tests.e2e.test_deploy_cli import ROOT, pipeframe


def test_serve_needs_a_deploy_then_answers_the_example_endpoints(tmp_path):
    project = tmp_path / "shop"
    shutil.copytree(ROOT / "example_project", project, ignore=shutil.ignore_patterns(".pipeframe"))
    for command in (("serve", "--port", str(free_port())), ("run",)):
        refused = pipeframe(*command, cwd=project)
        assert refused.returncode == 1 and "PF818" in refused.stdout and "pipeframe deploy" in refused.stdout
        assert "Traceback" not in refused.stdout + refused.stderr
    for step in (("deploy", "--yes"), ("append", "--fixtures")):
        done = pipeframe(*step, cwd=project)
        assert done.returncode == 0, done.stdout + done.stderr

    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIPEFRAME_")}
    server = subprocess.Popen([sys.executable, "-m", "pipeframe.cli", "serve", "--port", str(port)], cwd=project,
                              env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True)
    url = f"http://127.0.0.1:{port}/v0/pipes/top_products.json"
    try:
        deadline = time.monotonic() + 600
        while True:
            try:
                answer = httpx.get(url, params={"limit": 3}, timeout=120)
                break
            except httpx.TransportError:
                assert server.poll() is None, server.communicate()
                assert time.monotonic() < deadline, "the server never answered"
                time.sleep(1)
        assert answer.status_code == 200, answer.text
        body = answer.json()
        assert body["rows"] == 3 and [m["name"] for m in body["meta"]] == ["product", "orders", "revenue", "currency"]
        assert {row["currency"] for row in body["data"]} == {"EUR"}
        # docs/http.md's first example: a filtered request and the first row it answers.
        request, first_row = documented_example()
        documented = httpx.get(f"http://127.0.0.1:{port}{request}", timeout=120)
        assert documented.status_code == 200 and documented.json()["data"][0] == first_row, documented.text
        bad = httpx.get(url, params={"limit": "three"}, timeout=120)
        assert bad.status_code == 400 and bad.json()["parameter"] == "limit"
        # ingest.spark_nice (10 by default): every thread of its Spark JVM yields the CPU to the server's own.
        assert jvm_niceness(server.pid) == {os.getpriority(os.PRIO_PROCESS, server.pid) + 10}
    finally:
        server.terminate()
        out, err = server.communicate(timeout=120)
    assert server.returncode == 0, out + err
    assert f"Serving shop on http://127.0.0.1:{port}" in out and "stopped" in out
    assert "Traceback" not in out + err


def jvm_niceness(pid: int) -> set[int]:
    """The niceness of every thread of the java process `pid` started (its Spark JVM)."""
    [java] = [int(d) for d in os.listdir("/proc") if d.isdigit() and _stat(int(d))[:2] == ("java", pid)]
    return {int(_stat(java, int(t))[2]) for t in os.listdir(f"/proc/{java}/task")}


def _stat(pid: int, thread: int | None = None) -> tuple:
    """(command, parent pid, niceness) of a process or one of its threads, from /proc (empty when it is gone)."""
    try:
        text = Path(f"/proc/{pid}/task/{thread}/stat" if thread else f"/proc/{pid}/stat").read_text()
    except OSError:
        return ()
    command, fields = text[text.index("(") + 1:text.rindex(")")], text[text.rindex(")") + 2:].split()
    return command, int(fields[1]), int(fields[16])


def documented_example() -> tuple[str, dict]:
    """The first `curl` of a .json endpoint in docs/http.md (path and query) and the first row of its answer there."""
    text = (ROOT / "docs" / "http.md").read_text(encoding="utf-8")
    found = re.search(r"\$ curl 'http://127\.0\.0\.1:7181(/v0/pipes/\w+\.json\?[^']*)'\n.*?\"data\": \[(\{.*?\})",
                      text, re.DOTALL)
    assert found, "docs/http.md has no endpoint example"
    return found.group(1), json.loads(found.group(2))
