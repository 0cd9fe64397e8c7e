"""What a `TYPE sink` pipe may say (Tinybird's `EXPORT_*` settings) and its EXPORT_FILE_TEMPLATE, checked by
`pipeframe check` (pure: no bucket is reached, no secret is read); connectors/sink.py runs the export.

Codes: PF116 a sink pipe's settings (a setting unknown, missing or out of its values, a connection of another TYPE,
a bucket URI that is not `s3://bucket/prefix`, a schedule that is not a cron, a file template naming what the pipe
does not output, EXPORT_* lines in a pipe that is not TYPE sink); a connection no file defines is a warning, as for
datasources."""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime

from pipeframe.connectors.spec import BUCKET_URI, SECRET, Rule, check_settings
from pipeframe.datafiles.model import Connection, Pipe, Setting
from pipeframe.datafiles.parser import valid_cron
from pipeframe.errors import Diagnostic

FORMATS = ("csv", "ndjson", "parquet")
COMPRESSIONS = ("none", "gz", "gzip")
STRATEGIES = ("new", "truncate")
COMMON = {
    "EXPORT_CONNECTION_NAME": Rule(required=True),
    "EXPORT_SCHEDULE": Rule(),  # a cron (UTC) or @on-demand (the default)
    "EXPORT_SERVICE": Rule(values=("s3", "s3_iamrole", "kafka")),  # Tinybird Classic's
}
S3_SINK = {
    **COMMON,
    "EXPORT_BUCKET_URI": Rule(required=True),
    "EXPORT_FILE_TEMPLATE": Rule(required=True),
    "EXPORT_FORMAT": Rule(values=FORMATS),
    "EXPORT_COMPRESSION": Rule(values=COMPRESSIONS),
    "EXPORT_WRITE_STRATEGY": Rule(values=STRATEGIES),
    "EXPORT_STRATEGY": Rule(values=(*STRATEGIES, "@new", "@truncate")),  # Tinybird Classic's spelling
}
KAFKA_SINK = {**COMMON, "EXPORT_KAFKA_TOPIC": Rule(required=True), "EXPORT_FORMAT": Rule(values=("json",))}
RUN_TIME = "run_time"  # pipeframe's placeholder for the run's scheduled time (UTC)
DEFAULT_STAMP = "%Y%m%d%H%M%S"
PLACEHOLDER = re.compile(r"\{([^{}]*)\}")
PART = re.compile(r"""\s*(?:(?P<count>\d+)|(?P<name>[A-Za-z_][A-Za-z0-9_]*)\s*(?:,\s*(['"])(?P<format>[^'"]*)\3)?)\s*""")


@dataclass(frozen=True)
class Placeholder:
    """One `{...}` of a file template: a column (optionally `{column, '%Y-%m-%d'}`), a file count `{8}`, or
    pipeframe's `{run_time}` / `{run_time, '%Y%m%d'}` (a column of that name wins, as in Tinybird)."""

    text: str  # as written, braces included
    name: str | None = None
    format: str | None = None
    count: int | None = None


@dataclass(frozen=True)
class FileTemplate:
    """EXPORT_FILE_TEMPLATE parsed: the literal parts and the placeholders between them."""

    written: str
    parts: tuple[str | Placeholder, ...]

    @property
    def placeholders(self) -> tuple[Placeholder, ...]:
        return tuple(p for p in self.parts if isinstance(p, Placeholder))

    def columns(self, outputs: Iterable[str]) -> tuple[str, ...]:
        """The placeholders that name columns of the pipe's result (one file per distinct value)."""
        known = set(outputs)
        return tuple(dict.fromkeys(p.name for p in self.placeholders if p.name and p.name in known))

    @property
    def files(self) -> int:
        """How many files `{N}` splits the rows into (1 without one)."""
        return next((p.count for p in self.placeholders if p.count), 1)

    def uses_run_time(self, outputs: Iterable[str]) -> bool:
        return any(p.name == RUN_TIME for p in self.placeholders) and RUN_TIME not in set(outputs)

    def render(self, values: Mapping[str, object], part: int, run_time: datetime) -> str:
        """The file name for one group of rows: its columns' `values`, its `part` (of `{N}`), the run's time."""
        out = []
        for piece in self.parts:
            if isinstance(piece, str):
                out.append(piece)
            elif piece.count is not None:
                out.append(str(part))
            elif piece.name in values:
                out.append(key_safe(_shown(values[piece.name], piece.format)))
            else:  # run_time (check refuses any other name)
                out.append(run_time.strftime(piece.format or DEFAULT_STAMP))
        return "".join(out)


UNSAFE = re.compile(r"[^A-Za-z0-9._=+-]")


def key_safe(value: str) -> str:
    """A column's value as a piece of an object key: letters, digits and `._=+-` kept, anything else (a `/` that
    would make a folder, a control character) as `_`, and no `..` or empty piece, so a file stays under the prefix
    even for tools that read keys as paths."""
    safe = UNSAFE.sub("_", value).replace("..", "__")
    return safe or "_"


class TemplateError(ValueError):
    """A file template that does not parse; the message says why."""


def file_template(written: str) -> FileTemplate:
    """Parse EXPORT_FILE_TEMPLATE (TemplateError when a brace is unbalanced or a placeholder is not understood)."""
    parts: list[str | Placeholder] = []
    at = 0
    for match in PLACEHOLDER.finditer(written):
        literal = written[at:match.start()]
        if "{" in literal or "}" in literal:
            raise TemplateError(f"a brace in `{literal}` is not closed")
        parts.append(literal)
        inner = PART.fullmatch(match.group(1))
        if inner is None:
            raise TemplateError(f"`{match.group(0)}` is not a placeholder")
        count = int(inner.group("count")) if inner.group("count") else None
        if count == 0:
            raise TemplateError("`{0}` splits the rows into no file")
        parts.append(Placeholder(match.group(0), inner.group("name"), inner.group("format"), count))
        at = match.end()
    rest = written[at:]
    if "{" in rest or "}" in rest:
        raise TemplateError(f"a brace in `{rest}` is not closed")
    parts.append(rest)
    if sum(1 for p in parts if isinstance(p, Placeholder) and p.count) > 1:
        raise TemplateError("it has more than one `{N}` file count")
    return FileTemplate(written, tuple(p for p in parts if p != ""))


def _shown(value: object, format: str | None) -> str:
    if value is None:
        return "null"
    if format and hasattr(value, "strftime"):
        return value.strftime(format)  # type: ignore[union-attr]
    return str(value)


def export_settings(pipe: Pipe) -> tuple[Setting, ...]:
    """Every EXPORT_* line of the pipe, whichever node it follows."""
    return tuple(s for node in pipe.nodes for s in node.export)


def sink_kind(pipe: Pipe, connections: Mapping[str, Connection]) -> str:
    """`s3` or `kafka`: the TYPE of the named connection, else what the settings say (EXPORT_KAFKA_TOPIC: kafka)."""
    settings = export_settings(pipe)
    named = next((s.value for s in settings if s.keyword == "EXPORT_CONNECTION_NAME"), None)
    connection = connections.get(named or "")
    if connection is not None and connection.type in ("s3", "kafka"):
        return connection.type
    return "kafka" if any(s.keyword == "EXPORT_KAFKA_TOPIC" for s in settings) else "s3"


def check_sinks(connections: Iterable[Connection], pipes: Iterable[Pipe],
                outputs: Mapping[str, tuple[str, ...] | None]) -> list[Diagnostic]:
    """Every problem of the project's sink pipes; `outputs`: each pipe's output columns (None: not known)."""
    by_name = {c.name: c for c in connections}
    found: list[Diagnostic] = []
    for pipe in pipes:
        settings = export_settings(pipe)
        if pipe.type != "sink":
            found += [Diagnostic("PF116", f"{s.keyword} is a sink's setting, but pipe `{pipe.name}` is not TYPE sink.",
                                 "Add `TYPE sink` after the node's SQL, or remove the EXPORT_* lines.", s.location)
                      for s in settings]
            continue
        where = pipe.typed_node.where("TYPE") if pipe.typed_node else pipe.location
        kind = sink_kind(pipe, by_name)
        rules, other = (S3_SINK, KAFKA_SINK) if kind == "s3" else (KAFKA_SINK, S3_SINK)
        theirs = [s for s in settings if s.keyword in other and s.keyword not in rules]
        found += [Diagnostic("PF116", f"{s.keyword} is a setting of {'Kafka' if kind == 's3' else 'S3'} sinks, but "
                             f"pipe `{pipe.name}` exports to {'S3' if kind == 's3' else 'Kafka'}.",
                             f"Name a `TYPE {'kafka' if kind == 's3' else 's3'}` connection in "
                             "EXPORT_CONNECTION_NAME, or remove the line.", s.location) for s in theirs]
        found += check_settings("PF116", f"{'S3' if kind == 's3' else 'Kafka'} sink pipe `{pipe.name}`",
                                tuple(s for s in settings if s not in theirs), rules, where)
        found += _repeated(settings) + _values(pipe, settings, outputs.get(pipe.name))
        named = next((s for s in settings if s.keyword == "EXPORT_CONNECTION_NAME"), None)
        connection = by_name.get(named.value) if named else None
        if named is not None and connection is None:
            close = difflib.get_close_matches(named.value, sorted(by_name), n=1)
            found.append(Diagnostic("PF116", f"Sink pipe `{pipe.name}` exports through connection `{named.value}`, "
                                    "which no .connection file defines: it is deployed but not exported.",
                                    f"Did you mean `{close[0]}`?" if close else
                                    f"Add connections/{named.value}.connection with `TYPE s3` and S3_REGION.",
                                    named.location, "warning"))
        elif named is not None and connection is not None and connection.type not in ("s3", "kafka"):
            found.append(Diagnostic("PF116", f"Sink pipe `{pipe.name}` exports through connection `{named.value}`, "
                                    f"which is TYPE {connection.type}.", "Name a `TYPE s3` (or `TYPE kafka`) "
                                    "connection.", named.location, "error"))
    return found


def _repeated(settings: tuple[Setting, ...]) -> list[Diagnostic]:
    seen: set[str] = set()
    found = []
    for setting in settings:
        if setting.keyword in seen:
            found.append(Diagnostic("PF116", f"{setting.keyword} appears twice.", "Keep one of them.",
                                    setting.location))
        seen.add(setting.keyword)
    return found


def _values(pipe: Pipe, settings: tuple[Setting, ...], outputs: tuple[str, ...] | None) -> list[Diagnostic]:
    """The bucket URI, the schedule and the file template, each judged on its own."""
    found = []
    for setting in settings:
        value = setting.value
        if SECRET.search(value):
            continue  # known where the sink runs
        if setting.keyword == "EXPORT_BUCKET_URI":
            match = BUCKET_URI.fullmatch(value)
            if match is None or any(c in (match.group("key") or "") for c in "*?["):
                found.append(Diagnostic("PF116", f"EXPORT_BUCKET_URI `{value}` is not an S3 bucket and prefix.",
                                        "Write `s3://bucket/prefix/` (s3a:// too; no wildcards).", setting.location))
        elif setting.keyword == "EXPORT_SCHEDULE" and value.lower() != "@on-demand" and not valid_cron(value):
            found.append(Diagnostic("PF116", f"EXPORT_SCHEDULE `{value}` is not a cron expression.",
                                    "Use five cron fields in UTC (minute hour day month weekday), e.g. `0 * * * *` "
                                    "for every hour, or @on-demand.", setting.location))
        elif setting.keyword == "EXPORT_FILE_TEMPLATE":
            found += _template(pipe, setting, outputs)
    return found


def _template(pipe: Pipe, setting: Setting, outputs: tuple[str, ...] | None) -> list[Diagnostic]:
    try:
        template = file_template(setting.value)
    except TemplateError as err:
        return [Diagnostic("PF116", f"EXPORT_FILE_TEMPLATE `{setting.value}` does not parse: {err}.",
                           "Write names with `{column}`, `{column, '%Y-%m-%d'}`, `{8}` (eight files) or "
                           "`{run_time, '%Y%m%d'}` (the run's time, UTC) between literal text.", setting.location)]
    if outputs is None:
        return []  # the pipe's columns are not known (a `SELECT *` of an unknown table, ...): checked when it runs
    known = sorted({*outputs, RUN_TIME})
    found = []
    for placeholder in template.placeholders:
        if placeholder.name is not None and placeholder.name not in known:
            close = difflib.get_close_matches(placeholder.name, known, n=1)
            found.append(Diagnostic("PF116", f"EXPORT_FILE_TEMPLATE names `{placeholder.text}`, which is no column "
                                    f"of pipe `{pipe.name}`.", f"Did you mean `{close[0]}`?" if close else
                                    f"Its columns: {', '.join(outputs)}; or `{{run_time}}`, the run's time.",
                                    setting.location))
    return found
