"""The example project's whole life on a real Spark standalone cluster (`spark://127.0.0.1:P`, from pyspark's jars).

One master and one worker (1 core, 1 GiB for executors) come up for the module (tests/cluster/standalone.py). The
life runs in ONE driver process (tests/cluster/life_worker.py, through `pipeframe.Project`): deploy, fixtures,
the project's own endpoint tests, refresh, populate, optimize and a rebuild, every answer checked against values
computed in Python from the rows appended (tests/cluster/shop.py). Then `pipeframe serve` (the CLI, a second
driver) takes events and answers an endpoint. The master's JSON and the worker's folders show the work ran on the
cluster's executor and that Delta's jars (shipped by the driver as `spark.jars`) reached it.

The driver runs with SPARK_LOCAL_IP=127.0.0.1 (a real cluster sets spark.driver.host instead, see
docs/cluster.md), and the copy of the project sets the small-data partition counts that spark_settings applies to
local masters only, so both drivers run like `local[*]` does, on a cluster.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from pipeframe.testing import same
from tests.cluster.shop import event_sales, expected_top_products, fixture_sales, sample_sales
from tests.cluster.standalone import StandaloneCluster, free_port

pytestmark = pytest.mark.cluster

ROOT = Path(__file__).resolve().parents[2]
WORKER = Path(__file__).with_name("life_worker.py")
SMALL_DATA = ('    spark.sql.shuffle.partitions: "4"\n'
              '    spark.databricks.delta.snapshotPartitions: "2"\n')


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with StandaloneCluster(tmp_path_factory.mktemp("standalone")) as running:
        yield running


def driver_env(cluster: StandaloneCluster) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIPEFRAME_")}
    python_path = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    return {**env, "PIPEFRAME_SPARK_MASTER": cluster.master_url, "SPARK_LOCAL_IP": "127.0.0.1",
            "PYSPARK_PYTHON": sys.executable, "PYTHONPATH": python_path}


@pytest.fixture(scope="module")
def lived(cluster, tmp_path_factory):
    """A copy of example_project after its life on the cluster, and what the worker saw."""
    project = tmp_path_factory.mktemp("life") / "shop"
    shutil.copytree(ROOT / "example_project", project, ignore=shutil.ignore_patterns(".pipeframe"))
    config = project / "pipeframe.yaml"
    text = config.read_text()
    assert "    spark.sql.session.timeZone: UTC\n" in text
    config.write_text(text.replace("    spark.sql.session.timeZone: UTC\n",
                                   "    spark.sql.session.timeZone: UTC\n" + SMALL_DATA, 1))
    out = project.parent / "life.json"
    done = subprocess.run([sys.executable, str(WORKER), str(project), str(out)], env=driver_env(cluster),
                          cwd=ROOT, capture_output=True, text=True, timeout=1500, check=False)
    assert done.returncode == 0, f"{done.stdout}\n{done.stderr[-4000:]}\n{cluster.log_tail()}"
    return project, json.loads(out.read_text())


def test_the_example_project_lives_on_the_cluster_with_the_same_answers(cluster, lived):
    _, seen = lived
    assert seen["failures"] == []
    assert [step for step, _ in seen["steps"]] == [
        "fixtures: top_products", "refresh: top_products", "populate: top_products", "optimize: top_products",
        "rebuild: top_products", "rebuild: units"]
    assert seen["deploy_changes"] > 0 and seen["fixtures"] == {"products": 9, "page_views": 200, "sales": 200}
    assert seen["endpoint_cases"] >= 10  # example_project/tests/*.yaml, answered as on local[*]
    assert seen["lag_before_refresh"] == {"sales_by_hour": 1} and "sales_by_hour" in seen["refreshed"]
    assert seen["optimized"] == ["sales_by_hour"]
    assert seen["rebuild_plan"] == {"sales_by_hour": "rebuild", "sales_by_day": "rebuild"}
    assert set(seen["status"].values()) == {"active"}


def test_the_work_ran_on_the_clusters_executor_with_deltas_jars(cluster, lived):
    _, seen = lived
    assert seen["master"] == cluster.master_url and seen["executors"] == 1
    [app] = [a for a in cluster.apps() if a["id"] == seen["app_id"]]
    assert app["name"] == "pipeframe:shop" and app["cores"] >= 1
    # The driver ships its resolved jars (`spark.jars`); the executor fetched Delta's into its own folder.
    assert "delta-spark" in seen["jars"]
    executor = cluster.folder / "work" / seen["app_id"]
    fetched = {p.name for p in executor.glob("*/*.jar")}
    assert any(name.startswith("io.delta_delta-spark") for name in fetched), sorted(fetched)
    assert any(name.startswith("io.delta_delta-storage") for name in fetched), sorted(fetched)


def test_serve_takes_events_and_answers_on_the_cluster(cluster, lived):
    project, _ = lived
    port = free_port()
    server = subprocess.Popen([sys.executable, "-m", "pipeframe.cli", "serve", "-p", str(project), "--host",
                               "127.0.0.1", "--port", str(port)], env=driver_env(cluster), cwd=project,
                              stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 600
        while True:
            try:
                httpx.get(f"{url}/v0/pipes", timeout=60).raise_for_status()
                break
            except httpx.TransportError:
                assert server.poll() is None, server.communicate()
                assert time.monotonic() < deadline, "the server never answered"
                time.sleep(1)
        events = event_sales()
        body = "\n".join(json.dumps(e) for e in events) + "\n"
        posted = httpx.post(f"{url}/v0/events", params={"name": "sales", "wait": "true"}, content=body,
                            timeout=300)
        assert posted.status_code == 200, posted.text
        answer = httpx.get(f"{url}/v0/pipes/top_products.json", params={"limit": 100}, timeout=300)
        assert answer.status_code == 200, answer.text
        expected = expected_top_products(fixture_sales(project) + sample_sales() + events)
        assert same(expected, answer.json()["data"]), answer.json()["data"]
        serving = [a for a in cluster.state().get("activeapps", []) if a["name"] == "pipeframe:shop"]
        assert serving, cluster.state()  # the server's driver is an application of the cluster
    finally:
        server.terminate()
        try:
            out, err = server.communicate(timeout=120)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, 9)
            out, err = server.communicate()
    assert server.returncode == 0, out + err
    assert "stopped" in out and "Traceback" not in out + err


STREAMED = {
    "pipeframe.yaml": ("name: streamed\nwarehouse: .pipeframe/warehouse\ningest:\n  kafka_engine: streaming\n"
                       "spark:\n  conf:\n    spark.sql.session.timeZone: UTC\n" + SMALL_DATA),
    "datasources/streamed.datasource": ("SCHEMA >\n    `user` String `json:$.user`,\n    `n` Int32 `json:$.n`\n\n"
                                        "KAFKA_CONNECTION_NAME local_kafka\nKAFKA_TOPIC streamed\n"
                                        "KAFKA_AUTO_OFFSET_RESET earliest\n"),
}


def streamed_rows(project: Path) -> list[tuple]:
    """(partition, offset, user, n) of every row of the datasource, read by delta-rs (no JVM in the test)."""
    from deltalake import DeltaTable

    [folder] = sorted((project / ".pipeframe" / "warehouse" / "tables" / "streamed").glob("v*"))
    table = DeltaTable(str(folder)).to_pyarrow_table(columns=["__partition", "__offset", "user", "n"])
    return sorted(zip(*(table.column(c).to_pylist() for c in table.column_names), strict=True))


@pytest.mark.kafka
def test_structured_streaming_reads_a_topic_on_the_clusters_executor_and_lands_each_message_once(
        cluster, kafka_broker, tmp_path):
    """`ingest.kafka_engine: streaming`: `pipeframe run` on the cluster reads a Kafka datasource with Spark's Kafka
    source (its jars shipped to the executor like Delta's), each micro-batch committed through the events API's
    commit path with a fence per partition. SIGKILLed while messages flow and started again (Structured Streaming
    runs the unfinished micro-batch again from its checkpoint), then stopped with Ctrl-C: each message once."""
    from confluent_kafka import Producer

    from tests.conftest import write_project

    kafka_broker.create_topic("streamed", 4)
    project = write_project(tmp_path / "streamed", {
        **STREAMED, "connections/local_kafka.connection":
            f"TYPE kafka\nKAFKA_BOOTSTRAP_SERVERS {kafka_broker.bootstrap}\nKAFKA_SECURITY_PROTOCOL PLAINTEXT\n"})
    env = driver_env(cluster)
    deployed = subprocess.run([sys.executable, "-m", "pipeframe.cli", "deploy", "-p", str(project), "--yes"],
                              env=env, cwd=ROOT, capture_output=True, text=True, timeout=600, check=False)
    assert deployed.returncode == 0, deployed.stdout + deployed.stderr
    producer = Producer({"bootstrap.servers": kafka_broker.bootstrap, "enable.idempotence": True})

    def produce(first: int, count: int) -> None:
        for i in range(first, first + count):
            producer.produce("streamed", json.dumps({"user": f"u{i % 7}", "n": i}).encode(), partition=i % 4)
        assert producer.flush(30) == 0

    log = tmp_path / "run.log"

    def run() -> subprocess.Popen:
        started = log.read_text().count("kept up to date") if log.exists() else 0
        with log.open("a") as out:
            process = subprocess.Popen([sys.executable, "-m", "pipeframe.cli", "run", "-p", str(project)], env=env,
                                       cwd=ROOT, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                       start_new_session=True)
        deadline = time.monotonic() + 600
        while log.read_text().count("kept up to date") == started:
            assert process.poll() is None and time.monotonic() < deadline, log.read_text()[-4000:]
            time.sleep(0.5)  # polling for the worker's banner
        return process

    def landed_until(count: int) -> int:
        deadline = time.monotonic() + 300
        while (got := len(streamed_rows(project))) < count and time.monotonic() < deadline:
            time.sleep(0.5)  # polling the table for the stream's commits
        return got

    produce(0, 3000)
    process = run()
    try:
        assert landed_until(1) >= 1, log.read_text()[-4000:]
        produce(3000, 1000)  # while the stream reads
    finally:
        os.killpg(process.pid, 9)  # SIGKILL, its driver with it
        process.wait()
    produce(4000, 1000)
    process = run()
    try:
        assert landed_until(5000) == 5000, log.read_text()[-4000:]
    finally:
        os.killpg(process.pid, 2)  # Ctrl-C
        assert process.wait(300) == 0, log.read_text()[-4000:]
    rows = streamed_rows(project)
    assert len(rows) == 5000 and len({(p, o) for p, o, _, _ in rows}) == 5000
    assert sorted(n for _, _, _, n in rows) == list(range(5000))
    fetched = {p.name for p in (cluster.folder / "work").glob("*/*/*.jar")}
    assert any(name.startswith("org.apache.spark_spark-sql-kafka") for name in fetched), sorted(fetched)
