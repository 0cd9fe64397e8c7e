"""Deployed state is read once per command: state-store, view-record and Delta history reads counted while the
example project's fixtures load (`pipeframe append --fixtures`) and during one dev-loop save."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

import pipeframe.compiler.compile as compile_module
from pipeframe.dev import DevLoop
from pipeframe.engine.warehouse import IO
from pipeframe.project import Project

EXAMPLE = Path(__file__).resolve().parents[2] / "example_project"


@pytest.fixture(scope="module")
def example(spark, spark_config) -> Path:
    root = Path(spark_config.root) / "reads"
    shutil.rmtree(root, ignore_errors=True)
    shutil.copytree(EXAMPLE, root, ignore=shutil.ignore_patterns(".pipeframe"))
    return root


def test_loading_fixtures_reads_the_deployed_state_once(spark, example):
    Project(example, spark=spark, environ={}).deploy()
    IO.clear()
    project = Project(example, spark=spark, environ={})
    results = project.load_fixtures()
    assert [r.datasource for r in results] == ["products", "page_views", "sales"]  # lookup tables first
    assert sum(r.accepted for r in results) > 0 and all(not v.failed for r in results for v in r.views)
    assert IO["state"] == 1, IO
    assert IO["views"] <= len(results), IO  # each append's refresh reads the view records (when there are any)
    # Delta history: per fixture file, is it loaded already and which version the append committed; per view
    # refreshed, its watermark and which version its write committed (or whether Delta skipped it); per source, its
    # recent commits (read once for all the views of that source). A local table's history is read from its commit
    # files (`history_log`); any other's through Spark (`history`).
    refreshed = [v.view for r in results for v in r.views]
    sources = {project.snapshot.table(name).state.source for name in refreshed}
    reads = IO["history"] + IO["history_log"]
    assert reads <= 2 * len(results) + 2 * len(refreshed) + len(sources), (IO, refreshed, sources)
    assert IO["history"] == 0, IO  # a local warehouse needs no DESCRIBE HISTORY
    IO.clear()
    again = Project(example, spark=spark, environ={}).load_fixtures()  # everything is loaded already
    assert all(r.reasons == ("already loaded",) for r in again)
    assert (IO["state"], IO["views"], IO["history"] + IO["history_log"]) == (1, 0, len(again)), IO


def test_a_dev_loop_save_compiles_once_and_reads_the_state_only_under_the_deploy_lock(spark, example, monkeypatch):
    lines: list[str] = []
    loop = DevLoop(example, env=None, echo=lines.append, spark=spark)
    assert loop.initial_build().ok, lines
    compiles = []
    real = compile_module.compile_project
    monkeypatch.setattr(compile_module, "compile_project", lambda *a, **k: compiles.append(1) or real(*a, **k))
    pipe = example / "pipes/top_products.pipe"
    pipe.write_text(pipe.read_text().replace("DESCRIPTION >", "DESCRIPTION >\n    Edited in the dev loop.", 1))
    IO.clear()
    build = loop.rebuild({str(pipe)})
    assert build.ok and build.changes == 1, lines
    assert len(compiles) == 1
    assert IO["state"] == 1, IO  # the deployer's read under its lock; planning used the snapshot in memory
    assert IO["history"] == 0, IO


def test_view_records_are_read_again_only_after_another_writer_changes_them(spark, example):
    project = Project(example, spark=spark, environ={})
    project.deploy()
    project.pause("sales_by_hour")
    IO.clear()
    for _ in range(3):
        outcomes = {r.view: r.outcome for r in project.refresh()}
        assert outcomes["sales_by_hour"] == "paused", outcomes
    assert IO["views"] == 0, IO  # this process wrote the records last: it knows them, and the table did not move
    Project(example, spark=spark, environ={}).resume("sales_by_hour")  # another writer (its own warehouse object)
    IO.clear()
    outcomes = {r.view: r.outcome for r in project.refresh()}
    assert outcomes["sales_by_hour"] in ("applied", "up to date"), outcomes  # the resume was seen
    assert IO["views"] == 1, IO
