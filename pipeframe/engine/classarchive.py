"""The embedded driver JVM's class archive: the JDK's class data sharing (AppCDS) for the classes Spark loads.

A Spark driver loads, parses and verifies thousands of classes on every start. The first start on a machine dumps
the classes it loaded into an archive at its exit (`-XX:ArchiveClassesAtExit`); every later start maps that file
(`-XX:SharedArchiveFile`) instead. Measured side by side (bench/jvm_start_bench.py, docs/benchmarks.md), a start
and one job: 11.3 -> 7.0 s, 18.8 -> 12.0 CPU-seconds. Nothing else changes: a JVM that cannot use an archive
(another JDK, another class path) says so in spark.log and loads its classes as before.

The archive lives in ~/.cache/pipeframe (about 150 MB), one per JDK, Spark, Delta and class path (the three
used last are kept). A JVM writes it to a temporary file named after the Python process that started it;
the next start adopts a finished one after the JDK has mapped it (`java -version` with it: a file cut short by a
killed JVM crashes a JVM that maps it, so it is never put in place). The warm local engine (`pipeframe local
start`) maps the same archive. Set `-Xshare:off` (or your own archive) in `spark.driver.extraJavaOptions` to opt
out.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.metadata
import importlib.util
import os
import subprocess
import time
from collections.abc import Mapping
from pathlib import Path

from pipeframe.config import user_cache_dir

_ENVIRONMENT = ("SPARK_CONF_DIR", "HADOOP_CONF_DIR", "YARN_CONF_DIR", "SPARK_DIST_CLASSPATH")
_OWN_CHOICE = ("-Xshare", "-XX:SharedArchiveFile", "-XX:ArchiveClassesAtExit", "-XX:SharedClassListFile")
_STALE_SECONDS = 600  # an unfinished dump older than this belongs to a JVM that died writing it
_OTHERS_KEPT = 2  # archives of other keys kept, the ones used last


def driver_java_options(java: Path | None, conf: Mapping[str, str],
                        environ: Mapping[str, str] | None = None) -> str | None:
    """`spark.driver.extraJavaOptions` for a driver JVM started with ``conf``: the user's, then the class archive's
    option; None when there is nothing to add (no java found, or the user chose their own archive or none)."""
    option = ClassArchive(java, conf, environ).java_option() if java is not None else None
    return " ".join(filter(None, [conf.get("spark.driver.extraJavaOptions"), option])) if option else None


class ClassArchive:
    """The archive for driver JVMs started with ``java`` and the Spark ``conf`` they are given."""

    def __init__(self, java: Path, conf: Mapping[str, str], environ: Mapping[str, str] | None = None) -> None:
        environ = os.environ if environ is None else environ
        self.java = java
        binary = java.resolve()
        stat = binary.stat() if binary.exists() else None
        # Spark's launcher builds the class path from SPARK_HOME's jars; pyspark's own folder when it is not set.
        spark_home = environ.get("SPARK_HOME") or str(Path(importlib.util.find_spec("pyspark").origin).parent)
        key = "\n".join([str(binary), str(stat.st_mtime_ns if stat else ""), f"SPARK_HOME={spark_home}",
                         f"pyspark={importlib.metadata.version('pyspark')}",
                         f"delta-spark={importlib.metadata.version('delta-spark')}",
                         *(f"{name}={environ.get(name, '')}" for name in _ENVIRONMENT),
                         f"extraClassPath={conf.get('spark.driver.extraClassPath', '')}"])
        self.path = user_cache_dir(environ) / f"classes-{hashlib.sha256(key.encode()).hexdigest()[:16]}.jsa"
        self.opted_out = any(choice in " ".join([conf.get("spark.driver.extraJavaOptions", ""),
                                                 environ.get("JAVA_TOOL_OPTIONS", ""),
                                                 environ.get("JDK_JAVA_OPTIONS", "")])
                             for choice in _OWN_CHOICE)

    def java_option(self) -> str | None:
        """The option for the next driver JVM: map the archive, or write one at exit while there is none yet;
        None when the user chose their own (or none)."""
        if self.opted_out:
            return None
        with contextlib.suppress(OSError):  # a read-only home only costs the archive
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._adopt_or_remove_dumps()
            self._remove_unused_archives()
            if self.path.is_file():
                os.utime(self.path)  # in use: see _remove_unused_archives
                return f"-XX:SharedArchiveFile={self.path}"
            # Dumping warns of every class it leaves out (signed jars, classes never linked): not for spark.log.
            return f"-XX:ArchiveClassesAtExit={self.dump_path(os.getpid())} -Xlog:cds=off"
        return None

    def dump_path(self, pid: int) -> Path:
        return self.path.with_name(f"{self.path.stem}.{pid}.tmp")

    def _adopt_or_remove_dumps(self) -> None:
        for dump in sorted(self.path.parent.glob(f"{self.path.stem}.*.tmp")):
            pid = dump.suffixes[-2].lstrip(".") if len(dump.suffixes) >= 2 else ""
            if pid.isdigit() and _alive(int(pid)):
                continue  # the process that started its JVM still runs: the JVM writes the file at its exit
            with contextlib.suppress(FileNotFoundError):  # another start adopted or removed it meanwhile
                if not self.path.is_file() and self._maps(dump):
                    os.replace(dump, self.path)
                elif self.path.is_file() or time.time() - dump.stat().st_mtime > _STALE_SECONDS:
                    dump.unlink(missing_ok=True)

    def _remove_unused_archives(self) -> None:
        """Beyond the few archives of other keys (an older pyspark, another SPARK_CONF_DIR) used last, ~150 MB each."""
        used: list[tuple[float, Path]] = []
        for other in self.path.parent.glob("classes-*.jsa"):
            with contextlib.suppress(FileNotFoundError):
                if other != self.path:
                    used.append((other.stat().st_mtime, other))
        for _, other in sorted(used, reverse=True)[_OTHERS_KEPT:]:
            other.unlink(missing_ok=True)  # a JVM mapping it keeps its pages

    def _maps(self, archive: Path) -> bool:
        """Whether the JDK maps ``archive`` whole: a finished dump (its JVM writes the header last)."""
        try:
            # A cut file crashes this JVM (SIGBUS): its crash report must not land in the working directory.
            done = subprocess.run([str(self.java), f"-XX:SharedArchiveFile={archive}", "-Xlog:cds=info",
                                   f"-XX:ErrorFile={os.devnull}", "-version"],
                                  capture_output=True, text=True, timeout=60, check=False,
                                  env={k: v for k, v in os.environ.items()
                                       if k not in ("JAVA_TOOL_OPTIONS", "JDK_JAVA_OPTIONS")})
        except (OSError, subprocess.TimeoutExpired):
            return False
        return done.returncode == 0 and "Mapped dynamic region" in done.stdout + done.stderr


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
