"""The Jinja sandbox templates run in: unknown names become request parameters, every `{{ }}` a literal.

Also guards the sandbox against resource bombs (`'x' * 10**9`, `2 ** 10**6`) and caches compiled templates.
"""

from __future__ import annotations

import hashlib
import marshal
import operator
import os
import re
import sys
from functools import lru_cache
from pathlib import Path
from typing import Any

import jinja2
from jinja2 import StrictUndefined, Template
from jinja2.compiler import CodeGenerator
from jinja2.exceptions import SecurityError
from jinja2.runtime import Context, Macro, missing
from jinja2.sandbox import SandboxedEnvironment

from pipeframe.templating.blocks import close_end_tags
from pipeframe.templating.control import custom_error, defined, error
from pipeframe.templating.errors import TemplateError
from pipeframe.templating.identifiers import column, columns, sql_and
from pipeframe.templating.literals import SqlFragment, ValueOperators, sql_literal
from pipeframe.templating.parameters import STATE_KEY, MissingParam, ParamRef, RenderState
from pipeframe.templating.typed import TYPED_FUNCTIONS

MAX_SEQUENCE = 1_000_000  # longest string/list `*` may build
MAX_EXPONENT = 1_000
_FORMAT_WIDTH = re.compile(r"%[-+ #0]*(?:\*|[0-9]{5,})|%[-+ #0]*[0-9]*\.(?:\*|[0-9]{5,})")
_BINOPS = {"*": operator.mul, "**": operator.pow, "%": operator.mod}
FUNCTIONS = {
    **TYPED_FUNCTIONS,
    "defined": defined,
    "column": column,
    "columns": columns,
    "sql_and": sql_and,
    "error": error,
    "custom_error": custom_error,
}


class ParameterContext(Context):
    """Resolves a name nobody defined to the request parameter of that name."""

    def resolve_or_missing(self, key: str) -> Any:
        value = super().resolve_or_missing(key)
        if value is missing:
            state = self.parent.get(STATE_KEY)
            if isinstance(state, RenderState):
                return state.ref(key)
        return value


class TrustedBlockCodeGenerator(CodeGenerator):
    """`{% set x %}...{% endset %}` captures rendered template output, so it is SQL, not a value to quote."""

    def write(self, x: str) -> None:
        if x == " = (Markup if context.eval_ctx.autoescape else identity)(":
            x = " = environment.trusted_sql("
        super().write(x)


def finalize(value: Any) -> str:
    """Every `{{ expr }}` passes here: parameters and plain values become literals, SqlFragment stays SQL."""
    if isinstance(value, (ParamRef, MissingParam)):
        return value.render_bare()
    return sql_literal(value)


def _plain(value: Any) -> Any:
    return value.operand() if isinstance(value, (ValueOperators, MissingParam)) else value


class SqlSandbox(SandboxedEnvironment):
    """A SandboxedEnvironment whose outputs are SQL literals and whose unknown names are parameters."""

    context_class = ParameterContext
    code_generator_class = TrustedBlockCodeGenerator
    intercepted_binops = frozenset(_BINOPS)

    @staticmethod
    def trusted_sql(text: str) -> SqlFragment:
        return SqlFragment(text)

    def call_binop(self, context: Context, operator: str, left: Any, right: Any) -> Any:
        left, right = _plain(left), _plain(right)
        if operator == "*":
            for sequence, count in ((left, right), (right, left)):
                sized = isinstance(sequence, (str, list, tuple)) and isinstance(count, int)
                if sized and len(sequence) * count > MAX_SEQUENCE:
                    raise SecurityError(f"`*` would build a sequence longer than {MAX_SEQUENCE}")
        elif operator == "**":
            if isinstance(right, (int, float)) and abs(right) > MAX_EXPONENT:
                raise SecurityError(f"`**` exponents are limited to {MAX_EXPONENT}")
        elif isinstance(left, str) and _FORMAT_WIDTH.search(left):
            raise SecurityError("`%` formatting with a huge or `*` width is not allowed")
        return _BINOPS[operator](left, right)

    def getattr(self, obj: Any, attribute: str) -> Any:
        return super().getattr(_plain(obj), attribute)

    def getitem(self, obj: Any, argument: Any) -> Any:
        return super().getitem(_plain(obj), _plain(argument))

    def call(self, context: Context, obj: Any, /, *args: Any, **kwargs: Any) -> Any:
        if isinstance(obj, (ParamRef, MissingParam)):
            raise TemplateError(
                "PF201",
                f"`{obj.name}` is not a template function.",
                "Use the template functions: " + ", ".join(sorted(FUNCTIONS)) + ".",
            )
        if isinstance(obj, Macro):
            # A macro's output is rendered template text, already made of literals.
            return SqlFragment(super().call(context, obj, *args, **kwargs))
        if not getattr(obj, "takes_param_refs", False):
            args = tuple(_plain(arg) for arg in args)
            kwargs = {key: _plain(value) for key, value in kwargs.items()}
        return super().call(context, obj, *args, **kwargs)


def _environment() -> SqlSandbox:
    env = SqlSandbox(
        undefined=StrictUndefined,
        finalize=finalize,
        autoescape=False,
        keep_trailing_newline=True,
        auto_reload=False,
        cache_size=0,
    )
    env.globals.pop("lipsum", None)
    env.globals.update(FUNCTIONS)
    return env


ENVIRONMENT = _environment()


def _cache_dir() -> Path | None:
    """Where compiled templates are kept between runs (like ruff's or mypy's cache); None disables it."""
    if os.environ.get("PIPEFRAME_NO_CACHE"):
        return None
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "pipeframe" / "templates"


# Compiled code depends on Jinja, Python and this module's code generator, so all three are in the key.
CACHE_KEY = f"{jinja2.__version__}:{sys.version_info[:2]}:{hashlib.sha256(Path(__file__).read_bytes()).hexdigest()}"


@lru_cache(maxsize=4096)
def compile_template(source: str) -> Template:
    """The compiled template for a source text (`%` line already blanked); raises TemplateSyntaxError.

    Jinja's compile step dominates `pipeframe check` on large projects, so the code objects are kept on
    disk keyed by a hash of the source and the Jinja/Python versions (the same idea as Jinja's bytecode
    cache, which `from_string` templates do not use)."""
    text = close_end_tags(source)
    folder = _cache_dir()
    path = None
    if folder is not None:
        digest = hashlib.sha256(f"{CACHE_KEY}\0{text}".encode()).hexdigest()
        path = folder / digest[:2] / f"{digest}.bin"
        try:
            code = marshal.loads(path.read_bytes())
            return ENVIRONMENT.template_class.from_code(ENVIRONMENT, code, ENVIRONMENT.make_globals(None))
        except (OSError, ValueError, EOFError, TypeError):
            pass
    code = ENVIRONMENT.compile(text)
    if path is not None:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_suffix(f".{os.getpid()}.tmp")
            tmp.write_bytes(marshal.dumps(code))
            os.replace(tmp, path)  # atomic: concurrent runs never read a half-written file
        except OSError:
            pass  # a read-only home directory only costs speed
    return ENVIRONMENT.template_class.from_code(ENVIRONMENT, code, ENVIRONMENT.make_globals(None))


def render_with(template: Template, state: RenderState, variables: dict[str, Any]) -> str:
    """Render once: project variables as trusted SQL (strings) or literals, unknown names as parameters."""
    scope: dict[str, Any] = {
        name: SqlFragment(value) if isinstance(value, str) else value for name, value in variables.items()
    }
    scope[STATE_KEY] = state
    return template.render(scope)
