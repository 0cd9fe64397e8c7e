"""Project discovery: find datafiles, fixtures and tests under a project root and parse them.

Files are found by extension anywhere under the root; `.pipeframe/`, `.git/` and `ignore` paths are skipped.
"""

from __future__ import annotations

import fnmatch
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Protocol

from pipeframe.datafiles.lexer import Inputs, Lexer
from pipeframe.datafiles.model import Connection, Datasource, Pipe, Resources
from pipeframe.datafiles.parser import is_identifier, parse_file
from pipeframe.errors import Diagnostic, DiagnosticSink, Location

RESOURCE_SUFFIXES = (".datasource", ".pipe", ".connection")
FIXTURE_SUFFIXES = (".ndjson", ".csv", ".parquet")
SKIPPED_DIRS = {".pipeframe", ".git", "__pycache__", ".venv", "node_modules", ".hypothesis", ".pytest_cache"}


def discover(root: Path, ignore: tuple[str, ...] = ()) -> list[Path]:
    """All files under ``root`` that are not skipped, in a stable (sorted) order."""
    found: list[Path] = []
    for dirpath, dirnames, filenames in os.walk(root):
        rel_dir = os.path.relpath(dirpath, root)
        dirnames[:] = sorted(
            d for d in dirnames
            if d not in SKIPPED_DIRS and not _ignored(os.path.normpath(os.path.join(rel_dir, d)), ignore))
        for name in sorted(filenames):
            rel = os.path.normpath(os.path.join(rel_dir, name))
            if not _ignored(rel, ignore):
                found.append(Path(dirpath) / name)
    return found


def _ignored(rel: str, patterns: tuple[str, ...]) -> bool:
    return any(fnmatch.fnmatch(rel, p) or fnmatch.fnmatch(rel, p.rstrip("/") + "/*") or rel == p.rstrip("/")
               for p in patterns)


class ParseCache(Protocol):
    """Parsed files kept between runs (the check cache): a file's result is reused while its text and its
    Inputs (included files, environment variables) are unchanged."""

    def parsed(self, rel: str, path: Path) -> tuple[Datasource | Pipe | Connection | None, tuple[Diagnostic, ...]] | None: ...

    def keep(self, rel: str, inputs: Inputs, resource: Datasource | Pipe | Connection | None,
             diagnostics: tuple[Diagnostic, ...]) -> None: ...


def load_resources(root: Path, ignore: tuple[str, ...] = (), environ: Mapping[str, str] | None = None,
                   cache: ParseCache | None = None) -> tuple[Resources, list[Diagnostic]]:
    """Parse every datafile under ``root``; returns the resources and every problem found."""
    environ = dict(os.environ) if environ is None else environ
    root = root.resolve()
    sink = DiagnosticSink()
    datasources: list[Datasource] = []
    pipes: list[Pipe] = []
    connections: list[Connection] = []
    fixtures: list[str] = []
    tests: list[str] = []
    files: list[str] = []
    owners: dict[tuple[str, str], str] = {}  # (suffix, name) -> file; a pipe may share its target's name
    for path in discover(root, ignore):
        rel = str(path.relative_to(root))
        suffix, stem = path.suffix, path.stem  # pathlib recomputes them on every access
        if suffix in RESOURCE_SUFFIXES:
            files.append(rel)
            if not is_identifier(stem):
                sink.error("PF104", f"Resource name `{stem}` (from the file name) is not a valid identifier.",
                           "Rename the file using letters, digits and underscores, not starting with a digit.",
                           Location(rel))
                continue
            if (suffix, stem) in owners:
                sink.error("PF105", f"Resource name `{stem}` is already used by {owners[(suffix, stem)]}.",
                           "Rename one of the files: names are unique across the project.", Location(rel))
                continue
            owners[(suffix, stem)] = rel
            resource = _parse(path, rel, root, environ, sink, cache)
            if isinstance(resource, Datasource):
                datasources.append(resource)
            elif isinstance(resource, Pipe):
                pipes.append(resource)
            elif isinstance(resource, Connection):
                connections.append(resource)
        elif suffix in FIXTURE_SUFFIXES:
            fixtures.append(rel)
        elif suffix in (".yaml", ".yml") and "tests" in Path(rel).parts[:-1]:
            tests.append(rel)
    resources = Resources(tuple(datasources), tuple(pipes), tuple(fixtures), tuple(tests), tuple(files),
                          tuple(connections))
    return resources, sink.items


def _parse(path: Path, rel: str, root: Path, environ: Mapping[str, str], sink: DiagnosticSink,
           cache: ParseCache | None) -> Datasource | Pipe | Connection | None:
    """One file's resource and its own problems, all of them (the project's sink drops one another file already
    reported, e.g. from a shared include): from the cache while nothing it was made from changed."""
    kept = cache.parsed(rel, path) if cache is not None else None
    if kept is None:
        found = DiagnosticSink()
        lexer = Lexer(root, environ, found, record=cache is not None)
        kept = parse_file(path, lexer, found), tuple(found.items)
        if cache is not None:
            cache.keep(rel, lexer.inputs or Inputs(), *kept)
    sink.extend(kept[1])
    return kept[0]
