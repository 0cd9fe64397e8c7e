"""The package's layers, kept by reading every import of every module (`ast`, no JVM).

Data flows one way: files (`datafiles/`) → templates (`templating/`) → `compiler/` → `plan/` → `engine/`, with
`sqltext.py` beside them; `project.py` is the API over them, and the CLI, the HTTP server and the dev loop are its
clients. Each rule below names the files it covers, the imports they must not make, and one breaking import that
proves the rule can fail (`test_each_rule_reports_its_violation`).

How imports are counted: every `import x` and `from x import y` in the file, wherever it is: at module level,
inside a function (a lazy import) and under `if TYPE_CHECKING:` alike. So pyspark, delta and py4j are named in
import statements only under `engine/`, even for type hints (other modules take those names from the engine,
e.g. `from pipeframe.engine.session import SparkSession` under TYPE_CHECKING). A relative import is resolved against
the file's package; `from pipeframe import cli` counts as importing `pipeframe.cli`. A forbidden name matches itself
and its submodules (`pipeframe.cli` matches `pipeframe.cli.common`, not `pipeframe.client`).

Besides imports, only `engine/` may use pyspark's JVM handles (`frame._jdf`, `spark._jvm`, ...).

No import cycles (`test_no_import_cycles`): the modules of the package, each an arrow to every pipeframe module it
imports, counted as above (module level, lazy and TYPE_CHECKING alike: a cycle hidden inside a function or a type
hint is still two modules that cannot be understood one without the other), form no cycle. For the graph an import
names the module it loads: `from a import b` is `a.b` when that is a module, else `a`; a module's own parent
package, loaded by Python before it, is not an arrow unless it imports a name from it. Nor does a module import a
private (`_name`) name of another module (`test_no_private_names_across_modules`).
"""

from __future__ import annotations

import ast
import functools
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "pipeframe"
SPARK = ("pyspark", "delta", "py4j")
PURE = ("datafiles/", "templating/", "compiler/", "plan/", "sqltext.py")


@dataclass(frozen=True)
class Rule:
    """Files under `covers` (paths relative to the package; a trailing / means a folder), except those under
    `exempt`, must not import any of `forbidden`. `breaking` is a (file, import line) that violates it."""

    name: str
    covers: tuple[str, ...]
    forbidden: tuple[str, ...]
    breaking: tuple[str, str]
    exempt: tuple[str, ...] = ()


def _parsing_modules() -> tuple[str, ...]:
    """The compiler's modules that import sqlglot (at load or lazily): the ones that parse or rewrite SQL."""
    found = []
    for path in sorted((PACKAGE / "compiler").glob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        names = [a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names] + \
            [n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and not n.level]
        if any(name.split(".")[0] == "sqlglot" for name in names):
            found.append(f"pipeframe.compiler.{path.stem}")
    return tuple(found)


PARSING = _parsing_modules()
# engine/generated.py computes a datasource's generated partition column over Arrow rows at ingest: it parses that
# ENGINE_PARTITION_KEY expression (not a view's SQL), once per expression. Recording it parsed at compile time is
# left for later; until then it is the one module of the engine that imports sqlglot.
SQL_AT_INGEST = ("engine/generated.py",)

RULES = (
    Rule("datafiles are read before anything is compiled or templated",
         covers=("datafiles/",), forbidden=("pipeframe.compiler", "pipeframe.templating", "pipeframe.plan"),
         breaking=("datafiles/parser.py", "from pipeframe.compiler.types import is_safe_cast")),
    Rule("the pure layers never reach Spark (`pipeframe check` starts no JVM)",
         covers=PURE, forbidden=("pipeframe.engine", *SPARK),
         breaking=("compiler/graph.py", "from pipeframe.engine.warehouse import Warehouse")),
    Rule("the pure layers know nothing of the API or its clients",
         covers=PURE, forbidden=("pipeframe.project", "pipeframe.endpoints", "pipeframe.copy", "pipeframe.testing",
                                 "pipeframe.cli", "pipeframe.server", "pipeframe.dev"),
         breaking=("plan/diff.py", "from pipeframe.project import Project")),
    Rule("the engine serves the API, never a client of it",
         covers=("engine/",), forbidden=("pipeframe.cli", "pipeframe.server", "pipeframe.dev"),
         breaking=("engine/deploy.py", "from pipeframe.server import Service")),
    Rule("nothing imports the CLI (but `python -m pipeframe`)", covers=("",), exempt=("cli/", "__main__.py"),
         forbidden=("pipeframe.cli",),
         breaking=("project.py", "from pipeframe import cli")),
    Rule("only the engine imports pyspark or delta", covers=("",), exempt=("engine/",), forbidden=SPARK,
         breaking=("endpoints.py", "from pyspark.sql import DataFrame")),
    Rule("only the CLI imports click", covers=("",), exempt=("cli/",), forbidden=("click",),
         breaking=("dev.py", "import click")),
    Rule("the read path needs no JVM: of the engine it uses only the pyspark-free log reading",
         covers=("serving/",), forbidden=tuple(f"pipeframe.engine.{m}" for m in (
             "session", "warehouse", "deploy", "tables", "ingest", "groupcommit", "materialize", "continuous",
             "lifecycle", "query", "localserver", "partials", "deltaappend")) + ("pipeframe.project",
                                                                                 "pipeframe.endpoints"),
         breaking=("serving/reader.py", "from pipeframe.engine.warehouse import Warehouse")),
    Rule("the engine parses no SQL: a view's maintenance is decided at compile time and recorded with its state",
         covers=("engine/",), forbidden=("sqlglot",), exempt=SQL_AT_INGEST,
         breaking=("engine/materialize.py", "import sqlglot")),
    Rule("the engine imports none of the compiler's modules that parse or rewrite SQL",
         # compile: the engine is given a compiled project and names its types (`CompiledPipe`), never compiles
         covers=("engine/",), forbidden=tuple(m for m in PARSING if m != "pipeframe.compiler.compile"),
         breaking=("engine/partials.py", "from pipeframe.compiler.partials import partials")),
)


@functools.cache
def _parsed(text: str, filename: str) -> ast.Module:
    """A file's tree, parsed once per content for all the rules (they only read it)."""
    return ast.parse(text, filename)


def _under(relative: str, prefixes: tuple[str, ...]) -> bool:
    """Whether the file is one of `prefixes`: a file (`sqltext.py`), a folder (`cli/`) or the whole package ("")."""
    return any(relative == p or (p.endswith("/") or not p) and relative.startswith(p) for p in prefixes)


def imports_of(path: Path, package: Path) -> list[tuple[int, str]]:
    """(line, module) for every import in the file; `from a import b` yields both `a` and `a.b`."""
    # the package a relative import starts from: the folder of the file (`__init__.py` included)
    here = ("pipeframe", *path.relative_to(package).parent.parts)
    found = []
    for node in ast.walk(_parsed(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = ".".join(here[: len(here) - node.level + 1] + ((node.module,) if node.module else ())) \
                if node.level else node.module or ""
            found.append((node.lineno, base))
            found += [(node.lineno, f"{base}.{alias.name}") for alias in node.names if alias.name != "*"]
    return found


def violations(rule: Rule, package: Path) -> list[str]:
    """`file:line imports module` for every import that breaks `rule` in the package at `package`, in file and
    line order (`from a import b` is reported as `a` when `a` itself is forbidden)."""
    found = []
    for path in sorted(package.rglob("*.py")):
        relative = path.relative_to(package).as_posix()
        if not _under(relative, rule.covers) or _under(relative, rule.exempt):
            continue
        hits = {(line, module) for line, module in imports_of(path, package)
                if any(module == f or module.startswith(f + ".") for f in rule.forbidden)}
        found += [f"pipeframe/{relative}:{line} imports {module}" for line, module in sorted(hits)
                  if (line, module.rpartition(".")[0]) not in hits]
    return found


@pytest.mark.parametrize("rule", RULES, ids=[r.name for r in RULES])
def test_layer_rule_holds(rule: Rule) -> None:
    broken = violations(rule, PACKAGE)
    assert not broken, f"{rule.name}:\n  " + "\n  ".join(broken)


@pytest.mark.parametrize("rule", RULES, ids=[r.name for r in RULES])
def test_each_rule_reports_its_violation(rule: Rule, tmp_path: Path) -> None:
    """The rule, run over a small tree holding its breaking import (at module level, in a function and under
    TYPE_CHECKING), reports all three; the same imports in a file outside the rule's reach report nothing."""
    file, line = rule.breaking
    package = tmp_path / "pipeframe"
    source = (f"{line}\n\n\ndef lazy():\n    {line}\n\n\n"
              f"from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    {line}\n")
    (package / file).parent.mkdir(parents=True, exist_ok=True)
    (package / file).write_text(source)
    assert [v.split(" imports ")[0] for v in violations(rule, package)] == [
        f"pipeframe/{file}:1", f"pipeframe/{file}:5", f"pipeframe/{file}:10"]

    allowed = next(p for p in ("engine/session.py", "cli/common.py")
                   if not _under(p, rule.covers) or _under(p, rule.exempt))
    (package / file).unlink()
    (package / allowed).parent.mkdir(parents=True, exist_ok=True)
    (package / allowed).write_text(source)
    assert violations(rule, package) == []


JVM_HANDLES = ("_jdf", "_jvm", "_jsc", "_jsparkSession")


def jvm_reaches(package: Path) -> list[str]:
    """`file:line .handle` for every use of pyspark's JVM handles (`frame._jdf`, ...) outside `engine/`."""
    found = []
    for path in sorted(package.rglob("*.py")):
        relative = path.relative_to(package).as_posix()
        if relative.startswith("engine/"):
            continue
        found += [f"pipeframe/{relative}:{node.lineno} .{node.attr}"
                  for node in ast.walk(_parsed(path.read_text(encoding="utf-8"), str(path)))
                  if isinstance(node, ast.Attribute) and node.attr in JVM_HANDLES]
    return found


def test_only_the_engine_reaches_into_the_jvm(tmp_path: Path) -> None:
    assert jvm_reaches(PACKAGE) == []
    (tmp_path / "engine").mkdir()
    (tmp_path / "engine" / "query.py").write_text("plan = frame._jdf.queryExecution()\n")
    (tmp_path / "endpoints.py").write_text("x = 1\nplan = frame._jdf.queryExecution()\n")
    assert jvm_reaches(tmp_path) == ["pipeframe/endpoints.py:2 ._jdf"]


def test_the_modules_the_engine_may_not_import_are_those_that_parse():
    assert {"pipeframe.compiler.partials", "pipeframe.compiler.sql", "pipeframe.compiler.maintenance_sql",
            "pipeframe.compiler.states"} <= set(PARSING)
    assert "pipeframe.compiler.maintenance" not in PARSING and "pipeframe.compiler.graph" not in PARSING


def test_relative_imports_are_resolved(tmp_path: Path) -> None:
    package = tmp_path / "pipeframe"
    (package / "datafiles").mkdir(parents=True)
    (package / "datafiles" / "parser.py").write_text("from ..compiler import types\nfrom . import lexer\n")
    (package / "datafiles" / "__init__.py").write_text("from ..compiler.graph import DAG\n")
    assert violations(RULES[0], package) == ["pipeframe/datafiles/__init__.py:1 imports pipeframe.compiler.graph",
                                             "pipeframe/datafiles/parser.py:1 imports pipeframe.compiler"]


def _module(path: Path, package: Path) -> str:
    """The dotted name of the module in file `path` (a package by its `__init__.py`)."""
    parts = ("pipeframe", *path.relative_to(package).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imported(path: Path, package: Path, modules: set[str]) -> Iterator[tuple[ast.ImportFrom | ast.Import, str, str]]:
    """(statement, module, name) for every name the file imports from a module of the package: `from a import b`
    gives (a.b, "") when a.b is a module, else (a, "b"); `import a.b` gives (a.b, "")."""
    here = ("pipeframe", *path.relative_to(package).parent.parts)
    for node in ast.walk(_parsed(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            yield from ((node, alias.name, "") for alias in node.names if alias.name in modules)
        elif isinstance(node, ast.ImportFrom):
            base = ".".join(here[: len(here) - node.level + 1] + ((node.module,) if node.module else ())) \
                if node.level else node.module or ""
            for alias in node.names:
                if f"{base}.{alias.name}" in modules:
                    yield node, f"{base}.{alias.name}", ""
                elif base in modules:
                    yield node, base, alias.name


def import_graph(package: Path) -> dict[str, dict[str, str]]:
    """module → {module it imports: `file:line` of the first such import} over every module of the package."""
    files = {_module(p, package): p for p in sorted(package.rglob("*.py"))}
    graph: dict[str, dict[str, str]] = {m: {} for m in files}
    for module, path in files.items():
        for node, target, _ in sorted(_imported(path, package, set(files)), key=lambda t: t[0].lineno):
            if target != module:
                graph[module].setdefault(target, f"pipeframe/{path.relative_to(package).as_posix()}:{node.lineno}")
    return graph


def import_cycles(package: Path) -> list[str]:
    """Every set of modules that import each other, directly or round a ring (a strongly connected component of
    the import graph, Tarjan's algorithm), as its modules and the imports that close it."""
    graph = import_graph(package)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    cycles = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        for target in graph[module]:
            if target not in index:
                visit(target)
                low[module] = min(low[module], low[target])
            elif target in stack:
                low[module] = min(low[module], index[target])
        if low[module] == index[module]:
            component = []
            while not component or component[-1] != module:
                component.append(stack.pop())
            if len(component) > 1:
                members = sorted(component)
                closing = [f"{where} imports {t}" for m in members for t, where in graph[m].items() if t in members]
                cycles.append(" ↔ ".join(members) + ":\n    " + "\n    ".join(closing))

    for module in graph:
        if module not in index:
            visit(module)
    return sorted(cycles)


def test_no_import_cycles() -> None:
    cycles = import_cycles(PACKAGE)
    assert not cycles, "modules importing each other (move what they share down into its own module):\n  " + \
        "\n  ".join(cycles)


# One import that would close a cycle: the dialect is below the SQL parser, which imports it.
CYCLE_BREAKING = (("compiler/dialect.py", "from pipeframe.compiler.sql import parse_select"),
                  ("compiler/sql.py", "from pipeframe.compiler.dialect import DIALECT"))


@pytest.mark.parametrize("where", ["module", "lazy", "type_checking"])
def test_an_import_cycle_is_reported(where: str, tmp_path: Path) -> None:
    """The breaking import closes a cycle wherever it sits (module level, in a function, under TYPE_CHECKING) and the
    report names both modules and the imports; without it the tree has no cycle."""
    (back_file, back), (file, line) = CYCLE_BREAKING
    package = tmp_path / "pipeframe"
    (package / "compiler").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "compiler" / "__init__.py").write_text("")
    (package / file).write_text(f"{line}\n\n\ndef parse_select():\n    pass\n")
    (package / back_file).write_text("DIALECT = 'spark'\n")
    assert import_cycles(package) == []
    wrapped = {"module": f"{back}\n", "lazy": f"def f():\n    {back}\n",
               "type_checking": f"from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    {back}\n"}[where]
    (package / back_file).write_text("DIALECT = 'spark'\n" + wrapped)
    at = {"module": 2, "lazy": 3, "type_checking": 4}[where]
    assert import_cycles(package) == [
        ("pipeframe.compiler.dialect ↔ pipeframe.compiler.sql:\n"
        f"    pipeframe/compiler/dialect.py:{at} imports pipeframe.compiler.sql\n"
        "    pipeframe/compiler/sql.py:1 imports pipeframe.compiler.dialect")]


def test_a_ring_of_three_and_a_package_are_read_as_python_loads_them(tmp_path: Path) -> None:
    """A cycle round three modules is one report naming all three; `from pipeframe.server import auth` in a module
    of the package it names loads the submodule `auth` (no cycle with the package's `__init__`), while importing a
    name the `__init__` defines does close one."""
    package = tmp_path / "pipeframe"
    (package / "server").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "a.py").write_text("from pipeframe import b\n")
    (package / "b.py").write_text("from pipeframe.c import x\n")
    (package / "c.py").write_text("import pipeframe.a\nx = 1\n")
    (package / "server" / "__init__.py").write_text("from pipeframe.server.routes import add\nService = 1\n")
    (package / "server" / "auth.py").write_text("")
    (package / "server" / "routes.py").write_text("from pipeframe.server import auth\n\n\ndef add():\n    pass\n")
    assert [c.split(":")[0] for c in import_cycles(package)] == ["pipeframe.a ↔ pipeframe.b ↔ pipeframe.c"]
    (package / "server" / "routes.py").write_text("from pipeframe.server import Service, auth\n")
    assert [c.split(":")[0] for c in import_cycles(package)] == [
        "pipeframe.a ↔ pipeframe.b ↔ pipeframe.c", "pipeframe.server ↔ pipeframe.server.routes"]


def private_imports(package: Path) -> list[str]:
    """`file:line imports module._name` for every private name a module imports from another module."""
    files = {_module(p, package): p for p in sorted(package.rglob("*.py"))}
    found = []
    for module, path in files.items():
        found += [f"pipeframe/{path.relative_to(package).as_posix()}:{node.lineno} imports {target}.{name}"
                  for node, target, name in _imported(path, package, set(files))
                  if target != module and (name or target.rpartition(".")[2]).startswith("_")
                  and not (name or target).endswith("__")]
    return sorted(found)


def test_no_private_names_across_modules(tmp_path: Path) -> None:
    """A module's `_names` are its own: another module that needs one gets a public name (or the code moves)."""
    assert private_imports(PACKAGE) == []
    package = tmp_path / "pipeframe"
    package.mkdir()
    (package / "endpoints.py").write_text("def _result():\n    pass\n")
    (package / "project.py").write_text("from pipeframe.endpoints import _result\n\n\n"
                                        "def read():\n    from pipeframe.endpoints import _result\n")
    assert private_imports(package) == ["pipeframe/project.py:1 imports pipeframe.endpoints._result",
                                        "pipeframe/project.py:5 imports pipeframe.endpoints._result"]
