"""Tokens: who is calling (a secret from pipeframe.yaml `tokens:`, or a signed tenant token: pipeframe/tokens.py),
what each token may read or append to, and secrets kept out of the access log."""

from __future__ import annotations

import hmac
import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING
from urllib.parse import parse_qsl, urlencode

from pipeframe.errors import PipeframeError
from pipeframe.tokens import RateLimiter, TenantToken, looks_signed, verify

if TYPE_CHECKING:
    from fastapi import Request

    from pipeframe.compiler.graph import ResourceKey
    from pipeframe.datafiles.model import TokenScope
    from pipeframe.plan.snapshot import DeployedResource

# Who calls: a static token's name, a signed tenant token, or None when no tokens are configured (everything open).
Caller = str | TenantToken | None
ADMIN_TOKEN = "admin"  # the token of this name in pipeframe.yaml may do everything, views API included


def token_of(request: Request) -> str | None:
    """The secret sent as `Authorization: Bearer <secret>`, else as `?token=<secret>`."""
    scheme, _, value = request.headers.get("authorization", "").partition(" ")
    if scheme.lower() == "bearer" and value.strip():
        return value.strip()
    return request.query_params.get("token") or None


def authenticate(tokens: Mapping[str, str], secret: str | None, signed: Signed | None = None) -> Caller:
    """Who sends `secret`: the name of the static token whose secret it is (static secrets first, each compared in
    constant time, so one shaped like a JWT still works), else the signed token it is (checked against `signed`'s
    key and counted against its rate limit). None only when the server has neither static tokens nor a signing
    key (everything is open): with a signing key alone, a request without a valid token is refused, or a tenant
    would read every tenant's rows by leaving its token out."""
    if not enforced(tokens, signed.key if signed is not None else None):
        return None
    if not secret:
        raise PipeframeError("PF811", "This server needs a token.",
                             "Send `Authorization: Bearer <token>` or `?token=<token>` with a secret from "
                             "pipeframe.yaml `tokens:` or a signed token.", http_status=401)
    found = None
    for name, known in tokens.items():  # every secret is compared, in constant time
        if hmac.compare_digest(known.encode(), secret.encode()):
            found = name
    if found is not None:
        return found
    if signed is not None and signed.key and looks_signed(secret):
        return signed.check(secret)
    raise PipeframeError("PF812", "The token is not valid.",
                         "Use a secret listed in pipeframe.yaml `tokens:`, or a token signed with the server's "
                         "signing key.", http_status=401)


def enforced(tokens: Mapping[str, str], signing_key: str | None) -> bool:
    """Whether the server asks every request for a token: it has static tokens or a signing key."""
    return bool(tokens) or bool(signing_key)


class Signed:
    """The signed tokens a server accepts: those of its project (`workspace`) signed with `key`, each within its
    rate limit (one `RateLimiter` per server)."""

    def __init__(self, key: str | None, workspace: str, limiter: RateLimiter | None = None) -> None:
        self.key = key
        self.workspace = workspace
        self.limiter = limiter or RateLimiter()

    def check(self, secret: str) -> TenantToken:
        token = verify(self.key, self.workspace, secret)
        if token.rps is not None:
            self.limiter.admit(token.name, token.rps)
        return token


def caller_name(caller: Caller) -> str | None:
    return caller.name if isinstance(caller, TenantToken) else caller


def may(caller: Caller, resource: DeployedResource | None, scope: TokenScope) -> bool:
    """Whether the token may READ a pipe or APPEND to a datasource: it is declared there with that scope (a signed
    token: the pipe is one of its `PIPES:READ` scopes)."""
    if isinstance(caller, TenantToken):
        return scope == "READ" and resource is not None and caller.may_read(resource.state.name)
    if caller is None or caller == ADMIN_TOKEN:
        return True
    return resource is not None and (caller, scope) in resource.state.tokens


def authorize(caller: Caller, key: ResourceKey, resource: DeployedResource | None, scope: TokenScope) -> None:
    """A PF813 (403) unless the token may use `resource` (deployed as `key`) with `scope`."""
    kind, name = key.kind, key.name
    if may(caller, resource, scope):
        return
    verb, file = ("read", f"pipes/{name}.pipe") if scope == "READ" else ("append to", f"{name}.datasource")
    if isinstance(caller, TenantToken):
        raise PipeframeError("PF813", f"Signed token `{caller.name}` may not {verb} {kind} `{name}`.",
                             f"Mint a token with `--pipe {name}` (signed tokens read pipes only).", http_status=403)
    raise PipeframeError("PF813", f"Token `{caller}` may not {verb} {kind} `{name}`.",
                         f'Declare `TOKEN "{caller}" {scope}` in {file} and deploy, or use a token declared '
                         "there.", http_status=403)


def require_admin(caller: Caller, what: str = "the views API") -> None:
    """A PF813 (403) unless the caller is the admin token (or no tokens are configured)."""
    if caller is not None and caller != ADMIN_TOKEN:
        raise PipeframeError("PF813", f"Token `{caller_name(caller)}` may not use {what}.",
                             f"Use the `{ADMIN_TOKEN}` token of pipeframe.yaml `tokens:`.", http_status=403)


def hidden(text: str) -> str:
    """A URL (or a log line) with the value of its `token` parameter hidden, however the name is spelled in the query
    (`%74oken=` is `token=` to the server too)."""
    path, mark, query = text.partition("?")
    if not mark:
        return text
    query, space, rest = query.partition(" ")
    if "token" not in query and "%" not in query:  # no name in it reads `token` (every access-log line comes here)
        return text
    items = parse_qsl(query, keep_blank_values=True)
    if not any(key == "token" for key, _ in items):
        return text
    masked = urlencode([(key, "***" if key == "token" else value) for key, value in items], safe="*")
    return f"{path}?{masked}{space}{rest}"


class HideTokens(logging.Filter):
    """Access-log lines must not carry `?token=<secret>`."""

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.args, tuple):
            record.args = tuple(hidden(a) if isinstance(a, str) else a for a in record.args)
        return True
