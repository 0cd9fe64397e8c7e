"""Project settings: pipeframe.yaml, environments and environment-variable overrides.

Resolution order (later wins): built-in defaults, top level of pipeframe.yaml, the selected environment's
block (deep-merged), then PIPEFRAME_WAREHOUSE / PIPEFRAME_SPARK_MASTER / PIPEFRAME_SPARK_REMOTE.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pipeframe.errors import Location, PipeframeError

CONFIG_FILE = "pipeframe.yaml"
STATE_DIR = ".pipeframe"
KNOWN_KEYS = {"name", "warehouse", "spark", "environments", "vars", "ignore", "tokens", "retention_hours", "ingest"}
KNOWN_SPARK_KEYS = {"master", "remote", "conf"}


@dataclass(frozen=True)
class IngestSettings:
    """How appends to one datasource are grouped into Delta commits (`ingest:` in pipeframe.yaml).

    A commit is made as soon as the requests waiting hold `flush_rows` lines or `flush_bytes` bytes, or the first
    of them has waited `flush_ms`; while one commit is written the next group gathers. Above `buffer_bytes` waiting,
    new requests are refused (HTTP 429) until the buffer drains."""

    flush_rows: int = 100_000
    flush_bytes: int = 16 * 1024 * 1024
    flush_ms: int = 50
    buffer_bytes: int = 256 * 1024 * 1024
    poll_ms: int = 1000  # how often the continuous materializer looks for commits made by other writers


@dataclass(frozen=True)
class SparkSettings:
    master: str = "local[*]"
    remote: str | None = None
    conf: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class ProjectConfig:
    """Settings for one project in one environment."""

    root: Path
    name: str
    warehouse: str
    spark: SparkSettings
    vars: Mapping[str, Any] = field(default_factory=dict)
    ignore: tuple[str, ...] = ()
    environment: str | None = None
    tokens: Mapping[str, str] = field(default_factory=dict)
    retention_hours: float = 168.0  # how long `optimize` keeps files no longer in a table (Delta VACUUM)
    ingest: IngestSettings = field(default_factory=IngestSettings)

    @property
    def warehouse_uri(self) -> str:
        """The warehouse as an absolute local path or an unchanged Hadoop URI."""
        if "://" in self.warehouse:
            return self.warehouse
        path = Path(self.warehouse)
        return str(path if path.is_absolute() else (self.root / path).resolve())


def deep_merge(base: Mapping[str, Any], override: Mapping[str, Any]) -> dict[str, Any]:
    merged: dict[str, Any] = dict(base)
    for key, value in override.items():
        if isinstance(value, Mapping) and isinstance(merged.get(key), Mapping):
            merged[key] = deep_merge(merged[key], value)
        else:
            merged[key] = value
    return merged


def _read_yaml(path: Path) -> dict[str, Any]:
    import yaml  # only projects with a pipeframe.yaml pay for it (`pipeframe check` starts in a fresh process)

    where = Location(CONFIG_FILE)
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        if mark is not None:
            where = Location(CONFIG_FILE, mark.line + 1, mark.column + 1)
        problem = getattr(exc, "problem", None) or "invalid YAML"
        raise PipeframeError("PF001", f"{CONFIG_FILE} is not valid YAML: {problem}.",
                             "Fix the YAML syntax at the position shown.", where) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise PipeframeError("PF001", f"{CONFIG_FILE} cannot be read: {exc}.",
                             "Check the file exists, is readable and is UTF-8 text.", where) from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise PipeframeError("PF001", f"{CONFIG_FILE} must be a mapping of settings, not a {type(data).__name__}.",
                             "Write settings as `key: value` lines, e.g. `name: shop`.", where)
    return data


def _check_shape(data: Mapping[str, Any], path: Path, context: str) -> None:
    where = Location(CONFIG_FILE)
    unknown = sorted(set(data) - KNOWN_KEYS)
    if unknown:
        raise PipeframeError("PF002", f"Unknown setting{'s' if len(unknown) > 1 else ''} {', '.join(unknown)} in {context}.",
                             f"Use only: {', '.join(sorted(KNOWN_KEYS))}.", where)
    spark = data.get("spark", {})
    if spark is None:
        return
    if not isinstance(spark, Mapping):
        raise PipeframeError("PF002", f"`spark` in {context} must be a mapping.",
                             "Write e.g. `spark: {master: 'local[*]'}`.", where)
    bad = sorted(set(spark) - KNOWN_SPARK_KEYS)
    if bad:
        raise PipeframeError("PF002", f"Unknown spark setting {', '.join(bad)} in {context}.",
                             f"Use only: {', '.join(sorted(KNOWN_SPARK_KEYS))}.", where)
    if spark.get("conf") is not None and not isinstance(spark.get("conf"), Mapping):
        raise PipeframeError("PF002", f"`spark.conf` in {context} must be a mapping of Spark settings.",
                             "Write e.g. `conf: {spark.driver.memory: 4g}`.", where)
    for key in ("vars", "tokens"):
        if data.get(key) is not None and not isinstance(data.get(key), Mapping):
            raise PipeframeError("PF002", f"`{key}` in {context} must be a mapping.",
                                 f"Write e.g. `{key}: {{name: value}}`.", where)


def _conf_value(value: Any) -> str:
    """A Spark setting as Spark spells it: YAML `true` is "true" (not Python's "True")."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def load_config(root: str | os.PathLike[str], env: str | None = None,
                environ: Mapping[str, str] | None = None) -> ProjectConfig:
    """Read ``root/pipeframe.yaml`` (optional) and resolve it for environment ``env``."""
    environ = os.environ if environ is None else environ
    root_path = Path(root).resolve()
    path = root_path / CONFIG_FILE
    data = _read_yaml(path) if path.is_file() else {}
    _check_shape(data, path, CONFIG_FILE)

    env = env or environ.get("PIPEFRAME_ENV") or None
    environments = data.get("environments") or {}
    if not isinstance(environments, Mapping):
        raise PipeframeError("PF002", "`environments` must map environment names to settings.",
                             "Write e.g. `environments: {dev: {warehouse: .pipeframe/dev}}`.", Location(CONFIG_FILE))
    if env:
        if env in environments:
            override = environments[env] or {}
            if not isinstance(override, Mapping):
                raise PipeframeError("PF003", f"Environment `{env}` must be a mapping of settings.",
                                     "Write e.g. `dev: {warehouse: .pipeframe/dev}`.", Location(CONFIG_FILE))
            _check_shape(override, path, f"environment `{env}`")
            data = deep_merge(data, override)
        elif env != "dev" and environments:
            raise PipeframeError("PF003", f"Unknown environment `{env}`.",
                                 f"Choose one of: {', '.join(sorted(environments))}, or add it under `environments:`.",
                                 Location(CONFIG_FILE))

    spark = dict(data.get("spark") or {})
    master = environ.get("PIPEFRAME_SPARK_MASTER") or spark.get("master") or "local[*]"
    remote = environ.get("PIPEFRAME_SPARK_REMOTE") or spark.get("remote") or None
    conf = {str(k): _conf_value(v) for k, v in (spark.get("conf") or {}).items() if v is not None}
    default_warehouse = f"{STATE_DIR}/{env}" if env else f"{STATE_DIR}/warehouse"
    warehouse = environ.get("PIPEFRAME_WAREHOUSE") or data.get("warehouse") or default_warehouse
    ignore = data.get("ignore") or ()
    if isinstance(ignore, str):
        ignore = (ignore,)
    return ProjectConfig(
        root=root_path,
        name=str(data.get("name") or root_path.name),
        warehouse=str(warehouse),
        spark=SparkSettings(master=str(master), remote=str(remote) if remote else None, conf=conf),
        vars=dict(data.get("vars") or {}),
        ignore=tuple(str(i) for i in ignore),
        environment=env,
        tokens={str(k): str(v) for k, v in (data.get("tokens") or {}).items()},
        retention_hours=_retention(data.get("retention_hours"), path),
        ingest=_ingest(data.get("ingest")),
    )


def _ingest(value: Any) -> IngestSettings:
    if value is None:
        return IngestSettings()
    known = IngestSettings.__dataclass_fields__
    example = "Write e.g. `ingest: {flush_rows: 100000, flush_bytes: 16777216, flush_ms: 50, buffer_bytes: 268435456}`."
    if not isinstance(value, Mapping):
        raise PipeframeError("PF002", "`ingest` must be a mapping of settings.", example, Location(CONFIG_FILE))
    unknown = sorted(set(value) - set(known))
    if unknown:
        raise PipeframeError("PF002", f"Unknown ingest setting {', '.join(map(str, unknown))}.",
                             f"Use only: {', '.join(known)}.", Location(CONFIG_FILE))
    settings = {}
    for key, number in value.items():
        if isinstance(number, bool) or not isinstance(number, int) or number <= 0:
            raise PipeframeError("PF002", f"`ingest.{key}` must be a positive whole number, not `{number}`.",
                                 example, Location(CONFIG_FILE))
        settings[key] = number
    return IngestSettings(**settings)


def _retention(value: Any, path: Path) -> float:
    if value is None:
        return 168.0
    try:
        hours = float(value)
    except (TypeError, ValueError):
        hours = -1.0
    if hours < 0:
        raise PipeframeError("PF002", f"`retention_hours` must be a number of hours, not `{value}`.",
                             "Write e.g. `retention_hours: 168` (Delta's default, 7 days).", Location(CONFIG_FILE))
    return hours
