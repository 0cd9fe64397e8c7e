"""An append or populate run in its own process (its own JVM), SIGKILLed at a chosen engine step, for the crash
tests of incremental views (tests/spark/test_crash.py).

Usage: python materialize_worker.py PROJECT append FILE KILL_AT
       python materialize_worker.py PROJECT populate KILL_AT CHUNK_ROWS
  append:   Project(PROJECT).append("events", FILE)
  populate: Project(PROJECT).populate("hourly", truncate=True, chunk_by="ts", chunk_rows=CHUNK_ROWS)
KILL_AT is a step name the engine reports through on_step ("source committed", "view committed hourly",
"chunk committed 2", "watermark committed", "swapped hourly", ...): the process kills itself with SIGKILL as
soon as that step is reported. KILL_AT "-" runs to completion (a plain run, e.g. to resume).

Every step is printed as `step <name>` before the kill decision, so the caller can tell where it died.
"""

from __future__ import annotations

import os
import signal
import sys

from pipeframe.errors import PipeframeError
from pipeframe.project import Project

NO_KILL = "-"


def main() -> int:
    root, mode = sys.argv[1], sys.argv[2]
    if mode == "append":
        file, kill_at = sys.argv[3], sys.argv[4]
    elif mode == "populate":
        kill_at, chunk_rows = sys.argv[3], int(sys.argv[4])
    else:
        print(f"unknown mode {mode!r}", file=sys.stderr, flush=True)
        return 2
    project = Project(root)

    def on_step(step: str) -> None:
        print(f"step {step}", flush=True)
        if step == kill_at:
            os.kill(os.getpid(), signal.SIGKILL)

    try:
        if mode == "append":
            result = project.append("events", file, on_step=on_step)
            print(f"appended {result.accepted} quarantined {result.quarantined} "
                  f"views {[(v.view, v.outcome) for v in result.views]}", flush=True)
        else:
            views = project.populate("hourly", truncate=True, chunk_by="ts", chunk_rows=chunk_rows,
                                     on_step=on_step)
            print(f"populated {[(v.view, v.outcome) for v in views]}", flush=True)
    except PipeframeError as err:
        print(err.diagnostics[0].format(), flush=True)
        return 1
    if kill_at != NO_KILL:
        print(f"step {kill_at!r} was never reported", flush=True)
        return 3
    return 0


if __name__ == "__main__":
    sys.exit(main())
