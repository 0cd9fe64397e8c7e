"""The compatibility corpus (tests/compat/, public Tinybird projects vendored unchanged): how much of each one
`pipeframe check` accepts, printed as a table (`pytest -s`, or `python -m tests.compat.report`), with a floor per
project so that a change that loses ground fails here. Raise a floor when you make more files check clean."""

from __future__ import annotations

import pytest

from tests.compat.report import CORPUS, check_project, projects, table

# Files that check clean, per project: what the corpus reached when the floor was last raised.
FLOORS = {
    "ecommerce-order-status-starter-kit": 26,
    "flappy-tinybird": 7,
    "log-analytics-starter-kit": 18,
    "real-time-inventory-management-system": 25,
    "tinynest": 64,
    "web-analytics-starter-kit": 28,
    "zero-dollars-stats": 15,
}


@pytest.fixture(scope="module")
def reports():
    return {p.name: check_project(p) for p in projects()}


def test_every_corpus_project_has_a_floor_and_its_licence(reports):
    assert set(reports) == set(FLOORS)
    sources = (CORPUS / "SOURCES.md").read_text(encoding="utf-8")
    for name in reports:
        assert (CORPUS / name / "LICENSE").is_file(), name
        assert f"`{name}/`" in sources, name


def test_the_corpus_checks_clean_at_least_as_far_as_before(reports, capsys):
    with capsys.disabled():
        print("\n" + table(list(reports.values())))
    below = {name: (r.clean, FLOORS[name]) for name, r in reports.items() if r.clean < FLOORS[name]}
    assert not below, f"clean files below the floor (clean, floor): {below}"
    files = sum(len(r.files) for r in reports.values())
    assert files >= 190  # the corpus is all there


def test_a_clean_file_has_no_error_and_a_failing_one_says_why(reports):
    for report in reports.values():
        for path, errors in report.failing.items():
            assert errors and all(e.is_error and e.code.startswith("PF") and e.hint for e in errors), path
        assert report.clean == len(report.files) - len(report.failing)
