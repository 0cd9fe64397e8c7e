"""The one sqlglot dialect pipeframe writes and reads compiled SQL in (Spark), shared by every module that parses or
prints a tree; ClickHouse input is translated into it by `compiler/clickhouse.py`."""

from __future__ import annotations

from sqlglot.dialects.dialect import Dialect

# One dialect instance: passing the name makes sqlglot look it up and build a new one on every call.
DIALECT = Dialect.get_or_raise("spark")
