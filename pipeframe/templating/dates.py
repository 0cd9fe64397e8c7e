"""Tinybird's date helpers for template logic: `day_diff(date_from, date_to)`."""

from __future__ import annotations

import datetime as dt
from typing import Any

from jinja2 import pass_context
from jinja2.runtime import Context

from pipeframe.templating.errors import TemplateError, shown
from pipeframe.templating.literals import ValueOperators
from pipeframe.templating.parameters import MissingParam, ParamRef, param_name, state_of


def _as_date(value: Any) -> dt.date | None:
    """A date from `YYYY-MM-DD`, a datetime text (its date part), a date or datetime; None when empty."""
    if isinstance(value, dt.datetime):
        return value.date()
    if isinstance(value, dt.date):
        return value
    if value is None or (isinstance(value, str) and not value.strip()):
        return None
    text = str(value).strip()
    try:
        return dt.date.fromisoformat(text[:10]) if len(text) == 10 else dt.datetime.fromisoformat(text).date()
    except ValueError:
        raise ValueError(value) from None


@pass_context
def day_diff(context: Context, d0: Any, d1: Any, default: Any = None) -> Any:
    """Whole days between two dates, whichever comes first (`day_diff('2019-01-02', '2019-02-01')` is 30). As in
    Tinybird, it is 0 in analysis (parameters are placeholders) and for a parameter that was not passed, unless a
    `default` is given; a value that is not a date is PF202."""
    state = state_of(context)
    for value in (d0, d1):
        if isinstance(value, (ParamRef, MissingParam)):
            state.use(value.name)
    if state.analyzing and any(isinstance(value, (ParamRef, MissingParam)) for value in (d0, d1)):
        return 0
    values = []
    for value in (d0, d1):
        if isinstance(value, MissingParam):
            values.append(None)
            continue
        raw = value.operand() if isinstance(value, ValueOperators) else value
        try:
            values.append(_as_date(raw))
        except ValueError:
            name = param_name(value)
            subject = f"Parameter `{name}`" if name else "The value"
            raise TemplateError("PF202", f"{subject} must be a date (YYYY-MM-DD) for day_diff(), got {shown(raw)}.",
                                "Pass a date such as 2024-01-31.", parameter=name) from None
    first, second = values
    if first is None or second is None:
        return 0 if default is None else default
    return abs((second - first).days)
day_diff.takes_param_refs = True  # type: ignore[attr-defined]
