"""Spark sessions: the one place in pipeframe that creates a SparkSession (embedded Spark + Delta, or Connect).

Resolves Spark settings from a ProjectConfig without a JVM, checks Java first, and turns start failures into
PipeframeError (PF501 Java, PF502 Connect extras, PF503 start failure, PF504 bad PIPEFRAME_SPARK_JARS).
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import importlib.metadata
import logging
import os
import re
import shutil
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlparse

from pipeframe.config import STATE_DIR, ProjectConfig, user_cache_dir
from pipeframe.engine.classarchive import driver_java_options
from pipeframe.engine.localstate import running
from pipeframe.errors import PipeframeError

if TYPE_CHECKING:  # pyspark is imported lazily so that `pipeframe check` never pays for it
    from pyspark.sql import SparkSession

JARS_ENV = "PIPEFRAME_SPARK_JARS"
DELTA_EXTENSION = "io.delta.sql.DeltaSparkSessionExtension"
DELTA_CATALOG = "org.apache.spark.sql.delta.catalog.DeltaCatalog"
MIN_JAVA = 17
LOG_FILE = "spark.log"
_LOG_ROTATE_BYTES = 5_000_000
_JAVA_HINT = ("Install Java 17 or newer (e.g. `apt-get install openjdk-17-jre-headless`, `brew install openjdk@17` "
              "or https://adoptium.net) and put it on PATH or point JAVA_HOME at it.")
_OFFLINE_HINT = ("Spark downloads Delta Lake's jars (and any spark.jars.packages) from Maven Central on the first "
                 f"start: go online once, check spark.jars.packages, or set {JARS_ENV} to pre-downloaded jars "
                 "(see docs/offline-jars.md).")


def spark_settings(config: ProjectConfig, environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The Spark conf pipeframe uses for ``config``, resolved without a JVM; ``config.spark.conf`` wins.

    Embedded sessions get the full launch conf. A Spark Connect session gets only session-level settings,
    because the server owns everything else (Delta extension, warehouse, jars).
    """
    environ = os.environ if environ is None else environ
    local = not config.spark.remote and _is_local(config.spark.master)
    if config.spark.remote:
        settings = {"spark.remote": config.spark.remote}
    else:
        settings = {
            "spark.master": config.spark.master,
            "spark.app.name": f"pipeframe:{config.name}",
            "spark.sql.extensions": DELTA_EXTENSION,
            "spark.sql.catalog.spark_catalog": DELTA_CATALOG,
            "spark.sql.warehouse.dir": config.warehouse_uri.rstrip("/") + "/spark-warehouse",
            "spark.ui.enabled": "false",
            # The console progress bar would garble CLI output (and the JVM log file).
            "spark.ui.showConsoleProgress": "false",
            # Same effect as sparkContext.setLogLevel("ERROR") right after start, but users can override it.
            "spark.log.level": "ERROR",
            # Jobs of different threads share the cores instead of queueing: an events commit is not held behind
            # a view's refresh (each runs in its own pool, `scheduler_pool`).
            "spark.scheduler.mode": "FAIR",
            # pyspark's "DataFrame query context": each Column call (`col`, `alias`, `cast`, `==`...) sends the
            # Python call site to the JVM (four py4j calls, ~0.4 ms) and tries to import IPython (0.5 s, the first
            # time). pipeframe names the place of an error itself (`_quiet_query_context_loggers`).
            "spark.python.sql.dataFrameDebugging.enabled": "false",
        }
        jars = offline_jars(environ)
        if jars:
            settings["spark.jars"] = ",".join(jars)
    if local:
        settings.update({
            # An embedded driver talks only to itself; binding to loopback avoids the classic failures on
            # laptops whose hostname resolves to a VPN or unreachable address.
            "spark.driver.host": "127.0.0.1",
            "spark.driver.bindAddress": "127.0.0.1",
            # Local data is small: Spark's 200 shuffle partitions and Delta's 50 log-replay partitions turn
            # every query into hundreds of tiny tasks. Cluster masters keep Spark's defaults (AQE tunes them).
            "spark.sql.shuffle.partitions": "4",
            "spark.databricks.delta.snapshotPartitions": "2",
        })
    settings.update({
        # Timestamps without a zone (DateTime parameters, date_trunc, partition keys) must not depend on the
        # machine that runs the pipe.
        "spark.sql.session.timeZone": "UTC",
        # Schema changes go through `pipeframe deploy` (FORWARD_QUERY); a write must never widen a table by
        # itself, even where a cluster's spark-defaults.conf turns this on.
        "spark.databricks.delta.schema.autoMerge.enabled": "false",
        # A view's watermark commit may hold no rows (an increment its WHERE filters out, BACKFILL skip, a rebuild's
        # last commit); it must still be recorded, also where it carries no transaction id (tables.guarded_by_lock).
        "spark.databricks.delta.skipRecordingEmptyCommits": "false",
        # ORDER BY with a LIMIT above this sorts (spilling as it must) and then takes the rows, where Spark's
        # in-memory top-K allocates for LIMIT rows first: a query read with a limit of 10**9 ran the driver out of
        # heap on three rows.
        "spark.sql.execution.topKSortFallbackThreshold": "100000",
    })
    if config.ingest.kafka_engine == "streaming" and not config.spark.remote:
        from pipeframe.engine.streams import SOURCE_EXCLUDES, SOURCE_PACKAGE

        settings["spark.jars.packages"] = SOURCE_PACKAGE  # Spark's Kafka source, with the Kafka client it needs
        settings["spark.jars.excludes"] = ",".join(SOURCE_EXCLUDES)
    user = dict(config.spark.conf)
    for listed in ("spark.jars.packages", "spark.jars.excludes"):  # the user's add to pipeframe's
        if listed in settings and user.get(listed):
            user[listed] = settings[listed] + "," + user[listed]
    if "spark.jars" in settings and user.get("spark.jars"):
        # Jar lists add up: dropping the Delta jars would break every table.
        user["spark.jars"] = settings["spark.jars"] + "," + user["spark.jars"]
    settings.update(user)
    return settings


def offline_jars(environ: Mapping[str, str] | None = None) -> list[str]:
    """The jar files named by PIPEFRAME_SPARK_JARS (jar paths and/or folders of jars), as absolute paths."""
    environ = os.environ if environ is None else environ
    value = environ.get(JARS_ENV, "").strip()
    jars: list[str] = []
    for item in (part.strip() for part in value.split(",")):
        if not item:
            continue
        path = Path(item).expanduser().resolve()
        if path.is_dir():
            found = sorted(str(p) for p in path.glob("*.jar"))
            if not found:
                raise PipeframeError("PF504", f"{JARS_ENV} names the folder {path}, which holds no .jar files.",
                                     "Download the Delta Lake jars into it first (see docs/offline-jars.md).")
            jars.extend(found)
        elif path.is_file() and path.suffix == ".jar":
            jars.append(str(path))
        else:
            raise PipeframeError("PF504", f"{JARS_ENV} names {item}, which is neither a .jar file nor a folder.",
                                 f"Set {JARS_ENV} to comma-separated jar paths or a folder of jars, "
                                 "or unset it to download Delta Lake from Maven Central.")
    return jars


def java_problem() -> str | None:
    """One sentence saying why Java cannot run Spark 4 here (missing or older than 17), or None if it can.

    Looks where Spark's launcher looks: JAVA_HOME/bin/java when JAVA_HOME is set, else `java` on PATH.
    """
    java = java_binary()
    java_home = os.environ.get("JAVA_HOME")
    if java_home:
        if java is None:
            return f"JAVA_HOME is set to {java_home}, but {Path(java_home) / 'bin' / 'java'} does not exist."
        where = f"JAVA_HOME ({java_home})"
    else:
        if java is None:
            return "Java is not installed (no `java` on PATH and JAVA_HOME is not set); Spark needs Java 17 or newer."
        where = f"`java` on PATH ({java})"
    try:
        done = subprocess.run([str(java), "-version"], capture_output=True, text=True, timeout=60, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"{where} could not run `java -version`: {exc}."
    major = java_major_version(done.stderr + done.stdout)
    if major is None:
        return f"{where} did not report a Java version (`java -version` exited with {done.returncode})."
    if major < MIN_JAVA:
        return f"{where} is Java {major}, but Spark 4 needs Java {MIN_JAVA} or newer."
    return None


def java_binary() -> Path | None:
    """The java Spark's launcher runs: JAVA_HOME/bin/java when JAVA_HOME is set, else `java` on PATH."""
    java_home = os.environ.get("JAVA_HOME")
    if java_home:
        java = Path(java_home) / "bin" / ("java.exe" if os.name == "nt" else "java")
        return java if java.is_file() else None
    found = shutil.which("java")
    return Path(found) if found else None


def java_major_version(version_output: str) -> int | None:
    """The major version in `java -version` output: `"1.8.0_402"` is 8, `"17.0.15"` is 17."""
    match = re.search(r'version "(\d+)(?:\.(\d+))?', version_output)
    if match is None:
        return None
    major = int(match.group(1))
    return int(match.group(2) or 0) if major == 1 else major


@dataclass(frozen=True)
class _Live:
    key: tuple[tuple[str, str], ...]
    session: SparkSession
    remote: bool
    url: str | None = None
    settings: tuple[tuple[str, str], ...] = ()  # what was set on a Connect session (a child gets the same)
    ignored: tuple[str, ...] = ()  # settings a Connect server owns, not set on the session


_lock = threading.Lock()
_live: _Live | None = None
_log = logging.getLogger(__name__)


def get_session(config: ProjectConfig) -> SparkSession:
    """The process's SparkSession for ``config``: started on first use, then reused while its settings hold.

    A process holds one session; asking for different settings stops the current one and starts another
    (in the same JVM). Set PIPEFRAME_SPARK_JARS to use pre-downloaded Delta jars instead of Maven Central.
    """
    global _live
    config, engine = with_local_engine(config)
    settings = spark_settings(config)
    key = tuple(sorted(settings.items()))
    with _lock:
        if _live is not None and _live.key == key and _is_alive(_live):
            return _live.session
        # Check what can be checked before stopping the current session, so a failure leaves it running.
        if config.spark.remote:
            require_connect_packages()
        else:
            require_java()
        _stop_locked()
        if config.spark.remote:
            session, applied, ignored = _start_connect(config.spark.remote, settings)
            if ignored and engine is None:  # the warm local engine was launched with them: nothing to say
                _log.warning("Spark Connect: the server at %s owns %s (launch settings, set where it starts); "
                             "pipeframe leaves %s alone.", config.spark.remote, ", ".join(ignored),
                             "it" if len(ignored) == 1 else "them")
            _live = _Live(key, session, True, config.spark.remote, tuple(applied.items()), tuple(ignored))
        else:
            session = _start_embedded(config, settings)
            _live = _Live(key, session, False)
        _quiet_query_context_loggers()
        return session


def started() -> bool:
    """Whether this process has started its SparkSession."""
    return _live is not None


def with_local_engine(config: ProjectConfig) -> tuple[ProjectConfig, str | None]:
    """``config`` pointed at the project's warm local engine (`pipeframe local start`) while one is up, and that
    engine's URL; ``config`` unchanged (and None) when spark.remote or a non-local master is set explicitly, or
    no local engine runs (a pid file left by a dead one is removed)."""
    if config.spark.remote or not _is_local(config.spark.master):
        return config, None
    server = running(config.root)
    if server is None:
        return config, None
    return dataclasses.replace(config, spark=dataclasses.replace(config.spark, remote=server.url)), server.url


def is_connect(spark: SparkSession) -> bool:
    """Whether ``spark`` is a Spark Connect session (no SparkContext, no JVM handles in this process)."""
    return type(spark).__module__.startswith("pyspark.sql.connect")


def child_session(spark: SparkSession) -> SparkSession:
    """A new session sharing ``spark``'s engine (the same warm SparkContext or Connect server) with its own
    temporary views and SQL settings: `newSession()` on embedded Spark; on Spark Connect, which has no
    `newSession()`, a second session on the same server with the same session settings. Stop it with
    `release_child`."""
    if not is_connect(spark):
        return spark.newSession()
    from pyspark.sql import SparkSession

    live = _live
    if live is None or live.session is not spark or live.url is None:
        return spark  # a Connect session pipeframe did not start: its URL and settings are unknown; shared
    child = SparkSession.builder.remote(live.url).create()
    _apply_connect_settings(child, dict(live.settings))
    return child


def release_child(spark: SparkSession, child: SparkSession) -> None:
    """Stop a session `child_session` made on a Connect server (an embedded child shares the context: kept)."""
    if child is not spark and is_connect(child):
        with contextlib.suppress(Exception):  # the server may already be gone; the session then is too
            child.stop()


def _quiet_query_context_loggers() -> None:
    """pyspark logs every failed query, with its JVM stack trace, to stderr before raising it; pipeframe
    reports the error itself (one located sentence), so those loggers are switched off."""
    import logging

    for name in ("SQLQueryContextLogger", "DataFrameQueryContextLogger"):
        logging.getLogger(name).disabled = True


def stop_session() -> None:
    """Stop the session get_session started, if any; the next get_session starts a fresh one."""
    with _lock:
        _stop_locked()


def yield_cpu(spark: SparkSession, nice: int) -> int:
    """Lower the CPU priority of the embedded Spark JVM's threads to `nice` above this process's (at most 19), as
    ClickHouse runs its background merges below its queries: under `serve`/`dev`/`run` the JVM's work is mostly view
    maintenance, and on a busy machine it held back the group commits and answers of this process (docs/benchmarks.md,
    issue 33). A thread's niceness is inherited by the threads it starts, so every later JVM thread runs as niced.
    Only ever lowered (no privilege needed). How many threads it set; 0 under Spark Connect (the JVM is elsewhere),
    off Linux, or with `nice` 0."""
    process = getattr(getattr(spark.sparkContext, "_gateway", None), "proc", None) if not is_connect(spark) else None
    tasks = f"/proc/{getattr(process, 'pid', 0)}/task"
    if nice <= 0 or process is None or not os.path.isdir(tasks):
        return 0
    wanted = min(19, os.getpriority(os.PRIO_PROCESS, 0) + nice)
    done: set[int] = set()
    for _ in range(2):  # a thread started while the first pass ran, by a thread not yet set, is set by the second
        for name in os.listdir(tasks):
            thread = int(name)
            if thread in done:
                continue
            with contextlib.suppress(ProcessLookupError, PermissionError):
                if os.getpriority(os.PRIO_PROCESS, thread) < wanted:
                    os.setpriority(os.PRIO_PROCESS, thread, wanted)
                done.add(thread)
    return len(done)


def _stop_locked() -> None:
    global _live
    if _live is not None:
        if _is_alive(_live):
            _live.session.stop()
        _live = None


def _is_alive(live: _Live) -> bool:
    if live.remote:
        return not live.session.is_stopped
    # What pyspark's own builder checks: a stopped context has dropped its Java handle.
    return live.session.sparkContext._jsc is not None


def require_java() -> None:
    problem = java_problem()
    if problem:
        raise PipeframeError("PF501", problem, _JAVA_HINT)


def require_connect_packages() -> None:
    try:
        import pyspark.sql.connect.session  # noqa: F401  # checks grpcio, pandas, pyarrow ... on import
    except ImportError as exc:
        version = importlib.metadata.version("pyspark")
        raise PipeframeError("PF502", f"Spark Connect needs extra packages that are not installed ({exc}).",
                             f'Run `pip install "pyspark[connect]=={version}"`, or remove spark.remote to use '
                             "embedded Spark.") from exc


def _start_embedded(config: ProjectConfig, settings: dict[str, str]) -> SparkSession:
    _create_local_dir(config.warehouse_uri)

    from delta import configure_spark_with_delta_pip
    from py4j.protocol import Py4JError
    from pyspark.errors import PySparkException
    from pyspark.sql import SparkSession

    conf = dict(settings)
    packages = [p for p in conf.pop("spark.jars.packages", "").split(",") if p.strip()]
    builder = SparkSession.builder
    for name, value in conf.items():
        builder = builder.config(name, value)
    resolved = None
    resolving = contextlib.ExitStack()  # holds the resolution lock until the jars are remembered
    if os.environ.get(JARS_ENV, "").strip():
        if packages:
            builder = builder.config("spark.jars.packages", ",".join(packages))
    else:
        resolved = ResolvedJars(packages, conf.get("spark.jars.excludes", ""))
        jars = resolved.load()
        if not jars:  # another process may be resolving the same jars: wait for it rather than race ivy
            resolving.enter_context(resolved.lock())
            jars = resolved.load()
        if jars:
            # The jars an earlier start resolved: ivy's resolution, seconds on every start, is skipped.
            builder = builder.config("spark.jars", ",".join([*jars, *filter(None, [conf.get("spark.jars")])]))
            resolved = None
        else:
            # delta-spark's helper adds its own Maven coordinate (io.delta:delta-spark_<spark>_2.13:<delta>);
            # spark-submit resolves it through ivy into ~/.ivy2.5.2 on the first start.
            builder = configure_spark_with_delta_pip(builder, extra_packages=packages)

    java_options = driver_java_options(java_binary(), conf)
    if java_options:
        builder = builder.config("spark.driver.extraJavaOptions", java_options)
    log = _jvm_log(config)
    session = None
    with resolving, _jvm_output_into(log) as start:
        try:
            session = builder.getOrCreate()
            _build_session_state(session)
        except (Py4JError, PySparkException, OSError) as exc:
            if session is not None:
                session.stop()
            output = _read_from(log, start)
            reason = first_meaningful_line(str(exc)) if isinstance(exc, Py4JError) else None
            reason = reason or first_meaningful_line(output) or first_meaningful_line(str(exc)) or repr(exc)
            hint = _OFFLINE_HINT if _looks_offline(output) else (
                f"Check spark.master and spark.conf in pipeframe.yaml; Spark's full output is in {log}.")
            raise PipeframeError("PF503", f"Spark could not start: {_sentence(reason)}", hint) from exc
        if resolved is not None:
            user = set(filter(None, (conf.get("spark.jars") or "").split(",")))
            resolved.save([j for j in (session.sparkContext.getConf().get("spark.jars") or "").split(",")
                           if j and j not in user])
    if DELTA_EXTENSION not in session.conf.get("spark.sql.extensions", ""):
        raise PipeframeError("PF503", "A Spark session without Delta Lake was already running in this process.",
                             "Stop it with spark.stop() before using pipeframe, or let pipeframe create it.")
    return session


class ResolvedJars:
    """The local jar files that ivy resolved for Delta Lake's (and spark.jars.packages') Maven coordinates on an
    earlier start, remembered per set of packages and versions under ~/.cache/pipeframe, so later starts put
    them on the classpath directly. Forgotten when any of the files is gone (ivy then resolves again)."""

    def __init__(self, packages: list[str], excludes: str = "") -> None:
        # spark.jars.excludes changes what ivy resolves (e.g. hadoop-aws without the AWS SDK bundle): part of the key.
        excluded = sorted(e.strip() for e in excludes.split(",") if e.strip())
        key = ",".join([f"pyspark={importlib.metadata.version('pyspark')}",
                        f"delta-spark={importlib.metadata.version('delta-spark')}", *sorted(packages),
                        *(f"exclude={e}" for e in excluded)])
        self.path = user_cache_dir() / f"jars-{hashlib.sha256(key.encode()).hexdigest()[:16]}.txt"

    def load(self) -> list[str]:
        try:
            jars = self.path.read_text(encoding="utf-8").split()
        except OSError:
            return []
        return jars if jars and all(Path(urlparse(j).path).is_file() for j in jars) else []

    @contextlib.contextmanager
    def lock(self) -> Iterator[None]:
        """Held while resolving, so concurrent first starts (test workers, two commands) resolve once."""
        import fcntl

        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            handle = open(self.path.with_suffix(".lock"), "a")  # noqa: SIM115 — held for the with block
        except OSError:
            yield
            return
        with handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            yield

    def save(self, jars: list[str]) -> None:
        with contextlib.suppress(OSError):  # a read-only home only costs the resolution next time
            self.path.parent.mkdir(parents=True, exist_ok=True)
            temporary = self.path.with_suffix(f".{os.getpid()}.tmp")
            temporary.write_text("\n".join(jars) + "\n", encoding="utf-8")
            temporary.replace(self.path)


def _build_session_state(session: SparkSession) -> None:
    """Build the session's lazy SQL state now, letting a failure surface as a raw Py4JJavaError.

    A bad value for a spark.sql setting makes the state fail to build; pyspark's error conversion then asks
    that broken state for its settings again and recurses through the JVM for many minutes. Skipping the
    conversion for this one call turns that hang into an immediate, readable Java error.
    """
    import py4j.java_gateway
    import py4j.protocol

    converting = py4j.java_gateway.get_return_value
    py4j.java_gateway.get_return_value = py4j.protocol.get_return_value
    try:
        session._jsparkSession.sessionState()
    finally:
        py4j.java_gateway.get_return_value = converting


def _start_connect(url: str, settings: dict[str, str]) -> tuple[SparkSession, dict[str, str], list[str]]:
    """A Connect session on ``url`` with the session-level ``settings`` set; returns it, the settings set and the
    names of those the server owns (launch-time and static settings such as spark.driver.memory), left alone."""
    from pyspark.errors import PySparkException
    from pyspark.sql import SparkSession

    # The Connect client retries an unreachable server with backoff for many minutes; a plain TCP connect
    # answers in seconds.
    address = urlparse(url)
    try:
        socket.create_connection((address.hostname or "localhost", address.port or 15002), timeout=10).close()
    except (OSError, ValueError) as exc:
        raise PipeframeError("PF503", f"Spark Connect at {url} is not reachable: {_sentence(str(exc))}",
                             "Start the Spark Connect server, or fix spark.remote / PIPEFRAME_SPARK_REMOTE "
                             "(sc://host:port).") from exc
    try:
        session = SparkSession.builder.remote(url).getOrCreate()
        applied, ignored = _apply_connect_settings(session, connect_settings(settings))
    except PySparkException as exc:
        reason = first_meaningful_line(str(exc)) or type(exc).__name__
        raise PipeframeError("PF503", f"Spark Connect at {url} is not usable: {_sentence(reason)}",
                             "Fix the setting named in spark.conf of pipeframe.yaml; with spark.remote the server "
                             "keeps its own launch settings (spark.driver.*, spark.sql.extensions, ...).") from exc
    return session, applied, ignored


def _apply_connect_settings(session: SparkSession, wanted: Mapping[str, str]) -> tuple[dict[str, str], list[str]]:
    """Set ``wanted`` on a Connect session: (the settings it holds now, those its server owns and refused)."""
    from pyspark.errors import PySparkException

    changes = settings_to_set(wanted, session.conf.getAll)  # one round trip; most already hold (local engine)
    applied = {name: value for name, value in wanted.items() if name not in changes}
    ignored = []
    for name, value in changes.items():
        try:
            session.conf.set(name, value)
        except PySparkException as exc:
            if not server_owned(str(exc)):
                raise
            ignored.append(name)
        else:
            applied[name] = value
    return applied, ignored


def connect_settings(settings: Mapping[str, str]) -> dict[str, str]:
    """What pipeframe tries to set on a Connect session: every setting but the connection itself."""
    return {name: value for name, value in settings.items() if name != "spark.remote"}


def settings_to_set(wanted: Mapping[str, str], current: Mapping[str, str]) -> dict[str, str]:
    """The settings of ``wanted`` that a Connect session does not hold yet (``current`` is what it holds)."""
    return {name: value for name, value in wanted.items() if current.get(name) != value}


def server_owned(error: str) -> bool:
    """Whether a Connect server refused a setting because it is not modifiable at runtime (a launch-time or
    static setting, which the server owns), as opposed to a bad value."""
    return "CANNOT_MODIFY_CONFIG" in error or "CANNOT_MODIFY_STATIC_CONFIG" in error \
        or "Cannot modify the value of" in error


def first_meaningful_line(text: str) -> str | None:
    """The line of Spark/JVM output that says what went wrong: the root cause of a Java exception, else the
    first exception, else the first line that is neither launcher chatter nor a stack frame."""
    text = text.split("JVM stacktrace:")[0]  # pyspark appends the Java trace after its own message
    lines = [line.strip().removeprefix(": ").strip() for line in text.splitlines()]
    lines = [line for line in lines if line]
    causes = [m for m in map(_CAUSE_LINE.match, lines) if m]
    if causes:
        return _clean(causes[-1].group("message") or causes[-1].group("name"))
    lines = [line for line in lines if not _is_chatter(line)]
    for line in lines:
        match = _EXCEPTION_LINE.match(line)
        if match:
            return _clean(match.group("message") or match.group("name"))
    return _clean(lines[0]) if lines else None


# `Error: Could not create the Java Virtual Machine.` is not an exception line: the JVM says why one line above.
_EXCEPTION = r"(?P<name>(?:[\w$]+\.)*[\w$]+(?:Exception|Error))(?::\s*(?P<message>.+))?$"
_EXCEPTION_LINE = re.compile(r'^(?:Exception in thread "[^"]*"\s+)?' + _EXCEPTION)
_CAUSE_LINE = re.compile(r"^Caused by: " + _EXCEPTION)
_CHATTER = re.compile(
    r"^(at |\.\.\. \d+ more|::|WARNING: |Picked up |Using Spark's default|Ivy Default Cache|"
    r"The jars for the packages|Setting default log level|To adjust logging level|An error occurred while calling|"
    r"\d\d/\d\d/\d\d \d\d:\d\d:\d\d (INFO|WARN) )")


def _clean(message: str) -> str:
    """Drop Spark's `[ERROR_CLASS]` prefix and `SQLSTATE` suffix, and ivy's brackets around the message."""
    message = re.sub(r"^\[[A-Z][A-Z0-9_.]*\]\s*", "", message.strip())
    message = re.sub(r"\s*SQLSTATE: \w+\s*$", "", message)
    if message.startswith("[") and message.endswith("]"):
        message = message[1:-1]
    return message.strip()


def _is_chatter(line: str) -> bool:
    return bool(_CHATTER.match(line))


def _looks_offline(output: str) -> bool:
    return "unresolved dependency" in output or "download failed" in output  # ivy's words


def _sentence(text: str) -> str:
    text = text.strip()
    return text if text.endswith((".", "!", "?")) else text + "."


def _is_local(master: str) -> bool:
    return master == "local" or master.startswith(("local[", "local-cluster["))


def _create_local_dir(uri: str) -> None:
    parsed = urlparse(uri)
    if "://" not in uri:
        Path(uri).mkdir(parents=True, exist_ok=True)
    elif parsed.scheme == "file":
        Path(parsed.path).mkdir(parents=True, exist_ok=True)


def _jvm_log(config: ProjectConfig) -> Path:
    log = config.root / STATE_DIR / LOG_FILE
    log.parent.mkdir(parents=True, exist_ok=True)
    if log.exists() and log.stat().st_size > _LOG_ROTATE_BYTES:
        log.replace(log.with_name(LOG_FILE + ".1"))
    return log


@contextlib.contextmanager
def _jvm_output_into(log: Path) -> Iterator[int]:
    """Send everything written to this process's stdout/stderr file descriptors into ``log`` while the
    block runs, and yield the offset where this start's output begins.

    pyspark launches the JVM as a child process that inherits these descriptors, so the JVM keeps writing
    its ivy report, launcher warnings and log4j output to the file for its whole life, while Python's own
    output is back on the terminal as soon as the session exists.
    """
    sys.stdout.flush()
    sys.stderr.flush()
    with open(log, "ab") as sink:
        start = sink.tell()
        try:
            saved = [os.dup(1), os.dup(2)]
        except OSError:  # no stdout/stderr to redirect (a detached daemon): nothing to keep quiet
            yield start
            return
        try:
            os.dup2(sink.fileno(), 1)
            os.dup2(sink.fileno(), 2)
            yield start
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            for fd in saved:
                os.close(fd)


def _read_from(log: Path, start: int) -> str:
    with open(log, "rb") as f:
        f.seek(start)
        return f.read().decode("utf-8", errors="replace")


def scheduler_pool(spark: SparkSession, pool: str) -> None:
    """Run this thread's Spark jobs in the FAIR scheduler pool `pool` (nothing on Spark Connect, which has no
    SparkContext)."""
    with contextlib.suppress(Exception):  # Spark Connect: its server schedules the jobs
        spark.sparkContext.setLocalProperty("spark.scheduler.pool", pool)
