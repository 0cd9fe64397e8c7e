"""Whether the project's warm local engine (`engine/localserver.py`) is up: its pid file, `.pipeframe/local.json`,
read and checked against the live process. Pure Python, so `session.get_session` can find the engine it connects to."""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

from pipeframe.config import STATE_DIR

HOST = "127.0.0.1"
STATE_FILE = "local.json"
LOG_FILE = "local.log"
SERVER_CLASS = "org.apache.spark.sql.connect.service.SparkConnectServer"


@dataclass(frozen=True)
class LocalServer:
    """A running local engine, as its pid file records it."""

    pid: int
    port: int
    started_at: float
    log: str
    warehouse: str = ""

    @property
    def url(self) -> str:
        return f"sc://{HOST}:{self.port}"

    def to_json(self) -> dict:
        return {**asdict(self), "url": self.url}


def state_path(root: Path) -> Path:
    return Path(root) / STATE_DIR / STATE_FILE


def log_path(root: Path) -> Path:
    return Path(root) / STATE_DIR / LOG_FILE


def parse_state(text: str) -> LocalServer | None:
    """The server a pid file describes, or None when the file is not one (garbage, a partial write)."""
    try:
        data = json.loads(text)
        return LocalServer(int(data["pid"]), int(data["port"]), float(data["started_at"]), str(data["log"]),
                           str(data.get("warehouse", "")))
    except (ValueError, KeyError, TypeError):
        return None


def process_alive(pid: int) -> bool:
    """Whether ``pid`` is a live process that is a Spark Connect server (a reused pid is not)."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # someone else's process: alive, but not to be trusted as ours
    cmdline = Path(f"/proc/{pid}/cmdline")
    if cmdline.exists():
        try:
            if SERVER_CLASS not in cmdline.read_bytes().decode(errors="replace"):
                return False
        except OSError:
            return False
        with contextlib.suppress(OSError):  # a zombie (exited, not yet reaped) is gone for our purposes
            if Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1].startswith("Z"):
                return False
    return True


def running(root: Path, alive: Callable[[int], bool] = process_alive) -> LocalServer | None:
    """The project's local engine if it is up; a pid file left by a dead one (or an unreadable one) is removed."""
    path = state_path(root)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError:
        return None
    server = parse_state(text)
    if server is not None and alive(server.pid):
        return server
    with contextlib.suppress(OSError):
        path.unlink()
    return None
