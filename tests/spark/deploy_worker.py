"""A deploy run in its own process (its own JVM), for the fault and concurrency tests.

Usage: python deploy_worker.py PROJECT MODE [GO_FILE]
  MODE kill-at-backfill: SIGKILL this process when the first backfill starts.
  MODE slow: wait for GO_FILE to exist, then deploy, pausing 8 s inside the deploy (while holding the lock).
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

    paused: list[bool] = []

    def on_step(step: str, change) -> None:
        if mode == "kill-at-backfill" and step == "backfill":
            os.kill(os.getpid(), signal.SIGKILL)
        if mode == "slow" and step == "start" and not paused:
            paused.append(True)
            time.sleep(8)

    if mode == "slow":
        go = Path(sys.argv[3])
        print("ready", flush=True)
        while not go.exists():
            time.sleep(0.05)
    try:
        result = project.deploy(on_step=on_step)
    except PipeframeError as err:
        print(err.diagnostics[0].format(), flush=True)
        return 1
    print(f"deployed {result.changes}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
