"""`check` is honest on the compatibility corpus: every file of every vendored Tinybird project (tests/compat/) that
checks clean passes Spark's analyzer — its compiled pipe and node SQL, a materialized view's state, read and
compaction queries, its partition key and TTL — over empty temporary views of the compiled schemas. Analysis only:
nothing runs. The table (files / clean / analyzed per project) prints with `pytest -s`; tests/compat/analysis.py
does the work, `python -m tests.compat.report --spark` prints the same outside pytest."""

from __future__ import annotations

import pytest

from tests.compat.analysis import Analysis, analyze_project
from tests.compat.report import projects, table


@pytest.fixture(scope="module")
def analyses(spark) -> dict[str, Analysis]:
    return {root.name: analyze_project(spark, root) for root in projects()}


def test_every_file_that_checks_clean_passes_sparks_analysis(analyses, capsys):
    with capsys.disabled():
        print("\n" + table([a.report for a in analyses.values()],
                           {name: len(a.analyzed) for name, a in analyses.items()}))
        for name, a in analyses.items():
            for path, upstream in sorted(a.blocked.items()):
                print(f"{name}/{path}: not analyzed, reads what {', '.join(upstream)} defines, which fails check")
    failures = [f"{name}/{path}: {message}" for name, a in analyses.items()
                for path, messages in sorted(a.failures.items()) for message in messages]
    assert not failures, "checks clean but Spark's analyzer rejects it:\n" + "\n".join(failures)


def test_analysis_covers_every_clean_file(analyses):
    for name, a in analyses.items():
        clean = set(a.report.files) - set(a.report.failing)
        assert set(a.analyzed) | set(a.failures) | set(a.blocked) == clean, name
        assert all(upstream and set(upstream) <= set(a.report.failing) for upstream in a.blocked.values()), name
        assert a.analyzed, f"{name}: nothing analyzed"
