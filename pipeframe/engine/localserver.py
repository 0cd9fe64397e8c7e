"""The warm local engine (`pipeframe local start|stop|status`): a Spark Connect server with Delta Lake, started from
pyspark's own jars (`bin/spark-submit --class ...SparkConnectServer`), running in the background for one project.

Its pid, port and URL are kept in `.pipeframe/local.json` (read by `localstate.running`), its output in
`.pipeframe/local.log`. While it is up, `session.get_session` connects every command of the project to it
(sc://127.0.0.1:PORT) unless spark.remote or a non-local master is set explicitly; a pid file whose process is gone
is removed on sight.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import replace
from pathlib import Path

from pipeframe.config import ProjectConfig, SparkSettings
from pipeframe.engine.classarchive import driver_java_options
from pipeframe.engine.localstate import (
    HOST,
    SERVER_CLASS,
    LocalServer,
    log_path,
    process_alive,
    running,
    state_path,
)
from pipeframe.engine.session import (
    JARS_ENV,
    ResolvedJars,
    first_meaningful_line,
    java_binary,
    require_connect_packages,
    require_java,
    spark_settings,
)
from pipeframe.errors import PipeframeError

START_TIMEOUT = 300.0  # the first start may resolve Delta's jars from Maven Central
STOP_TIMEOUT = 30.0
_HINT_STOP = "Stop it with `pipeframe local stop`, or use it as it is."


def port_free(port: int, host: str = HOST) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def free_port(host: str = HOST) -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def listening(port: int, host: str = HOST) -> bool:
    try:
        socket.create_connection((host, port), timeout=2).close()
    except OSError:
        return False
    return True


def server_conf(config: ProjectConfig, port: int, environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The launch conf of the project's local engine: the settings an embedded session of the project gets
    (`spark_settings`: Delta extension and catalog, local shuffle partitions, the project's spark.conf such as
    spark.driver.memory), plus the Connect server's address. Jars are added by `start`."""
    local = replace(config, spark=SparkSettings(master=config.spark.master, remote=None, conf=config.spark.conf))
    conf = spark_settings(local, environ)
    conf["spark.app.name"] = f"pipeframe-local:{config.name}"
    conf["spark.connect.grpc.binding.address"] = HOST
    conf["spark.connect.grpc.binding.port"] = str(port)
    return conf


def pyspark_home() -> Path:
    """pyspark's own Spark distribution (bin/spark-submit, jars/)."""
    import pyspark

    return Path(pyspark.__file__).parent


def spark_submit_command(conf: Mapping[str, str]) -> list[str]:
    """`spark-submit --class SparkConnectServer` from pyspark's own distribution, with ``conf`` as --conf pairs."""
    home = pyspark_home()
    jar = next(iter(sorted((home / "jars").glob("spark-connect_*.jar"))), None)
    if jar is None:
        raise PipeframeError("PF503", f"pyspark at {home} ships no spark-connect jar, so it cannot run a Spark "
                             "Connect server.", "Reinstall pyspark (`pip install --force-reinstall pyspark`).")
    command = [str(home / "bin" / "spark-submit"), "--class", SERVER_CLASS]
    for name, value in conf.items():
        command += ["--conf", f"{name}={value}"]
    return [*command, str(jar)]


def start(config: ProjectConfig, port: int | None = None, timeout: float = START_TIMEOUT,
          environ: Mapping[str, str] | None = None) -> LocalServer:
    """Start the project's local engine in the background and wait until it answers; PF511 when one is already
    up or the port is taken, PF503 when it does not come up (with the line of its log that says why)."""
    environ = os.environ if environ is None else environ
    root = config.root
    current = running(root)
    if current is not None:
        raise PipeframeError("PF511", f"The local engine of this project is already running at {current.url} "
                             f"(pid {current.pid}).", _HINT_STOP)
    if port is None:
        port = free_port()
    elif not port_free(port):
        raise PipeframeError("PF511", f"Port {port} on {HOST} is already in use.",
                             "Choose another with `pipeframe local start --port N`, or leave --port out to use a "
                             "free one.")
    require_java()
    require_connect_packages()
    conf = server_conf(config, port, environ)
    packages = [p for p in conf.pop("spark.jars.packages", "").split(",") if p.strip()]
    resolved: ResolvedJars | None = None
    if environ.get(JARS_ENV, "").strip():  # spark_settings put them in spark.jars already
        if packages:
            conf["spark.jars.packages"] = ",".join(packages)
    else:
        resolved = ResolvedJars(packages, conf.get("spark.jars.excludes", ""))
        jars = resolved.load()
        if jars:  # what an earlier start (embedded or local engine) resolved: no ivy resolution
            conf["spark.jars"] = ",".join([*jars, *filter(None, [conf.get("spark.jars")])])
            resolved = None
        else:  # ivy resolves Delta Lake (delta-spark's own coordinate) into ~/.ivy2.5.2; remembered below
            conf["spark.jars.packages"] = delta_packages(packages)

    log = log_path(root)
    log.parent.mkdir(parents=True, exist_ok=True)
    env = {**environ, "SPARK_HOME": str(pyspark_home())}
    env.pop("SPARK_REMOTE", None)
    env.pop("SPARK_CONNECT_MODE_ENABLED", None)
    java_options = driver_java_options(java_binary(), conf, env)  # the embedded driver's class archive
    if java_options:
        conf["spark.driver.extraJavaOptions"] = java_options
    command = spark_submit_command(conf)
    with open(log, "ab") as sink:
        sink.write(f"\n--- pipeframe local start {time.strftime('%Y-%m-%d %H:%M:%S')} port {port}\n".encode())
        sink.flush()
        offset = sink.tell()
        process = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=sink, stderr=subprocess.STDOUT,
                                   cwd=root, env=env, start_new_session=True)
    server = LocalServer(process.pid, port, time.time(), str(log), config.warehouse_uri)
    deadline = time.monotonic() + timeout
    while not listening(port):
        if process.poll() is not None or time.monotonic() > deadline:
            _terminate(process.pid, lambda: process.poll() is not None)
            reason = _why(log, offset) or f"it did not listen on port {port} within {timeout:.0f} s"
            raise PipeframeError("PF503", f"The local engine could not start: {reason}",
                                 f"Its full output is in {log}.")
        time.sleep(0.2)
    server = replace(server, started_at=time.time())
    _write_state(root, server)
    if resolved is not None:
        _remember_jars(server, resolved)
    return server


def delta_packages(extra: list[str]) -> str:
    """Delta Lake's Maven coordinate for this pyspark and delta-spark, plus ``extra``: what
    `configure_spark_with_delta_pip` puts in spark.jars.packages (asked of it, not spelled out again here)."""
    from delta import configure_spark_with_delta_pip
    from pyspark.sql import SparkSession

    builder = configure_spark_with_delta_pip(SparkSession.Builder(), extra_packages=extra)
    return str(builder._options["spark.jars.packages"])


def _remember_jars(server: LocalServer, resolved) -> None:
    """Save the jars ivy resolved (the server's spark.jars) so later starts, embedded ones too, skip ivy."""
    from pyspark.sql import SparkSession

    with contextlib.suppress(Exception):  # only costs a resolution next time
        session = SparkSession.builder.remote(server.url).create()
        try:
            jars = [j for j in (session.conf.get("spark.jars") or "").split(",") if j]
        finally:
            session.stop()
        if jars:
            resolved.save(jars)


def _why(log: Path, offset: int) -> str | None:
    try:
        with open(log, "rb") as f:
            f.seek(offset)
            output = f.read().decode("utf-8", errors="replace")
    except OSError:
        return None
    line = first_meaningful_line(output)
    return None if line is None else (line if line.endswith(".") else line + ".")


def _write_state(root: Path, server: LocalServer) -> None:
    path = state_path(root)
    temporary = path.with_suffix(f".{os.getpid()}.tmp")
    temporary.write_text(json.dumps(server.to_json(), indent=2) + "\n", encoding="utf-8")
    temporary.replace(path)


def stop(root: Path, timeout: float = STOP_TIMEOUT) -> LocalServer | None:
    """Stop the project's local engine (SIGTERM, then SIGKILL after ``timeout``); the server stopped, or None when
    none was running."""
    server = running(root)
    if server is None:
        return None
    _terminate(server.pid, lambda: not process_alive(server.pid), timeout)
    with contextlib.suppress(OSError):
        state_path(root).unlink()
    return server


def _terminate(pid: int, gone: Callable[[], bool], timeout: float = STOP_TIMEOUT) -> None:
    for sig, wait in ((signal.SIGTERM, timeout), (signal.SIGKILL, 10.0)):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, sig)  # the server leads its own process group (start_new_session)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, sig)
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            if gone():
                return
            time.sleep(0.1)


@contextlib.contextmanager
def started(config: ProjectConfig, port: int | None = None) -> Iterator[LocalServer]:
    """A local engine for the block, stopped at its end (for scripts and benchmarks)."""
    server = start(config, port)
    try:
        yield server
    finally:
        stop(config.root)
