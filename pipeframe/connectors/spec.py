"""What a `.connection` file and a datasource's connector settings may say, checked by `pipeframe check` (pure: no
broker is reached, no secret is read), and `tb_secret("NAME", "default")` resolved where a connector runs: from the
environment, then a `.env` file next to pipeframe.yaml, then the default.

Codes: PF111 a connection file's problem (TYPE, a setting unknown, missing or out of its values), PF112 a secret
that is not set and has no default (raised when the connector starts), PF113 a datasource's connector settings (a
connection of another type, a missing KAFKA_TOPIC or IMPORT_BUCKET_URI, a value out of its set, a bucket URI that is
not s3:// or s3a://; a connection no file defines is a warning, as Tinybird Classic projects keep theirs in the
workspace)."""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from pipeframe.datafiles.model import Connection, Datasource, Setting
from pipeframe.errors import Diagnostic, PipeframeError

SECRET = re.compile(r"""\{\{\s*tb_secret\(\s*(["'])(?P<name>[A-Za-z_][A-Za-z0-9_]*)\1\s*"""
                    r"""(?:,\s*(["'])(?P<default>.*?)\3\s*)?\)\s*\}\}""")


@dataclass(frozen=True)
class Rule:
    """One setting: required or not, and the values it takes (empty: any text)."""

    required: bool = False
    values: tuple[str, ...] = ()


KAFKA_CONNECTION = {
    "KAFKA_BOOTSTRAP_SERVERS": Rule(required=True),
    "KAFKA_SECURITY_PROTOCOL": Rule(values=("PLAINTEXT", "SASL_PLAINTEXT", "SASL_SSL", "SSL")),
    "KAFKA_SASL_MECHANISM": Rule(values=("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")),
    "KAFKA_KEY": Rule(),
    "KAFKA_SECRET": Rule(),
    "KAFKA_SSL_CA_PEM": Rule(),
}
S3_CONNECTION = {  # read by S3 imports (connectors/s3.py) and S3 sinks (connectors/sink.py)
    "S3_REGION": Rule(required=True), "S3_ARN": Rule(), "S3_ACCESS_KEY": Rule(), "S3_SECRET": Rule(),
    "S3_ENDPOINT": Rule(),
}
CONNECTIONS = {"kafka": KAFKA_CONNECTION, "s3": S3_CONNECTION}
KAFKA_DATASOURCE = {
    "KAFKA_CONNECTION_NAME": Rule(required=True),
    "KAFKA_TOPIC": Rule(required=True),
    "KAFKA_GROUP_ID": Rule(),
    "KAFKA_AUTO_OFFSET_RESET": Rule(values=("earliest", "latest")),
    "KAFKA_STORE_RAW_VALUE": Rule(values=("true", "false")),
}
S3_DATASOURCE = {  # Tinybird's S3 connector (Forward's settings, and Classic's IMPORT_SERVICE / IMPORT_STRATEGY)
    "IMPORT_CONNECTION_NAME": Rule(required=True),
    "IMPORT_BUCKET_URI": Rule(required=True),
    "IMPORT_SCHEDULE": Rule(values=("@auto", "@on-demand")),
    "IMPORT_FROM_TIMESTAMP": Rule(),
    "IMPORT_STRATEGY": Rule(values=("append",)),
    "IMPORT_SERVICE": Rule(values=("s3", "s3_iamrole")),
}
BUCKET_URI = re.compile(r"s3a?://(?P<bucket>[^/*?\[\]]+)(?:/(?P<key>.*))?", re.IGNORECASE)


@dataclass(frozen=True)
class Connector:
    """What a datasource reads from: its settings' rules, the setting naming its connection and that one's TYPE."""

    what: str  # "Kafka datasource", as messages name it
    rules: Mapping[str, Rule]
    connection_setting: str
    type: str
    needs: str  # what a new connection file of that TYPE must say


KAFKA = Connector("Kafka datasource", KAFKA_DATASOURCE, "KAFKA_CONNECTION_NAME", "kafka", "KAFKA_BOOTSTRAP_SERVERS")
S3 = Connector("S3 import datasource", S3_DATASOURCE, "IMPORT_CONNECTION_NAME", "s3", "S3_REGION")


def connector_of(datasource: Datasource) -> Connector | None:
    """Whether a datasource reads from Kafka or imports from S3 (None: neither; its rows are appended)."""
    if not datasource.connector:
        return None
    return S3 if datasource.connector[0].keyword.startswith("IMPORT_") else KAFKA


def check_connections(connections: Iterable[Connection], datasources: Iterable[Datasource]) -> list[Diagnostic]:
    """Every problem of the project's connections and of its datasources' connector settings."""
    found: list[Diagnostic] = []
    by_name = {c.name: c for c in connections}
    for connection in by_name.values():
        rules = CONNECTIONS.get(connection.type or "")
        if rules is None:
            found.append(Diagnostic(
                "PF111", f"Connection `{connection.name}` has " + (f"TYPE `{connection.type}`, which pipeframe does "
                "not connect to." if connection.type else "no TYPE."),
                "Write `TYPE kafka` or `TYPE s3` as its first line.", connection.location, "error"))
            continue
        found += check_settings("PF111", f"connection `{connection.name}` (TYPE {connection.type})", connection.settings,
                           rules, connection.location)
    for ds in datasources:
        connector = connector_of(ds)
        if connector is None:
            continue
        mixed = next((s for s in ds.connector if s.keyword.split("_")[0] != connector.connection_setting.split("_")[0]),
                     None)
        if mixed is not None:
            found.append(Diagnostic("PF113", f"`{ds.name}` has both Kafka (KAFKA_*) and S3 import (IMPORT_*) settings.",
                                    "A datasource reads from one connector: keep the settings of one of them.",
                                    mixed.location, "error"))
            continue
        found += check_settings("PF113", f"{connector.what} `{ds.name}`", ds.connector, connector.rules, ds.location)
        if connector is S3:
            found += _import_values(ds)
        named = next((s for s in ds.connector if s.keyword == connector.connection_setting), None)
        if named is None:
            continue
        connection = by_name.get(named.value)
        if connection is None:
            close = difflib.get_close_matches(named.value, sorted(by_name), n=1)
            # A warning: Tinybird Classic keeps connections in the workspace, not in files; the datasource is
            # deployed and takes appends, it is not consumed (nor imported).
            found.append(Diagnostic("PF113", f"`{ds.name}` reads from connection `{named.value}`, which no "
                                    ".connection file defines: it is deployed but not "
                                    f"{'consumed' if connector is KAFKA else 'imported'}.",
                                    f"Did you mean `{close[0]}`?" if close else
                                    f"Add connections/{named.value}.connection with `TYPE {connector.type}` and "
                                    f"{connector.needs}.", named.location, "warning"))
        elif connection.type != connector.type:
            reads = "reads Kafka" if connector is KAFKA else "imports files"
            found.append(Diagnostic("PF113", f"`{ds.name}` {reads} from connection `{named.value}`, which is "
                                    f"TYPE {connection.type}.", f"Name a `TYPE {connector.type}` connection.",
                                    named.location, "error"))
    return found


def _import_values(ds: Datasource) -> list[Diagnostic]:
    """An S3 import's bucket URI (s3:// or s3a://, a bucket, globs in the key) and IMPORT_FROM_TIMESTAMP (ISO 8601)."""
    found = []
    for setting in ds.connector:
        if SECRET.search(setting.value):
            continue  # known where the import runs
        if setting.keyword == "IMPORT_BUCKET_URI" and BUCKET_URI.fullmatch(setting.value) is None:
            found.append(Diagnostic("PF113", f"IMPORT_BUCKET_URI `{setting.value}` is not an S3 URI.",
                                    "Write `s3://bucket/prefix/*.csv` (s3a:// too; `*`, `**` and `?` match in the "
                                    "key).", setting.location, "error"))
        elif setting.keyword == "IMPORT_FROM_TIMESTAMP" and from_timestamp(setting.value) is None:
            found.append(Diagnostic("PF113", f"IMPORT_FROM_TIMESTAMP `{setting.value}` is not a timestamp.",
                                    "Write an ISO 8601 time, e.g. `2024-01-31T00:00:00Z` (UTC unless it says).",
                                    setting.location, "error"))
    return found


def from_timestamp(value: str) -> datetime | None:
    """IMPORT_FROM_TIMESTAMP as an aware datetime (UTC unless it names a zone); None when it is not ISO 8601."""
    try:
        stamp = datetime.fromisoformat(value.strip())
    except ValueError:
        return None
    return stamp if stamp.tzinfo is not None else stamp.replace(tzinfo=UTC)


def check_settings(code: str, what: str, settings: tuple[Setting, ...], rules: Mapping[str, Rule],
                   where) -> list[Diagnostic]:
    """`code` for each setting `rules` do not know (with "did you mean"), each value out of its set, each required
    setting missing (at `where`)."""
    found = []
    written = {s.keyword for s in settings}
    for setting in settings:
        rule = rules.get(setting.keyword)
        if rule is None:
            close = difflib.get_close_matches(setting.keyword, sorted(rules), n=1)
            found.append(Diagnostic(code, f"`{setting.keyword}` is not a setting of {_a(what)}.",
                                    f"Did you mean `{close[0]}`?" if close else
                                    f"The settings it takes: {', '.join(sorted(rules))}.", setting.location, "error"))
        elif rule.values and not SECRET.search(setting.value) and \
                setting.value.strip().lower() not in {v.lower() for v in rule.values}:
            found.append(Diagnostic(code, f"{setting.keyword} `{setting.value}` is not one of "
                                    f"{', '.join(rule.values)}.", f"Write one of: {', '.join(rule.values)}.",
                                    setting.location, "error"))
    for keyword, rule in rules.items():
        if rule.required and keyword not in written:
            found.append(Diagnostic(code, f"{_a(what, 'A')} needs {keyword}.", f"Add a `{keyword} <value>` line.", where,
                                    "error"))
    return found


def _a(what: str, article: str = "a") -> str:
    return f"{article}{'n' if what.startswith('S3') else ''} {what}"  # "an S3 ...": said "es-three"


def environment(root: Path, environ: Mapping[str, str]) -> dict[str, str]:
    """The values secrets read: `.env` next to pipeframe.yaml (python-dotenv's format), overridden by `environ`."""
    from dotenv import dotenv_values

    dotenv = root / ".env"
    values = {k: v for k, v in dotenv_values(dotenv).items() if v is not None} if dotenv.is_file() else {}
    return {**values, **environ}


def settings_of(datasource: Datasource, connection: Connection, environ: Mapping[str, str]) -> dict[str, str]:
    """A connector datasource's settings and its connection's, secrets put in (PF112 for one that is not set)."""
    return {s.keyword: resolved(s, environ) for s in (*connection.settings, *datasource.connector)}


def resolved(setting: Setting, environ: Mapping[str, str]) -> str:
    """A setting's value with every `tb_secret(...)` call replaced (PF112 for a secret not set without default)."""

    def secret(match: re.Match[str]) -> str:
        name, default = match.group("name"), match.group("default")
        if name in environ:
            return environ[name]
        if default is not None:
            return default
        raise PipeframeError(
            "PF112", f"Secret `{name}` ({setting.keyword}) is not set.",
            f"Set the environment variable {name}, add `{name}=...` to .env next to pipeframe.yaml, or give "
            f'tb_secret a default: tb_secret("{name}", "...").', setting.location)

    return SECRET.sub(secret, setting.value).strip()  # quotes around the value were taken off by the parser
