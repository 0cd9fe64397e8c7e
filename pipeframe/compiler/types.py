"""Column types in the compiler: the safe-cast lattice (is an MV's output column storable in its target column?)
and the sqlglot bridge. Reading type spellings is `pipeframe.datafiles.types`."""

from __future__ import annotations

from sqlglot import exp, parse_one

from pipeframe.datafiles.types import (
    MAX_DECIMAL_PRECISION,
    ColumnType,
    TypeProblem,
    TypeTree,
    field_name,
    normalize_type,
    parse_type_tree,
)

__all__ = ["from_sqlglot", "is_safe_cast", "to_sqlglot"]


# --------------------------------------------------------------------------------------------------
# The safe-cast lattice: can every value of `source` be stored in `target` without loss?

_INTEGER_DIGITS = {"TINYINT": 3, "SMALLINT": 5, "INT": 10, "BIGINT": 19}
_EXACT_IN_DOUBLE = {"TINYINT", "SMALLINT", "INT", "FLOAT"}
_EXACT_IN_FLOAT = {"TINYINT", "SMALLINT"}


def _safe(source: TypeTree, target: TypeTree) -> bool:
    if source == target or source.name == "VOID":
        return True
    s, t = source.name, target.name
    if s in _INTEGER_DIGITS and t in _INTEGER_DIGITS:
        return _INTEGER_DIGITS[s] <= _INTEGER_DIGITS[t]
    if s in _INTEGER_DIGITS and t == "DECIMAL":
        return target.params[0] - target.params[1] >= _INTEGER_DIGITS[s]
    if t == "DOUBLE":
        return s in _EXACT_IN_DOUBLE
    if t == "FLOAT":
        return s in _EXACT_IN_FLOAT
    if s == "DECIMAL" and t == "DECIMAL":
        (p1, s1), (p2, s2) = source.params, target.params
        return s2 >= s1 and p2 - s2 >= p1 - s1
    if s == "DATE":
        return t in ("TIMESTAMP", "TIMESTAMP_NTZ")
    if s == t == "ARRAY":
        return _safe(source.children[0], target.children[0])
    if s == t == "MAP":
        return source.children[0] == target.children[0] and _safe(source.children[1], target.children[1])
    if s == t == "STRUCT":
        return source.fields == target.fields and all(map(_safe, source.children, target.children))
    return False


def is_safe_cast(source: str, target: str) -> bool:
    """True when a `source` value always fits a `target` column (widening only); False for anything else.

    Integers widen, DATE becomes a timestamp, decimals gain digits, containers follow their elements;
    narrowing, precision loss, anything to STRING and TIMESTAMP_NTZ -> TIMESTAMP are not safe. Unreadable
    input is never safe. Aggregate-state columns only accept the identical state type.
    """
    try:
        (source_column, source_tree), (target_column, target_tree) = parse_type_tree(source), parse_type_tree(target)
    except TypeProblem:
        return False
    if source_tree is None or target_tree is None:
        return source_column.type == target_column.type
    return _safe(source_tree, target_tree)


# --------------------------------------------------------------------------------------------------
# The sqlglot bridge.

_T = exp.DataType.Type

# Text-like types (including ClickHouse's UUID, IP addresses, enums and JSON) are all stored as STRING.
_SQLGLOT_STRINGS = (
    _T.TEXT, _T.VARCHAR, _T.CHAR, _T.NCHAR, _T.NVARCHAR, _T.BPCHAR, _T.NAME, _T.TINYTEXT, _T.MEDIUMTEXT,
    _T.LONGTEXT, _T.FIXEDSTRING, _T.UUID, _T.IPV4, _T.IPV6, _T.ENUM, _T.ENUM8, _T.ENUM16, _T.JSON,
)  # fmt: skip

_FROM_SQLGLOT: dict[exp.DataType.Type, str] = {
    _T.TINYINT: "TINYINT",
    **dict.fromkeys([_T.SMALLINT, _T.UTINYINT], "SMALLINT"),
    **dict.fromkeys([_T.INT, _T.USMALLINT, _T.MEDIUMINT, _T.UMEDIUMINT], "INT"),
    **dict.fromkeys([_T.BIGINT, _T.UINT], "BIGINT"),
    _T.UBIGINT: "DECIMAL(20,0)",
    **dict.fromkeys([_T.INT128, _T.UINT128, _T.INT256, _T.UINT256], "DECIMAL(38,0)"),
    _T.FLOAT: "FLOAT",
    _T.DOUBLE: "DOUBLE",
    _T.BOOLEAN: "BOOLEAN",
    **dict.fromkeys(_SQLGLOT_STRINGS, "STRING"),
    **dict.fromkeys([_T.DATE, _T.DATE32], "DATE"),
    **dict.fromkeys([_T.TIMESTAMP, _T.TIMESTAMPTZ, _T.TIMESTAMPLTZ, _T.DATETIME, _T.DATETIME64], "TIMESTAMP"),
    _T.TIMESTAMPNTZ: "TIMESTAMP_NTZ",
    **dict.fromkeys([_T.BINARY, _T.VARBINARY, _T.BLOB], "BINARY"),
    _T.VARIANT: "VARIANT",
    **dict.fromkeys([_T.NULL, _T.NOTHING], "VOID"),
}

_SQLGLOT_DECIMAL_PRECISION = {_T.DECIMAL32: 9, _T.DECIMAL64: 18, _T.DECIMAL128: 38}


def _int_params(dtype: exp.DataType) -> list[int] | None:
    values = []
    for param in dtype.expressions:
        text = param.name
        if not (text.isascii() and text.isdigit()):
            return None
        values.append(int(text))
    return values


def from_sqlglot(dtype: exp.DataType) -> str | None:
    """The canonical Spark type for a sqlglot DataType, or None when it has no Spark equivalent (or is UNKNOWN)."""
    kind = dtype.this
    if kind in _FROM_SQLGLOT:
        return _FROM_SQLGLOT[kind]
    if kind == _T.DECIMAL:
        params = _int_params(dtype)
        if params is None or len(params) > 2:
            return None
        precision = params[0] if params else 10
        scale = params[1] if len(params) > 1 else 0
        if not 1 <= precision <= MAX_DECIMAL_PRECISION or scale > precision:
            return None
        return TypeTree("DECIMAL", (precision, scale)).render()
    if kind in _SQLGLOT_DECIMAL_PRECISION:
        params = _int_params(dtype)
        if not params or len(params) != 1 or params[0] > _SQLGLOT_DECIMAL_PRECISION[kind]:
            return None
        return TypeTree("DECIMAL", (_SQLGLOT_DECIMAL_PRECISION[kind], params[0])).render()
    if kind == _T.LOWCARDINALITY:
        return _child(dtype, 0) if len(dtype.expressions) == 1 else None
    if kind in (_T.ARRAY, _T.LIST):
        element = _child(dtype, 0) if len(dtype.expressions) == 1 else None
        return None if element is None else f"ARRAY<{element}>"
    if kind == _T.MAP:
        if len(dtype.expressions) != 2:
            return None
        key, value = _child(dtype, 0), _child(dtype, 1)
        return None if key is None or value is None else f"MAP<{key},{value}>"
    if kind == _T.STRUCT:
        return _struct_from_sqlglot(dtype)
    if kind in (_T.AGGREGATEFUNCTION, _T.SIMPLEAGGREGATEFUNCTION):
        return _aggregate_from_sqlglot(dtype)
    if kind == _T.USERDEFINED:
        # sqlglot keeps names it does not know (e.g. some ClickHouse spellings) as user-defined types.
        try:
            return normalize_type(str(dtype.args.get("kind") or ""))
        except TypeProblem:
            return None
    return None


def _child(dtype: exp.DataType, index: int) -> str | None:
    child = dtype.expressions[index]
    return from_sqlglot(child) if isinstance(child, exp.DataType) else None


def _struct_from_sqlglot(dtype: exp.DataType) -> str | None:
    names: list[str] = []
    types: list[str] = []
    for position, field in enumerate(dtype.expressions, start=1):
        if isinstance(field, exp.ColumnDef) and isinstance(field.args.get("kind"), exp.DataType):
            names.append(field.name)
            rendered = from_sqlglot(field.args["kind"])
        elif isinstance(field, exp.DataType):
            names.append(f"_{position}")
            rendered = from_sqlglot(field)
        else:
            return None
        if rendered is None:
            return None
        types.append(rendered)
    text = "STRUCT<" + ", ".join(f"{field_name(n)}: {t}" for n, t in zip(names, types)) + ">"
    try:
        return normalize_type(text)  # rejects duplicate field names, like a written STRUCT would be
    except TypeProblem:
        return None


def _aggregate_from_sqlglot(dtype: exp.DataType) -> str | None:
    if not dtype.expressions:
        return None
    function, *args = dtype.expressions
    if isinstance(function, exp.Identifier):
        written = function.name
    elif isinstance(function, (exp.AnonymousAggFunc, exp.Anonymous)):
        params = ", ".join(p.sql(dialect="clickhouse") for p in function.expressions)
        written = f"{function.name}({params})"
    else:
        return None
    parts = [written]
    for arg in args:
        rendered = from_sqlglot(arg) if isinstance(arg, exp.DataType) else None
        if rendered is None:
            return None
        parts.append(rendered)
    keyword = "AggregateFunction" if dtype.this == _T.AGGREGATEFUNCTION else "SimpleAggregateFunction"
    try:
        return normalize_type(f"{keyword}({', '.join(parts)})")
    except TypeProblem:
        return None


def to_sqlglot(type_str: str) -> exp.DataType:
    """A sqlglot DataType for a type in any accepted spelling (Spark dialect); raises TypeProblem."""
    column, tree = parse_type_tree(type_str)
    if tree is None:
        return _aggregate_to_sqlglot(column)
    return _tree_to_sqlglot(tree)


def _tree_to_sqlglot(tree: TypeTree) -> exp.DataType:
    # Built node by node: sqlglot's Spark parser does not read VOID, neither alone nor nested (ARRAY<VOID>).
    if tree.name == "VOID":
        return exp.DataType(this=_T.NULL)
    if tree.name in ("ARRAY", "MAP"):
        children = [_tree_to_sqlglot(c) for c in tree.children]
        return exp.DataType(this=_T[tree.name], expressions=children, nested=True)
    if tree.name == "STRUCT":
        fields = [
            exp.ColumnDef(this=exp.to_identifier(name), kind=_tree_to_sqlglot(child))
            for name, child in zip(tree.fields, tree.children)
        ]
        return exp.DataType(this=_T.STRUCT, expressions=fields, nested=True)
    return exp.DataType.build(tree.render(), dialect="spark")


def _aggregate_to_sqlglot(column: ColumnType) -> exp.DataType:
    # Built by hand: the canonical Spark argument types (MAP<...>, TIMESTAMP_NTZ) are not ClickHouse syntax.
    name = column.aggregate_function or ""
    function: exp.Expression
    if column.aggregate_params:
        params = [parse_one(p, dialect="clickhouse") for p in column.aggregate_params]
        function = exp.AnonymousAggFunc(this=name, expressions=params)
    else:
        function = exp.to_identifier(name)
    args = [to_sqlglot(a) for a in column.aggregate_args]
    for arg in args:
        for node in arg.find_all(exp.DataType):
            node.set("nullable", False)  # or sqlglot's ClickHouse output wraps every argument in Nullable(...)
    return exp.DataType(this=_T.AGGREGATEFUNCTION, expressions=[function, *args], nested=False, nullable=False)
