"""A deploy run in its own process (its own JVM), for the fault and concurrency tests.

Usage: python deploy_worker.py PROJECT MODE [SIGNALS_DIR]
  MODE kill-at-backfill: SIGKILL this process when the first backfill starts.
  MODE held: wait for SIGNALS_DIR/go to exist, then deploy; once inside the deploy (holding the lock) write this
    process's pid to SIGNALS_DIR/held and wait for SIGNALS_DIR/release before going on.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

from pipeframe.errors import PipeframeError
from pipeframe.project import Project


def main() -> int:
    root, mode = sys.argv[1], sys.argv[2]
    project = Project(root)
    project.plan()  # start Spark and read the state before any race begins

    signals = Path(sys.argv[3]) if mode == "held" else None
    held: list[bool] = []

    def on_step(step: str, change) -> None:
        if mode == "kill-at-backfill" and step == "backfill":
            os.kill(os.getpid(), signal.SIGKILL)
        if signals is not None and step == "start" and not held:
            held.append(True)
            # The lock is held from here until the test says release: the other deploy meets it for sure.
            (signals / "held.tmp").write_text(str(os.getpid()))
            (signals / "held.tmp").rename(signals / "held")  # appears whole
            wait_for(signals / "release")

    if signals is not None:
        print("ready", flush=True)
        wait_for(signals / "go")
    try:
        result = project.deploy(on_step=on_step)
    except PipeframeError as err:
        print(err.diagnostics[0].format(), flush=True)
        return 1
    print(f"deployed {result.changes}", flush=True)
    return 0


def wait_for(marker: Path, timeout: float = 300.0) -> None:
    """Poll for the test's marker file; a test that never writes it fails this worker instead of hanging it."""
    deadline = time.monotonic() + timeout
    while not marker.exists():
        if time.monotonic() > deadline:
            raise SystemExit(f"{marker} did not appear within {timeout:.0f} s")
        time.sleep(0.05)


if __name__ == "__main__":
    sys.exit(main())
