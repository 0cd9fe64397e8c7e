"""Template control functions: `defined(x)`, `error(msg, code)`, `custom_error({...})`.

In analysis every branch must run, so error()/custom_error() do nothing there.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from jinja2 import Undefined, pass_context
from jinja2.runtime import Context

from pipeframe.templating.errors import TemplateError
from pipeframe.templating.literals import SqlFragment
from pipeframe.templating.parameters import MissingParam, ParamRef, is_passed, state_of


def defined(x: Any) -> bool:
    """Whether the request passed a (non-empty) value for this parameter."""
    if isinstance(x, ParamRef):
        x.state.use(x.name)
        return True
    if isinstance(x, MissingParam):
        x.state.use(x.name)
        return False
    if isinstance(x, Undefined):
        return False
    return is_passed(x)


defined.takes_param_refs = True  # type: ignore[attr-defined]


def _status(code: Any) -> int:
    try:
        status = int(code)
    except (TypeError, ValueError, OverflowError):
        return 400
    return status if 400 <= status <= 599 else 400


def _raise(message: Any, code: Any) -> None:
    text = str(message) if message is not None else ""
    raise TemplateError(
        "PF204",
        text or "The endpoint's template raised an error.",
        "",
        http_status=_status(code),
    )


@pass_context
def error(context: Context, message: Any, code: Any = 400) -> SqlFragment:
    """`{{ error('limit is too big', 400) }}`: stop rendering and answer with this message and status."""
    if not state_of(context).analyzing:
        _raise(message, code)
    return SqlFragment("")


@pass_context
def custom_error(context: Context, payload: Any) -> SqlFragment:
    """`{{ custom_error({'error': 'msg', 'code': 403}) }}`: like error(), Tinybird's dict form."""
    if not state_of(context).analyzing:
        if isinstance(payload, Mapping):
            _raise(payload.get("error", payload.get("message", payload)), payload.get("code", 400))
        _raise(payload, 400)
    return SqlFragment("")
