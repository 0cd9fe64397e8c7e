"""Spark settings, the Java check and start-failure messages, all without a JVM (pyspark is never imported).

The settings are what get_session hands to Spark, so these tests pin the embedded defaults, the user's
override rule, Spark Connect's reduced set and PIPEFRAME_SPARK_JARS.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from pipeframe.config import load_config
from pipeframe.engine.session import (
    DELTA_CATALOG,
    DELTA_EXTENSION,
    JARS_ENV,
    first_meaningful_line,
    get_session,
    java_major_version,
    java_problem,
    spark_settings,
)
from pipeframe.errors import PipeframeError

REPO = Path(__file__).resolve().parents[2]


def project(tmp_path: Path, yaml: str = "", **environ: str):
    tmp_path.mkdir(parents=True, exist_ok=True)
    if yaml:
        (tmp_path / "pipeframe.yaml").write_text(yaml, encoding="utf-8")
    return load_config(tmp_path, environ=environ)


def test_embedded_defaults(tmp_path):
    settings = spark_settings(project(tmp_path, "name: shop\n"), environ={})
    assert settings["spark.master"] == "local[*]"
    assert settings["spark.app.name"] == "pipeframe:shop"
    assert settings["spark.sql.extensions"] == DELTA_EXTENSION
    assert settings["spark.sql.catalog.spark_catalog"] == DELTA_CATALOG
    assert settings["spark.sql.warehouse.dir"] == str(tmp_path.resolve() / ".pipeframe/warehouse/spark-warehouse")
    assert settings["spark.ui.enabled"] == "false"
    assert settings["spark.sql.shuffle.partitions"] == "4"
    assert settings["spark.sql.session.timeZone"] == "UTC"
    assert settings["spark.databricks.delta.schema.autoMerge.enabled"] == "false"
    assert "spark.jars" not in settings and "spark.jars.packages" not in settings  # Delta comes from Maven


def test_settings_are_strings(tmp_path):
    settings = spark_settings(project(tmp_path, "spark: {conf: {spark.sql.shuffle.partitions: 8}}\n"), environ={})
    assert all(isinstance(k, str) and isinstance(v, str) for k, v in settings.items())


def test_the_projects_spark_conf_wins(tmp_path):
    config = project(tmp_path, "spark:\n  conf:\n    spark.sql.shuffle.partitions: 16\n"
                               "    spark.sql.session.timeZone: Europe/Madrid\n    spark.driver.memory: 4g\n")
    settings = spark_settings(config, environ={})
    assert settings["spark.sql.shuffle.partitions"] == "16"
    assert settings["spark.sql.session.timeZone"] == "Europe/Madrid"
    assert settings["spark.driver.memory"] == "4g"


def test_environment_selects_the_warehouse(tmp_path):
    config = project(tmp_path, "environments:\n  dev: {warehouse: .pipeframe/dev}\n", PIPEFRAME_ENV="dev")
    assert spark_settings(config, environ={})["spark.sql.warehouse.dir"].endswith("/.pipeframe/dev/spark-warehouse")


def test_a_hadoop_warehouse_uri_is_kept(tmp_path):
    config = project(tmp_path, PIPEFRAME_WAREHOUSE="s3a://bucket/shop/")
    assert spark_settings(config, environ={})["spark.sql.warehouse.dir"] == "s3a://bucket/shop/spark-warehouse"


def test_a_cluster_master_keeps_sparks_own_partitioning(tmp_path):
    settings = spark_settings(project(tmp_path, PIPEFRAME_SPARK_MASTER="spark://head:7077"), environ={})
    assert settings["spark.master"] == "spark://head:7077"
    assert "spark.sql.shuffle.partitions" not in settings
    assert "spark.driver.host" not in settings
    assert settings["spark.sql.extensions"] == DELTA_EXTENSION


def test_spark_connect_gets_only_session_settings(tmp_path):
    config = project(tmp_path, "spark: {conf: {spark.sql.shuffle.partitions: 32}}\n",
                     PIPEFRAME_SPARK_REMOTE="sc://spark.internal:15002")
    settings = spark_settings(config, environ={JARS_ENV: "/does/not/matter"})
    assert settings == {
        "spark.remote": "sc://spark.internal:15002",
        "spark.sql.session.timeZone": "UTC",
        "spark.databricks.delta.schema.autoMerge.enabled": "false",
        "spark.databricks.delta.skipRecordingEmptyCommits": "false",
        "spark.sql.execution.topKSortFallbackThreshold": "100000",
        "spark.sql.shuffle.partitions": "32",
    }


def make_jars(folder: Path, *names: str) -> list[str]:
    folder.mkdir(parents=True, exist_ok=True)
    for name in names:
        (folder / name).write_bytes(b"PK")
    return [str((folder / name).resolve()) for name in sorted(names)]


def test_pipeframe_spark_jars_folder_replaces_maven(tmp_path):
    jars = make_jars(tmp_path / "jars", "delta-storage-4.4.0.jar", "delta-spark_4.1_2.13-4.4.0.jar")
    (tmp_path / "jars" / "README.txt").write_text("not a jar")
    settings = spark_settings(project(tmp_path / "p"), environ={JARS_ENV: str(tmp_path / "jars")})
    assert settings["spark.jars"].split(",") == jars
    assert "spark.jars.packages" not in settings


def test_pipeframe_spark_jars_accepts_a_comma_separated_list_and_keeps_user_jars(tmp_path):
    delta, storage = make_jars(tmp_path / "jars", "delta.jar", "storage.jar")
    config = project(tmp_path / "p", "spark: {conf: {spark.jars: /opt/extra/udfs.jar}}\n")
    settings = spark_settings(config, environ={JARS_ENV: f" {storage} , {delta},"})
    assert settings["spark.jars"].split(",") == [storage, delta, "/opt/extra/udfs.jar"]


@pytest.mark.parametrize("value, words", [("missing.jar", "neither a .jar file nor a folder"),
                                          ("empty", "holds no .jar files")])
def test_a_bad_pipeframe_spark_jars_is_pf504(tmp_path, value, words):
    (tmp_path / "empty").mkdir()
    with pytest.raises(PipeframeError) as caught:
        spark_settings(project(tmp_path / "p"), environ={JARS_ENV: str(tmp_path / value)})
    assert caught.value.code == "PF504"
    assert words in caught.value.diagnostics[0].message


@pytest.mark.parametrize("output, major", [
    ('openjdk version "17.0.15" 2025-04-15\nOpenJDK Runtime Environment', 17),
    ('java version "1.8.0_402"\nJava(TM) SE Runtime Environment', 8),
    ('Picked up _JAVA_OPTIONS: -Xmx1g\nopenjdk version "21" 2023-09-19', 21),
    ('openjdk version "11.0.2-internal" 2019-01-15', 11),
    ("no version here", None),
])
def test_java_major_version(output, major):
    assert java_major_version(output) == major


def fake_java(home: Path, version: str) -> Path:
    java = home / "bin" / "java"
    java.parent.mkdir(parents=True)
    java.write_text(f"#!/bin/sh\necho 'openjdk version \"{version}\" 2024-01-01' >&2\n")
    java.chmod(0o755)
    return home


posix_only = pytest.mark.skipif(os.name != "posix", reason="fake java is a shell script")


@posix_only
def test_java_17_is_fine(tmp_path, monkeypatch):
    monkeypatch.setenv("JAVA_HOME", str(fake_java(tmp_path / "jdk17", "17.0.9")))
    assert java_problem() is None


@posix_only
def test_old_java_is_one_sentence(tmp_path, monkeypatch):
    monkeypatch.setenv("JAVA_HOME", str(fake_java(tmp_path / "jdk8", "1.8.0_402")))
    problem = java_problem()
    assert problem is not None and problem.endswith(".") and problem.count(". ") == 0
    assert "Java 8" in problem and "17" in problem


def test_a_broken_java_home_is_named(tmp_path, monkeypatch):
    monkeypatch.setenv("JAVA_HOME", str(tmp_path / "nowhere"))
    problem = java_problem()
    assert problem is not None and "JAVA_HOME" in problem and str(tmp_path / "nowhere") in problem


def test_missing_java(tmp_path, monkeypatch):
    monkeypatch.delenv("JAVA_HOME", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    problem = java_problem()
    assert problem is not None and "not installed" in problem


@posix_only
def test_get_session_with_old_java_is_pf501_before_any_spark(tmp_path, monkeypatch):
    monkeypatch.setenv("JAVA_HOME", str(fake_java(tmp_path / "jdk11", "11.0.2")))
    with pytest.raises(PipeframeError) as caught:
        get_session(project(tmp_path / "p"))
    assert caught.value.code == "PF501"
    assert "Java 11" in caught.value.diagnostics[0].message
    assert "JAVA_HOME" in caught.value.diagnostics[0].hint


IVY_FAILURE = """\
:: loading settings :: url = jar:file:/x/ivy-2.5.3.jar!/org/apache/ivy/core/settings/ivysettings.xml
Ivy Default Cache set to: /root/.ivy2.5.2/cache
io.delta#delta-spark_4.1_2.13 added as a dependency
\t\t::          UNRESOLVED DEPENDENCIES         ::
Exception in thread "main" java.lang.RuntimeException: [unresolved dependency: io.delta#nope_2.13;0.0.1: not found]
\tat org.apache.spark.util.MavenUtils$.resolveMavenCoordinates(MavenUtils.scala:1)
"""
JVM_FAILURE = """\
Invalid maximum heap size: -Xmxbanana
Error: Could not create the Java Virtual Machine.
Error: A fatal exception has occurred. Program will exit.
"""
PY4J_FAILURE = """\
An error occurred while calling o31.sessionState.
: java.lang.IllegalArgumentException: Error while instantiating 'org.apache.spark.sql.internal.SessionStateBuilder':
\tat org.apache.spark.sql.classic.SparkSession$.instantiateSessionState(SparkSession.scala:1)
Caused by: org.apache.spark.SparkIllegalArgumentException: [INVALID_CONF_VALUE.TYPE_MISMATCH] The value 'abc' in \
the config "spark.sql.shuffle.partitions" is invalid. It should be a/an 'int' value. SQLSTATE: 22022
\tat org.apache.spark.sql.internal.SQLConf.setConfString(SQLConf.scala:1)
"""
MASTER_FAILURE = """\
WARNING: Using incubator modules: jdk.incubator.vector
Using Spark's default log4j profile: org/apache/spark/log4j2-defaults.properties
26/11/21 15:18:30 WARN Utils: Your hostname, vm, resolves to a loopback address: 127.0.0.1
Exception in thread "main" org.apache.spark.SparkException: Master must either be yarn or start with spark, k8s, \
or local
\tat org.apache.spark.deploy.SparkSubmit.error(SparkSubmit.scala:1065)
"""


@pytest.mark.parametrize("output, line", [
    (IVY_FAILURE, "unresolved dependency: io.delta#nope_2.13;0.0.1: not found"),
    (JVM_FAILURE, "Invalid maximum heap size: -Xmxbanana"),
    (PY4J_FAILURE, ("The value 'abc' in the config \"spark.sql.shuffle.partitions\" is invalid. "
                    "It should be a/an 'int' value.")),
    (MASTER_FAILURE, "Master must either be yarn or start with spark, k8s, or local"),
    ("", None),
])
def test_first_meaningful_line_of_real_start_failures(output, line):
    assert first_meaningful_line(output) == line


def test_no_jvm_needed_for_settings_and_the_java_check(tmp_path):
    code = ("import sys; from pipeframe.config import load_config; "
            "from pipeframe.engine.session import spark_settings, java_problem; "
            f"spark_settings(load_config({str(tmp_path)!r}, environ={{}}), environ={{}}); java_problem(); "
            "assert 'pyspark' not in sys.modules and 'py4j' not in sys.modules, 'pyspark was imported'")
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr


def test_resolved_jars_are_remembered_and_forgotten_when_a_file_is_gone(tmp_path, monkeypatch):
    from pipeframe.engine.session import ResolvedJars

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    jars = [tmp_path / "delta-spark.jar", tmp_path / "delta-storage.jar"]
    for jar in jars:
        jar.write_bytes(b"PK")
    cache = ResolvedJars(["org.example:extra:1.0"])
    assert cache.load() == []  # never resolved: ivy resolves on this start
    cache.save([f"file://{jar}" for jar in jars])
    assert ResolvedJars(["org.example:extra:1.0"]).load() == [f"file://{jar}" for jar in jars]
    assert ResolvedJars([]).load() == []  # other packages, other resolution
    jars[1].unlink()
    assert ResolvedJars(["org.example:extra:1.0"]).load() == []  # a jar was removed: resolve again


def test_a_second_first_start_waits_for_the_one_resolving_the_jars(tmp_path, monkeypatch):
    import threading

    from pipeframe.engine.session import ResolvedJars

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    jar = tmp_path / "delta-spark.jar"
    jar.write_bytes(b"PK")
    seen: list[list[str]] = []
    first = ResolvedJars([])
    with first.lock():
        def second_start() -> None:
            with ResolvedJars([]).lock():
                seen.append(ResolvedJars([]).load())

        waiting = threading.Thread(target=second_start)
        waiting.start()
        waiting.join(timeout=0.5)
        assert waiting.is_alive() and seen == []  # blocked while the first one resolves
        first.save([f"file://{jar}"])
    waiting.join(timeout=10)
    assert seen == [[f"file://{jar}"]]  # and then it finds what the first one resolved
