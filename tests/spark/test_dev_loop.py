"""The dev loop in process, on the shared session: an endpoint edit is served as soon as it compiles, and taken
back when its deploy then fails, so what is served is always what is deployed or about to be."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from pipeframe.dev import DevLoop
from pipeframe.server import Service
from tests.conftest import EVENTS, write_project

TOP = """\
NODE endpoint
SQL >
    %
    SELECT user_id, sum(amount) AS total FROM events GROUP BY user_id ORDER BY total DESC
    LIMIT {{ Int(limit, 10) }}
TYPE endpoint
"""


def test_an_edit_served_ahead_of_a_failed_deploy_is_taken_back(spark, spark_config):
    root = Path(spark_config.root) / "dev_loop"
    shutil.rmtree(root, ignore_errors=True)
    write_project(root, {"datasources/events.datasource": EVENTS, "pipes/top.pipe": TOP,
                         "fixtures/events.ndjson": '{"ts": "2024-05-01 10:00:00", "user_id": "ann", "amount": 3}\n'})
    shutil.copy(Path(spark_config.root) / "pipeframe.yaml", root / "pipeframe.yaml")
    lines: list[str] = []
    loop = DevLoop(root, echo=lines.append, spark=spark)
    assert loop.initial_build().ok, lines
    loop.service = Service(loop.project)
    assert loop.service.current.endpoints.run("top", {}).data == [{"user_id": "ann", "total": 3}]

    pipe = root / "pipes/top.pipe"
    pipe.write_text(pipe.read_text().replace("total", "spent"))
    warehouse = loop.project.warehouse
    warehouse.acquire_lock("another-deploy")  # the deploy after the early serve will fail
    try:
        failed = loop.rebuild({str(pipe)})
    finally:
        warehouse.release_lock("another-deploy")
    assert not failed.ok
    assert any("PF602" in line for line in lines) and any("still serving" in line for line in lines)
    assert loop.service.current.endpoints.run("top", {}).columns == ["user_id", "total"]  # taken back

    assert loop.rebuild({str(pipe)}).ok
    assert loop.service.current.endpoints.run("top", {}).data == [{"user_id": "ann", "spent": 3}]


def test_the_last_compiles_diagnostics_are_served_under_dev(spark, spark_config):
    """`GET /v0/dev/diagnostics` (the console's dev tab) answers what the last compile of the files reported: nothing
    after a good build, the error with its file, line and fix after a broken save (the last good version serving)."""
    import httpx

    from pipeframe.server import start_server

    root = Path(spark_config.root) / "dev_diagnostics"
    shutil.rmtree(root, ignore_errors=True)
    write_project(root, {"datasources/events.datasource": EVENTS, "pipes/top.pipe": TOP})
    shutil.copy(Path(spark_config.root) / "pipeframe.yaml", root / "pipeframe.yaml")
    lines: list[str] = []
    loop = DevLoop(root, echo=lines.append, spark=spark)
    assert loop.initial_build().ok, lines
    loop.service = Service(loop.project, last_compile=lambda: loop.last_compile)
    server = start_server(loop.service, port=0)
    try:
        with httpx.Client(base_url=server.url, timeout=120) as http:
            clean = http.get("/v0/dev/diagnostics").json()
            assert (clean["ok"], clean["errors"], clean["diagnostics"]) == (True, 0, [])
            assert clean["compiled_at"] is not None

            pipe = root / "pipes/top.pipe"
            pipe.write_text(pipe.read_text().replace("FROM events", "FROM evnets"))
            assert not loop.rebuild({str(pipe)}).ok
            broken = http.get("/v0/dev/diagnostics").json()
            assert (broken["ok"], broken["errors"]) == (False, 1)
            [error] = broken["diagnostics"]
            assert (error["code"], error["file"], error["line"]) == ("PF301", "pipes/top.pipe", 4), error
            assert "events" in error["hint"] and str(root) not in json.dumps(broken)
            assert http.get("/v0/pipes/top.json").status_code == 200  # the last good version still serves
    finally:
        server.stop()
