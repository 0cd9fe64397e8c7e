"""A real Apache Kafka broker for the tests: one KRaft node (broker and controller in one JVM) on 127.0.0.1.

Test support, for pipeframe's Kafka connector:

    with KafkaBroker(tmp_path) as broker:
        broker.create_topic("events", partitions=4)
        producer = confluent_kafka.Producer({"bootstrap.servers": broker.bootstrap})
        ...
        broker.restart()  # the same data dir and ports: topics, records and committed offsets survive

Kafka's jars come from Maven Central, not from a release tarball: `org.apache.kafka:kafka_2.13` (the broker, with
`kafka.Kafka` and `kafka.tools.StorageTool`) and its runtime dependencies, plus log4j's binding for SLF4J 1.7 (the
tarball adds it; the pom does not), copied by `mvn dependency:copy-dependencies` from a generated pom into
`$XDG_CACHE_HOME/pipeframe/kafka-<version>/` (default `~/.cache`). That happens once per machine: an fcntl lock
beside the folder makes concurrent pytest-xdist workers wait for the first one, the jars are copied into a temporary
folder that is renamed into place, and a marker file written last tells later runs to skip Maven.

The node is formatted once (`StorageTool format --standalone`: 4.x's dynamic quorum, one voter, found through
`controller.quorum.bootstrap.servers`) with a cluster id made here (a random UUID in Kafka's URL-safe base64, so no
JVM is started for it), then run as `java -cp '<cache>/*' kafka.Kafka server.properties` in its own process group,
with stdout and stderr in `<workdir>/kafka.log`. Both listeners (PLAINTEXT for clients, CONTROLLER for the quorum)
take free ports on 127.0.0.1, chosen once so that restart() comes back on the same ones. Internal topics have one
replica (and one partition, so the first consumer group or transaction is not kept waiting for 50 of them).
`start()` waits until an AdminClient's metadata request lists this node, and stops what it started if that fails;
stop() sends SIGTERM to the group (a controlled shutdown), then SIGKILL after a grace period.
"""

from __future__ import annotations

import base64
import contextlib
import fcntl
import os
import shutil
import signal
import subprocess
import tempfile
import time
import uuid
from pathlib import Path
from typing import Self

from pipeframe.config import user_cache_dir
from pipeframe.engine.localserver import free_port, listening

KAFKA_VERSION = "4.1.2"
SCALA_VERSION = "2.13"
LOG4J_VERSION = "2.25.3"  # the log4j-core that kafka-server 4.1.2 depends on
NODE_ID = 1

POM = """\
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>pipeframe.tests</groupId>
  <artifactId>kafka-broker-jars</artifactId>
  <version>0</version>
  <packaging>pom</packaging>
  <dependencies>
    <dependency>
      <groupId>org.apache.kafka</groupId>
      <artifactId>kafka_{scala}</artifactId>
      <version>{kafka}</version>
    </dependency>
    <dependency>
      <groupId>org.apache.logging.log4j</groupId>
      <artifactId>log4j-slf4j-impl</artifactId>
      <version>{log4j}</version>
    </dependency>
  </dependencies>
  <build>
    <plugins>
      <plugin>
        <groupId>org.apache.maven.plugins</groupId>
        <artifactId>maven-dependency-plugin</artifactId>
        <version>3.8.1</version>
      </plugin>
    </plugins>
  </build>
</project>
"""

LOG4J2 = """\
status = warn
appender.console.type = Console
appender.console.name = STDOUT
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = INFO
rootLogger.appenderRef.stdout.ref = STDOUT
logger.kafka.name = kafka
logger.kafka.level = INFO
logger.apache.name = org.apache.kafka
logger.apache.level = INFO
logger.request.name = kafka.request.logger
logger.request.level = WARN
"""


class KafkaError(RuntimeError):
    """Kafka's jars could not be resolved or the broker did not come up; the message ends with the log's tail."""


def cache_root() -> Path:
    return user_cache_dir()


def kafka_jars(version: str = KAFKA_VERSION, timeout: float = 900) -> Path:
    """The folder of Kafka `version`'s jars (the broker and its runtime dependencies), resolved once per machine."""
    folder = cache_root() / f"kafka-{version}"
    marker = folder / ".complete"
    if marker.exists():
        return folder
    folder.parent.mkdir(parents=True, exist_ok=True)
    with open(folder.parent / f"kafka-{version}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes, also if this process dies
        if marker.exists():  # another worker resolved them while this one waited
            return folder
        build = Path(tempfile.mkdtemp(prefix=f".kafka-{version}-", dir=folder.parent))
        try:
            (build / "pom.xml").write_text(POM.format(scala=SCALA_VERSION, kafka=version, log4j=LOG4J_VERSION))
            command = ["mvn", "-q", "-B", "-f", str(build / "pom.xml"), "dependency:copy-dependencies",
                       "-DincludeScope=runtime", f"-DoutputDirectory={build / 'jars'}"]
            try:
                done = subprocess.run(command, check=False, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                                      timeout=timeout, cwd=build)
            except (OSError, subprocess.TimeoutExpired) as error:
                raise KafkaError(f"could not resolve Kafka {version}'s jars with Maven: {error}") from error
            jars = sorted(path.name for path in (build / "jars").glob("*.jar"))
            if done.returncode != 0 or f"kafka_{SCALA_VERSION}-{version}.jar" not in jars:
                output = "\n".join((done.stdout + done.stderr).splitlines()[-40:])
                raise KafkaError(f"`{' '.join(command)}` failed ({done.returncode}):\n{output}")
            shutil.rmtree(folder, ignore_errors=True)  # a half-copied folder from a run that died
            os.replace(build / "jars", folder)
            marker.write_text("\n".join(jars) + "\n")
        finally:
            shutil.rmtree(build, ignore_errors=True)
    return folder


def random_cluster_id() -> str:
    """A cluster id as `StorageTool random-uuid` prints it: 16 random bytes, URL-safe base64 without padding."""
    while True:
        text = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not text.startswith("-"):  # Kafka's Uuid.randomUuid() avoids ids that read as command-line options
            return text


class KafkaBroker:
    """One Kafka 4.x KRaft node (process.roles=broker,controller) with its data, config and log in `workdir`."""

    def __init__(self, workdir: Path, heap: str = "512m") -> None:
        self.workdir = Path(workdir)
        self.heap = heap
        self.port, self.controller_port = free_port(), free_port()
        self.process: subprocess.Popen | None = None
        self._log = None

    @property
    def bootstrap(self) -> str:
        """`bootstrap.servers` for clients: the PLAINTEXT listener."""
        return f"127.0.0.1:{self.port}"

    @property
    def data_dir(self) -> Path:
        return self.workdir / "data"

    @property
    def log_path(self) -> Path:
        return self.workdir / "kafka.log"

    def properties(self) -> dict[str, str]:
        return {
            "process.roles": "broker,controller",
            "node.id": str(NODE_ID),
            "controller.quorum.bootstrap.servers": f"127.0.0.1:{self.controller_port}",
            "listeners": f"PLAINTEXT://127.0.0.1:{self.port},CONTROLLER://127.0.0.1:{self.controller_port}",
            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{self.port},CONTROLLER://127.0.0.1:{self.controller_port}",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "PLAINTEXT",
            "log.dirs": str(self.data_dir),
            "num.partitions": "1",
            "offsets.topic.replication.factor": "1",
            "offsets.topic.num.partitions": "1",
            "transaction.state.log.replication.factor": "1",
            "transaction.state.log.min.isr": "1",
            "transaction.state.log.num.partitions": "1",
            "share.coordinator.state.topic.replication.factor": "1",
            "share.coordinator.state.topic.min.isr": "1",
            "group.initial.rebalance.delay.ms": "0",
            "num.network.threads": "2",
            "num.io.threads": "2",
            "num.recovery.threads.per.data.dir": "1",
        }

    def _java(self, main_class: str, *args: str) -> list[str]:
        return ["java", f"-Xmx{self.heap}", "-Xms64m", "-Djava.awt.headless=true",
                f"-Dlog4j2.configurationFile={self.workdir / 'log4j2.properties'}",
                "-cp", f"{kafka_jars()}/*", main_class, *args]

    def _configure(self) -> Path:
        self.workdir.mkdir(parents=True, exist_ok=True)
        (self.workdir / "log4j2.properties").write_text(LOG4J2)
        config = self.workdir / "server.properties"
        config.write_text("".join(f"{key}={value}\n" for key, value in self.properties().items()))
        return config

    def _format(self, config: Path) -> None:
        """Format the data dir once; restart() finds meta.properties there and keeps the data."""
        if (self.data_dir / "meta.properties").exists():
            return
        command = self._java("kafka.tools.StorageTool", "format", "-t", random_cluster_id(), "-c", str(config),
                             "--standalone")
        with open(self.log_path, "ab") as log:
            done = subprocess.run(command, check=False, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                  cwd=self.workdir, timeout=120)
        if done.returncode != 0:
            raise KafkaError(f"formatting the storage failed ({done.returncode}).\n" + self.log_tail())

    def start(self, timeout: float = 90) -> Self:
        try:
            config = self._configure()
            self._format(config)
            self._log = open(self.log_path, "ab")  # noqa: SIM115 — closed by stop()
            self.process = subprocess.Popen(self._java("kafka.Kafka", str(config)), stdin=subprocess.DEVNULL,
                                            stdout=self._log, stderr=subprocess.STDOUT, cwd=self.workdir,
                                            start_new_session=True)
            self._wait(timeout)
        except BaseException:
            self.stop()
            raise
        return self

    def _wait(self, timeout: float) -> None:
        from confluent_kafka.admin import AdminClient

        deadline = time.monotonic() + timeout
        admin = None
        while True:
            assert self.process is not None
            if self.process.poll() is not None:
                raise KafkaError(f"the Kafka broker exited ({self.process.returncode}) while starting.\n"
                                 + self.log_tail())
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise KafkaError(f"timed out after {timeout:.0f} s waiting for the Kafka broker.\n" + self.log_tail())
            # Connect only once the listener is bound: librdkafka logs every refused connection to stderr.
            if admin is None and listening(self.port):
                admin = AdminClient({"bootstrap.servers": self.bootstrap})
            if admin is not None:
                with contextlib.suppress(Exception):
                    if NODE_ID in admin.list_topics(timeout=min(5.0, max(remaining, 0.5))).brokers:
                        return
            time.sleep(0.2)

    def admin(self):
        from confluent_kafka.admin import AdminClient

        return AdminClient({"bootstrap.servers": self.bootstrap})

    def create_topic(self, name: str, partitions: int = 1, timeout: float = 30) -> None:
        """Create `name` and wait until every partition has a leader in the broker's metadata."""
        from confluent_kafka.admin import NewTopic

        admin = self.admin()
        futures = admin.create_topics([NewTopic(name, num_partitions=partitions, replication_factor=1)],
                                      operation_timeout=timeout, request_timeout=timeout)
        futures[name].result(timeout=timeout)
        deadline = time.monotonic() + timeout
        while True:
            topic = admin.list_topics(topic=name, timeout=timeout).topics.get(name)
            if (topic is not None and topic.error is None and len(topic.partitions) == partitions
                    and all(p.leader == NODE_ID for p in topic.partitions.values())):
                return
            if time.monotonic() > deadline:
                raise KafkaError(f"topic {name!r} has no leader for all {partitions} partitions after {timeout} s")
            time.sleep(0.1)

    def log_tail(self, lines: int = 40) -> str:
        """The log's first ERROR lines (the cause; a failed start ends in many lines of shutdown), then its tail."""
        if not self.log_path.exists():
            return ""
        text = self.log_path.read_text(errors="replace").splitlines()
        errors = [line for line in text if " ERROR " in line or " FATAL " in line][:10]
        first = f"--- errors in {self.log_path} ---\n" + "\n".join(errors) + "\n" if errors else ""
        return first + f"--- {self.log_path} ---\n" + "\n".join(text[-lines:])

    def stop(self, grace: float = 30) -> None:
        """SIGTERM the broker's process group (a controlled shutdown), SIGKILL it after `grace` seconds."""
        if self.process is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.process.pid, signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.process.wait(timeout=grace)
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.process.pid, signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.process.wait(timeout=10)
            self.process = None
        if self._log is not None:
            self._log.close()
            self._log = None

    def restart(self, timeout: float = 90) -> Self:
        """Stop, then start again on the same data dir and the same ports."""
        self.stop()
        return self.start(timeout)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
