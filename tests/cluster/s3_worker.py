"""The example project's life with its warehouse on S3, in one driver process (one embedded Spark session).

Usage: python tests/cluster/s3_worker.py PROJECT_COPY OUT_JSON BUCKET PREFIX
  (S3_ENDPOINT, AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY in the environment: the project's pipeframe.yaml names
  them as `${VAR}`s, and this script lists the bucket with boto3 through them)

Runs through the `pipeframe.Project` API on `warehouse: s3a://BUCKET/PREFIX`: deploy (state store, deploy history),
the fixtures, the project's endpoint tests, the deploy lock taken twice, appends with an idempotency key (the group
commit writer) and without their views, refresh, populate --truncate (a rebuild: the old version's objects are
deleted), optimize with VACUUM (retention 0) of `sales` and `sales_by_hour`, a second deploy that changes nothing, and PF609 once the LogStore
setting is taken away (reads still answer). After each step the answers are compared with values computed in
Python, and the objects are listed in the bucket. Writes what it saw to OUT_JSON (failures as a list of sentences)
and exits 0 even when an answer differs: the test reports every difference at once. A PipeframeError is printed as
its diagnostics (exit 1), as the CLI would.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from urllib.parse import unquote

from pipeframe.errors import PipeframeError
from pipeframe.project import Project
from tests.cluster.shop import Life, expected_top_products, sale, sample_sales

LOGSTORE_KEY = "spark.delta.logStore.s3a.impl"


def main() -> int:
    root, out, bucket, prefix = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3], sys.argv[4]
    life = Life()
    seen, check, top_products = life.seen, life.check, life.top_products
    seen["seconds"] = {}
    started = time.monotonic()

    import boto3

    s3 = boto3.client("s3", endpoint_url=os.environ["S3_ENDPOINT"], region_name="us-east-1")

    def keys(under: str) -> list[str]:
        pages = s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=f"{prefix}/{under}")
        return [item["Key"].removeprefix(f"{prefix}/") for page in pages for item in page.get("Contents", [])]

    def timed(step: str) -> None:
        seen["seconds"][step] = round(time.monotonic() - started, 1)

    try:
        project = Project(root)
        warehouse = project.warehouse
        seen["warehouse"] = warehouse.uri
        seen["version_before_deploy"] = project.deployed_version()
        result = project.deploy()
        timed("deploy")
        seen["deploy_changes"] = result.changes
        seen["history_after_deploy"] = [(d.result, d.id == result.deployment) for d in project.history()]
        seen["version_after_deploy"] = project.deployed_version()
        seen["state_log"] = keys("_pipeframe/state/_delta_log/")
        seen["lock_log"] = keys("_pipeframe/lock/_delta_log/")

        # The deploy lock on S3: a second holder is refused while the first holds it, and takes it once released.
        warehouse.acquire_lock("s3-test-a")
        try:
            warehouse.acquire_lock("s3-test-b")
            seen["second_lock"] = "taken"
        except PipeframeError as err:
            seen["second_lock"] = err.diagnostics[0].code
        finally:
            warehouse.release_lock("s3-test-a")
        warehouse.acquire_lock("s3-test-b")
        warehouse.release_lock("s3-test-b")
        seen["lock_holder_after"] = warehouse.spark.read.format("delta").load(warehouse.lock_path).first()["holder"]
        timed("lock")

        rows = life.load_fixtures(project, root)
        seen["sales_objects"] = keys("tables/sales/")
        timed("fixtures")

        # The group commit writer with an idempotency key: the retry lands nothing and answers what landed.
        keyed = [sale("2024-05-16 18:00:00", "o-10001", "cluster-mug", 12.5, 3, "c-0800")]
        first = project.append("sales", [json.dumps(r) for r in keyed], idempotency_key="s3-order-1")
        again = project.append("sales", [json.dumps(r) for r in keyed], idempotency_key="s3-order-1")
        rows += keyed
        seen["keyed"] = [(first.accepted, first.replayed), (again.accepted, again.replayed)]
        check("idempotent append: top_products", top_products(project), expected_top_products(rows))
        timed("keyed append")

        more = sample_sales()
        appended = project.append("sales", [json.dumps(r) for r in more], views=False)
        rows += more
        seen["lag_before_refresh"] = {s.name: s.lag_versions for s in project.status("sales_by_hour")}
        seen["refreshed"] = sorted(r.view for r in project.refresh())
        view = project.snapshot.table("sales_by_hour")
        watermark = _watermark(project, view.path)
        seen["watermark_is_append"] = watermark == appended.version
        check("refresh: top_products", top_products(project), expected_top_products(rows))
        timed("refresh")

        before = project.snapshot.table("sales_by_hour")
        project.populate("sales_by_hour", truncate=True)
        after = project.snapshot.table("sales_by_hour")
        seen["populate_versions"] = [before.version, after.version]
        seen["old_version_objects"] = keys(_under(before.path, warehouse.uri))
        seen["new_version_objects"] = len(keys(_under(after.path, warehouse.uri)))
        check("populate: top_products", top_products(project), expected_top_products(rows))
        timed("populate")

        stored_before = _data_files(keys("tables/"))
        # The landing table (several appends: OPTIMIZE compacts them) and a view (state compaction first); every
        # table runs the same code, so two keep the test short.
        seen["optimized"] = project.optimize("sales") + project.optimize("sales_by_hour")
        check("optimize: top_products", top_products(project), expected_top_products(rows))
        spark = project.spark
        stored_after = _data_files(keys("tables/"))
        live = {_under(f, warehouse.uri).rstrip("/")
                for r in project.snapshot.values() if r.state.has_table and r.path
                for f in spark.read.format("delta").load(r.path).inputFiles()}
        sales = project.snapshot.table("sales").path
        seen["sales_operations"] = sorted({r["operation"] for r in spark.sql(f"DESCRIBE HISTORY delta.`{sales}`")
                                           .collect()})
        # VACUUM deleted the files OPTIMIZE and compaction replaced; every file the tables read is still there.
        seen["vacuum"] = {"deleted": len(stored_before - stored_after), "live": len(live),
                          "live_missing": sorted(f for f in live if f not in stored_after and unquote(f) not in stored_after)}
        timed("optimize")

        # A second deploy of the same files: nothing to do, no new deployment, the state store does not move.
        version = project.deployed_version()
        again_project = project.reload()
        plan = again_project.plan()
        seen["second_plan_has_changes"] = plan.has_changes
        seen["second_deploy_changes"] = again_project.deploy().changes
        seen["history_after_second"] = len(again_project.history())
        seen["version_unchanged"] = again_project.deployed_version() == version
        timed("second deploy")

        # Without a LogStore named for s3a, every write is refused before it starts; reads still answer.
        logstore = spark.conf.get(LOGSTORE_KEY)
        spark.conf.unset(LOGSTORE_KEY)
        try:
            bare = Project(root, spark=spark)
            refusals = {}
            for name, action in [("append", lambda: bare.append("sales", [json.dumps(keyed[0])])),
                                 ("deploy", lambda: bare.warehouse.acquire_lock("s3-test-c")),
                                 ("refresh", bare.refresh), ("optimize", bare.optimize)]:
                try:
                    action()
                    refusals[name] = "written"
                except PipeframeError as err:
                    refusals[name] = err.diagnostics[0].code
                    seen["refusal_message"] = err.diagnostics[0].format()
            seen["refusals"] = refusals
            check("refused writes: top_products", top_products(bare), expected_top_products(rows))
        finally:
            spark.conf.set(LOGSTORE_KEY, logstore)
        timed("refusals")
        seen["objects"] = len(keys(""))
    except PipeframeError as err:
        for diagnostic in err.diagnostics:
            print(diagnostic.format(), flush=True)
        return 1
    seen["failures"] = life.failures
    out.write_text(json.dumps(seen, indent=2, default=str))
    return 0


def _under(path: str | None, uri: str) -> str:
    """A table's folder relative to the warehouse, as a key prefix."""
    return (path or "").removeprefix(uri + "/").rstrip("/") + "/"


def _data_files(keys: list[str]) -> set[str]:
    """The Parquet data files among object keys (not the Delta log's checkpoints, not change data)."""
    return {k for k in keys if k.endswith(".parquet") and "/_delta_log/" not in k and "/_change_data/" not in k}


def _watermark(project: Project, path: str | None) -> int | None:
    from pipeframe.engine import tables

    return tables.read_watermark(project.spark, path or "").source_version


if __name__ == "__main__":
    sys.exit(main())
