"""Request parameters a template renders into LIMIT or OFFSET. Spark takes a whole number from 0 to 2147483647
there, so such a parameter's valid range follows from where it is used: a value outside it is a PF202 (HTTP 400)
raised before the query reaches Spark, not a failed Spark job."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from sqlglot import exp

from pipeframe.compiler.sql import locate, parse_select
from pipeframe.errors import Location, PipeframeError
from pipeframe.templating import Parameter, TemplateError, is_templated, trace
from pipeframe.templating.errors import shown
from pipeframe.templating.parameters import PARAMETER_MARKER, is_passed
from pipeframe.templating.values import InvalidValue, parse

MAX_ROWS = 2**31 - 1  # Spark's LIMIT and OFFSET are INT


def limit_parameters(sql: str, variables: Mapping[str, Any], location: Location) -> dict[str, tuple[str, Location]]:
    """Parameter name → the clause (`LIMIT` or `OFFSET`) a node's template renders it into, and where."""
    if not is_templated(sql):
        return {}
    try:
        traced = trace(sql, variables=variables, location=location)
        tree = parse_select(traced, location)
    except PipeframeError:  # the node compiled in analysis; with markers in place it may not parse: no use found
        return {}
    found: dict[str, tuple[str, Location]] = {}
    for clause in tree.find_all(exp.Limit, exp.Offset):
        for literal in clause.find_all(exp.Literal):
            if literal.is_string and literal.this.startswith(PARAMETER_MARKER):
                name = literal.this[len(PARAMETER_MARKER):]
                word = "OFFSET" if isinstance(clause, exp.Offset) else "LIMIT"
                found.setdefault(name, (word, locate(literal, traced, location)))
    return found


def check_limit_values(uses: Mapping[str, tuple[str, Location]], parameters: Sequence[Parameter],
                       params: Mapping[str, Any]) -> None:
    """Raise PF202 for a request value (or default) of a LIMIT/OFFSET parameter that Spark would refuse."""
    defaults = {p.name: p.default for p in parameters}
    for name, (clause, location) in uses.items():
        raw, is_default = params.get(name), False
        if not is_passed(raw):
            raw, is_default = defaults.get(name), True
            if raw is None:
                continue  # rendering reports the missing parameter
        try:
            value = parse("Int", raw)
        except InvalidValue:
            value = None
        if value is None or not 0 <= value <= MAX_ROWS:
            subject = f"The default of parameter `{name}`" if is_default else f"Parameter `{name}`"
            raise TemplateError("PF202", f"{subject} is used in {clause}, so it must be a whole number from 0 to "
                                f"{MAX_ROWS}, got {shown(raw)}.", f"Pass a whole number from 0 to {MAX_ROWS}, e.g. "
                                f"{name}=10.", location, parameter=name)
