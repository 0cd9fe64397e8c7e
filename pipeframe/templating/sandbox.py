"""The Jinja sandbox templates run in: unknown names become request parameters, every `{{ }}` a literal.

Also guards the sandbox against resource bombs (`'x' * 10**9`, `2 ** 10**6`) and compiles each template shape once.
"""

from __future__ import annotations

import operator
import re
from functools import lru_cache
from types import CodeType
from typing import Any

from jinja2 import StrictUndefined, Template
from jinja2.compiler import CodeGenerator
from jinja2.exceptions import SecurityError, TemplateSyntaxError
from jinja2.lexer import TokenStream
from jinja2.parser import Parser
from jinja2.runtime import Context, Macro, missing
from jinja2.sandbox import SandboxedEnvironment

from pipeframe.templating.blocks import close_end_tags
from pipeframe.templating.control import custom_error, defined, error
from pipeframe.templating.dates import day_diff
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
    "day_diff": day_diff,
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


@lru_cache(maxsize=4096)
def compile_template(source: str) -> Template:
    """The compiled template for a source text (`%` line already blanked); raises TemplateSyntaxError.

    Templates of one shape share their compile (`_compile`); across runs, the check cache (`compiler/cache.py`)
    keeps what rendering found, so an unchanged template is not compiled at all."""
    code = _compile(close_end_tags(source))
    return ENVIRONMENT.template_class.from_code(ENVIRONMENT, code, ENVIRONMENT.make_globals(None))


_SHAPES: dict[tuple[tuple[int, str, str], ...], CodeType] = {}  # a template's tokens, text as markers -> code


def _compile(text: str) -> CodeType:
    """`ENVIRONMENT.compile(text)`, done once per template shape: the same endpoint over another table differs only
    in its plain text, so the text becomes numbered markers in the tokens Jinja parses and compiles, and goes back
    into the compiled code's constants. Line numbers, and so the lines of template errors, are `text`'s own."""
    lexer = ENVIRONMENT.lexer
    texts: list[str] = []
    shape: list[tuple[int, str, str]] = []
    try:
        for lineno, kind, value in lexer.tokeniter(ENVIRONMENT.preprocess(text), None):
            if kind == "data" and value:
                texts.append(next(lexer.wrap([(lineno, kind, value)])).value)  # newlines normalized, as parsed
                value = f"\x00{len(texts) - 1}\x00"
            shape.append((lineno, kind, value))
        key = tuple(shape)
        code = _SHAPES.get(key)
        if code is None:
            parser = Parser(ENVIRONMENT, "")
            parser.stream = TokenStream(lexer.wrap(key), None, None)  # what Environment._parse would tokenize
            python = ENVIRONMENT._generate(parser.parse(), None, None)
            if "\x00" in text or python.count("\\x00") != 2 * len(texts):  # a NUL of its own: no sharing
                return ENVIRONMENT.compile(text)  # type: ignore[return-value]
            if len(_SHAPES) >= 4096:
                _SHAPES.clear()
            code = _SHAPES[key] = ENVIRONMENT._compile(python, "<template>")
    except TemplateSyntaxError:  # reported as Jinja reports it, lexing and parsing in step
        return ENVIRONMENT.compile(text)  # type: ignore[return-value]
    return _with_texts(code, texts) if texts else code


_TEXT_MARKER = re.compile("\x00([0-9]+)\x00")


def _with_texts(value: Any, texts: list[str]) -> Any:
    """A compiled shape's constants (nested code and tuples included) with the markers replaced by their text."""
    if isinstance(value, str):
        return _TEXT_MARKER.sub(lambda m: texts[int(m.group(1))], value) if "\x00" in value else value
    if isinstance(value, tuple):
        return tuple(_with_texts(item, texts) for item in value)
    if isinstance(value, CodeType):
        return value.replace(co_consts=_with_texts(value.co_consts, texts))
    return value


def render_with(template: Template, state: RenderState, variables: dict[str, Any]) -> str:
    """Render once: project variables as trusted SQL (strings) or literals, unknown names as parameters."""
    scope: dict[str, Any] = {
        name: SqlFragment(value) if isinstance(value, str) else value for name, value in variables.items()
    }
    scope[STATE_KEY] = state
    return template.render(scope)
