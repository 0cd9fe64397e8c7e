"""The request parameters an endpoint declares, as plain data: what `analyze()` finds in a template and what the
HTTP API validates against. No Jinja here, so a compiled project read back from the check cache loads without it."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date
from typing import Any


@dataclass(frozen=True)
class Parameter:
    """A request parameter an endpoint accepts, as its template declares it."""

    name: str
    type: str
    default: Any = None
    description: str = ""
    required: bool = False
    enum: tuple = ()
    item_type: str | None = None

    def to_json(self) -> dict:
        return {
            "name": self.name,
            "type": self.type,
            "default": _jsonable(self.default),
            "description": self.description,
            "required": self.required,
            "enum": [_jsonable(item) for item in self.enum],
            "item_type": self.item_type,
        }


def _jsonable(value: Any) -> Any:
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (list, tuple)):
        return [_jsonable(item) for item in value]
    if isinstance(value, date):
        return value.isoformat()
    return str(value)
