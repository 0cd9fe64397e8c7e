"""The check cache: each datafile's parse and each costly compile step's result, kept in `.pipeframe/cache/`
between runs and reused while a digest of exactly what it was made from is unchanged (dbt's partial parse).

A parsed file is keyed by its bytes, the files its INCLUDEs looked for and the environment variables it names; a
compile step by the definitions, project vars and upstream schemas it reads (`Compiler._memo`). The cache is an
optimisation only: an unreadable, corrupt or foreign cache file is ignored and rebuilt, one that cannot be written
is skipped, and the diagnostics are the same with or without it.
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import os
import pickle
import sys
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pipeframe.compiler.compile import fingerprint
from pipeframe.datafiles.lexer import Inputs, file_digest
from pipeframe.datafiles.model import Connection, Datasource, Pipe
from pipeframe.errors import Diagnostic

CACHE_DIR = Path(".pipeframe") / "cache"  # under the project root; discovery skips `.pipeframe/`
FORMAT = 1  # bump when what is kept changes shape
# What a cache file may hold besides pipeframe's own model classes: values a template can give a parameter.
SAFE_GLOBALS = {
    "builtins": {"set", "frozenset", "complex", "range", "slice", "bytearray"},
    "datetime": {"date", "datetime", "time", "timedelta", "timezone"},
    "decimal": {"Decimal"},
}
# Modules whose classes a cache file may name: the pure layers, whose classes have no side effects.
MODEL_PACKAGES = ("pipeframe.datafiles.", "pipeframe.compiler.", "pipeframe.templating.", "pipeframe.errors",
                  "pipeframe.sqltext")

Entry = tuple[str, Any]  # (digest of the inputs, kept value)


class CheckCache:
    """The check cache of one project folder and environment, read once when opened and written by `save()`.

    It serves the loader (`parsed`/`keep`, per file) and the compiler (`get`/`put`, per step)."""

    def __init__(self, root: Path, environ: Mapping[str, str], env: str | None = None) -> None:
        self.root = root
        self.environ = environ
        self.path = root / CACHE_DIR / f"check-{env or 'default'}.pickle"
        self.header = (FORMAT, str(root), _code_stamp())
        self._kept: dict[tuple[str, str], Entry] = {}  # from the last run
        self._used: dict[tuple[str, str], Entry] = {}  # hit or made in this run: what save() writes
        self._made = False  # whether anything was made in this run
        self._digests: dict[str, str | None] = {}  # file digests computed in this run
        self._reading: dict[str, str] = {}  # rel path -> digest of the file being parsed
        self._sources: dict[str, str] = {}  # rel path -> digest of everything its resource was made from

    @classmethod
    def open(cls, root: Path, environ: Mapping[str, str], env: str | None = None) -> CheckCache:
        cache = cls(root, environ, env)
        cache._kept = cache._read()
        return cache

    # ------------------------------------------------------------------------------------- the loader
    def parsed(self, rel: str, path: Path) -> tuple[Datasource | Pipe | Connection | None, tuple[Diagnostic, ...]] | None:
        """The resource parsed from `rel` and its problems, if neither the file nor any of its inputs changed."""
        digest = self._digest(path)
        if digest is None:  # unreadable: the parser reports it, every time
            return None
        self._reading[rel] = digest
        entry = self._kept.get(("file", rel))
        if entry is None or entry[0] != digest:
            return None
        files, variables, resource, diagnostics = entry[1]
        if any(self._digest(Path(name)) != seen for name, seen in files) or \
                any(self.environ.get(name) != value for name, value in variables):
            return None
        self._use(("file", rel), entry)
        self._sources[rel] = fingerprint((rel, digest, files, variables))
        return resource, diagnostics

    def keep(self, rel: str, inputs: Inputs, resource: Datasource | Pipe | Connection | None,
             diagnostics: tuple[Diagnostic, ...]) -> None:
        digest = self._reading.get(rel)
        if digest is None:
            return
        files = tuple(sorted(inputs.files.items()))
        variables = tuple((name, self.environ.get(name)) for name in sorted(inputs.variables))
        self._put(("file", rel), (digest, (files, variables, resource, diagnostics)))
        self._sources[rel] = fingerprint((rel, digest, files, variables))

    # ----------------------------------------------------------------------------------- the compiler
    def source_key(self, path: str) -> str | None:
        return self._sources.get(path)

    def get(self, kind: str, name: str, key: str) -> Any | None:
        entry = self._kept.get((kind, name))
        if entry is None or entry[0] != key:
            return None
        self._use((kind, name), entry)
        return entry[1]

    def put(self, kind: str, name: str, key: str, value: Any) -> None:
        self._put((kind, name), (key, value))

    # ------------------------------------------------------------------------------------ the file
    def save(self) -> None:
        """Write what this run used or made (entries of removed files are dropped); nothing if that is what
        was read. A folder that cannot be written only costs the next run its speed."""
        if not self._made and self._used.keys() == self._kept.keys():
            return
        tmp = self.path.with_name(f"{self.path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
        try:
            data = pickle.dumps((self.header, self._used), protocol=pickle.HIGHEST_PROTOCOL)
            self.path.parent.mkdir(parents=True, exist_ok=True)
            tmp.write_bytes(data)
            os.replace(tmp, self.path)  # atomic: a concurrent run reads the old file or the new one
        except (OSError, pickle.PicklingError, TypeError, AttributeError, RecursionError):
            # Not writable, or a value that does not pickle (a template default of an odd type): no cache.
            with contextlib.suppress(OSError):
                tmp.unlink(missing_ok=True)

    def _read(self) -> dict[tuple[str, str], Entry]:
        try:
            data = self.path.read_bytes()
        except OSError:
            return {}
        try:
            header, entries = _ModelUnpickler(io.BytesIO(data)).load()
        except Exception:  # noqa: BLE001 — a corrupt or foreign file can fail in any way; it is rebuilt
            return {}
        if header != self.header or not isinstance(entries, dict):
            return {}
        return entries

    def _digest(self, path: Path) -> str | None:
        key = str(path)
        if key not in self._digests:
            self._digests[key] = file_digest(path)
        return self._digests[key]

    def _use(self, key: tuple[str, str], entry: Entry) -> None:
        self._used[key] = entry

    def _put(self, key: tuple[str, str], entry: Entry) -> None:
        self._used[key] = entry
        self._made = True


class _ModelUnpickler(pickle.Unpickler):
    """Loads only pipeframe's pure model classes and plain values: a cache file cannot run code."""

    def find_class(self, module: str, name: str) -> Any:
        if "." not in name and name in SAFE_GLOBALS.get(module, ()):
            return super().find_class(module, name)
        if "." not in name and (module + ".").startswith(MODEL_PACKAGES):
            found = super().find_class(module, name)
            if isinstance(found, type) and found.__module__ == module:
                return found
        raise pickle.UnpicklingError(f"{module}.{name} is not allowed in the check cache")


def _code_stamp() -> tuple[object, ...]:
    """What the kept results were computed by: Python, pipeframe's pure layers and the SQL and template libraries
    (file sizes and times, so an upgrade or an edit of the compiler discards the cache). Nothing is imported."""
    package = Path(__file__).resolve().parents[1]
    stamp: list[object] = [sys.version]
    for folder, names in ((package / "datafiles", None), (package / "compiler", None), (package / "templating", None),
                          (package, ("errors.py", "sqltext.py"))):
        try:
            entries = sorted(os.scandir(folder), key=lambda e: e.name)
        except OSError:
            continue
        stamp.extend((folder.name, e.name, e.stat().st_mtime_ns, e.stat().st_size) for e in entries
                     if e.name.endswith(".py") and (names is None or e.name in names))
    for library in ("sqlglot", "jinja2"):
        spec = importlib.util.find_spec(library)
        origin = spec.origin if spec else None
        try:
            stat = os.stat(origin) if origin else None
        except OSError:
            stat = None
        stamp.append((library, origin, stat.st_mtime_ns if stat else None, stat.st_size if stat else None))
    return tuple(stamp)
