"""The four ways of keeping the scenario's three views up to date, behind one small interface.

    pipeframe  `Project.refresh()`: the new source commits only, merged into the views' aggregate states.
    ctas       CREATE OR REPLACE TABLE ... AS SELECT of each view over all rows, in the same session.
    dbt        `dbt run` (dbt-spark, session connection, in this process on the same SparkSession): the hourly and
               daily views as incremental models (merge on Delta, the usual `is_incremental()` filter), the
               all-time latency percentiles as a table (they cannot be merged, so dbt recomputes them).
    sdp        `spark-pipelines run` (Spark Declarative Pipelines): the three views as materialized views, which
               open-source Spark recomputes on every run; against a warm Spark Connect server started once.

Each side has `update()` (bring the views up to date, timed by the caller) and `exact()` (the exact view's rows,
for the cross-check), and reads the same Delta table the appends land in.
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path

from scenario import EXACT_COLUMNS, EXACT_VIEW, VIEWS


def delta_path(path: str | Path) -> str:
    return "delta.`" + str(path).replace("`", "``") + "`"


class Pipeframe:
    name = "pipeframe"

    def __init__(self, project) -> None:
        self.project = project

    def update(self) -> None:
        self.project.refresh()

    def exact(self):
        return self.project.query(f"SELECT {EXACT_COLUMNS} FROM {EXACT_VIEW}")


class Ctas:
    name = "ctas"

    def __init__(self, spark, source: str, work: Path) -> None:
        self.spark, self.source, self.folder = spark, source, work / "ctas"

    def update(self) -> None:
        for view, sql in VIEWS.items():
            self.spark.sql(f"CREATE OR REPLACE TABLE {delta_path(self.folder / view)} USING DELTA AS "
                           + sql.format(events=delta_path(self.source)))

    def exact(self):
        return self.spark.sql(f"SELECT {EXACT_COLUMNS} FROM {delta_path(self.folder / EXACT_VIEW)}")


DBT_INCREMENTAL = {  # view -> (unique key, the filter a dbt user writes for time-ordered events)
    "requests_by_hour": ("['hour', 'endpoint', 'status']", "ts >= (SELECT max(hour) FROM {{ this }})"),
    "users_by_day": ("['day']", "ts >= (SELECT CAST(max(day) AS TIMESTAMP) FROM {{ this }})"),
}


class Dbt:
    name = "dbt"
    schema = "dbt_bench"

    def __init__(self, spark, source: str, work: Path, threads: int = 4) -> None:
        from dbt.cli.main import dbtRunner

        self.spark = spark
        self.root = work / "dbt"
        (self.root / "models").mkdir(parents=True)
        (self.root / "dbt_project.yml").write_text(
            "name: bench\nversion: '1.0'\nprofile: bench\nmodel-paths: [models]\n"
            f"vars:\n  events: \"{delta_path(source)}\"\n")
        (self.root / "profiles.yml").write_text(
            "bench:\n  target: bench\n  outputs:\n    bench:\n      type: spark\n      method: session\n"
            f"      host: NA\n      schema: {self.schema}\n      threads: {threads}\n")
        for view, sql in VIEWS.items():
            body = sql.format(events="{{ var('events') }}")
            if view in DBT_INCREMENTAL:
                key, where = DBT_INCREMENTAL[view]
                config = (f"{{{{ config(materialized='incremental', incremental_strategy='merge', "
                          f"file_format='delta', unique_key={key}) }}}}")
                body = body.replace("\nGROUP BY", f"\n{{% if is_incremental() %}}WHERE {where}{{% endif %}}\nGROUP BY")
            else:
                config = "{{ config(materialized='table', file_format='delta') }}"
            (self.root / "models" / f"{view}.sql").write_text(f"{config}\n{body}\n")
        self.runner = dbtRunner()

    def update(self) -> None:
        root = str(self.root)
        result = self.runner.invoke(["run", "--project-dir", root, "--profiles-dir", root, "--quiet",
                                     "--target-path", str(self.root / "target"),
                                     "--log-path", str(self.root / "logs")])
        if not result.success:
            raise RuntimeError(f"dbt run failed: {result.exception or result.result}")

    def exact(self):
        return self.spark.sql(f"SELECT {EXACT_COLUMNS} FROM {self.schema}.{EXACT_VIEW}")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Sdp:
    name = "sdp"
    SERVER_CLASS = "org.apache.spark.sql.connect.service.SparkConnectServer"

    def __init__(self, spark, source: str, work: Path, conf: dict[str, str]) -> None:
        import pyspark

        self.spark = spark
        self.root = work / "sdp"
        self.warehouse = self.root / "warehouse"
        (self.root / "transformations").mkdir(parents=True)
        home = Path(pyspark.__file__).parent
        self.cli = str(home / "bin" / "spark-pipelines")
        self.port = free_port()
        settings = {
            "spark.master": conf.get("spark.master", "local[*]"),
            "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
            "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
            "spark.sql.warehouse.dir": str(self.warehouse),
            "spark.connect.grpc.binding.port": str(self.port),
            "spark.ui.enabled": "false",
            # the Delta jars (ivy coordinates or PIPEFRAME_SPARK_JARS files) and session settings of the
            # pipeframe side's session
            **{k: v for k, v in conf.items() if k in ("spark.jars.packages", "spark.jars", "spark.driver.memory",
                                                        "spark.sql.shuffle.partitions", "spark.sql.session.timeZone")},
        }
        command = [str(home / "bin" / "spark-submit"), "--class", self.SERVER_CLASS]
        for key, value in settings.items():
            command += ["--conf", f"{key}={value}"]
        self.log = (self.root / "connect-server.log").open("w")
        self.server = subprocess.Popen(command, stdout=self.log, stderr=subprocess.STDOUT, cwd=self.root,
                                       env={**os.environ, "SPARK_HOME": str(home)})
        self._wait_for_server()
        for view, sql in VIEWS.items():  # Delta MVs fail on their second run in Spark 4.1 (see the docs)
            (self.root / "transformations" / f"{view}.sql").write_text(
                f"CREATE MATERIALIZED VIEW {view} AS\n{sql.format(events=delta_path(source))};\n")
        (self.root / "pipeline.yml").write_text(
            f"name: bench\nstorage: {(self.root / 'storage').as_uri()}\n"
            "libraries:\n  - glob:\n      include: transformations/**\n")
        self.run_phase: list[float] = []  # "Starting run" -> "Run is COMPLETED", from the CLI's own log lines

    def _wait_for_server(self, timeout: float = 300) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.server.poll() is not None:
                raise RuntimeError(f"the Spark Connect server exited; see {self.log.name}")
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", self.port)) == 0:
                    return
            time.sleep(0.5)
        raise RuntimeError(f"the Spark Connect server did not listen on {self.port} within {timeout} s")

    def update(self) -> None:
        done = subprocess.run([self.cli, "--remote", f"sc://127.0.0.1:{self.port}", "run", "--spec",
                               str(self.root / "pipeline.yml")], cwd=self.root, capture_output=True, text=True,
                              env={**os.environ, "SPARK_HOME": str(Path(self.cli).parents[1])}, check=False)
        if done.returncode != 0 or "Run is COMPLETED" not in done.stdout:
            raise RuntimeError(f"spark-pipelines run failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
        stamps = {}
        for line in done.stdout.splitlines():
            match = re.match(r"(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d): (Starting run|Run is COMPLETED)", line)
            if match:
                stamps[match.group(2)] = datetime.fromisoformat(match.group(1))
        self.run_phase.append((stamps["Run is COMPLETED"] - stamps["Starting run"]).total_seconds())

    def exact(self):
        folder = self.warehouse / EXACT_VIEW
        return self.spark.sql(f"SELECT {EXACT_COLUMNS} FROM parquet.`{folder}`")

    def close(self) -> None:
        self.server.terminate()
        try:
            self.server.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.server.kill()
        self.log.close()


def versions() -> dict[str, str]:
    from importlib import metadata

    found = {"python": sys.version.split()[0]}
    for package in ("pipeframe", "pyspark", "delta-spark", "dbt-core", "dbt-spark", "sqlglot"):
        try:
            found[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            found[package] = "not installed"
    java = subprocess.run(["java", "-version"], capture_output=True, text=True, check=False).stderr
    found["java"] = java.splitlines()[0] if java else "unknown"
    return found


def remove(path: Path) -> None:
    shutil.rmtree(path, ignore_errors=True)
