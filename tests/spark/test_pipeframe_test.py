"""`pipeframe test` on a copy of example_project: one temporary warehouse built from its fixtures for the whole
module; every case passes, a changed expectation fails with a diff, `--update` writes the answer back."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from pipeframe.errors import PipeframeError
from pipeframe.project import Project
from pipeframe.testing import isolated_project, run_tests

EXAMPLE = Path(__file__).resolve().parents[2] / "example_project"


@pytest.fixture(scope="module")
def project(spark, spark_config) -> Project:
    root = spark_config.root / "pipeframe_test_example"
    shutil.copytree(EXAMPLE, root, ignore=shutil.ignore_patterns(".pipeframe"))
    return Project(root, spark=spark, environ={})


@pytest.fixture(scope="module")
def built(project, spark):
    """The example deployed into a temporary warehouse with its fixtures, shared by every test here."""
    steps = []
    with isolated_project(project, steps.append) as built:
        warehouse = Path(built.config.warehouse_uri)
        assert steps == ["deploy", "fixtures"] and warehouse.is_dir()
        # The same warm Spark (no restart for another warehouse), but a session of its own for the names.
        assert built.spark is not spark and built.spark.sparkContext is spark.sparkContext
        yield built
    assert not warehouse.exists()  # removed on exit
    assert not (project.root / ".pipeframe" / "warehouse").exists()  # the project's own was never used


def test_every_example_case_passes(project, built):
    seen = []
    report = run_tests(project, built=built, on_result=seen.append)
    assert report.ok, "\n\n".join(f"{r.case.id}\n{r.failure}" for r in report.failed)
    assert len(report.results) == 16 and seen == list(report.results)
    assert sum(r.case.status == 400 for r in report.results) == 6
    assert all(r.status == (r.case.status or 200) for r in report.results)
    top_3 = next(r for r in report.results if r.case.id == "top_products.top_3")
    assert [row["product"] for row in top_3.rows] == ["espresso-machine", "coffee-grinder", "running-shoes"]


def test_a_changed_row_fails_with_a_diff_and_update_writes_the_answer_back(project, built):
    path = project.root / "tests" / "top_products.yaml"
    original = path.read_text(encoding="utf-8")
    right = '{"product":"coffee-grinder","orders":27,"revenue":3793.78,"currency":"EUR"}'
    wrong = '{"product":"coffee-grinder","orders":72,"revenue":3793.78,"currency":"EUR"}'
    assert original.count(right) == 2
    # Only the top_3 case's second row changes (the `default` case holds the same line).
    path.write_text(original.replace("- name: top_3\n  params: {limit: 3}\n  expected_result: |\n"
                                     '    {"product":"espresso-machine","orders":17,"revenue":8899.5,"currency":"EUR"}\n'
                                     f"    {right}\n",
                                     "- name: top_3\n  params: {limit: 3}\n  expected_result: |\n"
                                     '    {"product":"espresso-machine","orders":17,"revenue":8899.5,"currency":"EUR"}\n'
                                     f"    {wrong}\n"), encoding="utf-8")
    try:
        failed = run_tests(project, ["top_products"], built=built)
        assert not failed.ok and [r.case.id for r in failed.failed] == ["top_products.top_3"]
        assert failed.failed[0].failure.splitlines() == [
            "--- expected  tests/top_products.yaml :: top_3",
            "+++ actual    top_products(limit=3)",
            "@@ -1,3 +1,3 @@",
            ' {"product":"espresso-machine","orders":17,"revenue":8899.5,"currency":"EUR"}',
            f"-{wrong}",
            f"+{right}",
            ' {"product":"running-shoes","orders":19,"revenue":3022.6,"currency":"EUR"}',
        ]

        updated = run_tests(project, ["top_products.top_3"], update=True, built=built)
        assert updated.ok and updated.updated_files == ("tests/top_products.yaml",)
        assert [r.updated for r in updated.results] == [True]
        assert path.read_text(encoding="utf-8") == original  # comments, spacing and other cases as written

        assert run_tests(project, ["top_products"], built=built).ok
    finally:
        path.write_text(original, encoding="utf-8")


def test_status_cases_pass_on_the_status_and_a_wrong_status_fails(project, built):
    path = project.root / "tests" / "product_hours.yaml"
    original = path.read_text(encoding="utf-8")
    assert "  expected_http_status: 400\n" in original
    path.write_text(original.replace("  expected_http_status: 400\n", "  expected_http_status: 200\n"),
                    encoding="utf-8")
    try:
        report = run_tests(project, ["product_hours"], built=built)
        [failure] = report.failed
        assert failure.case.id == "product_hours.missing_product" and failure.status == 400
        assert failure.failure.startswith("expected HTTP 200, got HTTP 400: ")
        assert "PF202" in failure.failure and "`product`" in failure.failure

        assert run_tests(project, ["product_hours"], update=True, built=built).ok
        assert path.read_text(encoding="utf-8") == original
    finally:
        path.write_text(original, encoding="utf-8")


def test_a_malformed_test_file_is_an_error_before_anything_is_built(spark, spark_config):
    root = spark_config.root / "pipeframe_test_malformed"
    shutil.copytree(EXAMPLE, root, ignore=shutil.ignore_patterns(".pipeframe"))
    (root / "tests" / "top_products.yaml").write_text("- name: top_3\n  params: {limit: 3\n", encoding="utf-8")
    with pytest.raises(PipeframeError) as err:
        run_tests(Project(root, spark=spark, environ={}))
    assert err.value.code == "PF821" and str(err.value.diagnostics[0].location) == "tests/top_products.yaml:3:1"
    # Only the check cache was written; no warehouse (throwaway or not) was built.
    assert [p.name for p in (root / ".pipeframe").iterdir()] == ["cache"]
