"""Property tests: whatever is in the project folder, loading it reports diagnostics and never raises.

Each example writes files into a fresh temporary folder and runs ``load_resources``; every diagnostic must
have a stable code, a message, a hint and a location inside a project file.
"""

from __future__ import annotations

import re
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pipeframe.datafiles.loader import load_resources
from pipeframe.datafiles.parser import DATASOURCE_KEYWORDS, NODE_KEYWORDS, PIPE_KEYWORDS

EXAMPLE = Path(__file__).resolve().parents[2] / "example_project"
EXAMPLE_FILES = {
    str(p.relative_to(EXAMPLE)): p.read_text(encoding="utf-8")
    for p in sorted(EXAMPLE.rglob("*")) if p.suffix in (".datasource", ".pipe", ".incl")
}
ENVIRON = {"TENANT": "acme", "TABLE": "sales"}
CODE = re.compile(r"PF\d{3}")

FUZZ = settings(max_examples=200, deadline=None, database=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])


def file_lines(data: bytes) -> list[str]:
    """The file's lines as the lexer numbers them (a tab counts as four spaces)."""
    text = data.decode("utf-8", errors="replace").removeprefix("\ufeff")
    return text.replace("\r\n", "\n").replace("\r", "\n").replace("\t", "    ").split("\n")


def check_project(files: dict[str, bytes]) -> list:
    """Write ``files``, load them, and check every diagnostic points at a real place in a real file."""
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        for rel, data in files.items():
            path = root / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
        resources, diags = load_resources(root, (), ENVIRON)
    lines = {rel: file_lines(data) for rel, data in files.items()}
    for d in diags:
        assert CODE.fullmatch(d.code), d
        assert d.message.strip() and d.hint.strip(), d
        assert d.severity in ("error", "warning", "info"), d
        assert d.location is not None, d
        assert d.location.path in lines, d
        file = lines[d.location.path]
        assert 1 <= d.location.line <= len(file), (d, len(file))
        assert 1 <= d.location.col <= len(file[d.location.line - 1]) + 1, (d, file[d.location.line - 1])
    parsed = {r.path for r in (*resources.datasources, *resources.pipes)}
    assert parsed <= set(files)
    return diags


# ------------------------------------------------------------------------------------------ random text

file_names = st.sampled_from(["a.pipe", "pipes/b.pipe", "c.datasource", "ds/d.datasource", "x.incl"])


@FUZZ
@given(st.dictionaries(file_names, st.text(max_size=400), min_size=1, max_size=4))
def test_random_text_never_raises(files):
    check_project({rel: text.encode("utf-8") for rel, text in files.items()})


@FUZZ
@given(st.dictionaries(file_names, st.binary(max_size=300), min_size=1, max_size=4))
def test_random_bytes_never_raise(files):
    diags = check_project(files)
    for d in diags:
        if d.message.startswith("File is not UTF-8"):
            assert (d.code, d.location.line) == ("PF101", 1)


bad_stems = st.text(alphabet="ab_1-. é", min_size=1, max_size=8).filter(lambda s: s.strip(".") and "/" not in s)


@FUZZ
@given(bad_stems, st.sampled_from([".pipe", ".datasource"]))
def test_any_file_name_is_either_a_resource_or_a_located_error(stem, suffix):
    rel = f"{stem}{suffix}"
    body = b"NODE a\nSQL >\n    SELECT 1\n" if suffix == ".pipe" else b"SCHEMA >\n    `a` INT\n"
    diags = check_project({rel: body})
    assert all(d.location.path == rel for d in diags)


# ---------------------------------------------------------------------------------------- keyword soup

KEYWORDS = sorted(DATASOURCE_KEYWORDS | PIPE_KEYWORDS | NODE_KEYWORDS | {"INCLUDE"})
BLOCK_INDENTS = ["    ", "    ", "  ", "\t", "      "]
INDENTS = ["", "", "", " ", "  ", "   ", "    ", "    ", "     ", "        ", "\t", " \t"]
VALUES = [
    ">", ">", "", "x", "sales", "endpoint", "materialized", "copy", "MergeTree", '"ingest" APPEND', "READ",
    '"x.incl"', '"inc/y.incl" "A=1" "B=two words"', '"missing.incl"', '"x.incl', "'unbalanced", "A=", "skip",
    "$TENANT", "${TABLE}", "$UNSET", "${UNSET", "$", "(a, b", "tuple()", "to_date(ts)", "ts + INTERVAL 1 DAY",
    "0 1 * * *", "@on-demand", "append", "replace", "sketch", "exact", "products, `users", "%", "`", "#",
]
BLOCK_LINES = [
    "`ts` DateTime `json:$.ts`,", "`a` String,", "`a` String", "b Int64 DEFAULT 0,", "`c` Array(String",
    "`d` LowCardinality(Nullable(String)),", "`e` AggregateFunction(sum, Float64),", "`f` AggregateFunction(",
    "`g` Map(String, Int64)", "`h` ARRAY<STRUCT<x: INT>>,", "`i` Decimal(10, 2) CODEC(ZSTD(1)),",
    "`j` Int33,", "`2bad` INT,", ",,", "`json:$.x`", "DEFAULT", "`unclosed INT", "SELECT * FROM sales",
    "WHERE x > 1 AND y < 2", "GROUP BY 1, 2", "%", "{{ String(p) }}", "{% if defined(x) %}", "$TENANT",
    "${UNSET}", "# not a comment in a block", ")", "]>", "'", '"', "",
]


@st.composite
def soup_line(draw) -> str:
    kind = draw(st.sampled_from(["keyword", "keyword", "keyword", "block", "block", "junk", "blank", "comment"]))
    indent = draw(st.sampled_from(INDENTS))
    if kind == "keyword":
        keyword = draw(st.sampled_from(KEYWORDS))
        if draw(st.booleans()):
            keyword = draw(st.sampled_from([keyword.lower(), keyword + "X", keyword[:-1], keyword.title()]))
        value = draw(st.sampled_from(VALUES) | st.text(max_size=12))
        return f"{indent}{keyword} {value}".rstrip() if value else f"{indent}{keyword}"
    if kind == "block":
        return draw(st.sampled_from(BLOCK_INDENTS)) + draw(st.sampled_from(BLOCK_LINES))
    if kind == "junk":
        return indent + draw(st.text(alphabet="`'\"()<>[]{}$%#,;:=> \\abc01", max_size=20))
    if kind == "comment":
        return f"{indent}# {draw(st.text(max_size=10))}"
    return ""


soup_text = st.lists(soup_line(), max_size=30).map(lambda lines: "\n".join(lines))


@FUZZ
@given(st.dictionaries(file_names, soup_text, min_size=1, max_size=4),
       st.sampled_from(["\n", "\r\n"]), st.booleans())
def test_keyword_soup_never_raises(files, newline, bom):
    prefix = b"\xef\xbb\xbf" if bom else b""
    check_project({rel: prefix + text.replace("\n", newline).encode("utf-8") for rel, text in files.items()})


@FUZZ
@given(soup_text, soup_text, st.binary(max_size=40))
def test_includes_of_soup_and_bytes_never_raise(pipe_text, include_text, include_bytes):
    check_project({
        "pipes/p.pipe": f'INCLUDE "x.incl" "A=1"\n{pipe_text}\nINCLUDE "inc/y.incl"\n'.encode(),
        "pipes/x.incl": include_text.encode(),
        "inc/y.incl": include_bytes + b'\nINCLUDE "pipes/x.incl"\n',
        "x.incl": b'INCLUDE "x.incl"\nNODE looped\nSQL >\n    SELECT 1\n',
    })


# -------------------------------------------------------------------------------- mutated example files

@st.composite
def mutated_example(draw) -> dict[str, bytes]:
    rel = draw(st.sampled_from(sorted(EXAMPLE_FILES)))
    lines = EXAMPLE_FILES[rel].split("\n")
    for _ in range(draw(st.integers(1, 6))):
        op = draw(st.sampled_from(["delete", "duplicate", "swap", "indent", "truncate", "insert", "replace"]))
        if not lines:
            lines = [""]
        i = draw(st.integers(0, len(lines) - 1))
        if op == "delete":
            del lines[i]
        elif op == "duplicate":
            lines.insert(i, lines[i])
        elif op == "swap":
            j = draw(st.integers(0, len(lines) - 1))
            lines[i], lines[j] = lines[j], lines[i]
        elif op == "indent":
            lines[i] = draw(st.sampled_from(INDENTS)) + lines[i].lstrip()
        elif op == "truncate":
            text = "\n".join(lines)
            lines = text[: draw(st.integers(0, len(text)))].split("\n")
        elif op == "insert":
            pos = draw(st.integers(0, len(lines[i])))
            chars = draw(st.text(alphabet="`'\"()<>[],$%#{} \t\r>xX0\x00é", min_size=1, max_size=4))
            lines[i] = lines[i][:pos] + chars + lines[i][pos:]
        else:
            lines[i] = draw(st.sampled_from(BLOCK_LINES + [f"{k} >" for k in ("SQL", "SCHEMA", "NODE")]))
    files = {name: text.encode("utf-8") for name, text in EXAMPLE_FILES.items()
             if name == "includes/date_filter.incl"}
    files[rel] = "\n".join(lines).encode("utf-8")
    return files


@FUZZ
@given(mutated_example())
def test_mutated_example_files_never_raise(files):
    check_project(files)


def test_example_project_files_pass_the_checks_unchanged():
    assert check_project({rel: text.encode("utf-8") for rel, text in EXAMPLE_FILES.items()}) == []
