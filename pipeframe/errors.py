"""Errors and diagnostics: the only error shapes a pipeframe user ever sees.

Every problem carries a stable code (``PF101``), a location, one sentence saying what is wrong and one
saying how to fix it. Code ranges: PF0xx project/config, PF1xx datafile syntax, PF2xx templates,
PF3xx names/SQL/graph/types, PF4xx incrementality, PF5xx Spark session, PF6xx deploy, PF7xx ingest and
views, PF8xx endpoints, copy pipes, the HTTP server and `pipeframe test`. The full list: docs/diagnostics.md.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Literal

Severity = Literal["error", "warning", "info"]


@dataclass(frozen=True, order=True)
class Location:
    """A position in a project file; lines and columns count from 1."""

    path: str
    line: int = 1
    col: int = 1

    def __str__(self) -> str:
        return f"{self.path}:{self.line}:{self.col}"

    def shifted(self, lines: int = 0, col: int | None = None) -> Location:
        return Location(self.path, self.line + lines, self.col if col is None else col)


@dataclass(frozen=True)
class Diagnostic:
    """One problem found in a project: what, where, and how to fix it."""

    code: str
    message: str
    hint: str = ""
    location: Location | None = None
    severity: Severity = "error"

    @property
    def is_error(self) -> bool:
        return self.severity == "error"

    def format(self) -> str:
        where = f"{self.location} " if self.location else ""
        text = f"{where}{self.code} {self.severity}: {self.message}"
        if self.hint:
            text += f"\n    fix: {self.hint}"
        return text

    def to_json(self) -> dict:
        loc = self.location
        return {
            "code": self.code,
            "severity": self.severity,
            "message": self.message,
            "hint": self.hint,
            "file": loc.path if loc else None,
            "line": loc.line if loc else None,
            "col": loc.col if loc else None,
        }


class PipeframeError(Exception):
    """The one exception type that reaches users; it holds one or more diagnostics."""

    exit_code = 1  # what the CLI exits with
    http_status = 400  # what the HTTP server answers with

    def __init__(
        self,
        code: str,
        message: str,
        hint: str = "",
        location: Location | None = None,
        *,
        http_status: int | None = None,
    ) -> None:
        self.diagnostics: tuple[Diagnostic, ...] = (Diagnostic(code, message, hint, location),)
        if http_status is not None:
            self.http_status = http_status
        super().__init__(self.diagnostics[0].format())

    @classmethod
    def many(cls, diagnostics: Iterable[Diagnostic]) -> PipeframeError:
        diags = tuple(diagnostics)
        if not diags:
            raise ValueError("PipeframeError.many needs at least one diagnostic")
        err = cls(diags[0].code, diags[0].message, diags[0].hint, diags[0].location)
        err.diagnostics = diags
        err.args = ("\n".join(d.format() for d in diags),)
        return err

    @property
    def code(self) -> str:
        return self.diagnostics[0].code


class RefusedError(PipeframeError):
    """A change pipeframe will not make (deploy exit status 3), as opposed to an error (exit status 1)."""

    exit_code = 3


@dataclass
class DiagnosticSink:
    """Collects diagnostics so every problem in a project is reported at once."""

    items: list[Diagnostic] = field(default_factory=list)

    def add(self, diagnostic: Diagnostic) -> None:
        if diagnostic not in self.items:
            self.items.append(diagnostic)

    def error(self, code: str, message: str, hint: str = "", location: Location | None = None) -> None:
        self.add(Diagnostic(code, message, hint, location, "error"))

    def warning(self, code: str, message: str, hint: str = "", location: Location | None = None) -> None:
        self.add(Diagnostic(code, message, hint, location, "warning"))

    def extend(self, diagnostics: Iterable[Diagnostic]) -> None:
        for d in diagnostics:
            self.add(d)

    @property
    def errors(self) -> list[Diagnostic]:
        return [d for d in self.items if d.is_error]

    @property
    def warnings(self) -> list[Diagnostic]:
        return [d for d in self.items if d.severity == "warning"]

    def sorted(self) -> list[Diagnostic]:
        return sorted(self.items, key=lambda d: (d.location or Location(""), d.code))
