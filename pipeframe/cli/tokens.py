"""`pipeframe token create`: mint a signed tenant token (JWT) for the HTTP API (a thin client of
`Project.create_token`)."""

from __future__ import annotations

import json
import re
import secrets
from typing import Any

import click

from pipeframe.cli.common import ENV_OPTION, PROJECT_OPTION, load_project, parse_params, run
from pipeframe.errors import PipeframeError

DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhd]?)\s*$")
UNIT_SECONDS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}


@click.group()
def token() -> None:
    """Signed tenant tokens for the HTTP API.

    \b
    Examples:
      pipeframe token create --pipe top_products --fixed-param org_id=42 --expires-in 1h --rps 10
    """


@token.command()
@click.option("--pipe", "pipes", multiple=True, required=True, metavar="NAME",
              help="An endpoint pipe the token may read (repeat for several).")
@click.option("--fixed-param", "fixed", multiple=True, metavar="NAME=VALUE",
              help="A parameter value the token pins on its pipes: a request cannot send another (repeat for "
                   "several). 42 is a number, true/false booleans, anything else text.")
@click.option("--expires-in", default="1h", show_default=True, metavar="DURATION",
              help="How long the token is valid: 90s, 15m, 1h, 7d.")
@click.option("--rps", type=int, default=None, help="At most this many requests per second (429 beyond).")
@click.option("--name", default=None,
              help="The token's name: who calls, in errors and logs; tokens of one name share their rate limit "
                   "(default: tenant-<8 random hex digits>, a name of its own).")
@click.option("--json", "as_json", is_flag=True, help="Print the token and its claims as JSON.")
@PROJECT_OPTION
@ENV_OPTION
def create(pipes: tuple[str, ...], fixed: tuple[str, ...], expires_in: str, rps: int | None, name: str | None,
           as_json: bool, project_dir: str, env: str | None) -> None:
    """Mint a token that may read only PIPEs, with fixed parameters, an expiry and a rate limit.

    Signed (HS256) with pipeframe.yaml `signing_key:` or PIPEFRAME_SIGNING_KEY: the server must have the same key.
    The token goes to a client (a browser): `Authorization: Bearer <token>` or `?token=<token>`.

    \b
    Examples:
      pipeframe token create --pipe top_products --fixed-param org_id=42 --expires-in 1h
      curl -H "Authorization: Bearer $(pipeframe token create --pipe top_products --fixed-param org_id=42)" \\
        'http://127.0.0.1:7181/v0/pipes/top_products.json'
    """

    def body() -> int:
        params = {k: json_scalar(v) for k, v in parse_params(fixed, "--fixed-param").items()}
        seconds = duration(expires_in)
        named = name or f"tenant-{secrets.token_hex(4)}"
        minted = load_project(project_dir, env).create_token(list(pipes), params, seconds, rps, named)
        if as_json:
            click.echo(json.dumps({"token": minted, "name": named, "pipes": list(pipes), "fixed_params": params,
                                   "expires_in": seconds, "rps": rps}))
        else:
            click.echo(minted)
        return 0

    run(body)


def json_scalar(text: str) -> Any:
    """A --fixed-param value: a JSON number or boolean as such, anything else as the text given."""
    try:
        value = json.loads(text)
    except ValueError:
        return text
    return value if isinstance(value, int | float | bool) else text


def duration(text: str) -> float:
    """`90s`, `15m`, `1h`, `7d` (or plain seconds) in seconds; PF834 for anything else."""
    found = DURATION.match(text)
    if not found or float(found.group(1)) <= 0:
        raise PipeframeError("PF834", f"`--expires-in {text}` is not a duration.",
                             "Write a positive number with s, m, h or d, e.g. --expires-in 1h.")
    return float(found.group(1)) * UNIT_SECONDS[found.group(2)]


COMMANDS = [token]
