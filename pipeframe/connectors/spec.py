"""What a `.connection` file and a datasource's connector settings may say, checked by `pipeframe check` (pure: no
broker is reached, no secret is read), and `tb_secret("NAME", "default")` resolved where a connector runs: from the
environment, then a `.env` file next to pipeframe.yaml, then the default.

Codes: PF111 a connection file's problem (TYPE, a setting unknown, missing or out of its values), PF112 a secret
that is not set and has no default (raised when the connector starts), PF113 a datasource's connector settings (a
connection of another type, a missing KAFKA_TOPIC, a value out of its set; a connection no file defines is a
warning, as Tinybird Classic projects keep theirs in the workspace)."""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
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
S3_CONNECTION = {  # accepted and checked; S3 imports and sinks are not built yet (docs/connectors.md)
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
        found += _settings("PF111", f"connection `{connection.name}` (TYPE {connection.type})", connection.settings,
                           rules, connection.location)
    for ds in datasources:
        if not ds.connector:
            continue
        found += _settings("PF113", f"Kafka datasource `{ds.name}`", ds.connector, KAFKA_DATASOURCE, ds.location)
        named = next((s for s in ds.connector if s.keyword == "KAFKA_CONNECTION_NAME"), None)
        if named is None:
            continue
        connection = by_name.get(named.value)
        if connection is None:
            close = difflib.get_close_matches(named.value, sorted(by_name), n=1)
            # A warning: Tinybird Classic keeps connections in the workspace, not in files; the datasource is
            # deployed and takes appends, it is not consumed.
            found.append(Diagnostic("PF113", f"`{ds.name}` reads from connection `{named.value}`, which no "
                                    ".connection file defines: it is deployed but not consumed.",
                                    f"Did you mean `{close[0]}`?" if close else
                                    f"Add connections/{named.value}.connection with `TYPE kafka` and "
                                    "KAFKA_BOOTSTRAP_SERVERS.", named.location, "warning"))
        elif connection.type != "kafka":
            found.append(Diagnostic("PF113", f"`{ds.name}` reads Kafka from connection `{named.value}`, which is "
                                    f"TYPE {connection.type}.", "Name a `TYPE kafka` connection.", named.location,
                                    "error"))
    return found


def _settings(code: str, what: str, settings: tuple[Setting, ...], rules: Mapping[str, Rule], where) -> list[Diagnostic]:
    found = []
    written = {s.keyword for s in settings}
    for setting in settings:
        rule = rules.get(setting.keyword)
        if rule is None:
            close = difflib.get_close_matches(setting.keyword, sorted(rules), n=1)
            found.append(Diagnostic(code, f"`{setting.keyword}` is not a setting of a {what}.",
                                    f"Did you mean `{close[0]}`?" if close else
                                    f"The settings it takes: {', '.join(sorted(rules))}.", setting.location, "error"))
        elif rule.values and not SECRET.search(setting.value) and \
                _plain(setting.value) not in rule.values:
            found.append(Diagnostic(code, f"{setting.keyword} `{setting.value}` is not one of "
                                    f"{', '.join(rule.values)}.", f"Write one of: {', '.join(rule.values)}.",
                                    setting.location, "error"))
    for keyword, rule in rules.items():
        if rule.required and keyword not in written:
            found.append(Diagnostic(code, f"A {what} needs {keyword}.", f"Add a `{keyword} <value>` line.", where,
                                    "error"))
    return found


def _plain(value: str) -> str:
    text = value.strip()  # already unquoted by the parser
    return text.lower() if text.lower() in ("earliest", "latest", "true", "false") else text.upper()


def environment(root: Path, environ: Mapping[str, str]) -> dict[str, str]:
    """The values secrets read: `.env` next to pipeframe.yaml (python-dotenv's format), overridden by `environ`."""
    from dotenv import dotenv_values

    dotenv = root / ".env"
    values = {k: v for k, v in dotenv_values(dotenv).items() if v is not None} if dotenv.is_file() else {}
    return {**values, **environ}


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
