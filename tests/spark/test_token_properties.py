"""Properties of signed tenant tokens, served by the real HTTP server over real Spark + Delta (issue 37).

Hypothesis draws tenants, token shapes (the pipes a token may read, what it pins on each and as which JSON type,
scopes of other types, a pipe named twice, a misspelled pin, its expiry, limit and name, how it is sent) and the
parameters an attacker sends (the pinned name in other cases, with spaces, percent-encoded, repeated, beside unknown
ones and `q`, the pipe's name percent-encoded or in capitals), and checks that:
- a valid token answers exactly its tenant's rows for the pipe's other parameters (recomputed from the rows loaded
  up front), whatever the request sends; a pipe outside its scopes is a 403 PF813; the same parameters as a JSON
  body are not a route (POST: 405), so the query string is the only way in;
- a token naming a pipe in two scopes with other pins is refused (403 PF831): the last scope used to win, so one
  without `fixed_params` undid the other's pins and the tenant chose `org_id` (found by this module);
- an expired (past the 30 s leeway), forged, tampered, unsigned, other algorithm's or other project's token is a
  403 (PF832 / PF831) and answers no rows;
- a burst beyond `limits.rps` gets 429 PF833 with Retry-After past exactly `rps` requests, while another token's
  requests in the same second all succeed. The server's RateLimiter reads a clock this module freezes and moves
  (`clock`): every request of an example falls in one whole-second window, whatever the machine's speed.

One deployed project and one server (tests/spark/conftest.py) serve the module; nothing writes after the fixtures.
Examples are derandomized, without an example database: CI runs the same ones every time.
"""

from __future__ import annotations

import csv
import io
import itertools
import json
import math
import random
import time
from collections.abc import Iterator
from urllib.parse import quote, unquote_plus

import httpx
import jwt
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from pipeframe.project import Project
from pipeframe.server import RunningServer
from pipeframe.tokens import LEEWAY_S, PIPES_READ
from tests.spark.conftest import deployed
from tests.spark.test_server import ORG_ORDERS, SIGNING_KEY, assert_error

ORDERS = """\
DESCRIPTION >
    Orders of several tenants (organizations), in regions
SCHEMA >
    `org_id` INT `json:$.org_id`,
    `region` STRING `json:$.region`,
    `item` STRING `json:$.item`,
    `amount` DOUBLE `json:$.amount`
"""
ORG_REGION = """\
NODE endpoint
SQL >
    %
    SELECT org_id, region, item FROM orders
    WHERE org_id = {{ Int(org_id, required=True) }}
    {% if defined(region) %} AND region = {{ String(region) }} {% end %}
TYPE endpoint
"""
ORG_TOTALS = """\
DESCRIPTION >
    Reads the pipe org_orders: its parameter org_id is this pipe's too
NODE endpoint
SQL >
    SELECT org_id, count(*) AS orders, sum(amount) AS total FROM org_orders GROUP BY org_id
TYPE endpoint
"""
ORGS_ORDERS = """\
NODE endpoint
SQL >
    %
    SELECT org_id, item FROM orders WHERE org_id IN {{ Array(org_ids, 'Int', required=True) }}
TYPE endpoint
"""
ALL_ORDERS = """\
NODE endpoint
SQL >
    SELECT org_id, region, item, amount FROM orders
TYPE endpoint
"""
# Each tenant pipe and the parameter that selects the tenant; all_orders takes none (no tenant token names it).
TENANT_KEY = {"org_orders": "org_id", "org_region": "org_id", "org_totals": "org_id", "orgs_orders": "org_ids"}
PIPES = sorted([*TENANT_KEY, "all_orders"])
COLUMNS = {"org_orders": ("org_id", "item", "amount"), "org_region": ("org_id", "region", "item"),
           "org_totals": ("org_id", "orders", "total"), "orgs_orders": ("org_id", "item"),
           "all_orders": ("org_id", "region", "item", "amount")}
REGIONS = ["eu", "us", "apac"]
ORGS = [-3, 0, 7, 42, 1000]
TENANTS = [*ORGS, 99]  # 99 has no rows
ADMIN = {"Authorization": "Bearer admin-secret-37"}
FORGER_KEY = "a-forger-s-own-signing-key-of-32-bytes"


def orders() -> list[dict]:
    """The rows loaded up front: 0-4 random orders per organization (amounts in quarters, so every sum is exact),
    and one without an organization. Seeded: the same rows on every run."""
    rng = random.Random(37)
    rows = [{"org_id": org, "region": rng.choice(REGIONS), "item": rng.choice(["mug", "tea", "pot", "cup", "jar"]),
             "amount": rng.randint(1, 400) / 4} for org in ORGS for _ in range(rng.randint(0, 4))]
    return [*rows, {"org_id": None, "region": "eu", "item": "orphan", "amount": 1.0}]


ROWS = orders()


def expected(pipe: str, tenant: int, region: str | None) -> list[tuple]:
    """The rows `pipe` answers a token of `tenant`, recomputed from ROWS; `region`: the region parameter it gets."""
    mine = [r for r in ROWS if r["org_id"] == tenant]
    if pipe == "org_region":
        mine = [r for r in mine if region is None or r["region"] == region]
    if pipe == "org_totals":
        return [(tenant, len(mine), sum(r["amount"] for r in mine))] if mine else []
    return sorted(tuple(r[c] for c in COLUMNS[pipe]) for r in mine)


@pytest.fixture(scope="module")
def project(spark, spark_config) -> Project:
    assert spark_config.name == WORKSPACE
    return deployed(spark, spark_config, "token_properties", {
        "datasources/orders.datasource": ORDERS, "pipes/org_orders.pipe": ORG_ORDERS,
        "pipes/org_region.pipe": ORG_REGION, "pipes/org_totals.pipe": ORG_TOTALS,
        "pipes/orgs_orders.pipe": ORGS_ORDERS, "pipes/all_orders.pipe": ALL_ORDERS,
        "fixtures/orders.ndjson": "".join(json.dumps(row) + "\n" for row in ROWS),
    }, f"tokens:\n  admin: admin-secret-37\nsigning_key: {SIGNING_KEY}\n")


class Clock:
    """The clock of the server's RateLimiter: frozen, moved by the test only, to a second no example used yet."""

    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now

    def next_second(self, fraction: float = 0.0) -> None:
        self.now = math.floor(self.now) + 1 + fraction


@pytest.fixture(scope="module")
def clock(server: RunningServer) -> Iterator[Clock]:
    frozen = Clock()
    server.service.limiter.clock = frozen
    yield frozen
    server.service.limiter.clock = time.monotonic


def test_the_rows_are_loaded(http):
    answer = http.get("/v0/pipes/all_orders.json", headers=ADMIN)
    assert answer.status_code == 200, answer.text
    assert sorted(rows(answer, "all_orders", "json"), key=repr) == sorted(
        (tuple(r[c] for c in COLUMNS["all_orders"]) for r in ROWS), key=repr)
    assert len({r["org_id"] for r in ROWS if r["org_id"] is not None}) >= 3  # several tenants have rows


# ------------------------------------------------------------------------------------------------ tokens
WORKSPACE = "spark_tests"  # the project's name: deployed() gives it the shared session's pipeframe.yaml


def sign(claims: dict, key: str = SIGNING_KEY, algorithm: str = "HS256") -> str:
    return jwt.encode({"workspace_id": WORKSPACE, **claims}, key, algorithm=algorithm)


_names = itertools.count()


@st.composite
def tenant_tokens(draw) -> dict:
    """A token's claims for one tenant: PIPES:READ scopes of 1-4 tenant pipes, each pinning the tenant's key (as an
    int, a string, a list) and on org_region sometimes the region; sometimes scopes of other types, a misspelled
    pin (the pipe takes no such parameter: refused at request time), or the same pipe twice with other pins."""
    tenant = draw(st.sampled_from(TENANTS))
    pipes = draw(st.lists(st.sampled_from(sorted(TENANT_KEY)), min_size=1, max_size=4, unique=True))
    scopes, pins, misnamed = [], {}, set()
    for pipe in pipes:
        key = TENANT_KEY[pipe]
        value = draw(st.sampled_from([[tenant], [str(tenant)], tenant, str(tenant)] if key == "org_ids"
                                     else [tenant, str(tenant)]))
        fixed = {key: value}
        if pipe == "org_region" and draw(st.booleans()):
            fixed["region"] = draw(st.sampled_from(REGIONS))
        if draw(st.integers(0, 9)) == 0:  # a pin under a name the pipe does not take
            fixed[draw(st.sampled_from([key.upper(), f"{key} ", f"{key}[]", key.replace("_", "-")]))] = value
            misnamed.add(pipe)
        scopes.append({"type": PIPES_READ, "resource": pipe, "fixed_params": fixed})
        pins[pipe] = fixed
    # Scopes of other types grant nothing; a PIPES:READ scope without a string resource neither.
    scopes += draw(st.lists(st.sampled_from([
        {"type": "DATASOURCES:READ", "resource": "orders"}, {"type": "ADMIN"}, {"type": "PIPES:READ"},
        {"type": "pipes:read", "resource": "all_orders"}, {"type": "PIPES:READ", "resource": ["all_orders"]}]),
        max_size=2))
    twice = None
    if draw(st.integers(0, 7)) == 0:  # one pipe named again, pinned otherwise (or not at all)
        twice = draw(st.sampled_from(pipes))
        other = draw(st.sampled_from([t for t in TENANTS if t != tenant]))
        again = {"type": PIPES_READ, "resource": twice, **draw(st.sampled_from(
            [{}, {"fixed_params": {}}, {"fixed_params": {TENANT_KEY[twice]: [other] if twice == "orgs_orders"
                                                          else other}}]))}
        scopes.insert(draw(st.integers(0, len(scopes))), again)
    scopes = draw(st.permutations(scopes))
    issued = int(time.time())
    claims = {"name": f"tenant{tenant}-{next(_names)}", "iat": issued,
              "exp": issued + draw(st.integers(3600, 10**8)), "scopes": list(scopes)}
    if draw(st.booleans()):
        claims["limits"] = {"rps": draw(st.integers(100, 10**6))}  # not reached: the clock moves every example
    return {"tenant": tenant, "claims": claims, "pins": pins, "misnamed": misnamed, "twice": twice}


# An attacker's spellings of a parameter name, as written in the query string (percent-encoded or not).
def spellings(name: str) -> st.SearchStrategy[str]:
    def encoded(at: int) -> str:
        return name[:at] + f"%{ord(name[at]):02X}" + name[at + 1:]

    return st.one_of(
        st.just(name), st.just("".join(f"%{ord(c):02X}" for c in name)),
        st.integers(0, len(name) - 1).map(encoded),
        st.sampled_from([name.upper(), name.title(), name.capitalize(), name.swapcase()]),
        st.sampled_from([f"{name}%20", f"+{name}", f"%20{name}", f"{name}+", f"{name}%09", f"{name}%00"]),
        st.sampled_from([f"{name}[]", f"{name}%5B%5D", f"{name}[0]", name.replace("_", "-"), name.replace("_", "."),
                         name.replace("_", "%255F"), quote("ｏ") + name[1:], f"{name}%3D", f"{name}s", name[:-1]]),
    )


ATTACK_VALUES = st.one_of(st.sampled_from(TENANTS).map(str), st.sampled_from([
    "7,42", "-3,0,7,42,1000", "' OR 1=1 --", "1 OR 1=1", "", "null", "[7, 42]", "*", "%", "2147483648", "42.0",
    "0x2A", " 42"]), st.integers(-10, 1100).map(str))


@st.composite
def requests(draw, token: dict) -> dict:
    """A request of the token's tenant: a pipe (mostly one of its scopes), a format, the legitimate region parameter
    of org_region when not pinned, and the attacker's spellings of every pinned name (plus org_id and org_ids)
    with other values, repeated, beside unknown parameters, in a random order; the token in the Authorization
    header or in `?token=`."""
    pins = token["pins"]
    pipe = draw(st.sampled_from(sorted(pins)) | st.sampled_from(PIPES))
    pairs: list[tuple[str, str]] = []
    region = None
    if pipe == "org_region" and "region" not in pins.get(pipe, {}) and draw(st.booleans()):
        region = draw(st.sampled_from([*REGIONS, "zz"]))
        pairs.append(("region", region))
    attacked = sorted({"org_id", "org_ids"} | ({"region"} & set(pins.get(pipe, {}))))
    for _ in range(draw(st.integers(0, 6))):
        name = draw(st.sampled_from(attacked))
        pairs.append((draw(spellings(name)), quote(draw(ATTACK_VALUES), safe="")))
    pairs += draw(st.lists(st.tuples(
        st.text("abxyz_", min_size=1, max_size=6).filter(lambda n: n not in ("org_id", "org_ids", "region")),
        ATTACK_VALUES.map(lambda v: quote(v, safe=""))), max_size=2))
    if draw(st.integers(0, 5)) == 0:
        pairs.append(("q", quote("SELECT * FROM orders", safe="")))  # reserved: never a template parameter
    # The pipe's name in the path as is, with a character percent-encoded (the same pipe), or in capitals (none).
    at = draw(st.integers(0, len(pipe) - 1))
    path = draw(st.sampled_from([pipe, pipe[:at] + f"%{ord(pipe[at]):02X}" + pipe[at + 1:], pipe.upper()]))
    return {"pipe": unquote_plus(path), "path": path, "fmt": draw(st.sampled_from(["json", "ndjson", "csv"])),
            "region": region, "pairs": draw(st.permutations(pairs)), "in_query": draw(st.integers(0, 3)) == 0,
            "scheme": draw(st.sampled_from(["Bearer", "bearer", "BEARER"]))}


def send(http: httpx.Client, secret: str, request: dict) -> httpx.Response:
    pairs = list(request["pairs"])
    headers = {}
    if request["in_query"]:
        pairs.insert(0, ("token", secret))
    else:
        headers["Authorization"] = f"{request['scheme']} {secret}"
    query = "&".join(f"{k}={v}" for k, v in pairs)
    return http.get(f"/v0/pipes/{request['path']}.{request['fmt']}" + (f"?{query}" if query else ""),
                    headers=headers)


def rows(answer: httpx.Response, pipe: str, fmt: str) -> list[tuple]:
    """The answer's rows as tuples of the pipe's columns; csv cells as the JSON value they spell."""
    columns = COLUMNS[pipe]
    if fmt == "json":
        data = answer.json()["data"]
        assert answer.json()["rows"] == len(data)
    elif fmt == "ndjson":
        data = [json.loads(line) for line in answer.text.splitlines()]
    else:
        table = list(csv.reader(io.StringIO(answer.text)))
        assert tuple(table[0]) == columns, table[0]
        data = [dict(zip(columns, (cell_value(c) for c in line), strict=True)) for line in table[1:]]
    for row in data:
        assert tuple(row) == columns, row
    return [tuple(row[c] for c in columns) for row in data]


def cell_value(cell: str) -> object:
    for parse in (int, float):
        try:
            return parse(cell)
        except ValueError:
            pass
    return None if cell == "" else cell


def examples(count: int) -> settings:
    """`count` examples, the same ones on every run (derandomized, no example database), without deadlines."""
    return settings(max_examples=count, deadline=None, database=None, derandomize=True,
                    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])


@examples(300)
@given(token=tenant_tokens(), data=st.data())
def test_a_tenant_token_answers_its_tenants_rows_whatever_the_request_sends(http, clock, token, data):
    """Property: a valid token answers exactly its tenant's rows (for the pipe's other parameters), whatever
    spelling, repetition or value of a pinned parameter the request sends; a pipe outside its scopes is a 403
    PF813; a pin the pipe does not take, or a pipe named twice with other pins, a 403 PF831, never rows."""
    clock.next_second()
    secret = sign(token["claims"])
    request = data.draw(requests(token), label="request")
    answer = send(http, secret, request)
    pipe, tenant = request["pipe"], token["tenant"]  # pipe: as the server decodes the path
    listed = http.get("/v0/pipes", headers={"Authorization": f"Bearer {secret}"})
    if token["twice"] is not None:  # which of the two scopes' pins would apply is a guess: the token is refused
        assert_error(answer, 403, "PF831")
        assert_error(listed, 403, "PF831")
        event("answered", "refused: a pipe in two scopes")
        return
    assert sorted(p["name"] for p in listed.json()["pipes"]) == sorted(token["pins"])
    if pipe not in token["pins"]:
        assert_error(answer, 403, "PF813")
        event("answered", "outside its scopes")
        return
    if pipe in token["misnamed"]:
        assert_error(answer, 403, "PF831")
        event("answered", "refused: pins a name the pipe does not take")
        return
    assert answer.status_code == 200, (answer.status_code, answer.text)
    region = token["pins"][pipe].get("region", request["region"])
    got = rows(answer, pipe, request["fmt"])
    event("answered", "rows" if got else "no rows")
    assert {row[0] for row in got} <= {tenant}, got  # the tenant's org id only
    assert sorted(got) == expected(pipe, tenant, region)

    # The same request with the pins as a JSON body, as a POST: not a route (405), no rows.
    posted = http.post(f"/v0/pipes/{pipe}.json", json={unquote_plus(k): unquote_plus(v) for k, v in request["pairs"]},
                       headers={"Authorization": f"Bearer {secret}"})
    assert_error(posted, 405, "PF814")


# ------------------------------------------------------------------------------------------ refused tokens
FATES = ["expired", "forged", "tampered", "other project", "unsigned", "other algorithm"]


@examples(100)
@pytest.mark.filterwarnings("ignore::jwt.warnings.InsecureKeyLengthWarning")  # HS512 with the server's HS256 key
@given(token=tenant_tokens(), fate=st.sampled_from(FATES), past=st.integers(1, 10**7), data=st.data())
def test_an_expired_forged_tampered_or_foreign_token_is_refused(http, clock, token, fate, past, data):
    """Property: whatever its shape and whatever the request, a token expired for more than the leeway, signed
    with another key (or not at all, or with another algorithm), whose payload was swapped, or minted for
    another project answers 403 (PF832 expired, PF831 otherwise), and no rows."""
    clock.next_second()
    claims = dict(token["claims"])
    if fate == "expired":  # exp at least LEEWAY_S + 1 s before now: expired by the time the server reads it
        claims["exp"] = int(time.time()) - LEEWAY_S - past
        claims["iat"] = claims["exp"] - 3600
        secret = sign(claims)
    elif fate == "forged":
        secret = sign(claims, FORGER_KEY)
    elif fate == "tampered":  # wider claims (every pipe, nothing pinned) under this token's signature
        header, _payload, signature = sign(claims).split(".")
        wider = {**claims, "scopes": [{"type": PIPES_READ, "resource": p} for p in PIPES]}
        secret = ".".join((header, sign(wider).split(".")[1], signature))
    elif fate == "other project":
        secret = sign({**claims, "workspace_id": "another_project"})
    elif fate == "unsigned":
        secret = jwt.encode(claims, None, algorithm="none")
    else:
        secret = sign(claims, SIGNING_KEY, "HS512")
    request = data.draw(requests(token), label="request")
    answer = send(http, secret, request)
    body = assert_error(answer, 403, "PF832" if fate == "expired" else "PF831")
    assert "data" not in body and secret not in answer.text
    assert_error(http.get("/v0/pipes", headers={"Authorization": f"Bearer {secret}"}), 403,
                 "PF832" if fate == "expired" else "PF831")


# ---------------------------------------------------------------------------------------------- rate limit
@examples(50)
@given(rps=st.integers(1, 4), over=st.integers(1, 4), other_rps=st.integers(1, 4), data=st.data(),
       tenants=st.tuples(st.sampled_from(ORGS), st.sampled_from(ORGS)), fraction=st.floats(0, 0.999))
def test_a_burst_beyond_the_limit_gets_429_and_other_tokens_do_not(http, clock, project, rps, over, other_rps,
                                                                    data, tenants, fraction):
    """Property: within one second (the limiter's window), a token's requests past its `rps` are 429 PF833 with
    Retry-After, exactly the first `rps` succeed; another token's requests in the same second (another name, same
    tenant or not, up to its own limit) and a static token's all succeed; the next second the burst is admitted."""
    clock.next_second(fraction)
    n = next(_names)
    burst = project.create_token(["org_orders"], {"org_id": tenants[0]}, 3600, rps=rps, name=f"burst-{n}")
    calm = project.create_token(["org_orders", "org_region"], {"org_id": tenants[1]}, 3600, rps=other_rps,
                                name=f"calm-{n}")
    others = data.draw(st.integers(1, other_rps), label="calm requests")
    order = data.draw(st.permutations(["burst"] * (rps + over) + ["calm"] * others + ["admin"]), label="order")
    answers: dict[str, list[httpx.Response]] = {"burst": [], "calm": [], "admin": []}
    for who in order:
        headers = ADMIN if who == "admin" else {"Authorization": f"Bearer {burst if who == 'burst' else calm}"}
        answers[who].append(http.get("/v0/pipes/org_orders.json", params={"org_id": "7"}, headers=headers))

    assert [a.status_code for a in answers["burst"]] == [200] * rps + [429] * over
    for refused in answers["burst"][rps:]:
        assert_error(refused, 429, "PF833")
        assert int(refused.headers["Retry-After"]) >= 1
    for answered in answers["burst"][:rps]:
        assert sorted(rows(answered, "org_orders", "json")) == expected("org_orders", tenants[0], None)
    for answered in answers["calm"]:
        assert answered.status_code == 200, answered.text
        assert sorted(rows(answered, "org_orders", "json")) == expected("org_orders", tenants[1], None)
    assert [a.status_code for a in answers["admin"]] == [200]

    clock.next_second()  # the next window: the burst's token is admitted again
    again = http.get("/v0/pipes/org_orders.json", headers={"Authorization": f"Bearer {burst}"})
    assert again.status_code == 200, again.text
