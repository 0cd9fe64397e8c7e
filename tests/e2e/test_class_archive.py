"""The driver JVM's class archive (pipeframe/engine/classarchive.py), through real Spark starts in subprocesses: the
first start writes it at exit, the next maps it, and a dump cut short is never put in place."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from pipeframe.config import load_config, user_cache_dir
from pipeframe.engine.classarchive import ClassArchive
from pipeframe.engine.session import java_binary, spark_settings
from tests.spark.conftest import until

START = "from pipeframe.project import Project; import sys; print(Project(sys.argv[1]).spark.range(7).count())"


def start_spark(root: Path, env: dict[str, str]) -> str:
    done = subprocess.run([sys.executable, "-c", START, str(root)], cwd=root, env=env, capture_output=True, text=True,
                          timeout=600, check=False, stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout.strip()


def test_the_first_start_writes_the_archive_the_next_maps_it_and_a_cut_dump_is_never_used(tmp_path):
    cache = tmp_path / "cache"
    (cache / "pipeframe").mkdir(parents=True)
    for jars in user_cache_dir().glob("jars-*.txt"):  # the jars ivy resolved before: this test is not about them
        shutil.copy(jars, cache / "pipeframe")
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIPEFRAME_")}
    env["XDG_CACHE_HOME"] = str(cache)
    root = tmp_path / "project"
    root.mkdir()
    loaded = tmp_path / "classes.log"
    (root / "pipeframe.yaml").write_text(
        f"name: archived\nspark:\n  conf:\n    spark.driver.extraJavaOptions: -Xlog:class+load=info:file={loaded}\n",
        encoding="utf-8")
    archive = ClassArchive(java_binary(), spark_settings(load_config(root, environ={})), environ=env)
    assert archive.path.parent == cache / "pipeframe" and not archive.path.exists()

    assert start_spark(root, env) == "7"
    # The JVM writes the archive as it exits, after the Python process: the next start adopts the finished file.
    assert until(lambda: (archive.java_option() or "").startswith("-XX:SharedArchiveFile="), True) is True
    assert archive.path.is_file() and not list(archive.path.parent.glob("*.tmp"))
    first = loaded.read_text()
    assert "[cds]" not in (root / ".pipeframe" / "spark.log").read_text()  # the dump is quiet
    assert "org.apache.spark.SparkContext source: jar:file:" in first or "org.apache.spark.SparkContext source: file:" in first

    loaded.unlink()
    assert start_spark(root, env) == "7"
    second = loaded.read_text()
    # Spark's classes now come from the archive (the "top" layer, above the JDK's own), not from its jars.
    assert "org.apache.spark.SparkContext source: shared objects file (top)" in second
    assert sum("shared objects file (top)" in line for line in second.splitlines()) > 5000
    assert "Unable to use shared archive" not in (root / ".pipeframe" / "spark.log").read_text()

    # A dump its JVM did not finish (killed while writing) is never put in place, and goes once it is old.
    fresh = ClassArchive(java_binary(), {"spark.driver.extraClassPath": str(tmp_path)}, environ=env)
    with archive.path.open("rb") as whole:
        cut = whole.read(archive.path.stat().st_size // 3)
    dead_pid = _a_dead_pid()
    fresh.dump_path(dead_pid).write_bytes(cut)
    assert fresh.java_option().startswith(f"-XX:ArchiveClassesAtExit={fresh.dump_path(os.getpid())} ")
    assert not fresh.path.exists() and fresh.dump_path(dead_pid).exists()
    os.utime(fresh.dump_path(dead_pid), (0, 0))
    fresh.java_option()
    assert not fresh.dump_path(dead_pid).exists() and not fresh.path.exists()

    # Archives of other keys: the two used last are kept beside this key's, older ones go (~150 MB each).
    others = [cache / "pipeframe" / f"classes-other{i}.jsa" for i in range(4)]
    for age, other in enumerate(others):
        other.write_bytes(b"")
        os.utime(other, (1_000_000 - age, 1_000_000 - age))
    assert archive.java_option() == f"-XX:SharedArchiveFile={archive.path}"
    assert sorted(cache.joinpath("pipeframe").glob("classes-*.jsa")) == sorted([archive.path, *others[:2]])

    # A user's own choice wins: no archive option is added.
    assert ClassArchive(java_binary(), {"spark.driver.extraJavaOptions": "-Xshare:off"}, environ=env).java_option() is None


def _a_dead_pid() -> int:
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    process.wait()
    return process.pid
