"""Signed tenant tokens: JWTs (HS256, PyJWT) shaped as Tinybird's, minted with the project's signing key
(`pipeframe token create`) and checked by the HTTP server: which pipes a token may read, the parameter values it
pins (`fixed_params`), its expiry and its rate limit (`limits.rps`, counted per token name by `RateLimiter`)."""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import jwt

from pipeframe.errors import PipeframeError

ALGORITHM = "HS256"
PIPES_READ = "PIPES:READ"
LEEWAY_S = 30  # clock skew allowed between the machine that minted a token and the server (exp, iat, nbf)
MIN_KEY_BYTES = 32  # HS256 keys shorter than its hash are refused (RFC 7518, 3.2)


@dataclass(frozen=True)
class PipeScope:
    """One `PIPES:READ` scope: the pipe a token may read and the parameter values it pins."""

    pipe: str
    fixed_params: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class TenantToken:
    """A verified JWT: its name (who calls, for logs and the rate limit), the pipes it may read and its limit."""

    name: str
    scopes: Mapping[str, PipeScope]
    rps: int | None = None

    def may_read(self, pipe: str) -> bool:
        return pipe in self.scopes

    def fixed_params(self, pipe: str) -> Mapping[str, Any]:
        scope = self.scopes.get(pipe)
        return scope.fixed_params if scope is not None else {}


def looks_signed(secret: str) -> bool:
    """Whether a secret sent by a client is a JWT (three dot-separated parts, a JSON header) rather than a static
    token: only those are checked against the signing key."""
    return secret.startswith("eyJ") and secret.count(".") == 2


def mint(key: str, workspace: str, name: str, scopes: list[PipeScope], expires_in: float,
         rps: int | None = None, now: float | None = None) -> str:
    """A JWT signed with `key` for the project `workspace`, valid for `expires_in` seconds from `now`."""
    issued = int(time.time() if now is None else now)
    payload: dict[str, Any] = {
        "workspace_id": workspace, "name": name, "iat": issued, "exp": issued + math.ceil(expires_in),
        "scopes": [{"type": PIPES_READ, "resource": s.pipe, **({"fixed_params": dict(s.fixed_params)}
                                                               if s.fixed_params else {})} for s in scopes]}
    if rps is not None:
        payload["limits"] = {"rps": rps}
    return jwt.encode(payload, key, algorithm=ALGORITHM)


def verify(key: str | None, workspace: str, secret: str, now: float | None = None) -> TenantToken:
    """The token `secret` carries, once its signature (with `key`), expiry and workspace are checked; a PF831 (bad
    signature or shape, or no signing key configured) or PF832 (expired) 403 otherwise."""
    if not key:
        raise _refused("PF831", "This server checks no signed tokens: it has no signing key.",
                       "Set `signing_key:` in pipeframe.yaml (or PIPEFRAME_SIGNING_KEY) on the server.")
    try:
        # With `now` given (tests), the expiry is checked below against it rather than against the wall clock.
        claims = jwt.decode(secret, key, algorithms=[ALGORITHM], leeway=LEEWAY_S,
                            options={"require": ["exp", "name", "scopes"], "verify_exp": now is None})
    except jwt.ExpiredSignatureError:
        raise _expired() from None
    except (jwt.InvalidTokenError, TypeError, ValueError) as exc:  # a claim of another type included
        raise _refused("PF831", f"The signed token is not valid: {exc}.",
                       "Mint a new one with `pipeframe token create` (the server's signing key signs it).") from None
    if now is not None and _number(claims.get("exp")) <= now:
        raise _expired()
    if claims.get("workspace_id") != workspace:
        raise _refused("PF831", "The signed token was minted for another project.",
                       f"Mint one for `{workspace}` with `pipeframe token create`.")
    return TenantToken(str(claims["name"]), _scopes(claims["scopes"]), _rps(claims.get("limits")))


def _scopes(value: Any) -> dict[str, PipeScope]:
    if not isinstance(value, list):
        raise _refused("PF831", "The signed token's `scopes` is not a list.", "Mint it with `pipeframe token create`.")
    found = {}
    for scope in value:
        if not isinstance(scope, Mapping) or scope.get("type") != PIPES_READ or not isinstance(scope.get("resource"),
                                                                                                str):
            continue  # other scope types grant nothing here
        fixed = scope.get("fixed_params") or {}
        if not isinstance(fixed, Mapping) or any(empty(v) for v in fixed.values()):
            raise _refused("PF831", f"The signed token's `fixed_params` of `{scope['resource']}` is not a mapping "
                           "of values (an empty or null value pins nothing).", "Mint it with `pipeframe token create`.")
        pipe = PipeScope(scope["resource"], dict(fixed))
        if found.get(pipe.pipe, pipe) != pipe:  # the last one won: a scope without pins undid another's
            raise _refused("PF831", f"The signed token names pipe `{pipe.pipe}` in two scopes that fix other "
                           "parameters: which one applies would be a guess.",
                           "Mint it with one scope per pipe (`pipeframe token create`).")
        found[pipe.pipe] = pipe
    return found


def empty(value: Any) -> bool:
    """A fixed parameter value that would pin nothing: a template reads null and "" as a parameter not sent."""
    return value is None or value == "" or (isinstance(value, list) and (not value or any(empty(v) for v in value)))


def _rps(limits: Any) -> int | None:
    rps = limits.get("rps") if isinstance(limits, Mapping) else None
    if rps is None:
        return None
    if isinstance(rps, bool) or not isinstance(rps, int) or rps < 1:
        raise _refused("PF831", "The signed token's `limits.rps` is not a positive whole number.",
                       "Mint it with `pipeframe token create --rps N`.")
    return rps


def _number(value: Any) -> float:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else 0.0


def _expired() -> PipeframeError:
    return _refused("PF832", "The signed token has expired.", "Ask the application that gave it for a new one.")


def _refused(code: str, message: str, hint: str) -> PipeframeError:
    return PipeframeError(code, message, hint, http_status=403)


class RateLimiter:
    """Requests per second per token name, in whole-second windows of `clock()` (injectable for tests): the
    `rps`+1-th request of a name within one second is a PF833 429 with Retry-After, other names are not affected.
    Holds one lock for a dict update only."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self._windows: dict[str, tuple[int, int]] = {}  # name -> (second, requests in it)
        self._lock = threading.Lock()

    def admit(self, name: str, rps: int) -> None:
        now = self.clock()
        second = math.floor(now)
        with self._lock:
            start, count = self._windows.get(name, (second, 0))
            count = count + 1 if start == second else 1
            self._windows[name] = (second, count)
            if len(self._windows) > 100_000:  # names of tokens long gone: forget every window but this second's
                self._windows = {n: w for n, w in self._windows.items() if w[0] == second}
        if count > rps:
            raise PipeframeError("PF833", f"Token `{name}` is over its limit of {rps} requests per second.",
                                 "Retry after the Retry-After seconds, or mint a token with a higher `--rps`.",
                                 http_status=429)
