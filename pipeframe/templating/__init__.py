"""Templated SQL: a Jinja sandbox with SQL-safe output, Tinybird's typed parameters, analysis rendering.

render() turns a template and request values into SQL; analyze() finds the parameters without a request. Jinja is
loaded on their first use, not by `import pipeframe.templating`: reading a compiled project needs only Parameter.
"""

from typing import TYPE_CHECKING

from pipeframe.templating.declared import Parameter
from pipeframe.templating.errors import TemplateError

if TYPE_CHECKING:
    from pipeframe.templating.rendering import Analysis, analyze, is_templated, render, trace

__all__ = ["Analysis", "Parameter", "TemplateError", "analyze", "is_templated", "render", "trace"]


def __getattr__(name: str) -> object:
    if name in ("Analysis", "analyze", "is_templated", "render", "trace"):
        from pipeframe.templating import rendering

        return getattr(rendering, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
