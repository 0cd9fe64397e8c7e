"""Source rows appended, updated and deleted in place, then the retraction refresh of the views, run in its own
process (its own JVM) so that tests/spark/test_retraction_crash.py can SIGKILL it during the retraction.

Usage: python retraction_worker.py PROJECT refresh FILE KILL_AT
       python retraction_worker.py PROJECT delete FILE
       python retraction_worker.py PROJECT join FILE KILL_AT
Both modes append FILE (NDJSON) to `events` without refreshing the views, then UPDATE rows of `events` in place
(as another Spark job would), then:
  refresh: DELETE rows (SQL, as another job), then Project.refresh(on_step=...), killing the process group with
           SIGKILL as soon as the step KILL_AT is reported ("view committed hourly", ...);
  delete:  what Project.delete("events", DELETE_WHERE) does (the DELETE, then the refresh of the views, which
           retracts everything), with the engine's steps reported; the test kills the worker when it chooses.
  join:    (a project of `orders` joined with `customers`) FILE appended to `orders` without refreshing the views,
           JOIN_UPDATE run on `customers`, then Project.refresh(on_step=...) killed at KILL_AT as in `refresh`.
`step changes committed` is printed once the append and the UPDATE (and in `refresh` mode the DELETE) are
committed, and every engine step as `step <name>` before the kill decision.
"""

from __future__ import annotations

import os
import signal
import sys
import threading

from pipeframe.engine.ingest import Ingestor
from pipeframe.errors import PipeframeError
from pipeframe.project import Project

# u1's rows move to a new user u9, one hour later and 100 larger: groups of every view are left and entered.
UPDATE_SET = "amount = amount + 100, user_id = 'u9', ts = ts + INTERVAL 1 HOUR"
UPDATE_WHERE = "user_id = 'u1'"
# Every row of u3 and of two hours of each day: whole groups of every view disappear.
DELETE_WHERE = "user_id = 'u3' OR hour(ts) IN (5, 6)"
# Customer c1 moves to another country: the join view retracts its orders from one group and adds them to another.
JOIN_UPDATE = "UPDATE delta.`{path}` SET country = 'DE' WHERE cid = 'c1'"


def main() -> int:
    root, mode, file = sys.argv[1], sys.argv[2], sys.argv[3]
    kill_at = sys.argv[4] if mode in ("refresh", "join") else None
    if mode not in ("refresh", "delete", "join"):
        print(f"unknown mode {mode!r}", file=sys.stderr, flush=True)
        return 2

    printing = threading.Lock()  # views are refreshed by several threads: one whole line each

    def on_step(step: str) -> None:
        with printing:
            sys.stdout.write(f"step {step}\n")
            sys.stdout.flush()
        if step == kill_at:
            os.killpg(os.getpgid(0), signal.SIGKILL)  # this process and its JVM at once

    project = Project(root)
    try:
        if mode == "join":
            project.append("orders", file, views=False)
            project.spark.sql(JOIN_UPDATE.format(path=project.warehouse.snapshot(fresh=True).table("customers").path))
            on_step("changes committed")
            views = project.refresh(on_step=on_step)
            print(f"refreshed {[(v.view, v.outcome, v.path) for v in views]}", flush=True)
            print(f"step {kill_at!r} was never reported", flush=True)
            return 3
        project.append("events", file, views=False)
        path = project.warehouse.snapshot(fresh=True).table("events").path
        project.spark.sql(f"UPDATE delta.`{path}` SET {UPDATE_SET} WHERE {UPDATE_WHERE}")
        if mode == "refresh":
            project.spark.sql(f"DELETE FROM delta.`{path}` WHERE {DELETE_WHERE}")
        on_step("changes committed")
        if mode == "refresh":
            views = project.refresh(on_step=on_step)
        else:
            # What Project.delete("events", DELETE_WHERE) does, with the engine's steps reported.
            materializer = project.materializer(on_step=on_step)
            Ingestor(project.spark, project.warehouse).delete(materializer.table("events"), DELETE_WHERE)
            on_step("source committed")
            views = materializer.refresh(materializer.downstream(["events"]))
        print(f"refreshed {[(v.view, v.outcome, v.path) for v in views]}", flush=True)
    except PipeframeError as err:
        print(err.diagnostics[0].format(), flush=True)
        return 1
    if kill_at is not None:
        print(f"step {kill_at!r} was never reported", flush=True)
        return 3
    return 0


if __name__ == "__main__":
    sys.exit(main())
