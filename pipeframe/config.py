"""Project settings: pipeframe.yaml, environments and environment-variable overrides.

Resolution order (later wins): built-in defaults, top level of pipeframe.yaml, the selected environment's
block (deep-merged), then PIPEFRAME_WAREHOUSE / PIPEFRAME_SPARK_MASTER / PIPEFRAME_SPARK_REMOTE /
PIPEFRAME_SIGNING_KEY / PIPEFRAME_SPARK_NICE (`ingest.spark_nice`).

A value may name environment variables: `${VAR}`, `${VAR:-default}` (the default when VAR is unset or empty),
`$${` for a literal `${`. They are substituted after the environment is chosen, so a secret that only `prod`
uses need not be set in development.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pipeframe.errors import Location, PipeframeError

CONFIG_FILE = "pipeframe.yaml"
STATE_DIR = ".pipeframe"
KNOWN_KEYS = {"name", "warehouse", "spark", "environments", "vars", "ignore", "tokens", "signing_key", "retention_hours", "ingest",
              "service_log"}
KNOWN_SPARK_KEYS = {"master", "remote", "conf"}


def user_cache_dir(environ: Mapping[str, str] | None = None) -> Path:
    """Where pipeframe keeps what it learns once per machine (resolved jars, the JVM's class archive)."""
    environ = os.environ if environ is None else environ
    return Path(environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "pipeframe"


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
    import_poll_ms: int = 5000  # how often `serve`/`dev`/`run` list the bucket of each @auto S3 import datasource
    # Group commits and view increments to local tables are written by pyarrow and committed to the Delta log
    # without a Spark write job (engine/deltaappend.py); false: always through Spark's writer.
    direct_commit: bool = True
    # How `serve`/`dev`/`run` read Kafka datasources: `consumer` (librdkafka in the server's process) or `streaming`
    # (Spark Structured Streaming's Kafka source: read and parsed on the cluster's executors; connectors/kafka_stream.py).
    kafka_engine: str = "consumer"
    # Under `serve`/`dev`/`run`, the embedded Spark JVM's threads (view maintenance, Spark's jobs) run this much nicer
    # than the process's own (group commits, answers), so a refresh on both cores does not hold requests back
    # (session.yield_cpu; 0: the same priority; at most 19).
    spark_nice: int = 10


KAFKA_ENGINES = ("consumer", "streaming")


@dataclass(frozen=True)
class ServiceLogSettings:
    """The service datasources (`service_log:` in pipeframe.yaml): whether requests and operations are recorded into
    `pipeframe.pipe_stats` and `pipeframe.ops_log`, how often a server writes what it recorded, and how many days of
    rows are kept."""

    enabled: bool = True
    flush_ms: int = 2000
    retention_days: int = 7


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
    # The key signed tenant tokens (JWT, pipeframe/tokens.py) are signed and checked with: pipeframe.yaml
    # `signing_key:` (usually `${SOME_SECRET}`), or PIPEFRAME_SIGNING_KEY. Never written into the warehouse.
    signing_key: str | None = field(default=None, repr=False)
    retention_hours: float = 168.0  # how long `optimize` keeps files no longer in a table (Delta VACUUM)
    ingest: IngestSettings = field(default_factory=IngestSettings)
    service_log: ServiceLogSettings = field(default_factory=ServiceLogSettings)

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


class _Template(str):
    """A YAML value that names environment variables, with where it was written; substituted by `_substitute`."""

    line: int
    column: int
    plain: bool  # written unquoted: once substituted, `${PORT}` may read as a number, as YAML would read it


_REFERENCE = re.compile(r"\$(\$)?\{([^}]*)\}")
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _loader(stream: str) -> Any:
    """PyYAML's safe loader, keeping every string that names `${...}` as a `_Template`."""
    import yaml

    class Loader(yaml.SafeLoader):
        def construct_yaml_str(self, node: Any) -> Any:
            value = super().construct_yaml_str(node)
            if "${" not in value:
                return value
            template = _Template(value)
            template.line, template.column = node.start_mark.line + 1, node.start_mark.column + 1
            template.plain = node.style is None
            return template

    Loader.add_constructor("tag:yaml.org,2002:str", Loader.construct_yaml_str)
    return Loader(stream)


def _substitute(value: Any, environ: Mapping[str, str]) -> Any:
    """``value`` (a setting, or a mapping or list of them) with every `${VAR}` replaced from ``environ``."""
    if isinstance(value, Mapping):
        return {key: _substitute(item, environ) for key, item in value.items()}
    if isinstance(value, list):
        return [_substitute(item, environ) for item in value]
    if not isinstance(value, _Template):
        return value
    where = Location(CONFIG_FILE, value.line, value.column)

    def replace(match: re.Match[str]) -> str:
        if match.group(1):  # `$${...}`: written literally
            return match.group(0)[1:]
        name, has_default, default = match.group(2).partition(":-")
        if not _NAME.fullmatch(name):
            raise PipeframeError("PF002", f"`{match.group(0)}` is not a reference to an environment variable.",
                                 "Write `${NAME}` or `${NAME:-default}`; write `$${` for a literal `${`.", where)
        found = environ.get(name)
        if found:
            return found
        if has_default:
            return default
        if found is None:
            raise PipeframeError("PF008", f"`{match.group(0)}` names the environment variable {name}, which is not set.",
                                 f"Set {name} in the environment (e.g. a CI secret), or give a default: "
                                 f"`${{{name}:-value}}`.", where)
        return found

    text = _REFERENCE.sub(replace, value)
    if not value.plain:
        return text
    import yaml  # a plain scalar reads as YAML would read the substituted text: `${FLUSH_MS:-50}` is a number

    loader = yaml.SafeLoader("")
    try:
        return loader.construct_object(yaml.ScalarNode(loader.resolve(yaml.ScalarNode, text, (True, False)), text))
    finally:
        loader.dispose()


def _read_yaml(path: Path) -> dict[str, Any]:
    import yaml  # only projects with a pipeframe.yaml pay for it (`pipeframe check` starts in a fresh process)

    where = Location(CONFIG_FILE)
    try:
        data = yaml.load(path.read_text(encoding="utf-8"), Loader=_loader)  # a SafeLoader (see `_loader`)
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

    data = {key: value if key == "environments" else _substitute(value, environ) for key, value in data.items()}
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
        signing_key=str(environ.get("PIPEFRAME_SIGNING_KEY") or data.get("signing_key") or "") or None,
        retention_hours=_retention(data.get("retention_hours"), path),
        ingest=_ingest(data.get("ingest") if "PIPEFRAME_SPARK_NICE" not in environ else
                       {**(data.get("ingest") or {}), "spark_nice": _whole(environ["PIPEFRAME_SPARK_NICE"])}),
        service_log=_service_log(data.get("service_log")),
    )


def _service_log(value: Any) -> ServiceLogSettings:
    if value is None:
        return ServiceLogSettings()
    known = ServiceLogSettings.__dataclass_fields__
    example = "Write e.g. `service_log: {enabled: true, flush_ms: 2000, retention_days: 7}`."
    if not isinstance(value, Mapping) or set(value) - set(known):
        raise PipeframeError("PF002", "`service_log` must be a mapping of " + ", ".join(known) + ".", example,
                             Location(CONFIG_FILE))
    for key, setting in value.items():
        wanted = bool if key == "enabled" else int
        if not isinstance(setting, wanted) or (wanted is int and (isinstance(setting, bool) or setting <= 0)):
            kind = "true or false" if wanted is bool else "a positive whole number"
            raise PipeframeError("PF002", f"`service_log.{key}` must be {kind}, not `{setting}`.", example,
                                 Location(CONFIG_FILE))
    return ServiceLogSettings(**value)


def _whole(text: str) -> int | str:
    """An environment variable's whole number, or its text (which the setting's check then names)."""
    try:
        return int(text)
    except ValueError:
        return text


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
        if key == "kafka_engine":
            if number not in KAFKA_ENGINES:
                raise PipeframeError("PF002", f"`ingest.kafka_engine` must be one of {', '.join(KAFKA_ENGINES)}, not "
                                     f"`{number}`.", "Write e.g. `ingest: {kafka_engine: streaming}`.",
                                     Location(CONFIG_FILE))
            settings[key] = number
            continue
        if key == "direct_commit":
            if not isinstance(number, bool):
                raise PipeframeError("PF002", f"`ingest.direct_commit` must be true or false, not `{number}`.",
                                     example, Location(CONFIG_FILE))
            settings[key] = number
            continue
        if key == "spark_nice":
            if isinstance(number, bool) or not isinstance(number, int) or not 0 <= number <= 19:
                raise PipeframeError("PF002", f"`ingest.spark_nice` must be a whole number from 0 to 19, not "
                                     f"`{number}`.", "Write e.g. `ingest: {spark_nice: 10}` (0: Spark's threads at "
                                     "the process's own priority).", Location(CONFIG_FILE))
            settings[key] = number
            continue
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
