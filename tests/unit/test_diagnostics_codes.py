"""Every error code pipeframe raises is documented in docs/diagnostics.md, and every documented code is raised.

Codes in the source: the `PFnnn` in string literals (f-strings included) of `pipeframe/**/*.py`, docstrings left out.
Codes in the docs: the first cell of each row of the table in docs/diagnostics.md.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CODE = re.compile(r"\bPF\d{3}\b")
DOC_ROW = re.compile(r"^\|\s*(PF\d{3})\s*\|", re.MULTILINE)


def _docstrings(tree: ast.AST) -> set[int]:
    nodes = [tree, *(n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef))]
    return {id(n.body[0].value) for n in nodes
            if n.body and isinstance(n.body[0], ast.Expr) and isinstance(n.body[0].value, ast.Constant)}


def source_codes(package: Path) -> set[str]:
    codes: set[str] = set()
    for path in package.rglob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        skip = _docstrings(tree)
        codes.update(code for node in ast.walk(tree)
                     if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in skip
                     for code in CODE.findall(node.value))
    return codes


def documented_codes(page: Path) -> set[str]:
    return set(DOC_ROW.findall(page.read_text(encoding="utf-8")))


def difference(package: Path, page: Path) -> tuple[list[str], list[str]]:
    """(raised but not documented, documented but never raised)."""
    raised, documented = source_codes(package), documented_codes(page)
    return sorted(raised - documented), sorted(documented - raised)


def test_the_codes_in_the_source_are_the_documented_ones() -> None:
    undocumented, unused = difference(ROOT / "pipeframe", ROOT / "docs" / "diagnostics.md")
    assert not undocumented and not unused, (
        f"raised but not in docs/diagnostics.md: {undocumented}; in docs/diagnostics.md but never raised: {unused}")


def test_a_difference_is_reported_both_ways(tmp_path: Path) -> None:
    package = tmp_path / "pipeframe"
    package.mkdir()
    (package / "errors.py").write_text('"""PF777 in a docstring does not count."""\n\n'
                                       'def fail(n):\n    raise ValueError(f"PF101 {n}") or ValueError("PF102: x")\n')
    page = tmp_path / "diagnostics.md"
    page.write_text("| code | meaning |\n|---|---|\n| PF101 | one |\n| PF103 | three |\n\nPF104 in prose is not a row.\n")
    assert difference(package, page) == (["PF102"], ["PF103"])
