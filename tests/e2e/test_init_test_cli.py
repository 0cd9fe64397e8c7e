"""`pipeframe init` then `pipeframe check` and `pipeframe test` as a user runs them, in a fresh folder."""

from __future__ import annotations

from tests.e2e.test_deploy_cli import pipeframe

STARTER_FILES = {".gitignore", "README.md", "pipeframe.yaml", "datasources/events.datasource", "fixtures/events.ndjson",
                 "pipes/events_per_hour.pipe", "pipes/top_events.pipe", "tests/top_events.yaml"}


def test_init_makes_a_project_that_checks_and_passes_its_tests(tmp_path):
    created = pipeframe("init", "shop", cwd=tmp_path)
    assert created.returncode == 0, created.stdout + created.stderr
    project = tmp_path / "shop"
    assert {str(p.relative_to(project)) for p in project.rglob("*") if p.is_file()} == STARTER_FILES
    assert "Created a pipeframe project in shop/" in created.stdout
    for step in ("cd shop", "pipeframe check", "pipeframe deploy", "pipeframe append --fixtures",
                 "pipeframe endpoint top_events", "pipeframe test"):
        assert step in created.stdout

    check = pipeframe("check", cwd=project)
    assert check.returncode == 0 and "✓ no errors" in check.stdout, check.stdout + check.stderr

    unknown = pipeframe("test", "top_event", cwd=project)
    assert unknown.returncode == 1 and "PF825" in unknown.stdout and "Did you mean `top_events`?" in unknown.stdout

    tested = pipeframe("test", cwd=project)
    out = tested.stdout + tested.stderr
    assert tested.returncode == 0, out
    assert "tests/top_events.yaml" in out and "✓ default" in out and "✓ top_2" in out and "✓ bad_limit" in out
    assert "3 passed" in out and "Traceback" not in out
    # The tests ran on a temporary warehouse: nothing was deployed into the project's own.
    assert not list((project / ".pipeframe" / "warehouse").glob("_pipeframe"))


def test_init_never_overwrites_files(tmp_path):
    (tmp_path / "pipeframe.yaml").write_text("name: mine\n", encoding="utf-8")
    (tmp_path / "pipes").mkdir()
    (tmp_path / "pipes" / "top_events.pipe").write_text("# mine\n", encoding="utf-8")

    refused = pipeframe("init", cwd=tmp_path)
    assert refused.returncode == 1
    assert "PF007" in refused.stdout and "pipeframe.yaml" in refused.stdout and "pipes/top_events.pipe" in refused.stdout
    assert "fix:" in refused.stdout and "Traceback" not in refused.stdout + refused.stderr
    assert (tmp_path / "pipeframe.yaml").read_text(encoding="utf-8") == "name: mine\n"
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["pipeframe.yaml", "pipes", "top_events.pipe"]


def test_init_names_the_project_after_its_folder(tmp_path):
    from pipeframe.project import Project

    assert pipeframe("init", "iot", cwd=tmp_path).returncode == 0
    settings = (tmp_path / "iot" / "pipeframe.yaml").read_text(encoding="utf-8")
    assert "name: iot\n" in settings and "starter" not in settings
    assert (tmp_path / "iot" / "README.md").read_text(encoding="utf-8").startswith("# iot — a pipeframe project")
    assert Project(tmp_path / "iot", environ={}).config.name == "iot"

    here = tmp_path / "plant 7: yes"  # initialised in the current folder; a name YAML would misread is quoted
    here.mkdir()
    assert pipeframe("init", cwd=here).returncode == 0
    assert Project(here, environ={}).config.name == "plant 7: yes"
