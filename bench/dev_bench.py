"""Dev loop latency: from saving an endpoint's file to the HTTP API answering with the new version.

Usage: python bench/dev_bench.py [--repeats 5] [--json F]

One run, the same starter project (pipeframe/templates) and machine for both sides:
  warm: `pipeframe dev` (in this process: one warm Spark session, the watcher, the HTTP server); each repeat
        waits until the previous save is fully deployed, saves a new revision of pipes/top_events.pipe and polls
        GET /v0/pipes/top_events.json until the answer carries it. Target (PRODUCT.md section 8): ≤ 1 s median.
        (An endpoint-only edit is served before its deploy is recorded in the state store, which follows.)
        Then pairs of saves 0.3 s apart: the time from the second save to its answer (it must not queue behind
        the first save's deploy).
  cold: what the same edit costs without the dev loop: `pipeframe deploy --yes` then `pipeframe endpoint` as
        two fresh processes (each starts its own JVM).
Prints a JSON summary (min / median / max, and the cold / warm ratio).
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx
from common import emit, options, summary  # bench/common.py (the script's folder is on sys.path)

ROOT = Path(__file__).resolve().parents[1]
ENDPOINT = "pipes/top_events.pipe"


def template_dir() -> Path:
    import pipeframe

    return Path(pipeframe.__file__).parent / "templates"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def save_revision(project: Path, revision: int) -> None:
    path = project / ENDPOINT
    text = path.read_text()
    marker = "        event,\n"
    start = text.index(marker) + len(marker)
    if "AS revision" in text:  # replace the previous revision line
        end = text.index("\n", start) + 1
        text = text[:start] + text[end:]
    path.write_text(text[:start] + f"        {revision} AS revision,\n" + text[start:])



def warm(project: Path, repeats: int, successive: list[float]) -> list[float]:
    from pipeframe.dev import DevLoop

    port = free_port()
    url = f"http://127.0.0.1:{port}/v0/pipes/top_events.json"
    loop = DevLoop(project, echo=lambda _line: None)
    stop = threading.Event()
    thread = threading.Thread(target=loop.run, args=("127.0.0.1", port, stop), daemon=True)
    thread.start()
    latencies = []
    try:
        wait_until(url, lambda body: body.get("rows", 0) > 0, timeout=600)
        for revision in range(1, repeats + 1):
            loop.idle.wait(300)  # the previous save is fully deployed: measure one save on its own
            time.sleep(0.2)
            start = time.perf_counter()
            save_revision(project, revision)
            wait_until(url, lambda body, r=revision: body["data"] and body["data"][0].get("revision") == r,
                       timeout=120)
            latencies.append(time.perf_counter() - start)
        # Saves in quick succession: the second save, 0.3 s after the first, must not wait for the first one's
        # deploy to be recorded (it is served at once; the deploys coalesce behind it).
        for revision in range(repeats + 1, 2 * repeats + 1, 2):
            loop.idle.wait(300)
            time.sleep(0.2)
            save_revision(project, revision)
            time.sleep(0.3)
            start = time.perf_counter()
            save_revision(project, revision + 1)
            wait_until(url, lambda body, r=revision + 1: body["data"] and body["data"][0].get("revision") == r,
                       timeout=120)
            successive.append(time.perf_counter() - start)
    finally:
        stop.set()
        thread.join(timeout=60)
    return latencies


def wait_until(url: str, ready, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            response = httpx.get(url, timeout=30)
            if response.status_code == 200 and ready(response.json()):
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.02)
    raise SystemExit(f"no matching answer from {url} within {timeout} s")


def cold(project: Path, repeats: int, first_revision: int) -> list[float]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIPEFRAME_")}
    env["PIPEFRAME_ENV"] = "dev"

    def pipeframe(*args: str) -> str:
        done = subprocess.run([sys.executable, "-m", "pipeframe.cli", *args, "-p", str(project)], env=env,
                              capture_output=True, text=True, check=False, stdin=subprocess.DEVNULL)
        if done.returncode != 0:
            raise SystemExit(f"pipeframe {' '.join(args)} failed:\n{done.stdout}\n{done.stderr}")
        return done.stdout

    latencies = []
    for revision in range(first_revision, first_revision + repeats):
        start = time.perf_counter()
        save_revision(project, revision)
        pipeframe("deploy", "--yes")
        body = json.loads(pipeframe("endpoint", "top_events", "--format", "json"))
        assert body["data"][0]["revision"] == revision, body
        latencies.append(time.perf_counter() - start)
    return latencies


def main() -> int:
    args = options(__doc__)
    work = Path(tempfile.mkdtemp(prefix="pipeframe-devbench-"))
    try:
        project = work / "starter"
        shutil.copytree(template_dir(), project)
        successive: list[float] = []
        warm_s = warm(project, args.repeats, successive)
        cold_s = cold(project, max(2, args.repeats // 2), 2 * args.repeats + 2)
        import pyspark

        results = {"warm_save_to_answer_s": summary(warm_s), "cold_deploy_then_endpoint_s": summary(cold_s),
                   "second_of_two_quick_saves_s": summary(successive),
                   "cold_over_warm_median": round(statistics.median(cold_s) / statistics.median(warm_s), 1),
                   "target_s": 1.0, "spark": pyspark.__version__, "python": sys.version.split()[0],
                   "cpus": os.cpu_count()}
        emit(results, args.json)
        return 0
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
