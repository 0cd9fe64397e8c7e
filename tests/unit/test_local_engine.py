"""The warm local engine's pure side, without a JVM: its pid file (stale ones ignored and removed), how commands
find it, the launch conf and command line it gets, which Connect refusals mean "the server owns this setting",
and the `pipeframe local` commands that need no server (status, stop, a port already taken)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from pipeframe.cli import main
from pipeframe.config import load_config
from pipeframe.engine import localserver
from pipeframe.engine.localserver import server_conf, spark_submit_command
from pipeframe.engine.localstate import SERVER_CLASS, LocalServer, parse_state, process_alive, running, state_path
from pipeframe.engine.session import (
    DELTA_CATALOG,
    DELTA_EXTENSION,
    connect_settings,
    server_owned,
    settings_to_set,
    with_local_engine,
)

# What a Spark Connect 4.1 server answers to `conf.set` (copied from a real server).
DRIVER_MEMORY = ('[CANNOT_MODIFY_CONFIG] Cannot modify the value of the Spark config: "spark.driver.memory". '
                 "SQLSTATE: 46110")
STATIC = ('[CANNOT_MODIFY_STATIC_CONFIG] Cannot modify the value of the static Spark config: '
          '"spark.sql.warehouse.dir". SQLSTATE: 46110')
BAD_VALUE = ("[INVALID_CONF_VALUE.TYPE_MISMATCH] The value 'abc' in the config \"spark.sql.shuffle.partitions\" "
             "is invalid. It should be a/an 'int' value. SQLSTATE: 22022")


@pytest.fixture
def shop(tmp_path: Path) -> Path:
    root = tmp_path / "shop"
    (root / "datasources").mkdir(parents=True)
    (root / "datasources" / "events.datasource").write_text("SCHEMA >\n    `id` STRING\n", encoding="utf-8")
    (root / "pipeframe.yaml").write_text("name: shop\nspark:\n  conf:\n    spark.driver.memory: 2g\n",
                                         encoding="utf-8")
    return root


@pytest.fixture
def lookalike():
    """A live process whose command line names the Connect server class (what the pid check looks for)."""
    process = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)", SERVER_CLASS])
    cmdline = Path(f"/proc/{process.pid}/cmdline")
    for _ in range(500):  # the command line appears once the child has exec'd
        if SERVER_CLASS.encode() in cmdline.read_bytes():
            break
        time.sleep(0.01)
    yield process
    process.kill()
    process.wait()


def write_state(root: Path, pid: int, port: int = 15123) -> Path:
    path = state_path(root)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(LocalServer(pid, port, 0.0, "local.log").to_json()), encoding="utf-8")
    return path


def dead_pid() -> int:
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    process.wait()
    return process.pid


def test_a_pid_file_round_trips_and_garbage_is_no_server():
    server = LocalServer(4321, 15002, 1.5, "/p/.pipeframe/local.log", "/p/.pipeframe/warehouse")
    assert parse_state(json.dumps(server.to_json())) == server
    assert server.url == "sc://127.0.0.1:15002"
    for text in ("", "{", "[]", '{"pid": 1}', '{"pid": "x", "port": 1, "started_at": 0, "log": ""}'):
        assert parse_state(text) is None


def test_only_a_live_connect_server_counts(lookalike):
    assert process_alive(lookalike.pid)
    assert not process_alive(dead_pid())
    assert not process_alive(0)
    assert not process_alive(os.getpid())  # alive, but a reused pid that is not a Connect server is not ours


def test_a_stale_pid_file_is_ignored_and_removed(shop):
    path = write_state(shop, dead_pid())
    assert running(shop) is None and not path.exists()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("not json", encoding="utf-8")
    assert running(shop) is None and not path.exists()
    assert running(shop) is None  # no file at all


def test_commands_use_a_running_engine_unless_spark_is_set_explicitly(shop, lookalike):
    write_state(shop, lookalike.pid, 15123)
    config, url = with_local_engine(load_config(shop, environ={}))
    assert url == "sc://127.0.0.1:15123" and config.spark.remote == url
    explicit = load_config(shop, environ={"PIPEFRAME_SPARK_REMOTE": "sc://elsewhere:15002"})
    assert with_local_engine(explicit) == (explicit, None)
    cluster = load_config(shop, environ={"PIPEFRAME_SPARK_MASTER": "spark://127.0.0.1:7077"})
    assert with_local_engine(cluster) == (cluster, None)
    lookalike.kill()
    lookalike.wait()
    local = load_config(shop, environ={})
    assert with_local_engine(local) == (local, None) and not state_path(shop).exists()


def test_connect_refusals_that_mean_the_server_owns_a_setting():
    assert server_owned(DRIVER_MEMORY) and server_owned(STATIC)
    assert not server_owned(BAD_VALUE)  # a bad value is the user's to fix: reported, not ignored
    assert connect_settings({"spark.remote": "sc://h:1", "spark.sql.shuffle.partitions": "8"}) == \
        {"spark.sql.shuffle.partitions": "8"}
    # only what the session does not hold yet is sent (the local engine was launched with the project's settings)
    wanted = {"spark.driver.memory": "2g", "spark.sql.session.timeZone": "UTC", "spark.sql.shuffle.partitions": "64"}
    current = {"spark.driver.memory": "2g", "spark.sql.session.timeZone": "UTC", "spark.sql.shuffle.partitions": "4"}
    assert settings_to_set(wanted, current) == {"spark.sql.shuffle.partitions": "64"}


def test_the_server_is_launched_with_the_projects_local_settings(shop):
    config = load_config(shop, environ={"PIPEFRAME_SPARK_REMOTE": "sc://ignored:1"})
    conf = server_conf(config, 15999, environ={})
    assert conf["spark.connect.grpc.binding.address"] == "127.0.0.1"
    assert conf["spark.connect.grpc.binding.port"] == "15999"
    assert conf["spark.sql.extensions"] == DELTA_EXTENSION and conf["spark.sql.catalog.spark_catalog"] == DELTA_CATALOG
    assert conf["spark.driver.memory"] == "2g"  # a launch setting: the server is where it belongs
    assert conf["spark.sql.shuffle.partitions"] == "4" and conf["spark.driver.bindAddress"] == "127.0.0.1"
    assert "spark.remote" not in conf
    command = spark_submit_command(conf)
    assert command[0].endswith("bin/spark-submit") and command[1:3] == ["--class", SERVER_CLASS]
    assert "spark.connect.grpc.binding.port=15999" in command
    assert Path(command[-1]).is_file() and Path(command[-1]).name.startswith("spark-connect_")
    assert localserver.delta_packages([]).startswith("io.delta:delta-spark_")


def test_local_status_and_stop_without_a_server(shop):
    runner = CliRunner()
    status = runner.invoke(main, ["local", "status", "-p", str(shop)])
    assert status.exit_code == 0 and "not running" in status.output
    status = runner.invoke(main, ["local", "status", "--json", "-p", str(shop)])
    assert status.exit_code == 0 and json.loads(status.output) == {"running": False}
    stopped = runner.invoke(main, ["local", "stop", "-p", str(shop)])
    assert stopped.exit_code == 0 and "not running" in stopped.output


def test_local_start_on_a_port_in_use_is_refused_before_anything_starts(shop):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = CliRunner().invoke(main, ["local", "start", "--port", str(port), "-p", str(shop)])
    assert done.exit_code == 1 and "PF511" in done.output and f"Port {port}" in done.output
    assert not state_path(shop).exists()


def test_local_start_while_one_runs_is_refused(shop, lookalike):
    write_state(shop, lookalike.pid, 15123)
    done = CliRunner().invoke(main, ["local", "start", "-p", str(shop)])
    assert done.exit_code == 1 and "PF511" in done.output and "sc://127.0.0.1:15123" in done.output
