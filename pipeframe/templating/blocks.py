"""Template text before Jinja sees it: the leading `%` marker line and Tinybird's `{% end %}` alias (also written
`{% end if %}`).

Both rewrites keep every line where it was, so Jinja's line numbers are the datafile's.
"""

from __future__ import annotations

import re

from pipeframe.templating.errors import TemplateError

# The marker alone on its line, or followed by the SQL (`% SELECT ...`, which Tinybird accepts too).
_PERCENT_LINE = re.compile(r"\A((?:[ \t]*\r?\n)*)[ \t]*%(?:[ \t]*(?=\r?\n|\Z)|(?P<inline>(?=[ \t]+[^\s%{])))")
_ANY_END = re.compile(r"\{%[-+]?\s*end\b")
_TAG = re.compile(r"\{#.*?#\}|\{%[-+]?\s*(?P<name>[A-Za-z_]\w*)(?P<body>.*?)%\}", re.DOTALL)
_ENDRAW = re.compile(r"\{%[-+]?\s*endraw\s*[-+]?%\}")
_ASSIGNMENT = re.compile(r"(?<![=!<>])=(?!=)")
BLOCK_TAGS = frozenset({"if", "for", "macro", "call", "filter", "with", "block", "autoescape", "trans", "set"})


def has_percent_line(sql: str) -> bool:
    return _PERCENT_LINE.match(sql) is not None


def strip_percent_line(sql: str) -> str:
    """Blank out a leading `%` (Tinybird's templated-node marker), keeping the line count and every column."""
    return _PERCENT_LINE.sub(lambda match: match.group(0).replace("%", " ") if match.group("inline") is not None
                             else match.group(1), sql, count=1)


def position(source: str, offset: int) -> tuple[int, int]:
    """1-based line and column of an offset."""
    line_start = source.rfind("\n", 0, offset) + 1
    return source.count("\n", 0, offset) + 1, offset - line_start + 1


def close_end_tags(source: str) -> str:
    """Rewrite each `{% end %}` to the end tag of the innermost open block (`{% endif %}`, `{% endfor %}`...)."""
    if _ANY_END.search(source) is None:
        return source
    pieces: list[str] = []
    open_blocks: list[str] = []
    done = 0
    cursor = 0
    while (match := _TAG.search(source, cursor)) is not None:
        cursor = match.end()
        name = match.group("name")
        if name is None:  # a comment
            continue
        if name == "raw":
            endraw = _ENDRAW.search(source, cursor)
            cursor = endraw.end() if endraw else len(source)
        elif name == "end":
            if not open_blocks:
                line, col = position(source, match.start())
                raise TemplateError(
                    "PF201",
                    "`{% end %}` closes no open block.",
                    "Remove it, or open the block it should close ({% if %}, {% for %}, ...).",
                    line=line,
                    col=col,
                )
            # Tinybird ignores what follows `end` (`{% end if %}`); keep only a whitespace-control mark.
            start = match.start("name")
            body = match.group("body").rstrip()
            trim = body[-1] if body[-1:] in ("-", "+") else ""
            pieces.append(source[done:start] + "end" + open_blocks.pop() + (f" {trim}" if trim else " "))
            done = match.end("body")
        elif name in BLOCK_TAGS and not (name == "set" and _ASSIGNMENT.search(match.group("body"))):
            open_blocks.append(name)
        elif name.startswith("end") and open_blocks and open_blocks[-1] == name[3:]:
            open_blocks.pop()
    pieces.append(source[done:])
    return "".join(pieces)
