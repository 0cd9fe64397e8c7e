"""Two Tinybird projects of the compatibility corpus (tests/compat/), unchanged, answer as ClickHouse would.

Each is deployed as vendored, generated rows (seeded) are appended to its landing datasource in two batches, so
every materialized view merges states across appends, and every endpoint is called — with its defaults and with
other parameter values — and compared with a recomputation in plain Python of what the endpoint's ClickHouse SQL
means, written per endpoint from the generated rows (never with Spark).

- flappy-tinybird: `events_api` → `mat_player_stats` (countIfState, maxState) → 4 endpoints (a leaderboard with
  ROW_NUMBER and NOT IN, a personalization rule over the last 5 minutes, per-player stats with round()).
- log-analytics-starter-kit: `logs` → 4 materialized views (countState per minute / hour, path(url)) → 9 endpoints
  over date ranges (a scalar `WITH (SELECT ...)` from another pipe, `column()` parameters, ORDER BY ... LIMIT).

Also `FROM t FINAL` on a ReplacingMergeTree (ENGINE_VER, ENGINE_IS_DELETED), in an endpoint and a copy pipe,
against the latest row per key recomputed in Python.

Where ClickHouse leaves the answer open (ties under ORDER BY ... LIMIT, LIMIT without ORDER BY), the comparison
accepts every answer ClickHouse could give, and no other.
"""

from __future__ import annotations

import random
import shutil
import statistics
from collections import Counter, defaultdict
from datetime import datetime, timedelta
from decimal import ROUND_HALF_UP, Decimal
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from pipeframe.copy import run_copy
from pipeframe.errors import PipeframeError
from pipeframe.project import Project

CORPUS = Path(__file__).resolve().parents[1] / "compat"


def utcnow() -> datetime:
    return datetime.utcnow().replace(microsecond=0)  # noqa: DTZ003 — Spark's session time zone is UTC


def fmt(ts: datetime) -> str:
    """A timestamp as the endpoint answers it (Tinybird's JSON format)."""
    return ts.isoformat(sep=" ", timespec="microseconds" if ts.microsecond else "seconds")


def ch_round(x: float, digits: int) -> float:
    """ClickHouse's round(x, n) of a Float64: x * 10^n rounded half to even (nearbyint), divided back."""
    scale = 10 ** digits
    return round(x * scale) / scale


def corpus_project(spark, spark_config, name: str) -> Project:
    """A corpus project copied unchanged under the shared session's root, checked clean and deployed."""
    root = Path(spark_config.root) / f"compat_{name}"
    shutil.rmtree(root, ignore_errors=True)
    shutil.copytree(CORPUS / name, root)
    shutil.copy(Path(spark_config.root) / "pipeframe.yaml", root / "pipeframe.yaml")
    project = Project(root, spark=spark, environ={})
    report = project.check()
    # warnings only: a connector or token setting ignored (PF110), an ORDER BY dropped from a view (PF402)
    assert report.ok and {d.code for d in report.diagnostics} <= {"PF110", "PF402"}, \
        [d.format() for d in report.diagnostics]
    project.deploy()
    return project


def append_in_two_batches(project: Project, datasource: str, rows: list[dict], rng: random.Random) -> None:
    rows = rows[:]
    rng.shuffle(rows)
    half = len(rows) // 2
    for batch in (rows[:half], rows[half:]):
        result = project.append(datasource, batch)
        assert (result.accepted, result.quarantined) == (len(batch), 0), result


def endpoints_of(project: Project) -> set[str]:
    return {name for name, pipe in project.compiled.pipes.items() if pipe.type == "endpoint"}


# Which engine answered each endpoint call (the read path, or Spark with the reason it gave): printed per module.
ENGINES: Counter[tuple[str, str]] = Counter()


def call(project: Project, pipe: str, **params) -> list[dict]:
    """The endpoint's rows, as its HTTP route answers them (the read path where it can answer as Spark would)."""
    answer = project.endpoint(pipe, **params)
    assert answer.engine == "duckdb" or answer.engine_reason, (pipe, answer.engine)  # Spark only with a reason
    ENGINES[(answer.engine, f"{pipe}: {answer.engine_reason}" if answer.engine_reason else pipe)] += 1
    return answer.data


@pytest.fixture(scope="module", autouse=True)
def engines_used():
    yield
    print("\nendpoint calls by engine:", dict(ENGINES))


def ordered_top(got: list[dict], full: list[dict], key: str, limit: int) -> None:
    """`ORDER BY key DESC LIMIT limit` over `full`: ClickHouse may break ties either way, so the answer must be
    rows of `full`, sorted, and with the same key values as the true top `limit`."""
    assert all(row in full for row in got), (got, full)
    assert len(got) == min(limit, len(full))
    assert [row[key] for row in got] == sorted((row[key] for row in full), reverse=True)[:limit]


def sorted_by(got: list[dict], want: list[dict], key: str) -> None:
    """`ORDER BY key`: the same rows, in an order sorted by `key` (rows with one key may come in any order)."""
    assert [row[key] for row in got] == sorted(row[key] for row in got)
    assert sorted(map(repr, got)) == sorted(map(repr, want))


# ------------------------------------------------------------------------------------------ flappy-tinybird

def flappy_rows(rng: random.Random, now: datetime) -> list[dict]:
    """Game events of six players. Sessions start 2 minutes apart (so their last events differ, even to the
    second), each a whole recent (in the next hour: within `now() - 5 minutes` while the test runs) or old (two
    days ago) game. player2 has 8 sessions (round(total / 8, 2) meets a half), player4 only recent, low-scoring
    games without purchases (the offer rule)."""
    plan = {"player1": (13, 0.5, 12, 0.3), "player2": (8, 0.5, 12, 0.3), "player3": (5, 0.5, 8, 0.5),
            "player4": (4, 1.0, 5, 0.0), "player5": (3, 0.0, 10, 0.2), "player6": (6, 0.5, 15, 0.1)}
    rows: list[dict] = []
    slot = 0
    for player, (n_sessions, recent_share, max_score, purchase_p) in plan.items():
        for s in range(n_sessions):
            slot += 1
            recent = rng.random() < recent_share
            base = (now + timedelta(minutes=5) if recent else now - timedelta(days=2)) + timedelta(minutes=2 * slot)
            session = f"{player}-{s:02d}-{rng.randrange(10**6):06d}"
            kinds = ["start"] + ["score"] * rng.randint(0, max_score) + ["purchase"] * (rng.random() < purchase_p) \
                + ["die"] * rng.randint(0, 1)
            for kind in kinds:
                ts = base + timedelta(milliseconds=rng.randrange(50_000))
                rows.append({"name": player, "session_id": session, "type": kind,
                             "timestamp": ts.isoformat(sep=" ", timespec="milliseconds")})
    # player2's 8 games score 8k + 5 in all: the average ends in .625, a half at the third decimal
    player2 = [r for r in rows if r["name"] == "player2"]
    while sum(r["type"] == "score" for r in player2) % 8 != 5:
        player2.append({**player2[0], "type": "score"})
        rows.append(player2[-1])
    return rows


def flappy_sessions(rows: list[dict]) -> dict[tuple[str, str], dict]:
    """mat_player_stats: per (player, session), countIf(type = 'score'), countIf(type = 'purchase'), max(ts)."""
    sessions: dict[tuple[str, str], dict] = {}
    for row in rows:
        ts = datetime.fromisoformat(row["timestamp"])
        s = sessions.setdefault((row["name"], row["session_id"]), {"score": 0, "purchases": 0, "t": ts})
        s["score"] += row["type"] == "score"
        s["purchases"] += row["type"] == "purchase"
        s["t"] = max(s["t"], ts)
    return sessions


def expected_last_played_games(sessions, player: str) -> list[dict]:
    # toDateTime(maxMerge(game_ts)): a DateTime, whole seconds; ORDER BY t DESC LIMIT 10
    mine = sorted(((k[1], s) for k, s in sessions.items() if k[0] == player), key=lambda x: x[1]["t"], reverse=True)
    return [{"session_id": sid, "total_score": s["score"], "t": fmt(s["t"].replace(microsecond=0))}
            for sid, s in mine[:10]]


def expected_leaderboard(sessions, player: str) -> list[dict]:
    ranked = sorted(sessions.items(), key=lambda kv: (-kv[1]["score"], kv[1]["t"]))  # ROW_NUMBER() OVER (...)
    rank = {key: i + 1 for i, (key, _) in enumerate(ranked)}
    mine = [key for key in sessions if key[0] == player]
    last = [max(mine, key=lambda k: sessions[k]["t"])] if mine else []  # argMax(..., t) per player
    # rank_games is ORDER BY rank: its first 9 rows other than the player's last game, then that game
    top = [key for key, _ in ranked if key not in last][:9]
    return [{"rank": rank[k], "player_id": k[0], "session_id": k[1], "total_score": sessions[k]["score"]}
            for k in sorted(top + last, key=rank.get)]


def expected_personalization(sessions, player: str, now: datetime) -> list[dict]:
    recent = [s for k, s in sessions.items() if k[0] == player and s["t"] >= now - timedelta(minutes=5)]
    if not recent:
        return []  # stats has no row for the player: no offer row at all
    games, score, purchases = len(recent), sum(s["score"] for s in recent), sum(s["purchases"] for s in recent)
    return [{"offer": 1 if games >= 3 and score <= 30 and purchases == 0 else 0}]


def expected_player_stats(sessions, player: str) -> list[dict]:
    scores = [s["score"] for k, s in sessions.items() if k[0] == player]
    if not scores:
        return []
    return [{"player_id": player, "n_games": len(scores), "total_score": sum(scores),
             "avg_score": ch_round(sum(scores) / len(scores), 2), "max_score": max(scores)}]


def test_flappy_tinybird_answers_as_clickhouse(spark, spark_config):
    rng = random.Random(15_001)
    project = corpus_project(spark, spark_config, "flappy-tinybird")
    rows = flappy_rows(rng, utcnow())
    append_in_two_batches(project, "events_api", rows, rng)
    sessions = flappy_sessions(rows)
    assert endpoints_of(project) == {"api_last_played_games", "api_leaderboard", "api_personalization",
                                     "api_player_stats"}
    assert len([k for k in sessions if k[0] == "player2"]) == 8
    stats = expected_player_stats(sessions, "player2")[0]
    half_up = float((Decimal(stats["total_score"]) / 8).quantize(Decimal("0.01"), ROUND_HALF_UP))
    assert stats["total_score"] % 8 == 5 and stats["avg_score"] != half_up  # ClickHouse rounds to even

    for pipe in endpoints_of(project):  # `String(player_param, 'player1', required=True)`: a request must name one
        with pytest.raises(PipeframeError) as err:
            call(project, pipe)
        assert err.value.diagnostics[0].code == "PF202" and "player_param" in err.value.diagnostics[0].message
    # the pipes' default player, one whose average meets a half, the one who gets an offer, one without games
    for player in ("player1", "player2", "player4", "nobody"):
        params = {"player_param": player}
        assert call(project, "api_leaderboard", **params) == expected_leaderboard(sessions, player)
        if player == "nobody":  # the leaderboard is the one endpoint with rows for a player without games
            continue
        assert call(project, "api_last_played_games", **params) == expected_last_played_games(sessions, player)
        assert call(project, "api_player_stats", **params) == expected_player_stats(sessions, player)
        before = utcnow()
        got = call(project, "api_personalization", **params)
        # every game is in the next hour or two days old: the 5-minute window sees the same games all along
        assert got == expected_personalization(sessions, player, before) == \
            expected_personalization(sessions, player, utcnow())
    assert expected_personalization(sessions, "player4", utcnow()) == [{"offer": 1}]
    assert call(project, "api_player_stats", player_param="nobody") == []


# ------------------------------------------------------------------------------ log-analytics-starter-kit

LOG_COLUMNS = ("acceptcharset", "acceptencoding", "acceptlanguage", "browsername", "browserversion", "cachecontrol",
               "city", "connection", "country", "cpuarchitecture", "devicemodel", "devicetype", "devicevendor",
               "enginename", "engineversion", "headers", "host", "ip_address", "latitude", "log_level", "log_message",
               "longitude", "method", "osname", "osversion", "protocol", "region", "url", "useragent",
               "xforwaredforip", "origin", "referer", "contentlength", "contenttype", "from", "via")
PATHS = ("/api/users", "/api/orders", "/api/orders/items", "/health", "", "/api/search")


def log_rows(rng: random.Random, now: datetime, days: list[datetime]) -> list[dict]:
    """Requests over three whole days (some exactly at midnight, where a date range ends) and over the next 15
    minutes (so that `minute == toStartOfMinute(now())` finds rows, and an IP above the average, whenever the
    endpoint runs)."""
    stamps = [day + timedelta(seconds=rng.randrange(86_400), milliseconds=rng.randrange(1000))
              for day in days for _ in range(110)]
    stamps += [day + timedelta(seconds=rng.randrange(60)) for day in days for _ in range(4)]
    stamps += [now + timedelta(seconds=rng.randrange(15 * 60)) for _ in range(150)]
    # and one IP busier than the average in each of those minutes, whatever the others drew
    busy = [now.replace(second=0) + timedelta(minutes=m, seconds=rng.randrange(60)) for m in range(16) for _ in range(5)]
    rows = []
    for n, ts in enumerate(stamps + busy):
        row = dict.fromkeys(LOG_COLUMNS, "")
        path = rng.choice(PATHS)
        ip = "10.0.0.9" if n >= len(stamps) else f"10.0.0.{rng.randint(1, 6)}"
        row.update(event_ts=ts.isoformat(sep=" ", timespec="milliseconds"), isbot=rng.randint(0, 1),
                   ip_address=ip, log_level=rng.choice(["INFO", "INFO", "WARN", "ERROR"]),
                   url=f"https://api.example.com{path}" + (f"?id={rng.randrange(100)}" if rng.random() < 0.5 else ""),
                   osname=rng.choice(["Linux", "Mac OS", "Windows"]), browsername=rng.choice(["Chrome", "Firefox"]),
                   method=rng.choice(["GET", "POST"]))
        rows.append(row)
    return rows


class Logs:
    """The log rows as the views hold them, and the date range filter of every endpoint."""

    def __init__(self, rows: list[dict]):
        self.rows = [{**r, "ts": datetime.fromisoformat(r["event_ts"])} for r in rows]
        for r in self.rows:
            r["minute"] = r["ts"].replace(second=0, microsecond=0)
            r["hour"] = r["ts"].replace(minute=0, second=0, microsecond=0)
            r["function_name"] = urlsplit(r["url"]).path  # path(url)

    @staticmethod
    def between(value: datetime, date_from: str, date_to: str) -> bool:
        # `DateTime BETWEEN Date AND Date`: the dates are their midnights
        return datetime.fromisoformat(date_from) <= value <= datetime.fromisoformat(date_to)

    def count(self, keys: tuple[str, ...], where=lambda r: True) -> Counter:
        return Counter(tuple(r[k] for k in keys) for r in self.rows if where(r))


def expected_logs(logs: Logs, pipe: str, date_from: str, date_to: str, now_minute: datetime | None = None,
                  per_filter: str = "osname") -> list[dict]:
    def per_minute(r):
        return logs.between(r["minute"], date_from, date_to)

    def per_hour(r):
        return logs.between(r["hour"], date_from, date_to)

    def errors(r):
        return r["log_level"] == "ERROR" and per_hour(r)

    if pipe == "average_calls_per_ip_api":
        totals = logs.count(("minute", "ip_address"), per_minute).values()
        return [{"average": statistics.fmean(totals) if totals else None}]
    if pipe == "average_error_count_api":
        totals = logs.count(("function_name",), errors).values()
        return [{"average": statistics.fmean(totals) if totals else None}]
    if pipe == "error_frequency_api":
        return [{"function_name": f, "hour": fmt(h), "total": n}
                for (f, h), n in logs.count(("function_name", "hour"), errors).items()]
    if pipe == "error_per_api":
        return [{"hour": fmt(h), per_filter: v, "total": n, "per_filter": per_filter}
                for (h, v), n in logs.count(("hour", per_filter), errors).items()]
    if pipe == "function_errors_api":
        return [{"function_name": f, "total": n} for (f,), n in logs.count(("function_name",), errors).items()]
    if pipe == "ips_exceeding_avg_calls_per_minute_api":
        average = expected_logs(logs, "average_calls_per_ip_api", date_from, date_to)[0]["average"]
        now_rows = logs.count(("ip_address",), lambda r: r["minute"] == now_minute and per_minute(r))
        return [{"ip_address": ip, "total": n} for (ip,), n in now_rows.items() if average is not None and n > average]
    if pipe == "ips_with_most_calls_api":
        # toStartOfHour(minute) AS hour ... WHERE hour BETWEEN ...: the alias is the expression
        return [{"hour": fmt(h), "ip_address": ip, "total": n}
                for (h, ip), n in logs.count(("hour", "ip_address"), per_hour).items()]
    if pipe == "log_level_frequency_api":
        return [{"hour": fmt(h), "log_level": level, "total": n}
                for (h, level), n in logs.count(("hour", "log_level"), per_hour).items()]
    if pipe == "top_functions_api":
        return [{"function_name": f, "total": n} for (f,), n in logs.count(("function_name",), per_hour).items()]
    raise AssertionError(pipe)


def compare_logs(project: Project, logs: Logs, pipe: str, **params) -> None:
    dates = (params["date_from"], params["date_to"])
    if pipe == "ips_exceeding_avg_calls_per_minute_api":
        for _ in range(3):  # the answer is about the minute the call runs in: retry if the minute turned meanwhile
            minute = utcnow().replace(second=0)
            got = call(project, pipe, **params)
            if utcnow().replace(second=0) == minute:
                break
        want = expected_logs(logs, pipe, *dates, now_minute=minute)
        assert all(row in want for row in got) and len(got) == min(10, len(want)), (got, want)  # LIMIT 10, no order
        return
    got = call(project, pipe, **params)
    want = expected_logs(logs, pipe, *dates, per_filter=params.get("per_filter", "osname"))
    if pipe.startswith("average"):
        assert got[0]["average"] == pytest.approx(want[0]["average"], rel=1e-12)
    elif pipe in ("ips_with_most_calls_api", "function_errors_api"):
        ordered_top(got, want, "total", 10)  # ORDER BY total DESC LIMIT 10
    elif pipe == "top_functions_api":
        assert len(want) <= 10 and sorted(map(repr, got)) == sorted(map(repr, want))  # LIMIT 10 of at most 10
    else:
        sorted_by(got, want, "hour")  # ORDER BY hour ASC


def test_log_analytics_answers_as_clickhouse(spark, spark_config):
    rng = random.Random(15_002)
    now = utcnow()
    today = now.replace(hour=0, minute=0, second=0)
    days = [today - timedelta(days=d) for d in (3, 2, 1)]
    project = corpus_project(spark, spark_config, "log-analytics-starter-kit")
    rows = log_rows(rng, now, days)
    append_in_two_batches(project, "logs", rows, rng)
    logs = Logs(rows)
    names = endpoints_of(project)
    assert len(names) == 9

    def day(d: datetime) -> str:
        return d.date().isoformat()

    everything = {"date_from": day(days[0]), "date_to": day(today + timedelta(days=1))}
    one_day = {"date_from": day(days[1]), "date_to": day(days[2])}  # ends at a midnight that has rows
    assert any(r["minute"] == days[2] for r in logs.rows)
    for pipe in sorted(names):
        with pytest.raises(PipeframeError) as err:  # the defaults: each pipe asks for a range, as in Tinybird
            call(project, pipe)
        assert err.value.diagnostics[0].code == "PF204" and "date_from & date_to" in err.value.diagnostics[0].message
        compare_logs(project, logs, pipe, **everything)
    # a range ending at a midnight with rows, over each view's target and the raw rows
    for pipe in ("average_calls_per_ip_api", "error_frequency_api", "log_level_frequency_api", "top_functions_api",
                 "error_per_api"):
        compare_logs(project, logs, pipe, **one_day)
    compare_logs(project, logs, "error_per_api", **everything, per_filter="browsername")
    assert expected_logs(logs, "ips_exceeding_avg_calls_per_minute_api", **everything,
                         now_minute=utcnow().replace(second=0)), "the current minute has busy IPs"


# ------------------------------------------------------------------------------------ ReplacingMergeTree FINAL

FINAL_FILES = {
    "datasources/users.datasource": """SCHEMA >
    `id` Int64,
    `name` String,
    `plan` String,
    `updated_at` DateTime,
    `deleted` UInt8

ENGINE "ReplacingMergeTree"
ENGINE_SORTING_KEY "id"
ENGINE_VER "updated_at"
ENGINE_IS_DELETED "deleted"
""",
    "datasources/users_snapshot.datasource": "SCHEMA >\n    `id` Int64,\n    `name` String,\n    `plan` String\n",
    "pipes/users_by_plan.pipe": """NODE endpoint
SQL >
    %
    SELECT plan, count() AS users, groupArray(name) AS names
    FROM users FINAL
    WHERE id >= {{ Int64(min_id, 0) }}
    GROUP BY plan
    ORDER BY plan

TYPE endpoint
""",
    "pipes/user_rows.pipe": "NODE endpoint\nSQL >\n    SELECT id, name FROM users\n\nTYPE endpoint\n",
    "pipes/snapshot.pipe": """NODE latest
SQL >
    SELECT u.id, u.name, u.plan FROM users AS u FINAL

TYPE copy
TARGET_DATASOURCE users_snapshot
COPY_SCHEDULE @on-demand
""",
}


def test_final_reads_the_latest_row_per_key_without_deleted_ones(spark, spark_config):
    from tests.spark.conftest import deployed

    rng = random.Random(15_003)
    project = deployed(spark, spark_config, "replacing_final", FINAL_FILES)
    start = datetime(2026, 1, 1)
    rows = []
    for version in range(300):  # updates of 40 users; versions distinct per user, in random order
        rows.append({"id": rng.randrange(40), "name": f"name{rng.randrange(1000)}",
                     "plan": rng.choice(["free", "pro", "team"]), "deleted": int(rng.random() < 0.15),
                     "updated_at": (start + timedelta(minutes=version)).isoformat(sep=" ")})
    append_in_two_batches(project, "users", rows, rng)

    latest: dict[int, dict] = {}
    for row in rows:
        if row["id"] not in latest or row["updated_at"] > latest[row["id"]]["updated_at"]:
            latest[row["id"]] = row
    live = [r for r in latest.values() if not r["deleted"]]

    def by_plan(min_id: int) -> list[dict]:
        plans = defaultdict(list)
        for r in live:
            if r["id"] >= min_id:
                plans[r["plan"]].append(r["name"])
        return [{"plan": p, "users": len(names), "names": names} for p, names in sorted(plans.items())]

    for params in ({}, {"min_id": 20}):
        got = call(project, "users_by_plan", **params)
        want = by_plan(params.get("min_id", 0))
        assert [{**g, "names": sorted(g["names"])} for g in got] == [{**w, "names": sorted(w["names"])} for w in want]
    # without FINAL, every inserted row (ClickHouse's meaning before a merge: duplicates)
    assert len(call(project, "user_rows")) == len(rows)
    run_copy(project, "snapshot")
    snapshot = project.query("SELECT id, name, plan FROM users_snapshot").collect()
    assert sorted(tuple(r) for r in snapshot) == sorted((r["id"], r["name"], r["plan"]) for r in live)
    assert len(live) < len(latest) < len(rows)
