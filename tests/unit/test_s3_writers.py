"""Which warehouses pipeframe writes to without a LogStore named for them (no JVM: the rule, not Delta)."""

from __future__ import annotations

import pytest

from pipeframe.engine.warehouse import MULTI_DRIVER_LOGSTORE, SINGLE_DRIVER_LOGSTORE, s3_scheme, s3_writers_problem


@pytest.mark.parametrize(("uri", "scheme"), [
    ("s3a://bucket/shop", "s3a"), ("S3A://bucket/shop", "s3a"), ("s3://bucket/shop", "s3"), ("s3n://b/x", "s3n"),
    ("/home/me/shop/.pipeframe/warehouse", None), ("file:///tmp/warehouse", None), ("gs://bucket/shop", None),
    ("abfss://lake@account.dfs.core.windows.net/shop", None), ("hdfs://namenode:8020/shop", None),
])
def test_s3_scheme(uri: str, scheme: str | None) -> None:
    assert s3_scheme(uri) == scheme


def test_an_s3_warehouse_without_a_logstore_is_refused_naming_both_fixes() -> None:
    problem = s3_writers_problem("s3a://bucket/shop", "s3a", None)
    assert problem is not None
    [diagnostic] = problem.diagnostics
    assert diagnostic.code == "PF609"
    assert "s3a://bucket/shop" in diagnostic.message
    assert f"spark.delta.logStore.s3a.impl: {SINGLE_DRIVER_LOGSTORE}" in diagnostic.hint
    assert MULTI_DRIVER_LOGSTORE in diagnostic.hint
    assert s3_writers_problem("s3://bucket/shop", "s3", "  ") is not None


@pytest.mark.parametrize("logstore", [SINGLE_DRIVER_LOGSTORE, MULTI_DRIVER_LOGSTORE, "com.example.MyLogStore"])
def test_a_logstore_named_on_purpose_is_the_teams_decision(logstore: str) -> None:
    assert s3_writers_problem("s3a://bucket/shop", "s3a", logstore) is None


def test_excluded_jars_are_part_of_the_remembered_resolution(tmp_path, monkeypatch) -> None:
    """hadoop-aws with and without the AWS SDK bundle excluded are two resolutions (spark.jars.excludes)."""
    from pipeframe.engine.session import ResolvedJars

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    jar = tmp_path / "hadoop-aws.jar"
    jar.write_bytes(b"PK")
    packages = ["org.apache.hadoop:hadoop-aws:3.4.2"]
    ResolvedJars(packages, "software.amazon.awssdk:bundle").save([f"file://{jar}"])
    assert ResolvedJars(packages, " software.amazon.awssdk:bundle ").load() == [f"file://{jar}"]
    assert ResolvedJars(packages).load() == []  # without the exclusion ivy resolves (the bundle) again
    assert ResolvedJars(packages, "").path == ResolvedJars(packages).path  # no excludes: the key it always had
