"""SQL text: the one module that quotes string literals, identifiers and Delta paths for Spark SQL.

Pure Python (no pyspark), so the compiler, the template sandbox and the engine all quote the same way.
"""

from __future__ import annotations


def quote_string(text: str) -> str:
    """A Spark string literal: backslash and quote escaped, so the content can never end the literal."""
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def quote_identifier(name: str) -> str:
    """One name as a Spark identifier: `name`, a backtick inside doubled."""
    return "`" + name.replace("`", "``") + "`"


def quote_qualified(name: str) -> str:
    """A dotted name, each part quoted: `t`.`col`."""
    return ".".join(quote_identifier(part) for part in name.split("."))


def quote_path(path: str) -> str:
    """A Delta table addressed by its location: delta.`/path`."""
    return "delta." + quote_identifier(path)


PY4J_CALL = "An error occurred while calling "  # Py4J's first line of a Java exception: not the error itself


def first_line(exc: BaseException) -> str:
    """The first line of an error (at most 300 characters): Spark's messages run to pages of JVM stack. For an error
    Py4J relays from the JVM (`An error occurred while calling o103.save.` then `: org.apache...Exception: why`), the
    Java exception's line, its class without its package."""
    text = str(exc).strip().splitlines()
    if text and text[0].startswith(PY4J_CALL):
        cause = next((line[2:] for line in text[1:] if line.startswith(": ")), "")
        name, colon, why = cause.partition(": ")
        if cause:
            return (name.rsplit(".", 1)[-1] + colon + why)[:300]
    return text[0][:300] if text else type(exc).__name__
