"""A warehouse on S3 (`s3a://`), against a real S3-compatible server (moto's server mode) on 127.0.0.1.

One worker process (tests/cluster/s3_worker.py, one JVM) lives the example project's life through `pipeframe.Project`
with `warehouse: s3a://...`; this test reads what it saw and lists the bucket. The s3a settings come from the
environment through `${VAR}`s in pipeframe.yaml, as a CI job would pass them. The jars are hadoop-aws and the few
AWS SDK v2 modules it uses, with the 640 MB SDK bundle excluded (docs/cluster.md).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.cluster.s3server import ACCESS_KEY, REGION, SECRET_KEY, S3Server

pytestmark = pytest.mark.s3

REPO = Path(__file__).resolve().parents[2]
BUCKET = "shop-lake"
PREFIX = "shop"
SDK = "2.29.52"  # the AWS SDK v2 version hadoop-aws 3.4.2 is built against (hadoop-project's aws-java-sdk-v2.version)
PACKAGES = ",".join(["org.apache.hadoop:hadoop-aws:3.4.2", f"software.amazon.awssdk:s3:{SDK}",
                     f"software.amazon.awssdk:s3-transfer-manager:{SDK}", f"software.amazon.awssdk:sts:{SDK}"])

# The worker's JVM works for minutes: unlike the short-lived JVMs (tests/conftest.py: C1 only), it keeps the JIT's
# second tier, which pays off over its life. Side by side, the worker alone on a quiet machine: C1 only 240 s and 311
# JVM CPU-seconds, both tiers 186 s and 268 (the Spark Connect server of test_connect.py, tried the same way: no gain).
# Its queries run interpreted (PIPEFRAME_YAML): this test is about object storage, and codegen is exercised end to
# end by tests/e2e and the benchmarks. Side by side, the worker alone: 187 s and 271 JVM CPU-seconds with Spark's
# codegen and AQE, 145 s and 205 without.
LONG_LIVED_JVM = "-XX:+UseSerialGC"

PIPEFRAME_YAML = f"""\
name: shop
warehouse: s3a://{BUCKET}/{PREFIX}
retention_hours: 0          # optimize's VACUUM removes every file the tables no longer use
spark:
  master: local[2]
  conf:
    spark.driver.memory: 1g
    spark.sql.shuffle.partitions: 2
    spark.sql.codegen.wholeStage: false    # interpreted, as tests/spark's shared session (its conftest says why)
    spark.sql.codegen.factoryMode: NO_CODEGEN
    spark.sql.adaptive.enabled: false
    spark.jars.packages: {PACKAGES}
    spark.jars.excludes: software.amazon.awssdk:bundle
    spark.hadoop.fs.s3a.endpoint: ${{S3_ENDPOINT}}
    spark.hadoop.fs.s3a.endpoint.region: ${{AWS_REGION:-us-east-1}}
    spark.hadoop.fs.s3a.path.style.access: "true"
    spark.hadoop.fs.s3a.connection.ssl.enabled: "false"
    spark.hadoop.fs.s3a.access.key: ${{AWS_ACCESS_KEY_ID}}
    spark.hadoop.fs.s3a.secret.key: ${{AWS_SECRET_ACCESS_KEY}}
    spark.hadoop.fs.s3a.aws.credentials.provider: org.apache.hadoop.fs.s3a.SimpleAWSCredentialsProvider
    # One process writes this warehouse at a time (this worker): Delta's single-driver LogStore, named on purpose.
    spark.delta.logStore.s3a.impl: io.delta.storage.S3SingleDriverLogStore
vars:
  currency: EUR
"""


@pytest.fixture(scope="module")
def s3(tmp_path_factory: pytest.TempPathFactory):
    with S3Server(tmp_path_factory.mktemp("moto") / "moto.log") as server:
        server.create_bucket(BUCKET)
        yield server


@pytest.fixture(scope="module")
def life(s3: S3Server, tmp_path_factory: pytest.TempPathFactory) -> dict:
    root = tmp_path_factory.mktemp("s3") / "shop"
    shutil.copytree(REPO / "example_project", root, ignore=shutil.ignore_patterns(".pipeframe"))
    (root / "pipeframe.yaml").write_text(PIPEFRAME_YAML, encoding="utf-8")
    out = root.parent / "seen.json"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PIPEFRAME_", "AWS_"))}
    env.update(PYTHONPATH=str(REPO), S3_ENDPOINT=s3.endpoint, AWS_ACCESS_KEY_ID=ACCESS_KEY,
               AWS_SECRET_ACCESS_KEY=SECRET_KEY, AWS_REGION=REGION, JAVA_TOOL_OPTIONS=LONG_LIVED_JVM)
    done = subprocess.run([sys.executable, str(REPO / "tests" / "cluster" / "s3_worker.py"), str(root), str(out),
                           BUCKET, PREFIX], check=False, cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=1800)  # a few minutes on a quiet 2-core machine; this only stops a hung JVM
    log = root / ".pipeframe" / "spark.log"
    assert done.returncode == 0 and out.exists(), (
        f"worker exited {done.returncode}:\n{done.stdout}\n{done.stderr[-3000:]}\n"
        + (log.read_text(errors="replace")[-3000:] if log.exists() else ""))
    seen = json.loads(out.read_text())
    seen["bucket_keys"] = s3.keys(BUCKET, f"{PREFIX}/")
    return seen


def test_every_answer_is_the_local_one(life: dict) -> None:
    assert life["failures"] == []
    # The read path (delta-rs over the bucket, DuckDB) answered every call, reads without a LogStore too.
    assert life["engines"] and all(engine == ["duckdb", None] for engine in life["engines"]), life["engines"]
    assert life["endpoint_cases"] >= 5
    assert [step for step, _ in life["steps"]] == ["fixtures: top_products", "idempotent append: top_products",
                             "refresh: top_products", "populate: top_products", "optimize: top_products",
                             "refused writes: top_products"]


def test_state_store_and_deploy_history_live_in_the_bucket(life: dict) -> None:
    assert life["warehouse"] == f"s3a://{BUCKET}/{PREFIX}"
    assert life["version_before_deploy"] == -1
    assert life["deploy_changes"] > 0
    assert life["history_after_deploy"] == [["succeeded", True]]
    assert life["version_after_deploy"] >= 1
    assert any(k.endswith(".json") for k in life["state_log"])
    assert f"{PREFIX}/_pipeframe/state/_delta_log/00000000000000000000.json" in life["bucket_keys"]
    assert any(k.startswith(f"{PREFIX}/tables/sales/v1/") and k.endswith(".parquet") for k in life["bucket_keys"])


def test_a_second_deploy_changes_nothing(life: dict) -> None:
    assert life["second_plan_has_changes"] is False
    assert life["second_deploy_changes"] == 0
    assert life["history_after_second"] == 1
    assert life["version_unchanged"] is True


def test_the_deploy_lock_serializes_holders(life: dict) -> None:
    assert life["lock_log"], "the lock table was not written to the bucket"
    assert life["second_lock"] == "PF602"
    assert life["lock_holder_after"] is None


def test_appends_watermarks_and_idempotency_keys(life: dict) -> None:
    assert life["fixtures"] == {"products": 9, "page_views": 200, "sales": 200}
    assert life["keyed"] == [[1, False], [1, True]]
    assert life["lag_before_refresh"] == {"sales_by_hour": 1}
    assert "sales_by_hour" in life["refreshed"] and "sales_by_day" in life["refreshed"]
    assert life["watermark_is_append"] is True


def test_populate_replaces_the_version_and_deletes_the_old_objects(life: dict) -> None:
    old, new = life["populate_versions"]
    assert new == old + 1
    assert life["old_version_objects"] == []
    assert life["new_version_objects"] > 0


def test_optimize_and_vacuum_leave_only_live_files(life: dict) -> None:
    assert "sales_by_hour" in life["optimized"] and "sales" in life["optimized"]
    # With the single-driver S3 LogStore, Delta writes no VACUUM START/END commits (seen here): count the objects.
    assert "OPTIMIZE" in life["sales_operations"]
    assert life["vacuum"]["deleted"] > 0
    assert life["vacuum"]["live"] > 0 and life["vacuum"]["live_missing"] == []


def test_writes_without_a_named_logstore_are_refused_with_pf609(life: dict) -> None:
    assert life["refusals"] == {"append": "PF609", "deploy": "PF609", "refresh": "PF609", "optimize": "PF609"}
    assert "spark.delta.logStore.s3a.impl" in life["refusal_message"]
    assert "S3DynamoDBLogStore" in life["refusal_message"]
