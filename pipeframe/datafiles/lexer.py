"""Line-oriented lexing of datafiles: `KEYWORD value` lines and `KEYWORD >` indented blocks.

Handles `#` comments, `$VAR`/`${VAR}` substitution and `INCLUDE` splicing, keeping every line's origin.
"""

from __future__ import annotations

import hashlib
import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from pipeframe.errors import DiagnosticSink, Location

INDENT = "    "
VAR_PATTERN = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}|\$([A-Za-z_][A-Za-z0-9_]*)")
KEYWORD_PATTERN = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)(?:[ \t]+(.*))?$")
MAX_INCLUDE_DEPTH = 8
# Every keyword a datafile line may start with.
DATAFILE_KEYWORDS = frozenset({
    "DESCRIPTION", "TOKEN", "SCHEMA", "ENGINE", "ENGINE_PARTITION_KEY", "ENGINE_SORTING_KEY", "ENGINE_TTL",
    "ENGINE_SETTINGS", "ENGINE_PRIMARY_KEY", "ENGINE_VER", "ENGINE_SIGN", "ENGINE_VERSION", "ENGINE_IS_DELETED",
    "FORWARD_QUERY", "BACKFILL", "TAGS", "INDEXES", "SHARED_WITH", "VERSION", "NODE", "SQL", "TYPE", "DATASOURCE",
    "TARGET_DATASOURCE", "COPY_MODE", "COPY_SCHEDULE", "DIMENSIONS", "COUNT_DISTINCT", "FOLLOW_TTL",
    "INCLUDE",
})
# Connector settings (Kafka, S3, GCS, BigQuery/Snowflake imports, sinks): parsed, reported as not supported yet.
CONNECTOR_PREFIXES = ("IMPORT_", "KAFKA_", "S3_", "GCS_", "EXPORT_")
# Words that start a SQL line, never a datafile line: an unindented `ORDER BY ...` continues the query above it.
SQL_WORDS = frozenset({
    "SELECT", "FROM", "WHERE", "PREWHERE", "GROUP", "ORDER", "HAVING", "LIMIT", "OFFSET", "UNION", "INTERSECT",
    "EXCEPT", "JOIN", "LEFT", "RIGHT", "INNER", "OUTER", "FULL", "CROSS", "ANY", "ALL", "ARRAY", "ON", "USING",
    "AND", "OR", "NOT", "WITH", "AS", "CASE", "WHEN", "THEN", "ELSE", "END", "SETTINGS", "FORMAT", "WINDOW",
    "QUALIFY", "DISTINCT", "BY", "ASC", "DESC", "IN", "IS", "NULL", "BETWEEN", "LIKE", "ILIKE", "OVER", "INTERVAL",
    "FINAL", "SAMPLE", "VALUES", "LATERAL", "NULLS", "GLOBAL",
})


@dataclass(frozen=True)
class SourceLine:
    text: str
    location: Location


@dataclass(frozen=True)
class Statement:
    """One keyword with its value: a one-line value, or a block of dedented lines."""

    keyword: str
    value: str
    location: Location  # where the keyword is
    block: tuple[SourceLine, ...] | None = None

    @property
    def is_block(self) -> bool:
        return self.block is not None

    @property
    def text(self) -> str:
        """The value, or the block's lines joined (trailing blank lines dropped)."""
        if self.block is None:
            return self.value
        return "\n".join(line.text for line in self.block).rstrip()

    @property
    def value_location(self) -> Location:
        if self.block:
            return self.block[0].location
        return self.location.shifted(col=self.location.col + len(self.keyword) + 1)


def substitute(text: str, variables: Mapping[str, str], location: Location, sink: DiagnosticSink,
               strict: bool = True) -> str:
    """Replace `$VAR`/`${VAR}`; unknown names are errors when ``strict``, else left as they are."""

    def replace(match: re.Match[str]) -> str:
        name = match.group(1) or match.group(2)
        if name in variables:
            return str(variables[name])
        if strict:
            sink.error("PF107", f"Variable `${name}` is not set.",
                       f"Set the environment variable {name}, pass it as INCLUDE \"file\" \"{name}=value\", "
                       "or remove the `$`.", location.shifted(col=location.col + match.start()))
        return match.group(0)

    return VAR_PATTERN.sub(replace, text) if "$" in text else text


def read_lines(path: Path, display_path: str, sink: DiagnosticSink) -> list[SourceLine] | None:
    try:
        # utf-8-sig: editors on Windows often save a byte-order mark, which must not hide the first keyword.
        raw = path.read_text(encoding="utf-8-sig")
    except UnicodeDecodeError as exc:
        sink.error("PF101", f"File is not UTF-8 text ({exc.reason} at byte {exc.start}).",
                   "Save the file as UTF-8.", Location(display_path))
        return None
    except OSError as exc:
        sink.error("PF101", f"File cannot be read: {exc.strerror or exc}.",
                   "Check the file exists and is readable.", Location(display_path))
        return None
    raw = raw.replace("\r\n", "\n").replace("\r", "\n").replace("\t", INDENT)
    return [SourceLine(text, Location(display_path, n)) for n, text in enumerate(raw.split("\n"), start=1)]


def file_digest(path: Path) -> str | None:
    """A digest of a file's bytes; None when it is not a readable file."""
    try:
        return hashlib.blake2b(path.read_bytes(), digest_size=16).hexdigest()
    except OSError:
        return None


@dataclass
class Inputs:
    """What one file's statements were made from besides its own text: every file an INCLUDE looked for, with
    its digest when it was looked at (None: not a file), and every `$NAME` it substitutes. The check cache reuses
    the parsed file while all of them are unchanged."""

    files: dict[str, str | None] = field(default_factory=dict)
    variables: set[str] = field(default_factory=set)

    def look(self, path: Path) -> None:
        if str(path) not in self.files:
            self.files[str(path)] = file_digest(path)


def _is_file(path: Path) -> bool:
    """Like Path.is_file, but a path the OS cannot even look up (too long, ...) is simply not a file."""
    try:
        return path.is_file()
    except OSError:
        return False


def is_keyword(word: str) -> bool:
    upper = word.upper()
    return upper in DATAFILE_KEYWORDS or upper.startswith(CONNECTOR_PREFIXES)


def ends_block(text: str) -> bool:
    """Whether a line ends the `KEYWORD >` block above it. As in Tinybird, blocks are indented, but a block also
    takes unindented lines up to the next keyword line: `%`, `{% end %}`, `ORDER BY ...`, `) AS t` stay in it. A
    keyword line is an unindented datafile keyword, or an upper-case word that is not SQL (a misspelt keyword,
    reported as such rather than swallowed into a query)."""
    if not text or text[0] == " ":
        return False
    match = KEYWORD_PATTERN.match(text.rstrip())
    if match is None:
        return False
    word = match.group(1)
    return is_keyword(word) or (word.isupper() and word not in SQL_WORDS)


class Lexer:
    """Turns a file's lines into statements, expanding INCLUDEs and variables on the way."""

    def __init__(self, root: Path, environ: Mapping[str, str], sink: DiagnosticSink, record: bool = False) -> None:
        self.root = root
        self.environ = environ
        self.sink = sink
        self.record = record  # keep each file's Inputs in `self.inputs`, for the check cache
        self.inputs: Inputs | None = None
        self._resolved: dict[Path, Path] = {}

    def resolve(self, path: Path) -> Path:
        """`path.resolve()`, once per path: the parser asks for each file's display path more than once."""
        resolved = self._resolved.get(path)
        if resolved is None:
            resolved = self._resolved[path] = path.resolve()
        return resolved

    def _inside_root(self, path: Path) -> bool:
        try:
            return self.resolve(path).is_relative_to(self.resolve(self.root))
        except (OSError, RuntimeError):  # a path the OS cannot look up, a symlink loop
            return False

    def display(self, path: Path) -> str:
        try:
            return str(self.resolve(path).relative_to(self.root))
        except ValueError:
            return str(path)

    def statements(self, path: Path) -> list[Statement]:
        """The file's statements; when recording, what else they were made from is left in `self.inputs`."""
        self.inputs = Inputs() if self.record else None
        lines = read_lines(path, self.display(path), self.sink)
        if lines is None:
            return []
        return self._statements(self._expand(lines, path, {}, 0, (self.resolve(path),)))

    def _expand(self, lines: list[SourceLine], path: Path, include_vars: Mapping[str, str],
                depth: int, chain: tuple[Path, ...]) -> list[SourceLine]:
        """Substitute variables and splice INCLUDE files in place; ``chain`` is the files being expanded."""
        out: list[SourceLine] = []
        variables = {**self.environ, **include_vars}
        for line in lines:
            text = line.text
            stripped = text.strip()
            if stripped.startswith("#") and not text.startswith(" "):
                continue
            if text.startswith("INCLUDE ") or text.strip() == "INCLUDE":
                out.extend(self._include(line, path, include_vars, depth, chain))
                continue
            if self.inputs is not None and "$" in text:
                self.inputs.variables.update(m.group(1) or m.group(2) for m in VAR_PATTERN.finditer(text))
            substituted = substitute(text, variables, line.location, self.sink)
            out.append(line if substituted is text else SourceLine(substituted, line.location))
        return out

    def _include(self, line: SourceLine, path: Path, include_vars: Mapping[str, str],
                 depth: int, chain: tuple[Path, ...]) -> list[SourceLine]:
        where = line.location
        try:
            args = shlex.split(line.text[len("INCLUDE"):])
        except ValueError as exc:
            self.sink.error("PF106", f"INCLUDE line cannot be read: {exc}.",
                            'Write INCLUDE "path/to/file.incl" "VAR=value".', where)
            return []
        if not args:
            self.sink.error("PF106", "INCLUDE needs a file path.", 'Write INCLUDE "includes/file.incl".', where)
            return []
        if depth >= MAX_INCLUDE_DEPTH:
            self.sink.error("PF106", f"INCLUDE nested more than {MAX_INCLUDE_DEPTH} levels deep (a loop?).",
                            "Remove the INCLUDE that includes its own includer.", where)
            return []
        if "\x00" in args[0]:  # no file system takes it (Python refuses the path outright)
            self.sink.error("PF106", "The INCLUDE path contains a NUL character.",
                            'Write INCLUDE "path/to/file.incl" with printable characters only.', where)
            return []
        # Only files inside the project folder, by their real path: `..`, an absolute path or a symlink must
        # not splice in (and so reveal) files from elsewhere on the machine.
        candidates = (path.parent / args[0], self.root / args[0])
        inside = [c for c in candidates if self._inside_root(c)]
        if self.inputs is not None:  # kept as "no file here": a file appearing there (a symlink retargeted) is seen
            for candidate in candidates:
                if candidate not in inside:
                    self.inputs.files.setdefault(str(candidate), None)
        target = None
        for candidate in inside:
            if self.inputs is not None:
                self.inputs.look(candidate)  # before reading: an edit from now on is seen by the next run
            if _is_file(candidate):
                target = candidate
                break
        if target is None and len(inside) < len(candidates):
            self.sink.error("PF106", f"Included file `{args[0]}` is outside the project folder.",
                            "Move the file into the project folder and include it by a path relative to this file "
                            "or to the project root.", where)
            return []
        if target is None:
            self.sink.error("PF106", f"Included file `{args[0]}` does not exist.",
                            "Give the path relative to this file or to the project root.", where)
            return []
        # Stop at the first repeat: a file that includes itself several times would otherwise expand
        # exponentially up to MAX_INCLUDE_DEPTH.
        if target.resolve() in chain:
            loop = " -> ".join(self.display(p) for p in (*chain, target))
            self.sink.error("PF106", f"INCLUDE loop: {loop}.",
                            "Remove the INCLUDE that includes one of its own includers.", where)
            return []
        variables = dict(include_vars)
        for arg in args[1:]:
            name, eq, value = arg.partition("=")
            if not eq or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
                self.sink.error("PF106", f"INCLUDE argument `{arg}` is not of the form NAME=value.",
                                'Write INCLUDE "file.incl" "COLUMN=ts".', where)
                continue
            variables[name] = value
        included = read_lines(target, self.display(target), self.sink)
        if included is None:
            return []
        return self._expand(included, target, variables, depth + 1, (*chain, target.resolve()))

    def _statements(self, lines: list[SourceLine]) -> list[Statement]:
        statements: list[Statement] = []
        i = 0
        while i < len(lines):
            line = lines[i]
            text = line.text
            if not text.strip():
                i += 1
                continue
            if text[0] == " ":
                indent = len(text) - len(text.lstrip(" "))
                self.sink.error("PF103", f"Indented line outside a block (indent {indent}).",
                                "Indent block content under a `KEYWORD >` line, or start keywords at column 1.",
                                line.location.shifted(col=indent + 1))
                i += 1
                continue
            match = KEYWORD_PATTERN.match(text.rstrip())
            if match is None:
                self.sink.error("PF101", f"Expected a KEYWORD at the start of the line, found `{text.strip()[:40]}`.",
                                "Start each line with a keyword such as NODE, SQL, SCHEMA or DESCRIPTION.",
                                line.location)
                i += 1
                continue
            keyword, value = match.group(1), (match.group(2) or "").strip()
            if value == ">":
                block: list[SourceLine] = []
                i += 1
                while i < len(lines) and not ends_block(lines[i].text):
                    body = lines[i]
                    # Tinybird indents blocks by 4 spaces, but accepts less (even none): strip up to 4.
                    strip = min(len(body.text) - len(body.text.lstrip(" ")), len(INDENT))
                    block.append(SourceLine(body.text[strip:], body.location.shifted(col=strip + 1)))
                    i += 1
                while block and not block[-1].text.strip():
                    block.pop()
                statements.append(Statement(keyword, "", line.location, tuple(block)))
                continue
            statements.append(Statement(keyword, value, line.location))
            i += 1
        return statements
