"""TemplateError: the one error a template raises, with the HTTP status an endpoint answers with.

Codes: PF201 template syntax/runtime, PF202 bad or missing parameter, PF203 bad identifier, PF204 error().
"""

from __future__ import annotations

from typing import Self

from pipeframe.errors import Location, PipeframeError


class TemplateError(PipeframeError):
    """A problem in a template or in the request values it was rendered with."""

    def __init__(
        self,
        code: str,
        message: str,
        hint: str = "",
        location: Location | None = None,
        *,
        http_status: int = 400,
        parameter: str | None = None,
        line: int | None = None,
        col: int | None = None,
    ) -> None:
        super().__init__(code, message, hint, location)
        self.message = message
        self.hint = hint
        self.location = location
        self.http_status = http_status
        self.parameter = parameter
        # Position inside the template text, when known before the datafile location is.
        self.line = line
        self.col = col

    def located(self, location: Location) -> Self:
        """The same error, placed at `location` in its datafile."""
        return type(self)(
            self.code,
            self.message,
            self.hint,
            location,
            http_status=self.http_status,
            parameter=self.parameter,
            line=self.line,
            col=self.col,
        )


class MissingParameterError(TemplateError):
    """PF202 for a request parameter that was not passed (analysis tolerates these)."""


def shown(value: object) -> str:
    """A request value as a message quotes it: repr, cut to 60 characters."""
    text = value if isinstance(value, str) else repr(value)
    if len(text) > 60:
        text = text[:60] + "..."
    return repr(text) if isinstance(value, str) else text


def missing_parameter(name: str | None, *, required: bool) -> MissingParameterError:
    if name is None:
        return MissingParameterError("PF202", "A template function got no value.", "Pass a value or a default.")
    if required:
        return MissingParameterError(
            "PF202", f"Parameter `{name}` is required.", f"Pass {name}=... in the request.", parameter=name
        )
    return MissingParameterError(
        "PF202",
        f"Parameter `{name}` is missing.",
        f"Pass {name}=... in the request, or give the parameter a default in the template.",
        parameter=name,
    )
