"""A real Spark standalone cluster (one master, one worker) started from pyspark's own jars, on 127.0.0.1.

Test support, also used by `bench/run.py --cluster`:

    with StandaloneCluster(tmp_path) as cluster:
        env = {**os.environ, "PIPEFRAME_SPARK_MASTER": cluster.master_url}
        ...
        cluster.apps()  # the applications the master has seen (running and completed)

The master and the worker are `bin/spark-class org.apache.spark.deploy.{master.Master,worker.Worker}` with
SPARK_HOME set to the installed pyspark package (it ships `bin/` and `jars/`). Every port is chosen free on
127.0.0.1 (master RPC, master web UI, worker RPC, worker web UI), the master's REST submission server is off,
and an empty SPARK_CONF_DIR keeps a machine's spark-defaults.conf out. Each daemon runs in its own process
group; stop() sends SIGTERM to the group, then SIGKILL after a grace period, so the executors the worker
launched (its children, in its group) go with it. `start()` waits until the worker has registered with the
master (the master's `/json`), and stops whatever it started if that fails.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
import urllib.request
from pathlib import Path
from typing import Self

from pipeframe.engine.localserver import free_port

MASTER_CLASS = "org.apache.spark.deploy.master.Master"
WORKER_CLASS = "org.apache.spark.deploy.worker.Worker"



def spark_home() -> Path:
    import pyspark

    return Path(pyspark.__file__).resolve().parent


class ClusterError(RuntimeError):
    """The cluster did not come up; the message ends with the tail of the daemons' logs."""


class StandaloneCluster:
    """A standalone master and one worker (`cores` cores, `memory` for executors) in `folder` (logs, work dir)."""

    def __init__(self, folder: Path, cores: int = 1, memory: str = "1g", daemon_memory: str = "512m") -> None:
        self.folder = Path(folder)
        self.cores, self.memory, self.daemon_memory = cores, memory, daemon_memory
        self.port, self.webui_port = free_port(), free_port()
        self.worker_port, self.worker_webui_port = free_port(), free_port()
        self.processes: list[subprocess.Popen] = []
        self._logs: list = []

    @property
    def master_url(self) -> str:
        return f"spark://127.0.0.1:{self.port}"

    @property
    def webui_url(self) -> str:
        return f"http://127.0.0.1:{self.webui_port}"

    def environment(self) -> dict[str, str]:
        conf = self.folder / "conf"  # empty: no spark-defaults.conf or spark-env.sh from the machine
        conf.mkdir(parents=True, exist_ok=True)
        options = "-Dspark.master.rest.enabled=false -Dspark.ui.showConsoleProgress=false"
        return {**os.environ, "SPARK_HOME": str(spark_home()), "SPARK_CONF_DIR": str(conf),
                "SPARK_LOCAL_IP": "127.0.0.1", "SPARK_LOCAL_HOSTNAME": "127.0.0.1",
                "SPARK_DAEMON_MEMORY": self.daemon_memory, "SPARK_MASTER_OPTS": options,
                "SPARK_WORKER_OPTS": "-Dspark.worker.cleanup.enabled=false", "SPARK_NO_DAEMONIZE": "1"}

    def start(self, timeout: float = 180) -> Self:
        self.folder.mkdir(parents=True, exist_ok=True)
        try:
            self._launch("master", MASTER_CLASS, "--host", "127.0.0.1", "--port", str(self.port),
                         "--webui-port", str(self.webui_port))
            self._wait(lambda state: True, timeout, "the master's web UI to answer")
            work = self.folder / "work"
            work.mkdir(parents=True, exist_ok=True)
            self._launch("worker", WORKER_CLASS, "--host", "127.0.0.1", "--port", str(self.worker_port),
                         "--webui-port", str(self.worker_webui_port), "--cores", str(self.cores),
                         "--memory", self.memory, "--work-dir", str(work), self.master_url)
            self._wait(lambda state: state.get("aliveworkers", 0) >= 1, timeout, "the worker to register")
        except BaseException:
            self.stop()
            raise
        return self

    def _launch(self, name: str, main_class: str, *args: str) -> None:
        log = open(self.folder / f"{name}.log", "ab")  # noqa: SIM115 — closed by stop()
        self._logs.append(log)
        command = [str(spark_home() / "bin" / "spark-class"), main_class, *args]
        self.processes.append(subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                               env=self.environment(), cwd=self.folder, start_new_session=True))

    def _wait(self, ready, timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while True:
            for process in self.processes:
                if process.poll() is not None:
                    raise ClusterError(f"a Spark daemon exited ({process.returncode}) while waiting for {what}.\n"
                                       + self.log_tail())
            with contextlib.suppress(OSError, ValueError):
                if ready(self.state()):
                    return
            if time.monotonic() > deadline:
                raise ClusterError(f"timed out after {timeout:.0f} s waiting for {what}.\n" + self.log_tail())
            time.sleep(0.5)

    def state(self) -> dict:
        """The master's JSON: workers, `aliveworkers`, `activeapps`, `completedapps`, ..."""
        with urllib.request.urlopen(f"{self.webui_url}/json", timeout=10) as answer:
            return json.load(answer)

    def apps(self) -> list[dict]:
        """Every application the master has seen, running or completed (name, id, cores, state, ...)."""
        state = self.state()
        return [*state.get("activeapps", []), *state.get("completedapps", [])]

    def log_tail(self, lines: int = 40) -> str:
        tails = []
        for name in ("master", "worker"):
            path = self.folder / f"{name}.log"
            if path.exists():
                text = path.read_text(errors="replace").splitlines()[-lines:]
                tails.append(f"--- {path} ---\n" + "\n".join(text))
        return "\n".join(tails)

    def stop(self, grace: float = 20) -> None:
        """SIGTERM each daemon's process group (worker first, with its executors), SIGKILL what is left."""
        for process in reversed(self.processes):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(process.pid, signal.SIGTERM)
        deadline = time.monotonic() + grace
        for process in reversed(self.processes):
            try:
                process.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
            # The group outlives its leader when an executor is still shutting down: kill whatever is left.
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(process.pid, signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(timeout=10)
        self.processes.clear()
        for log in self._logs:
            log.close()
        self._logs.clear()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
