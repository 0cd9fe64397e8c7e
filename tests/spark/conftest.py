"""Spark test fixtures: one embedded Spark + Delta session for the whole run, built by pipeframe's builder.

Use `spark` for the session, `spark_config` for the project it belongs to and `table_path` for a fresh
Delta table location under that project's warehouse; a module that defines a `project` fixture gets it served
over HTTP by `server` and a client of it by `http`. Calling get_session with other settings restarts Spark
and stops this session, so tests that need a project should build it under `spark_config.root`.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from pipeframe.config import ProjectConfig, load_config
from pipeframe.engine.session import get_session, stop_session

if TYPE_CHECKING:
    import httpx

    from pipeframe.server import RunningServer

_tables = itertools.count()


@pytest.fixture(scope="session")
def spark_config(tmp_path_factory: pytest.TempPathFactory) -> ProjectConfig:
    """A throwaway project whose pipeframe.yaml asks for 2 shuffle partitions and interpreted query execution; the
    warehouse is its default.

    The shared session runs thousands of different queries over a few hundred rows each: generating and compiling
    Java for each (whole-stage and expression codegen) and re-planning each stage (adaptive execution) cost more
    than running them. Interpreted evaluation gives the same answers (Spark's own expression tests run both
    modes); side by side on test_read_path, test_views and test_retractions: wall 436 -> 335 s, JVM CPU 617 -> 463
    s. Worker processes started on copies of this pipeframe.yaml run the same way; the e2e tests' CLI commands and
    servers, the clusters and Spark Connect keep Spark's defaults, codegen and AQE included, as the README's main
    job and the benchmarks do."""
    root = tmp_path_factory.mktemp("spark_project")
    (root / "pipeframe.yaml").write_text(
        "name: spark_tests\nspark:\n  conf:\n    spark.sql.shuffle.partitions: 2\n"
        "    spark.sql.codegen.wholeStage: false\n    spark.sql.codegen.factoryMode: NO_CODEGEN\n"
        "    spark.sql.adaptive.enabled: false\n", encoding="utf-8")
    # environ={}: a developer's PIPEFRAME_WAREHOUSE or PIPEFRAME_SPARK_REMOTE must not leak into tests.
    return load_config(root, environ={})


@pytest.fixture(scope="session")
def spark(spark_config: ProjectConfig) -> Iterator:
    # This session's JVM lives for the whole run, where the C2 compiler pays off: it starts without the C1-only
    # flags tests/conftest.py gives the short-lived JVMs (workers, CLI subprocesses, servers). Its JIT threads
    # still took 39% of its CPU in tests/spark/test_views.py (per-thread /proc times): the tests run many
    # different small queries, few of them hot, so thresholds 4x higher compile only what stays hot (side by side
    # on three files, a few percent less JVM CPU and wall time; within the noise for the whole suite).
    with pytest.MonkeyPatch.context() as env:
        env.setenv("JAVA_TOOL_OPTIONS", "-XX:CompileThresholdScaling=4")
        session = get_session(spark_config)
    yield session
    stop_session()


@pytest.fixture
def table_path(spark_config: ProjectConfig, request: pytest.FixtureRequest) -> str:
    """A path under the warehouse where no table exists yet, unique to this test."""
    name = "".join(c if c.isalnum() else "_" for c in request.node.name)
    return str(Path(spark_config.warehouse_uri) / "tests" / f"{name}_{next(_tables)}")


@pytest.fixture(scope="module")
def server(project) -> Iterator[RunningServer]:
    """A real HTTP server (uvicorn, on a free port) serving the module's `project` fixture, for the whole module."""
    from pipeframe.server import Service, start_server

    running = start_server(Service(project), port=0)
    yield running
    running.stop()


@pytest.fixture(scope="module")
def http(server: RunningServer) -> Iterator[httpx.Client]:
    """A client of the module's `server`."""
    import httpx

    with httpx.Client(base_url=server.url, timeout=300) as client:
        yield client


def deployed(spark, spark_config: ProjectConfig, name: str, files: dict[str, str], config_extra: str = ""):
    """A project of `files` in a fresh folder under the shared session's root, with the session's pipeframe.yaml
    (plus `config_extra`), deployed and its fixtures loaded."""
    import shutil

    from pipeframe.project import Project
    from tests.conftest import write_project

    root = Path(spark_config.root) / name
    shutil.rmtree(root, ignore_errors=True)
    write_project(root, files)
    (root / "pipeframe.yaml").write_text((Path(spark_config.root) / "pipeframe.yaml").read_text() + config_extra)
    project = Project(root, spark=spark, environ={})
    project.deploy()
    project.load_fixtures()
    return project


def until(what, want, deadline_s: float = 120.0):
    """`what()` once it equals `want`, polled every 0.2 s until `deadline_s` (its last answer otherwise): how a test
    waits for a background job (a consumer, an import, the materializer) without sleeping a guessed time."""
    import time

    deadline = time.monotonic() + deadline_s
    while True:
        got = what()
        if got == want or time.monotonic() > deadline:
            return got
        time.sleep(0.2)
