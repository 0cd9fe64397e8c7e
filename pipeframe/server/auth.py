"""Tokens: who is calling (a secret from pipeframe.yaml `tokens:`), what each token may read or append to, and
secrets kept out of the access log."""

from __future__ import annotations

import hmac
import logging
import re
from collections.abc import Mapping
from typing import TYPE_CHECKING

from pipeframe.errors import PipeframeError

if TYPE_CHECKING:
    from fastapi import Request

    from pipeframe.compiler.graph import ResourceKey
    from pipeframe.datafiles.model import TokenScope
    from pipeframe.plan.snapshot import DeployedResource

ADMIN_TOKEN = "admin"  # the token of this name in pipeframe.yaml may do everything, views API included
TOKEN_IN_QUERY = re.compile(r"([?&]token=)[^&\s]*")


def token_of(request: Request) -> str | None:
    """The secret sent as `Authorization: Bearer <secret>`, else as `?token=<secret>`."""
    scheme, _, value = request.headers.get("authorization", "").partition(" ")
    if scheme.lower() == "bearer" and value.strip():
        return value.strip()
    return request.query_params.get("token") or None


def authenticate(tokens: Mapping[str, str], secret: str | None) -> str | None:
    """The name of the token whose secret this is; None when no tokens are configured (everything is open)."""
    if not tokens:
        return None
    if not secret:
        raise PipeframeError("PF811", "This server needs a token.",
                             "Send `Authorization: Bearer <token>` or `?token=<token>` with a secret from "
                             "pipeframe.yaml `tokens:`.", http_status=401)
    found = None
    for name, known in tokens.items():  # every secret is compared, in constant time
        if hmac.compare_digest(known.encode(), secret.encode()):
            found = name
    if found is None:
        raise PipeframeError("PF812", "The token is not valid.",
                             "Use a secret listed in pipeframe.yaml `tokens:`.", http_status=401)
    return found


def may(caller: str | None, resource: DeployedResource | None, scope: TokenScope) -> bool:
    """Whether the token may READ a pipe or APPEND to a datasource: it is declared there with that scope."""
    if caller is None or caller == ADMIN_TOKEN:
        return True
    return resource is not None and (caller, scope) in resource.state.tokens


def authorize(caller: str | None, key: ResourceKey, resource: DeployedResource | None, scope: TokenScope) -> None:
    """A PF813 (403) unless the token may use `resource` (deployed as `key`) with `scope`."""
    kind, name = key.kind, key.name
    if may(caller, resource, scope):
        return
    verb, file = ("read", f"pipes/{name}.pipe") if scope == "READ" else ("append to", f"{name}.datasource")
    raise PipeframeError("PF813", f"Token `{caller}` may not {verb} {kind} `{name}`.",
                         f'Declare `TOKEN "{caller}" {scope}` in {file} and deploy, or use a token declared '
                         "there.", http_status=403)


def require_admin(caller: str | None) -> None:
    """A PF813 (403) unless the caller is the admin token (or no tokens are configured)."""
    if caller is not None and caller != ADMIN_TOKEN:
        raise PipeframeError("PF813", f"Token `{caller}` may not use the views API.",
                             f"Use the `{ADMIN_TOKEN}` token of pipeframe.yaml `tokens:`.", http_status=403)


class HideTokens(logging.Filter):
    """Access-log lines must not carry `?token=<secret>`."""

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.args, tuple):
            record.args = tuple(TOKEN_IN_QUERY.sub(r"\1***", a) if isinstance(a, str) else a for a in record.args)
        return True
