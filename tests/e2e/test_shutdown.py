"""Ctrl-C (SIGINT) on `pipeframe dev` and `pipeframe serve` as a user sends it: the process exits with 0, every
request in flight gets its real outcome (rows committed are answered as committed; a refused request landed
nothing, never a dropped connection with rows landed), and a request arriving while it stops gets 503 PF819.
Three processes over one starter project: dev (idle; it also deploys the `dev` environment the serves use), serve
idle, serve with a wait=true POST and a 20,000-row POST in flight. Exit times are printed, never asserted."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from deltalake import DeltaTable

from pipeframe.engine.localserver import free_port
from tests.e2e.test_dev_cli import TEMPLATES, WAIT_S, DevProcess

ROWS = 20_000


@pytest.fixture(scope="module")
def project(tmp_path_factory) -> Path:
    """The starter project, deployed into its `dev` environment by `pipeframe dev`, which is then stopped with
    Ctrl-C while idle (case d)."""
    root = tmp_path_factory.mktemp("shutdown") / "starter"
    shutil.copytree(TEMPLATES, root)
    dev = DevProcess(root, free_port())
    try:
        dev.wait_for("dev serving the starter", lambda: dev.answer() is not None)
        seconds, code = interrupt(dev.process)
    finally:
        dev.stop()
    out = dev.drain()
    print(f"pipeframe dev, idle: exited {code} {seconds:.1f} s after SIGINT")
    assert code == 0, out
    assert "stopping" in out and "stopped" in out and "Traceback" not in out, out
    return root


def interrupt(process: subprocess.Popen) -> tuple[float, int]:
    """SIGINT, as Ctrl-C sends it; (seconds until the process exited, its return code)."""
    start = time.monotonic()
    process.send_signal(signal.SIGINT)
    code = process.wait(timeout=WAIT_S)
    return time.monotonic() - start, code


@contextlib.contextmanager
def serving(root: Path) -> Iterator[tuple[subprocess.Popen, str]]:
    """`pipeframe serve` of the project's `dev` environment on 127.0.0.1; killed on the way out if a failed
    assertion left it running."""
    process, url = serve(root)
    try:
        yield process, url
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()


def serve(root: Path) -> tuple[subprocess.Popen, str]:
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIPEFRAME_")}
    process = subprocess.Popen([sys.executable, "-m", "pipeframe.cli", "serve", "--env", "dev", "--port", str(port),
                                "-p", str(root)], env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + WAIT_S
    while True:
        try:
            if httpx.get(f"{url}/v0/ingest", timeout=60).status_code == 200:
                return process, url
        except httpx.TransportError:
            pass
        if process.poll() is not None or time.monotonic() > deadline:
            process.kill()
            pytest.fail(f"serve never answered:\n{process.communicate()[0]}")
        time.sleep(0.2)  # polling for the server to listen, not settling a race


def landed(root: Path) -> int:
    """Rows in the `events` table, read without a JVM (deltalake)."""
    logs = [p.parent for p in (root / ".pipeframe" / "dev").rglob("_delta_log") if "/tables/events/" in str(p)]
    assert len(logs) == 1, logs
    return DeltaTable(str(logs[0])).to_pyarrow_dataset().count_rows()


def events(count: int, start: int) -> bytes:
    return "".join(json.dumps({"ts": "2024-05-20 08:00:00", "user_id": f"u-{start + i}", "event": "shutdown"}) + "\n"
                   for i in range(count)).encode()


def test_serve_idle_exits_cleanly_on_ctrl_c(project):
    """Case c: nothing in flight."""
    with serving(project) as (process, _url):
        seconds, code = interrupt(process)
        out = process.communicate()[0]
    print(f"pipeframe serve, idle: exited {code} {seconds:.1f} s after SIGINT")
    assert code == 0 and "stopped" in out and "Traceback" not in out, out


def test_serve_answers_requests_in_flight_with_their_real_outcome(project):
    """Cases a and b in one process: a wait=true POST and a 20,000-row POST are in flight when SIGINT arrives."""
    before = landed(project)
    with serving(project) as (process, url):
        answers: dict[str, httpx.Response | Exception] = {}

        def post(name: str, body: bytes, wait: bool) -> None:
            try:
                answers[name] = httpx.post(f"{url}/v0/events", params={"name": "events", "wait": wait}, content=body,
                                           timeout=WAIT_S)
            except httpx.HTTPError as err:
                answers[name] = err

        bodies = {"wait": events(10, 0), "large": events(ROWS, 10)}
        threads = {name: threading.Thread(target=post, args=(name, body, name == "wait")) for name, body in bodies.items()}

        def counted(requests: int, buffered: bool) -> None:
            """Poll the server's own figures (GET /v0/ingest) until `requests` were committed (or, with `buffered`,
            committed or handed to the group committer): the requests were read whole, never still uploading."""
            deadline = time.monotonic() + WAIT_S
            while True:
                figures = httpx.get(f"{url}/v0/ingest", timeout=60).json()["datasources"].get("events", {})
                if figures.get("requests", 0) + (figures.get("buffered_requests", 0) if buffered else 0) >= requests:
                    return
                assert time.monotonic() < deadline and process.poll() is None, \
                    f"{requests} request(s) never reached the committer"
                time.sleep(0.05)  # polling an observable figure, not settling a race

        # SIGINT finds the wait=true request committed and waiting for its view (a refresh round; the first one of
        # the process starts Spark), and the large one with the group committer: the stop commits it, ends the
        # round, then answers both (202 each, or 200 if the round applied the rows first).
        threads["wait"].start()
        counted(1, buffered=False)
        threads["large"].start()
        counted(2, buffered=True)
        start = time.monotonic()
        process.send_signal(signal.SIGINT)

        def stopping() -> bool:  # the signal is handled on the server's main thread, a moment after it is sent
            try:
                return httpx.get(f"{url}/v0/ingest", timeout=60).status_code == 503
            except httpx.TransportError:
                return True

        deadline = time.monotonic() + WAIT_S
        while not stopping():
            assert time.monotonic() < deadline, "the server never began to stop"
            time.sleep(0.05)  # polling an observable answer, not settling a race
        # A request arriving once it stops: refused with 503 PF819 and Retry-After while the server stops, or not
        # connected once it closed its socket; never anything else.
        try:
            late = httpx.post(f"{url}/v0/events", params={"name": "events"}, content=events(1, -1), timeout=WAIT_S)
            assert late.status_code == 503 and late.json()["code"] == "PF819" and late.headers["Retry-After"], late.text
        except httpx.TransportError:
            pass  # the server had closed its socket: nothing was sent, so no row can land
        code = process.wait(timeout=WAIT_S)
        seconds = time.monotonic() - start
        for thread in threads.values():
            thread.join(WAIT_S)
        out = process.communicate()[0]
    print(f"pipeframe serve, wait=true + {ROWS:,}-row POST in flight: exited {code} {seconds:.1f} s after SIGINT; "
          f"answers {[(n, getattr(a, 'status_code', repr(a))) for n, a in answers.items()]}")
    assert code == 0 and "Traceback" not in out, out
    told = 0
    for name, body in bodies.items():
        answer = answers[name]
        assert isinstance(answer, httpx.Response), f"{name}: no answer ({answer!r}):\n{out}"
        sent = body.count(b"\n")
        if name == "wait":  # 200 once the views applied the rows, 202 when the stop came first: committed either way
            assert answer.status_code in (200, 202), answer.text
        else:
            assert answer.status_code == 202, answer.text
        assert answer.json()["successful_rows"] == sent, answer.text
        told += sent
    assert landed(project) - before == told
