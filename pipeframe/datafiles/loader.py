"""Project discovery: find datafiles, fixtures and tests under a project root and parse them.

Files are found by extension anywhere under the root; `.pipeframe/`, `.git/` and `ignore` paths are skipped.
"""

from __future__ import annotations

import fnmatch
import os
from collections.abc import Mapping
from pathlib import Path

from pipeframe.datafiles.model import Datasource, Pipe, Resources
from pipeframe.datafiles.parser import is_identifier, make_lexer, parse_file
from pipeframe.errors import Diagnostic, DiagnosticSink, Location

RESOURCE_SUFFIXES = (".datasource", ".pipe")
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


def load_resources(root: Path, ignore: tuple[str, ...] = (),
                   environ: Mapping[str, str] | None = None) -> tuple[Resources, list[Diagnostic]]:
    """Parse every datafile under ``root``; returns the resources and every problem found."""
    environ = dict(os.environ) if environ is None else environ
    root = root.resolve()
    sink = DiagnosticSink()
    lexer = make_lexer(root, environ, sink)
    datasources: list[Datasource] = []
    pipes: list[Pipe] = []
    fixtures: list[str] = []
    tests: list[str] = []
    files: list[str] = []
    owners: dict[tuple[str, str], str] = {}  # (suffix, name) -> file; a pipe may share its target's name
    for path in discover(root, ignore):
        rel = str(path.relative_to(root))
        if path.suffix in RESOURCE_SUFFIXES:
            files.append(rel)
            if not is_identifier(path.stem):
                sink.error("PF104", f"Resource name `{path.stem}` (from the file name) is not a valid identifier.",
                           "Rename the file using letters, digits and underscores, not starting with a digit.",
                           Location(rel))
                continue
            if (path.suffix, path.stem) in owners:
                sink.error("PF105", f"Resource name `{path.stem}` is already used by "
                           f"{owners[(path.suffix, path.stem)]}.",
                           "Rename one of the files: names are unique across the project.", Location(rel))
                continue
            owners[(path.suffix, path.stem)] = rel
            resource = parse_file(path, lexer, sink)
            if isinstance(resource, Datasource):
                datasources.append(resource)
            elif isinstance(resource, Pipe):
                pipes.append(resource)
        elif path.suffix in FIXTURE_SUFFIXES:
            fixtures.append(rel)
        elif path.suffix in (".yaml", ".yml") and "tests" in Path(rel).parts[:-1]:
            tests.append(rel)
    resources = Resources(tuple(datasources), tuple(pipes), tuple(fixtures), tuple(tests), tuple(files))
    return resources, sink.items
