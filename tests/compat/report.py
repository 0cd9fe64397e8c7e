"""How much of each vendored Tinybird project `pipeframe check` accepts: files, clean files, top failure reasons.

Run `python -m tests.compat.report` for the table; tests/unit/test_compat_corpus.py asserts its floor. JVM-free.
"""

from __future__ import annotations

import re
import sys
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from pipeframe.compiler.compile import CompiledProject, compile_project
from pipeframe.datafiles.loader import load_resources
from pipeframe.errors import Diagnostic

CORPUS = Path(__file__).resolve().parent
# The corpus must not depend on the machine's environment (`$VAR` in datafiles).
ENVIRON: dict[str, str] = {}
BACKTICKED = re.compile(r"`[^`]*`")


@dataclass(frozen=True)
class ProjectReport:
    """One corpus project checked: which files have no error, and the errors of the others."""

    name: str
    files: tuple[str, ...]
    failing: dict[str, tuple[Diagnostic, ...]]  # file -> its errors
    warnings: int

    @property
    def clean(self) -> int:
        return len(self.files) - len(self.failing)

    def reasons(self, top: int = 3) -> list[tuple[str, int]]:
        """The most frequent errors, by code and message shape (names in backticks elided), counted by file."""
        counter: Counter[str] = Counter()
        for errors in self.failing.values():
            counter.update({reason(e) for e in errors})
        return counter.most_common(top)


def reason(diagnostic: Diagnostic) -> str:
    return f"{diagnostic.code} {BACKTICKED.sub('`…`', diagnostic.message)[:90]}"


def projects() -> list[Path]:
    return sorted(p for p in CORPUS.iterdir() if p.is_dir() and not p.name.startswith(("_", ".")))


def check_project(root: Path) -> ProjectReport:
    return compile_corpus_project(root)[0]


def compile_corpus_project(root: Path) -> tuple[ProjectReport, CompiledProject]:
    """The project compiled as `pipeframe check` compiles it, and its report."""
    resources, diagnostics = load_resources(root, environ=ENVIRON)
    compiled = compile_project(resources, {}, diagnostics)
    failing: dict[str, list[Diagnostic]] = {}
    for diagnostic in compiled.diagnostics:
        if diagnostic.is_error:
            path = diagnostic.location.path if diagnostic.location else "<project>"
            failing.setdefault(path, []).append(diagnostic)
    files = tuple(resources.files)
    warnings = sum(1 for d in compiled.diagnostics if not d.is_error)
    return ProjectReport(root.name, files, {f: tuple(e) for f, e in failing.items()}, warnings), compiled


def table(reports: list[ProjectReport], analyzed: Mapping[str, int] | None = None) -> str:
    """One line per project: files, clean files (and, given `analyzed`, how many of those Spark's analyzer
    accepts), the share clean and the most frequent errors."""
    more = f" {'analyzed':>8}" if analyzed is not None else ""
    lines = [f"{'project':40} {'files':>5} {'clean':>5}{more} {'%':>4}  top failure reasons (files)"]
    for r in reports:
        share = 100 * r.clean // max(len(r.files), 1)
        reasons = "; ".join(f"{text} ({n})" for text, n in r.reasons()) or "-"
        more = f" {analyzed.get(r.name, 0):8}" if analyzed is not None else ""
        lines.append(f"{r.name:40} {len(r.files):5} {r.clean:5}{more} {share:3}%  {reasons}")
    files = sum(len(r.files) for r in reports)
    clean = sum(r.clean for r in reports)
    more = f" {sum(analyzed.values()):8}" if analyzed is not None else ""
    lines.append(f"{'total':40} {files:5} {clean:5}{more} {100 * clean // max(files, 1):3}%")
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    """`python -m tests.compat.report [PROJECT ...] [-v] [--spark]`: -v lists every error (also the default for one
    project); --spark starts Spark and adds the "analyzed" column and Spark's messages (tests/compat/analysis.py)."""
    names = [a for a in argv if not a.startswith("-")]
    chosen = [p for p in projects() if not names or p.name in names]
    if "--spark" in argv:
        from tests.compat.analysis import spark_analyses

        analyses = spark_analyses(chosen)
        reports = [a.report for a in analyses]
        print(table(reports, {a.report.name: len(a.analyzed) for a in analyses}))
        for a in analyses:
            for path, messages in sorted(a.failures.items()):
                for message in messages:
                    print(f"{a.report.name}/{path}: Spark: {message}")
            for path, upstream in sorted(a.blocked.items()):
                print(f"{a.report.name}/{path}: not analyzed: reads what {', '.join(upstream)} defines, which "
                      "fails check")
    else:
        reports = [check_project(p) for p in chosen]
        print(table(reports))
    if "-v" in argv or len(names) == 1:
        for r in reports:
            for path, errors in sorted(r.failing.items()):
                for e in errors:
                    print(f"{r.name}/{e.format().splitlines()[0]}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
