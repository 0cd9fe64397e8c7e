"""Endpoint tests (`pipeframe test`): the `tests/<pipe>.yaml` format, a temporary warehouse built from the
fixtures, each case's answer compared with its expectation, and `--update`'s rewrite of expectations in place.

A test file is a YAML list of cases named after the endpoint pipe it calls; each case has a `name`, `params`
and either `expected_result` (the answer's rows as NDJSON, in order) or `expected_http_status`.
"""

from __future__ import annotations

import difflib
import json
import math
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from pipeframe.errors import Diagnostic, Location, PipeframeError

if TYPE_CHECKING:
    from pipeframe.project import Project

CASE_KEYS = ("name", "description", "params", "expected_result", "expected_http_status")
FLOAT_TOLERANCE = 1e-9  # relative; Spark's double sums differ in the last bits between plans and partitionings


@dataclass(frozen=True)
class Case:
    """One test case: call `pipe` with `params`, expect `rows` (in order) or an HTTP `status`."""

    file: str  # project-relative path of its test file
    pipe: str
    name: str
    params: dict[str, Any]
    rows: tuple[dict[str, Any], ...] | None
    status: int | None
    location: Location

    @property
    def id(self) -> str:
        return f"{self.pipe}.{self.name}"


@dataclass(frozen=True)
class CaseResult:
    """A case as it ran: the answer's status and rows, and a readable explanation when they do not match."""

    case: Case
    status: int
    rows: list[dict[str, Any]] | None
    elapsed: float
    failure: str = ""  # a unified diff of NDJSON lines, or the status mismatch
    updated: bool = False  # `--update` rewrote its expectation to this answer

    @property
    def passed(self) -> bool:
        return not self.failure or self.updated


@dataclass(frozen=True)
class TestReport:
    """The outcome of `pipeframe test`: one result per case, in file order, and the files `--update` rewrote."""

    __test__ = False  # not a pytest test class

    results: tuple[CaseResult, ...]
    updated_files: tuple[str, ...] = ()
    build_seconds: float = 0.0

    @property
    def failed(self) -> list[CaseResult]:
        return [r for r in self.results if not r.passed]

    @property
    def ok(self) -> bool:
        return not self.failed


# ------------------------------------------------------------------------------------------ the file format
def load_cases(project: Project, names: Sequence[str] = ()) -> list[Case]:
    """Every case of the project's test files, or only those selected by `names` (`pipe` or `pipe.case`).

    All problems in all files are raised at once (PF821–PF825), before any Spark work starts."""
    compiled = project.compiled
    endpoints = sorted(name for name, pipe in compiled.pipes.items() if pipe.type == "endpoint")
    cases: list[Case] = []
    problems: list[Diagnostic] = []
    for rel in compiled.resources.tests:
        file_cases, file_problems = parse_test_file(project.root, rel, endpoints)
        cases.extend(file_cases)
        problems.extend(file_problems)
    if problems:
        raise PipeframeError.many(problems)
    return select(cases, names)


def parse_test_file(root: Path, rel: str, endpoints: Sequence[str]) -> tuple[list[Case], list[Diagnostic]]:
    """The cases of one test file and the problems found in it (PF821–PF824)."""
    pipe = Path(rel).stem
    problems: list[Diagnostic] = []
    if pipe not in endpoints:
        close = difflib.get_close_matches(pipe, endpoints, n=1)
        hint = (f"Did you mean `{close[0]}.yaml`? " if close else "") + \
            "A test file is named after the endpoint pipe it calls: tests/<endpoint>.yaml."
        problems.append(Diagnostic("PF824", f"`{pipe}` is not an endpoint pipe, so {rel} tests nothing.", hint,
                                   Location(rel)))
        return [], problems
    text = (root / rel).read_text(encoding="utf-8")
    try:
        items, node = _compose(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = Location(rel, mark.line + 1, mark.column + 1) if mark else Location(rel)
        problem = getattr(exc, "problem", None) or "invalid YAML"
        return [], [Diagnostic("PF821", f"{rel} is not valid YAML: {problem}.",
                               "Fix the YAML syntax at the position shown; every case is a `- name: ...` item.",
                               where)]
    if items is None:
        return [], []
    if not isinstance(items, list):
        return [], [Diagnostic("PF822", f"{rel} must be a list of test cases, not a {_kind(items)}.",
                               "Write each case as a list item: `- name: default` followed by `params:` and "
                               "`expected_result: |` or `expected_http_status:`.", _at(rel, node))]
    cases: list[Case] = []
    seen: set[str] = set()
    for item, item_node in zip(items, node.value, strict=True):
        case = _case(rel, pipe, item, item_node, problems)
        if case is None:
            continue
        if case.name in seen:
            problems.append(Diagnostic("PF822", f"{rel} has two cases named `{case.name}`.",
                                       "Give every case in a file its own name.", case.location))
            continue
        seen.add(case.name)
        cases.append(case)
    return cases, problems


def _case(rel: str, pipe: str, item: Any, node: yaml.Node, problems: list[Diagnostic]) -> Case | None:
    where = _at(rel, node)
    before = len(problems)

    def problem(code: str, message: str, hint: str, at: Location = where) -> None:
        problems.append(Diagnostic(code, message, hint, at))

    if not isinstance(item, dict):
        problem("PF822", f"A test case in {rel} is a {_kind(item)}, not a mapping.",
                "Write each case as `- name: ...` with `params:` and an expectation on the lines below.")
        return None
    name = item.get("name")
    named = isinstance(name, str) and name.strip()
    label, of_label = (f"Case `{name}`", f"case `{name}`") if named else ("A case", "a case")
    if not named:
        problem("PF822", f"A test case in {rel} has no `name`.", "Add `name: <what it checks>` to the case.")
    for key in item:
        if key not in CASE_KEYS:
            close = difflib.get_close_matches(str(key), CASE_KEYS, n=1)
            problem("PF822", f"{label} in {rel} has an unknown key `{key}`.",
                    (f"Did you mean `{close[0]}`? " if close else "") + f"Case keys: {', '.join(CASE_KEYS)}.",
                    _at(rel, _key_node(node, key)))
    params = item.get("params")
    if params is None:
        params = {}
    elif not isinstance(params, dict) or not all(isinstance(k, str) for k in params):
        problem("PF822", f"`params` of {of_label} in {rel} must be a mapping of parameter names to values.",
                "Write e.g. `params: {limit: 3, start: \"2024-05-15 00:00:00\"}` (or `params: {}`).",
                _at(rel, _value_node(node, "params")))
    has_rows, has_status = "expected_result" in item, "expected_http_status" in item
    if has_rows == has_status:
        problem("PF823", f"{label} in {rel} needs exactly one of `expected_result` and `expected_http_status`.",
                "Expect rows with `expected_result: |` followed by NDJSON lines, or an error with "
                "`expected_http_status: 400`; `pipeframe test --update` fills in rows.")
    rows = status = None
    if has_rows and not has_status:
        rows = _expected_rows(rel, of_label, item["expected_result"], _value_node(node, "expected_result"), problems)
    if has_status and not has_rows:
        status = item["expected_http_status"]
        if isinstance(status, bool) or not isinstance(status, int) or not 100 <= status <= 599:
            problem("PF823", f"`expected_http_status` of {of_label} in {rel} must be an HTTP status code, "
                    f"not {status!r}.", "Write e.g. `expected_http_status: 400` for a rejected parameter.",
                    _at(rel, _value_node(node, "expected_http_status")))
    if len(problems) > before:
        return None
    return Case(rel, pipe, name, params, rows, status, where)


def _expected_rows(rel: str, of_label: str, value: Any, node: yaml.Node,
                   problems: list[Diagnostic]) -> tuple[dict[str, Any], ...] | None:
    """The rows of an `expected_result` NDJSON block; problems name the offending line."""
    if value is None:
        value = ""
    if not isinstance(value, str):
        problems.append(Diagnostic("PF823", f"`expected_result` of {of_label} in {rel} must be NDJSON text.",
                                   "Write `expected_result: |` and one JSON object per line below it.",
                                   _at(rel, node)))
        return None
    block = getattr(node, "style", None) in ("|", ">")
    rows = []
    for offset, line in enumerate(value.splitlines()):
        if not line.strip():
            continue
        where = Location(rel, node.start_mark.line + 2 + offset, 1) if block else _at(rel, node)
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            row = exc
        if not isinstance(row, dict):
            problems.append(Diagnostic("PF823", f"Line {offset + 1} of `expected_result` of {of_label} in "
                                       f"{rel} is not a JSON object: {line.strip()[:80]}",
                                       "Write one JSON object per line under `expected_result: |` (a literal "
                                       "block keeps the lines apart), or regenerate it with "
                                       "`pipeframe test --update`.", where))
            return None
        rows.append(row)
    return tuple(rows)


def select(cases: list[Case], names: Sequence[str]) -> list[Case]:
    """The cases named by `pipe` or `pipe.case` (all of them without names); an unknown name is PF825."""
    if not names:
        return cases
    known = {c.pipe for c in cases} | {c.id for c in cases}
    unknown = [n for n in names if n not in known]
    if unknown:
        close = difflib.get_close_matches(unknown[0], sorted(known), n=1)
        hint = f"Did you mean `{close[0]}`?" if close else (
            f"Tests: {', '.join(sorted({c.pipe for c in cases}))}." if cases else
            "There are no test files yet: add tests/<endpoint>.yaml.")
        raise PipeframeError("PF825", f"No test file or case named {', '.join(f'`{n}`' for n in unknown)}.",
                             hint + " Name a test file's endpoint (`top_products`) or one case "
                             "(`top_products.top_3`).")
    wanted = set(names)
    return [c for c in cases if c.pipe in wanted or c.id in wanted]


def _compose(text: str) -> tuple[Any, yaml.Node | None]:
    """The file's data and its node tree (which knows where every value is written)."""
    loader = yaml.SafeLoader(text)
    try:
        node = loader.get_single_node()
        return (loader.construct_document(node) if node is not None else None), node
    finally:
        loader.dispose()


def _key_node(mapping: yaml.Node, key: str) -> yaml.Node:
    return next((k for k, _ in mapping.value if k.value == key), mapping)


def _value_node(mapping: yaml.Node, key: str) -> yaml.Node:
    return next((v for k, v in mapping.value if k.value == key), mapping)


def _at(rel: str, node: yaml.Node | None) -> Location:
    return Location(rel, node.start_mark.line + 1, node.start_mark.column + 1) if node is not None else Location(rel)


def _kind(value: Any) -> str:
    return {dict: "mapping", list: "list", str: "string"}.get(type(value), type(value).__name__)


# ------------------------------------------------------------------------------------------ running the cases
@contextmanager
def isolated_project(project: Project, on_step: Callable[[str], None] | None = None) -> Iterator[Project]:
    """`project` deployed into a fresh temporary warehouse with its fixtures loaded; removed on exit.

    It runs in a child of the project's session (`newSession()`, or a second session on the same Spark Connect
    server): the same warm engine, so no restart for another warehouse, but its own temporary views, so the names
    registered for the temporary tables never shadow the project's own (e.g. under `pipeframe dev`). Tables are
    addressed by path, so the session's `spark.sql.warehouse.dir` is never used."""
    from pipeframe.engine.session import child_session, release_child
    from pipeframe.project import Project

    project.require_valid()
    step = on_step or (lambda _: None)
    spark = project.spark
    child = child_session(spark)
    try:
        with tempfile.TemporaryDirectory(prefix="pipeframe-test-") as warehouse:
            environ = {**project.environ, "PIPEFRAME_WAREHOUSE": warehouse}
            built = Project(project.root, env=project.env, environ=environ, spark=child)
            step("deploy")
            built.deploy()
            step("fixtures")
            built.load_fixtures()
            yield built
    finally:
        release_child(spark, child)


def run_cases(built: Project, cases: Sequence[Case], update: bool = False,
              on_result: Callable[[CaseResult], None] | None = None) -> TestReport:
    """Run `cases` against a built project (see `isolated_project`); `update` rewrites failing expectations."""
    endpoints = built.endpoints()  # what Project.endpoint() and the HTTP API call, with the names registered once
    results = []
    for case in cases:
        start = time.perf_counter()
        try:
            answer = endpoints.run(case.pipe, case.params)
            status, rows, error = 200, answer.data, ""
        except PipeframeError as err:
            status, rows, error = err.http_status, None, "\n".join(d.format() for d in err.diagnostics)
        except Exception as exc:  # noqa: BLE001 — the HTTP API answers 500 for anything else; so does the test
            status, rows, error = 500, None, f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
        failure = explain(case, status, rows, error)
        # An internal error (500) is a bug to fix, never an expectation to write down.
        blessed = update and bool(failure) and status != 500
        result = CaseResult(case, status, rows, time.perf_counter() - start, failure, blessed)
        results.append(result)
        if on_result is not None:
            on_result(result)
    updated = rewrite_expectations(built.root, [r for r in results if r.updated]) if update else ()
    return TestReport(tuple(results), tuple(updated))


def run_tests(project: Project, names: Sequence[str] | None = None, update: bool = False,
              on_result: Callable[[CaseResult], None] | None = None,
              on_step: Callable[[str], None] | None = None, built: Project | None = None) -> TestReport:
    """Run the project's endpoint tests (all, or those named `pipe` / `pipe.case`) on a temporary warehouse.

    `built` reuses a project from `isolated_project(project)` instead of building one for this run (the test
    files are read again, the datafiles are not)."""
    project.require_valid()
    cases = load_cases(project, tuple(names or ()))
    if not cases:
        return TestReport(())
    if built is not None:
        return run_cases(built, cases, update, on_result)
    start = time.perf_counter()
    with isolated_project(project, on_step) as fresh:
        build_seconds = time.perf_counter() - start
        report = run_cases(fresh, cases, update, on_result)
    return TestReport(report.results, report.updated_files, build_seconds)


# ------------------------------------------------------------------------------------------ comparing
def explain(case: Case, status: int, rows: list[dict[str, Any]] | None, error: str = "") -> str:
    """Why the answer does not meet the case's expectation ("" when it does): a diff of rows or the statuses."""
    if case.status is not None:
        if status == case.status:
            return ""
        got = error or f"{len(rows or [])} row(s)"
        return f"expected HTTP {case.status}, got HTTP {status}: {got}"
    if rows is None:
        return f"expected rows, got HTTP {status}:\n{error}"
    expected = list(case.rows or ())
    if len(expected) == len(rows) and all(same(e, a) for e, a in zip(expected, rows, strict=True)):
        return ""
    expected_lines = [ndjson_line(row) for row in expected]
    # An answer row equal to an expected one (within the float tolerance) is shown as written, so the diff only
    # marks rows that really differ.
    actual_lines = [next((expected_lines[j] for j in _candidates(i, len(expected)) if same(expected[j], row)),
                         ndjson_line(row)) for i, row in enumerate(rows)]
    params = ", ".join(f"{k}={v!r}" for k, v in case.params.items())
    diff = difflib.unified_diff(expected_lines, actual_lines, f"expected  {case.file} :: {case.name}",
                                f"actual    {case.pipe}({params})", lineterm="")
    return "\n".join(diff)


def _candidates(i: int, n: int) -> list[int]:
    return ([i] if i < n else []) + [j for j in range(n) if j != i]


def same(expected: Any, actual: Any) -> bool:
    """JSON values equal, numbers within a tiny relative tolerance (booleans are not numbers)."""
    if isinstance(expected, bool) or isinstance(actual, bool):
        return type(expected) is type(actual) and expected == actual
    if isinstance(expected, int | float) and isinstance(actual, int | float):
        if isinstance(expected, float) and isinstance(actual, float) and math.isnan(expected):
            return math.isnan(actual)
        return math.isclose(expected, actual, rel_tol=FLOAT_TOLERANCE, abs_tol=FLOAT_TOLERANCE)
    if isinstance(expected, dict) and isinstance(actual, dict):
        return expected.keys() == actual.keys() and all(same(v, actual[k]) for k, v in expected.items())
    if isinstance(expected, list) and isinstance(actual, list):
        return len(expected) == len(actual) and all(same(e, a) for e, a in zip(expected, actual, strict=True))
    return expected == actual


def ndjson_line(row: dict[str, Any]) -> str:
    return json.dumps(row, ensure_ascii=False, separators=(",", ":"))


# ------------------------------------------------------------------------------------------ --update
def rewrite_expectations(root: Path, results: Sequence[CaseResult]) -> list[str]:
    """Write each result's answer as its case's expectation; returns the files changed.

    Only the expectation's value is replaced in the file's text, so comments, spacing and the other cases stay
    as written. A case that expected rows but now gets an error expects that status instead."""
    by_file: dict[str, dict[str, CaseResult]] = {}
    for result in results:
        by_file.setdefault(result.case.file, {})[result.case.name] = result
    changed = []
    for rel, wanted in by_file.items():
        path = root / rel
        text = path.read_text(encoding="utf-8")
        new = _rewrite(text, wanted)
        if new != text:
            path.write_text(new, encoding="utf-8")
            changed.append(rel)
    return changed


def _rewrite(text: str, wanted: dict[str, CaseResult]) -> str:
    _, root = _compose(text)
    edits: list[tuple[int, int, str]] = []
    for item in root.value if root is not None else []:
        name = next((v.value for k, v in item.value if k.value == "name"), None)
        result = wanted.get(name)
        if result is None:
            continue
        for key, value in item.value:
            old = text[value.start_mark.index:value.end_mark.index]
            body = old.rstrip()
            tail = old[len(body):]  # the blank lines a block scalar swallows stay where they were
            if key.value == "expected_result" and result.status == 200:
                new = _rows_scalar(result.rows or [], key.start_mark.column + 2, item.flow_style)
                if value.style == "|" and new.startswith("|"):  # keep `|` with its chomping and comment
                    new = body.split("\n", 1)[0] + new[1:]
                edits.append((value.start_mark.index, value.end_mark.index, new + tail))
            elif key.value == "expected_result":
                edits.append((key.start_mark.index, value.end_mark.index,
                               f"expected_http_status: {result.status}" + tail))
            elif key.value == "expected_http_status":
                edits.append((value.start_mark.index, value.end_mark.index, f"{result.status}" + tail))
    for start, end, new in sorted(edits, reverse=True):
        if text[start - 1:start] == ":":  # an empty value (`expected_result:`) has no space after its colon
            new = " " + new
        text = text[:start] + new + text[end:]
    return text


def _rows_scalar(rows: list[dict[str, Any]], indent: int, flow: bool) -> str:
    """Rows as the YAML value of `expected_result`: a literal block, or a quoted string inside `{...}`."""
    lines = [ndjson_line(row) for row in rows]
    if not lines:
        return '""'
    if flow:
        return json.dumps("".join(line + "\n" for line in lines), ensure_ascii=False)
    return "|\n" + "\n".join(" " * indent + line for line in lines)
