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
"""

from __future__ import annotations

import ast
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


def _under(relative: str, prefixes: tuple[str, ...]) -> bool:
    """Whether the file is one of `prefixes`: a file (`sqltext.py`), a folder (`cli/`) or the whole package ("")."""
    return any(relative == p or (p.endswith("/") or not p) and relative.startswith(p) for p in prefixes)


def imports_of(path: Path, package: Path) -> list[tuple[int, str]]:
    """(line, module) for every import in the file; `from a import b` yields both `a` and `a.b`."""
    # the package a relative import starts from: the folder of the file (`__init__.py` included)
    here = ("pipeframe", *path.relative_to(package).parent.parts)
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
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
                  for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path)))
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
