"""Spark SQL column types (as `ResourceState.columns` and pipeframe's own tables spell them: `BIGINT`,
`DECIMAL(10,2)`, `ARRAY<STRING>`, `MAP<STRING,BIGINT>`, `STRUCT<sum: DOUBLE, count: BIGINT>`) as the Delta log's
schema JSON spells them (PROTOCOL.md, "Schema Serialization Format"), for tables created without a Spark job.

Only what is certain to be what Spark writes: a type name it does not know (CHAR/VARCHAR, which Spark stores as
`string` with a metadata entry; INTERVAL, VARIANT, NOT NULL, COMMENT...) answers None, and the caller leaves the
table to Spark's `CREATE TABLE`."""

from __future__ import annotations

import re

_TOKEN = re.compile(r"\s*(?:(`[^`]+`|[A-Za-z_][A-Za-z0-9_]*)|(\d+)|([<>(),:]))")
_SIMPLE = {"STRING": "string", "BIGINT": "long", "LONG": "long", "INT": "integer", "INTEGER": "integer",
           "SMALLINT": "short", "SHORT": "short", "TINYINT": "byte", "BYTE": "byte", "BOOLEAN": "boolean",
           "DOUBLE": "double", "FLOAT": "float", "REAL": "float", "DATE": "date", "TIMESTAMP": "timestamp",
           "TIMESTAMP_LTZ": "timestamp", "TIMESTAMP_NTZ": "timestamp_ntz", "BINARY": "binary"}


def delta_type(ddl: str) -> object | None:
    """The Delta schema type of the Spark SQL type `ddl`; None when it is not one this module spells exactly."""
    tokens = _tokens(ddl)
    if tokens is None:
        return None
    parser = _Parser(tokens)
    kind = parser.type()
    return kind if parser.at_end() else None


def struct(columns: list[tuple[str, str]]) -> dict | None:
    """The schema (a struct of nullable fields) of `(name, Spark SQL type)` columns; None when a type is unknown."""
    fields = []
    for name, ddl in columns:
        kind = delta_type(ddl)
        if kind is None:
            return None
        fields.append(_field(name, kind))
    return {"type": "struct", "fields": fields}


def _field(name: str, kind: object) -> dict:
    return {"name": name, "type": kind, "nullable": True, "metadata": {}}


def _tokens(text: str) -> list[str] | None:
    tokens, at = [], 0
    text = text.rstrip()
    while at < len(text):
        match = _TOKEN.match(text, at)
        if match is None:
            return None
        tokens.append(match.group(match.lastindex or 0))
        at = match.end()
    return tokens


class _Parser:
    def __init__(self, tokens: list[str]) -> None:
        self.tokens, self.at = tokens, 0

    def at_end(self) -> bool:
        return self.at == len(self.tokens)

    def _next(self) -> str | None:
        if self.at_end():
            return None
        self.at += 1
        return self.tokens[self.at - 1]

    def _take(self, token: str) -> bool:
        if not self.at_end() and self.tokens[self.at] == token:
            self.at += 1
            return True
        return False

    def _number(self) -> int | None:
        token = self._next()
        return int(token) if token is not None and token.isdigit() else None

    def type(self) -> object | None:
        name = (self._next() or "").upper()
        if name in _SIMPLE:
            return _SIMPLE[name]
        if name in ("DECIMAL", "DEC", "NUMERIC"):
            return self._decimal()
        if name == "ARRAY" and self._take("<"):
            element = self.type()
            return None if element is None or not self._take(">") else \
                {"type": "array", "elementType": element, "containsNull": True}
        if name == "MAP" and self._take("<"):
            key = self.type()
            value = self.type() if key is not None and self._take(",") else None
            return None if value is None or not self._take(">") else \
                {"type": "map", "keyType": key, "valueType": value, "valueContainsNull": True}
        if name == "STRUCT" and self._take("<"):
            return self._struct()
        return None

    def _decimal(self) -> str | None:
        if not self._take("("):
            return "decimal(10,0)"
        precision = self._number()
        scale = self._number() if self._take(",") else 0
        if precision is None or scale is None or not self._take(")") or not 0 < precision <= 38 or scale > precision:
            return None
        return f"decimal({precision},{scale})"

    def _struct(self) -> dict | None:
        fields: list[dict] = []
        while not self._take(">"):
            if fields and not self._take(","):
                return None
            name = self._next()
            if name is None or not (name.startswith("`") or name[0].isalpha() or name[0] == "_"):
                return None
            self._take(":")
            kind = self.type()
            if kind is None:
                return None
            fields.append(_field(name.strip("`"), kind))
        return {"type": "struct", "fields": fields}
