"""Signed tenant tokens without a JVM: `pipeframe token create` mints Tinybird-shaped JWTs, and a server's checks
refuse expired, forged and foreign ones, count requests per token name against `limits.rps` on an injected clock,
and turn fixed parameters into the values a query string would carry. (Served: tests/spark/test_server.py and, as
properties, tests/spark/test_token_properties.py.)"""

from __future__ import annotations

import json
import time
from pathlib import Path

import jwt
import pytest
from click.testing import CliRunner

from pipeframe.cli import main
from pipeframe.config import load_config
from pipeframe.errors import PipeframeError
from pipeframe.server.auth import Signed, authenticate
from pipeframe.server.service import query_value
from pipeframe.tokens import PipeScope, RateLimiter, TenantToken, mint, verify
from tests.conftest import write_project

KEY = "unit-test-signing-key-of-32-bytes-x"
SCOPES = [PipeScope("org_orders", {"org_id": 42})]


@pytest.fixture
def shop(tmp_path: Path) -> Path:
    return write_project(tmp_path / "shop", {
        "pipeframe.yaml": "name: shop\n",
        "datasources/orders.datasource": "SCHEMA >\n    `org_id` INT,\n    `item` STRING\n",
        "pipes/org_orders.pipe": "NODE endpoint\nSQL >\n    %\n    SELECT item FROM orders\n"
                                 "    WHERE org_id = {{ Int(org_id, required=True) }}\n"
                                 "    {% if defined(region) %} AND region = {{ String(region) }} {% end %}\n"
                                 "TYPE endpoint\n",
    })


def test_token_create_mints_a_tinybird_shaped_jwt(shop: Path) -> None:
    result = CliRunner().invoke(main, ["token", "create", "--pipe", "org_orders", "--fixed-param", "org_id=42",
                                       "--fixed-param", "region=eu", "--expires-in", "1h", "--rps", "5",
                                       "--name", "acme", "-p", str(shop)], env={"PIPEFRAME_SIGNING_KEY": KEY})
    assert result.exit_code == 0, result.output
    token = result.output.strip()
    claims = jwt.decode(token, KEY, algorithms=["HS256"])
    assert jwt.get_unverified_header(token)["alg"] == "HS256"
    assert claims["exp"] - claims["iat"] == 3600
    assert {k: v for k, v in claims.items() if k not in ("exp", "iat")} == {
        "workspace_id": "shop", "name": "acme", "limits": {"rps": 5},
        "scopes": [{"type": "PIPES:READ", "resource": "org_orders", "fixed_params": {"org_id": 42, "region": "eu"}}]}
    checked = verify(KEY, "shop", token)
    assert (checked.name, checked.rps, dict(checked.fixed_params("org_orders"))) == ("acme", 5, {"org_id": 42,
                                                                                                 "region": "eu"})


@pytest.mark.parametrize(("args", "env", "code"), [
    (["--pipe", "org_orders"], {}, "PF834"),  # no signing key
    (["--pipe", "no_such"], {"PIPEFRAME_SIGNING_KEY": KEY}, "PF801"),
    (["--pipe", "org_orders", "--expires-in", "soon"], {"PIPEFRAME_SIGNING_KEY": KEY}, "PF834"),
    (["--pipe", "org_orders", "--rps", "0"], {"PIPEFRAME_SIGNING_KEY": KEY}, "PF834"),
    (["--pipe", "org_orders", "--fixed-param", "org_id"], {"PIPEFRAME_SIGNING_KEY": KEY}, "PF805"),
    # A name the pipe does not take (a typo, another case) or no value would pin nothing: the tenant's own wins.
    (["--pipe", "org_orders", "--fixed-param", "orgid=42"], {"PIPEFRAME_SIGNING_KEY": KEY}, "PF834"),
    (["--pipe", "org_orders", "--fixed-param", "ORG_ID=42"], {"PIPEFRAME_SIGNING_KEY": KEY}, "PF834"),
    (["--pipe", "org_orders", "--fixed-param", "org_id="], {"PIPEFRAME_SIGNING_KEY": KEY}, "PF834"),
    (["--pipe", "org_orders"], {"PIPEFRAME_SIGNING_KEY": "short-key"}, "PF834"),
])
def test_token_create_refuses_what_it_cannot_sign(shop: Path, args: list[str], env: dict, code: str) -> None:
    result = CliRunner().invoke(main, ["token", "create", *args, "-p", str(shop)],
                                env={"PIPEFRAME_SIGNING_KEY": "", **env})
    assert result.exit_code == 1 and code in result.output, result.output
    assert "Traceback" not in result.output


def test_expired_forged_and_foreign_tokens_are_refused_with_403() -> None:
    token = mint(KEY, "shop", "t", SCOPES, expires_in=60, now=1_000_000)
    assert verify(KEY, "shop", token, now=1_000_059).may_read("org_orders")
    cases = [(KEY, "shop", token, 1_000_060, "PF832"),  # exp is exclusive
             ("another-signing-key-of-32-bytes-xx", "shop", token, 1_000_000, "PF831"),
             (KEY, "other", token, 1_000_000, "PF831"),
             (None, "shop", token, 1_000_000, "PF831"),  # a server without a signing key
             (KEY, "shop", "eyJ.not.jwt", 1_000_000, "PF831")]
    for key, workspace, secret, now, code in cases:
        with pytest.raises(PipeframeError) as raised:
            verify(key, workspace, secret, now=now)
        assert (raised.value.code, raised.value.http_status) == (code, 403), (key, workspace, now)
    unsigned = jwt.encode({"workspace_id": "shop", "name": "t", "exp": 2_000_000, "scopes": []}, None,
                          algorithm="none")
    with pytest.raises(PipeframeError, match="PF831"):
        verify(KEY, "shop", unsigned, now=1_000_000)
    bad_rps = jwt.encode({"workspace_id": "shop", "name": "t", "exp": 2_000_000, "scopes": [],
                          "limits": {"rps": "many"}}, KEY, algorithm="HS256")
    with pytest.raises(PipeframeError, match="PF831"):
        verify(KEY, "shop", bad_rps, now=1_000_000)


def test_the_rate_limit_counts_per_token_name_within_one_second() -> None:
    now = [50.5]
    limiter = RateLimiter(clock=lambda: now[0])
    for _ in range(3):
        limiter.admit("acme", 3)
    with pytest.raises(PipeframeError) as raised:
        limiter.admit("acme", 3)
    assert (raised.value.code, raised.value.http_status) == ("PF833", 429)
    limiter.admit("globex", 1)  # another tenant is not affected
    now[0] = 50.99
    with pytest.raises(PipeframeError, match="PF833"):
        limiter.admit("acme", 3)
    now[0] = 51.0
    limiter.admit("acme", 3)


def test_static_tokens_and_signed_tokens_side_by_side() -> None:
    static = {"admin": "a-secret", "reader": "r-secret"}
    signed = Signed(KEY, "shop")
    token = mint(KEY, "shop", "acme", SCOPES, 60)
    assert authenticate(static, "r-secret", signed) == "reader"
    assert isinstance(authenticate(static, token, signed), TenantToken)
    assert isinstance(authenticate({}, token, signed), TenantToken)  # a signing key alone: tenants only
    for missing in (None, "", "not-a-jwt"):  # leaving the token out must not read every tenant's rows
        with pytest.raises(PipeframeError, match="PF811" if not missing else "PF812"):
            authenticate({}, missing, signed)
    assert authenticate({}, None, Signed(None, "shop")) is None  # neither tokens nor a key: open
    shaped = "eyJstatic.secret.value"  # a static secret shaped like a JWT is still that static token
    assert authenticate({"svc": shaped}, shaped, signed) == "svc"
    with pytest.raises(PipeframeError, match="PF812"):  # without a signing key a JWT is just an unknown secret
        authenticate(static, token, Signed(None, "shop"))


def test_a_token_fixing_nothing_a_bad_claim_or_a_skewed_clock_is_handled() -> None:
    for blank in ("", None, []):
        forged_by_another_library = jwt.encode({"workspace_id": "shop", "name": "acme", "exp": 2**31, "scopes": [
            {"type": "PIPES:READ", "resource": "org_orders", "fixed_params": {"org_id": blank}}]}, KEY)
        with pytest.raises(PipeframeError, match="PF831"):
            verify(KEY, "shop", forged_by_another_library)
    def signed_raw(claims: dict) -> str:  # as another JWT library may sign them, claim types unchecked
        return jwt.PyJWS().encode(json.dumps(claims).encode(), KEY, algorithm="HS256")

    for bad in ({"exp": "soon"}, {"exp": [1]}, {"iat": "now"}, {"scopes": "org_orders"}):
        with pytest.raises(PipeframeError, match="PF831"):  # a claim of another type: 403, not a 500
            verify(KEY, "shop", signed_raw({"workspace_id": "shop", "name": "a", "exp": 2**31, "scopes": [], **bad}))
    ahead = mint(KEY, "shop", "acme", SCOPES, 60, now=time.time() + 10)  # minted on a clock 10 s ahead
    assert verify(KEY, "shop", ahead).name == "acme"


def test_a_pipe_named_in_two_scopes_that_pin_otherwise_is_refused() -> None:
    """Scopes were read into a dict by pipe: the last one won, so a second scope of the pipe without fixed params
    (or with another tenant's) undid the first one's pins. Found by tests/spark/test_token_properties.py."""
    pinned = {"type": "PIPES:READ", "resource": "org_orders", "fixed_params": {"org_id": 42}}
    for again in ({"type": "PIPES:READ", "resource": "org_orders"}, {**pinned, "fixed_params": {}},
                  {**pinned, "fixed_params": {"org_id": 7}}, {**pinned, "fixed_params": {"org_id": 42, "r": "eu"}}):
        for scopes in ([pinned, again], [again, pinned]):
            token = jwt.encode({"workspace_id": "shop", "name": "acme", "exp": 2**31, "scopes": scopes}, KEY)
            with pytest.raises(PipeframeError, match="two scopes") as raised:
                verify(KEY, "shop", token)
            assert (raised.value.code, raised.value.http_status) == ("PF831", 403)
    same = jwt.encode({"workspace_id": "shop", "name": "acme", "exp": 2**31, "scopes": [pinned, dict(pinned)]}, KEY)
    assert dict(verify(KEY, "shop", same).fixed_params("org_orders")) == {"org_id": 42}  # the same pins twice


def test_fixed_params_are_sent_as_a_query_string_carries_them() -> None:
    assert [query_value(v) for v in (42, 4.5, True, False, "eu", None, [1, "b"])] == [
        "42", "4.5", "true", "false", "eu", "", ["1", "b"]]


def test_the_signing_key_comes_from_the_config_or_the_environment(tmp_path: Path) -> None:
    write_project(tmp_path, {"pipeframe.yaml": "signing_key: ${JWT_KEY}\n"})
    assert load_config(tmp_path, environ={"JWT_KEY": "from-file"}).signing_key == "from-file"
    assert load_config(tmp_path, environ={"JWT_KEY": "x", "PIPEFRAME_SIGNING_KEY": "from-env"}).signing_key == \
        "from-env"
    assert "from-file" not in repr(load_config(tmp_path, environ={"JWT_KEY": "from-file"}))
    assert load_config(tmp_path / "none", environ={}).signing_key is None
