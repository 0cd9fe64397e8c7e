"""Property test: whatever SQL a node holds, `check` reports diagnostics and never raises.

Mutates the example project's pipes (SQL fragments swapped, deleted, duplicated, keywords sprinkled in) and
compiles the whole project each time.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pipeframe.project import Project

EXAMPLE = Path(__file__).resolve().parents[2] / "example_project"
PIPES = sorted((EXAMPLE / "pipes").glob("*.pipe"))
FRAGMENTS = [
    "SELECT", "FROM", "WHERE", "GROUP BY", "ORDER BY", "LIMIT 3", "HAVING count(*) > 1", "OVER ()", "UNION",
    "UNION ALL", "DISTINCT", "count(*)", "sum(amount)", "avg(x)", "uniqState(x)", "uniqMerge(x)", "rand()",
    "quantilesState(0.5)(x)", "percentile(x, 0.5)", "max_by(a, b)", "JOIN products USING (product)",
    "RIGHT JOIN sales ON 1 = 1", "(", ")", ",", "'", "`", "{{", "}}", "{% if defined(x) %}", "{% end %}",
    "sales", "sales_by_hour", "nope", "1", "NULL", "CAST(x AS STRING)", "date_trunc('hour', ts)", ";",
    "WITH a AS (SELECT 1)", "count(DISTINCT x)", "x", "*",
]


@st.composite
def mutated_pipe(draw):
    path = draw(st.sampled_from(PIPES))
    lines = path.read_text().splitlines()
    sql_lines = [i for i, line in enumerate(lines) if line.startswith("    ")]
    for _ in range(draw(st.integers(1, 4))):
        if not sql_lines:
            break
        i = draw(st.sampled_from(sql_lines))
        action = draw(st.sampled_from(["insert", "replace", "delete", "duplicate"]))
        fragment = "    " + " ".join(draw(st.lists(st.sampled_from(FRAGMENTS), min_size=1, max_size=6)))
        if action == "insert":
            lines.insert(i, fragment)
        elif action == "replace":
            lines[i] = fragment
        elif action == "delete":
            lines[i] = ""
        else:
            lines.insert(i, lines[i])
        sql_lines = [j for j, line in enumerate(lines) if line.startswith("    ")]
    return path.name, "\n".join(lines) + "\n"


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mutated_pipe())
def test_check_never_raises_on_mutated_sql(mutation):
    name, text = mutation
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "proj"
        shutil.copytree(EXAMPLE, root, ignore=shutil.ignore_patterns(".pipeframe"))
        (root / "pipes" / name).write_text(text)
        report = Project(root).check()
        for d in report.diagnostics:
            assert d.code.startswith("PF") and d.message and d.hint
            assert d.location is not None and (root / d.location.path).exists()
