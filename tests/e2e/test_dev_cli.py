"""`pipeframe dev` as a user runs it: a subprocess serving the starter project while its files are edited.

Each save must reach the HTTP answer (an endpoint edit, then a materialized pipe edit), a syntax error must be
printed while the last good version keeps serving, and the process must never exit.
"""

from __future__ import annotations

import os
import queue
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from pipeframe.engine.localserver import free_port
from tests.e2e.test_deploy_cli import ROOT

TEMPLATES = ROOT / "pipeframe" / "templates"
WAIT_S = 300  # generous for a loaded machine; never asserted as a speed



class DevProcess:
    """`pipeframe dev` in a subprocess, its output collected line by line."""

    def __init__(self, project: Path, port: int) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith("PIPEFRAME_")}
        env["PYTHONUNBUFFERED"] = "1"
        self.process = subprocess.Popen(
            [sys.executable, "-m", "pipeframe.cli", "dev", "--port", str(port), "-p", str(project)],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, text=True, env=env)
        self.lines: queue.Queue[str] = queue.Queue()
        self.output: list[str] = []
        threading.Thread(target=self._read, daemon=True).start()
        self.url = f"http://127.0.0.1:{port}/v0/pipes/top_events.json"

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.put(line.rstrip("\n"))

    def drain(self) -> str:
        while not self.lines.empty():
            self.output.append(self.lines.get())
        return "\n".join(self.output)

    def alive(self) -> bool:
        return self.process.poll() is None

    def wait_for(self, what: str, condition: Callable[[], bool]) -> None:
        deadline = time.monotonic() + WAIT_S
        while time.monotonic() < deadline:
            assert self.alive(), f"pipeframe dev exited ({self.process.returncode}) waiting for {what}:\n{self.drain()}"
            if condition():
                return
            time.sleep(0.2)
        pytest.fail(f"timed out waiting for {what}:\n{self.drain()}")

    def answer(self) -> dict | None:
        try:
            response = httpx.get(self.url, params={"limit": 50}, timeout=30)
        except httpx.HTTPError:
            return None
        return response.json() if response.status_code == 200 else None

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.process.kill()


def edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text, f"{old!r} not in {path}"
    path.write_text(text.replace(old, new))


def test_dev_follows_every_save_and_survives_errors(tmp_path):
    project = tmp_path / "starter"
    shutil.copytree(TEMPLATES, project)
    endpoint, view = project / "pipes/top_events.pipe", project / "pipes/events_per_hour.pipe"
    dev = DevProcess(project, free_port())
    try:
        dev.wait_for("the first answer", lambda: (dev.answer() or {}).get("rows", 0) > 0)
        first = dev.answer()
        assert first is not None
        events = {row["event"] for row in first["data"]}
        top = first["data"][0]["event"]

        # 1. An endpoint's SQL: the answer gains a column.
        edit(endpoint, "        event,\n", "        event,\n        'v2' AS revision,\n")
        dev.wait_for("the endpoint edit", lambda: all(r.get("revision") == "v2" for r in (dev.answer() or {}).get(
            "data", [{}])))

        # 2. A materialized pipe: the view is rebuilt without the top event, the endpoint over it follows.
        edit(view, "    FROM events\n", f"    FROM events\n    WHERE event != '{top}'\n")
        dev.wait_for("the view edit", lambda: {r["event"] for r in (dev.answer() or {}).get("data", [])}
                     == events - {top})

        # 3. A syntax error: printed with its place, the last good version keeps serving.
        edit(endpoint, "    SELECT\n", "    SELEC\n")
        dev.wait_for("the error to be printed", lambda: "pipes/top_events.pipe" in dev.drain()
                     and "PF303" in dev.drain())
        answer = dev.answer()
        assert answer is not None and {r["event"] for r in answer["data"]} == events - {top}

        # 4. Fixed: served again, with the new text.
        edit(endpoint, "    SELEC\n", "    SELECT\n")
        edit(endpoint, "'v2' AS revision", "'v3' AS revision")
        dev.wait_for("the fix", lambda: all(r.get("revision") == "v3" for r in (dev.answer() or {}).get(
            "data", [{}])))
        assert dev.alive()
        assert "Traceback" not in dev.drain()
    finally:
        dev.stop()
