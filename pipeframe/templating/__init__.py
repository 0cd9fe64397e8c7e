"""Templated SQL: a Jinja sandbox with SQL-safe output, Tinybird's typed parameters, analysis rendering.

render() turns a template and request values into SQL; analyze() finds the parameters without a request.
"""

from pipeframe.templating.errors import TemplateError
from pipeframe.templating.parameters import Parameter
from pipeframe.templating.render import Analysis, analyze, is_templated, render

__all__ = ["Analysis", "Parameter", "TemplateError", "analyze", "is_templated", "render"]
