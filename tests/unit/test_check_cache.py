"""The check cache (`pipeframe/compiler/cache.py`): a run answered from `.pipeframe/cache/` compiles to exactly
what a run without it compiles, and a change to a file, an include, an upstream schema, a var or an environment
variable recompiles what it reaches, and only that. A bad cache file or an unwritable folder never fails a check."""

from __future__ import annotations

import pickle
import shutil
from pathlib import Path

import pytest

from pipeframe.compiler import sql
from pipeframe.compiler.cache import CACHE_DIR
from pipeframe.project import Project
from pipeframe.templating import rendering
from tests.conftest import EVENTS, HOURLY, write_project

EXAMPLE = Path(__file__).resolve().parents[2] / "example_project"

TOTALS = """\
SCHEMA >
    `user_id` STRING,
    `amount` INT
"""
TOTALS_PIPE = """\
NODE n
SQL >
    SELECT user_id, amount FROM events
TYPE materialized
DATASOURCE totals
"""
API = """\
TOKEN "dashboard" READ
NODE window
SQL >
    %
    SELECT * FROM hourly
    WHERE hour >= {{ DateTime(start, '2024-01-01 00:00:00', description="first hour") }}
    {% if defined(min_n) %} AND n >= {{ Int(min_n) }} {% end %}
NODE endpoint
SQL >
    %
    SELECT hour, sum(n) AS n, '{{ currency }}' AS currency FROM window
    GROUP BY hour
    LIMIT {{ Int(limit, 10) }}
TYPE endpoint
"""


def outcome(root: Path, **kwargs) -> dict:
    """Everything `check`, `sql` and a deploy read from a compile, in a form two runs can be compared by."""
    compiled = Project(root, **kwargs).compile()

    def view(v):
        if v is None:
            return None
        plan = v.plan and (v.plan.keys, v.plan.columns, v.plan.rewrites, v.plan.aggregated, v.plan.state_sql)
        return v.target, v.trigger, v.dimensions, v.verdict, plan

    return {
        "diagnostics": [(d.code, d.severity, d.message, d.hint, d.location) for d in compiled.diagnostics],
        "pipes": {name: (p.definition, p.type, p.reads, p.parameters, p.templated, p.target, p.sql, p.node_sql,
                         view(p.view), [u.name for u in p.upstream]) for name, p in compiled.pipes.items()},
        "datasources": {name: (d.definition, d.columns, d.view) for name, d in compiled.datasources.items()},
        "order": compiled.order, "edges": compiled.edges, "unresolved": compiled.unresolved,
        "resources": compiled.resources,
    }


def same_as_uncached(root: Path, **kwargs) -> dict:
    """The cached compile's outcome, after checking it equals a compile without the cache."""
    cached = outcome(root, **kwargs)
    assert cached == outcome(root, cache=False, **kwargs)
    return cached


@pytest.fixture
def work(monkeypatch) -> list[str]:
    """The SQL parsed and the templates rendered during the test: what a run did not take from the cache."""
    done: list[str] = []
    parse, analyze = sql.parse_select, rendering.analyze
    monkeypatch.setattr(sql, "parse_select", lambda text, *a, **k: done.append(text) or parse(text, *a, **k))
    monkeypatch.setattr(rendering, "analyze", lambda text, *a, **k: done.append(text) or analyze(text, *a, **k))
    return done


@pytest.fixture
def project(tmp_path: Path) -> Path:
    return write_project(tmp_path / "proj", {
        "pipeframe.yaml": "vars:\n  currency: EUR\n",
        "datasources/events.datasource": EVENTS,
        "datasources/totals.datasource": TOTALS,
        "pipes/totals.pipe": TOTALS_PIPE,
        "pipes/hourly.pipe": HOURLY,
        "pipes/api.pipe": API,
    })


def edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new))


def test_warm_run_equals_cold_run_on_the_example_project(tmp_path: Path, work: list[str]) -> None:
    root = tmp_path / "shop"
    shutil.copytree(EXAMPLE, root, ignore=shutil.ignore_patterns(".pipeframe"))
    cold = same_as_uncached(root)
    assert (root / CACHE_DIR / "check-default.pickle").is_file()
    work.clear()
    Project(root).compile()
    assert work == []  # nothing rendered or parsed: every file and step came from the cache
    assert outcome(root) == cold


def test_warm_run_keeps_every_diagnostic_and_its_location(tmp_path: Path, work: list[str]) -> None:
    files = {"datasources/events.datasource": EVENTS, "datasources/users.datasource": "SCHEMA >\n    `user_id` STRING\n"}
    for i in range(4):
        files[f"pipes/hourly_{i}.pipe"] = HOURLY.replace("DATASOURCE hourly", f"DATASOURCE hourly_{i}")
        files[f"pipes/api_{i}.pipe"] = API.replace("FROM hourly", f"FROM hourly_{i}")
    files.update({
        # PF410 (a warning): a view without GROUP BY joining a table that is not a declared dimension.
        "pipes/joined.pipe": "NODE n\nSQL >\n    SELECT e.user_id, e.amount FROM events e JOIN users u "
                             "ON e.user_id = u.user_id\nTYPE materialized\nDATASOURCE joined\n",
        "pipes/typo.pipe": "NODE n\nSQL >\n    SELECT * FROM evnts\nTYPE endpoint\n",  # PF301 with a hint
        "pipes/broken.pipe": "NODE n\nSQL >\n    %\n    SELECT {{ Int(x, }} FROM events\nTYPE endpoint\n",  # PF201
        "pipes/bad_sql.pipe": "NODE n\nSQL >\n    SELECT FROM WHERE\nTYPE endpoint\n",  # PF303
        "datasources/bad.datasource": "SCHEMA >\n    `a` NOPE\nENGINE_SORTING_KEY b\n",  # PF109, PF307
    })
    root = write_project(tmp_path / "gen", files)
    cold = same_as_uncached(root)
    assert {d[0] for d in cold["diagnostics"]} >= {"PF410", "PF301", "PF201", "PF303", "PF109", "PF307"}
    assert any(d[1] == "warning" for d in cold["diagnostics"])
    work.clear()
    Project(root).compile()
    assert work == []
    assert same_as_uncached(root) == cold


def test_editing_a_pipe_recompiles_that_pipe_only(project: Path, work: list[str]) -> None:
    before = same_as_uncached(project)
    edit(project / "pipes/api.pipe", "Int(limit, 10)", "Int(limit, 25)")
    work.clear()
    compiled = Project(project).compile()
    assert len(work) == 4  # the two nodes of api.pipe, rendered and parsed; nothing else
    assert "LIMIT 25" in compiled.pipes["api"].sql
    after = same_as_uncached(project)
    assert after["pipes"]["hourly"] == before["pipes"]["hourly"]


def test_an_upstream_schema_change_reaches_the_views_that_read_it(project: Path) -> None:
    assert same_as_uncached(project)["diagnostics"] == []
    edit(project / "datasources/events.datasource", "`amount` INT", "`amount` STRING")
    after = same_as_uncached(project)
    assert [(d[0], d[4].path) for d in after["diagnostics"]] == [("PF306", "datasources/totals.datasource")]
    edit(project / "datasources/events.datasource", "`amount` STRING", "`amount` BIGINT")
    after = same_as_uncached(project)
    assert {c.name: c.value_type for c in after["datasources"]["hourly"][1]}["total"] == "BIGINT"


def test_a_renamed_upstream_column_changes_the_generated_target(project: Path) -> None:
    before = same_as_uncached(project)
    edit(project / "datasources/events.datasource", "`amount` INT", "`price` INT")
    after = same_as_uncached(project)
    assert after["datasources"]["hourly"] != before["datasources"]["hourly"]


def test_an_include_change_reaches_every_file_that_includes_it(project: Path) -> None:
    (project / "includes").mkdir()
    (project / "includes/columns.incl").write_text("    `ts` TIMESTAMP,\n    `user_id` STRING,\n    `amount` INT\n")
    (project / "datasources/events.datasource").write_text('SCHEMA >\nINCLUDE "includes/columns.incl"\n')
    assert same_as_uncached(project)["diagnostics"] == []
    edit(project / "includes/columns.incl", "`amount` INT", "`amount` STRING")
    assert [d[0] for d in same_as_uncached(project)["diagnostics"]] == ["PF306"]


def test_an_include_found_elsewhere_after_a_new_file_is_seen(project: Path) -> None:
    # INCLUDE looks next to the including file first, then at the project root.
    (project / "includes").mkdir()
    (project / "includes/filter.incl").write_text("    WHERE amount > 0\n")
    (project / "pipes/big.pipe").write_text('NODE n\nSQL >\n    SELECT * FROM events\nINCLUDE "includes/filter.incl"\n'
                                            "TYPE endpoint\n")
    assert "amount > 0" in same_as_uncached(project)["pipes"]["big"][6]
    (project / "pipes/includes").mkdir()
    (project / "pipes/includes/filter.incl").write_text("    WHERE amount > 100\n")
    assert "amount > 100" in same_as_uncached(project)["pipes"]["big"][6]


def test_an_include_symlink_pointed_back_into_the_project_is_seen(project: Path, tmp_path: Path) -> None:
    (tmp_path / "outside.incl").write_text("    WHERE amount > 0\n")
    (project / "includes").mkdir()
    (project / "includes/filter.incl").write_text("    WHERE amount > 100\n")
    (project / "pipes/link.incl").symlink_to(tmp_path / "outside.incl")
    (project / "pipes/big.pipe").write_text('NODE n\nSQL >\n    SELECT * FROM events\nINCLUDE "link.incl"\n'
                                            "TYPE endpoint\n")
    assert ("PF106", "pipes/big.pipe", 4) in {(d[0], d[4].path, d[4].line) for d in same_as_uncached(project)[
        "diagnostics"]}
    (project / "pipes/link.incl").unlink()
    (project / "pipes/link.incl").symlink_to(project / "includes/filter.incl")
    after = same_as_uncached(project)
    assert not after["diagnostics"] and "amount > 100" in after["pipes"]["big"][6]


def test_a_var_change_rerenders_the_templates(project: Path) -> None:
    assert "'EUR'" in same_as_uncached(project)["pipes"]["api"][6]
    (project / "pipeframe.yaml").write_text("vars:\n  currency: USD\n")
    assert "'USD'" in same_as_uncached(project)["pipes"]["api"][6]


def test_an_environment_variable_change_reparses_the_files_that_name_it(project: Path) -> None:
    (project / "pipes/by_env.pipe").write_text("NODE n\nSQL >\n    SELECT * FROM ${SOURCE}\nTYPE endpoint\n")
    unset = same_as_uncached(project, environ={})
    assert "PF107" in [d[0] for d in unset["diagnostics"]]
    assert same_as_uncached(project, environ={"SOURCE": "events"})["pipes"]["by_env"][2] == ("events",)
    assert same_as_uncached(project, environ={"SOURCE": "hourly"})["pipes"]["by_env"][2] == ("hourly",)
    assert same_as_uncached(project, environ={}) == unset


def test_a_removed_datasource_is_reported_by_its_readers(project: Path) -> None:
    same_as_uncached(project)
    (project / "pipes/totals.pipe").unlink()
    (project / "datasources/events.datasource").unlink()
    after = same_as_uncached(project)
    assert {(d[0], d[4].path) for d in after["diagnostics"]} == {("PF301", "pipes/hourly.pipe")}


@pytest.mark.parametrize("content", [b"", b"not a pickle", pickle.dumps("a string"), pickle.dumps(({}, {}))[:-3]])
def test_a_corrupt_cache_file_is_ignored_and_rebuilt(project: Path, content: bytes) -> None:
    expected = same_as_uncached(project)
    path = project / CACHE_DIR / "check-default.pickle"
    path.write_bytes(content)
    assert outcome(project) == expected
    assert path.read_bytes() != content  # written again, whole


class _Payload:
    """What a tampered cache file could hold: a call made when it is unpickled."""

    def __init__(self, target: Path) -> None:
        self.target = target

    def __reduce__(self):
        return (Path.touch, (self.target,))


def test_a_cache_file_cannot_run_code(project: Path, tmp_path: Path) -> None:
    expected = same_as_uncached(project)
    marker = tmp_path / "ran"
    (project / CACHE_DIR / "check-default.pickle").write_bytes(pickle.dumps(_Payload(marker)))
    assert outcome(project) == expected
    assert not marker.exists()


@pytest.mark.parametrize("blocker", ["cache folder is a file", "cache file is a folder"])
def test_a_cache_that_cannot_be_written_does_not_fail_check(project: Path, blocker: str) -> None:
    expected = outcome(project, cache=False)
    (project / ".pipeframe").mkdir()
    if blocker == "cache folder is a file":
        (project / CACHE_DIR).write_text("")
    else:
        (project / CACHE_DIR / "check-default.pickle").mkdir(parents=True)
    assert outcome(project) == expected
    assert outcome(project) == expected
    assert not list((project / ".pipeframe").rglob("*.tmp"))


def test_without_the_cache_nothing_is_written(project: Path) -> None:
    Project(project, cache=False).compile()
    Project(project, environ={"PIPEFRAME_NO_CACHE": "1"}).compile()
    assert not (project / CACHE_DIR).exists()


def test_each_environment_keeps_its_own_cache(project: Path) -> None:
    (project / "pipeframe.yaml").write_text("vars:\n  currency: EUR\nenvironments:\n  prod:\n    vars:\n"
                                            "      currency: USD\n")
    assert "'EUR'" in same_as_uncached(project)["pipes"]["api"][6]
    assert "'USD'" in same_as_uncached(project, env="prod")["pipes"]["api"][6]
    assert {p.name for p in (project / CACHE_DIR).iterdir()} == {"check-default.pickle", "check-prod.pickle"}


def test_check_no_cache_flag(project: Path) -> None:
    from click.testing import CliRunner

    from pipeframe.cli import main

    uncached = CliRunner().invoke(main, ["check", str(project), "--no-cache", "--json"])
    assert uncached.exit_code == 0 and not (project / CACHE_DIR).exists()
    cached = CliRunner().invoke(main, ["check", str(project), "--json"])
    assert (project / CACHE_DIR).is_dir() and cached.output == uncached.output
