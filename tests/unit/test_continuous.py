"""The continuous materializer's rounds and waits, JVM-free: which views a round refreshes (those downstream of the
tables that moved, plus those a waiter needs), and that `wait` answers only with refreshes from a round that started
after it was called. The refreshing itself is the engine's (tests/spark/test_events.py runs it on Spark)."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

from pipeframe.engine.continuous import ContinuousMaterializer
from pipeframe.engine.materialize import ViewRefresh


@dataclass
class State:
    name: str
    source: str | None = None
    has_table: bool = True


@dataclass
class Resource:
    state: State
    path: str


@dataclass
class Tables:
    """A warehouse of three tables: events → hourly → daily; `versions` is what `version_of` answers."""

    versions: dict[str, int] = field(default_factory=lambda: {"events": 0, "hourly": 0, "daily": 0})
    refreshed: list[list[str]] = field(default_factory=list)
    fail: bool = False
    outcome: str = "applied"

    def version_of(self, path: str) -> int:
        return self.versions[path]


class Views:
    """The part of a Materializer the loop uses, over `Tables`."""

    def __init__(self, tables: Tables) -> None:
        self.warehouse = tables
        self.deployed = {n: Resource(State(n, s), n) for n, s in (("events", None), ("hourly", "events"),
                                                                   ("daily", "hourly"))}

    def views(self) -> list[Resource]:
        return [self.deployed["hourly"], self.deployed["daily"]]

    def downstream(self, names) -> list[Resource]:
        """The views fed by `names`, directly or through other views, upstream first."""
        found, fed = set(names), []
        for view in self.views():
            if view.state.source in found:
                fed.append(view)
                found.add(view.state.name)
        return fed

    def refresh(self, views: list[Resource]) -> list[ViewRefresh]:
        if self.warehouse.fail:
            raise RuntimeError("the table vanished")
        self.warehouse.refreshed.append([v.state.name for v in views])
        return [ViewRefresh(v.state.name, self.warehouse.outcome, 0, 1, rows=3, waited_ms=12.0) for v in views]


def test_a_round_refreshes_what_is_downstream_of_the_tables_that_moved():
    tables = Tables()
    loop = ContinuousMaterializer(lambda: Views(tables))
    assert [r.view for r in loop.run_round(1)] == ["hourly", "daily"]  # the first round looks at everything
    assert loop.run_round(2) == []  # nothing moved
    tables.versions["hourly"] += 1  # another process refreshed hourly: only its downstream follows
    assert [r.view for r in loop.run_round(3)] == ["daily"]
    tables.versions["events"] += 1
    assert [r.view for r in loop.run_round(4, forced={"daily"})] == ["hourly", "daily"]  # upstream first
    assert loop.run_round(5, forced={"daily"}) and tables.refreshed[-1] == ["daily"]
    assert loop.view_json("hourly") == {"visible_ms": 12.0} and loop.view_json("nope") == {"visible_ms": None}


def test_a_failed_round_is_retried_by_the_next_one():
    tables = Tables()
    loop = ContinuousMaterializer(lambda: Views(tables))
    loop.run_round(1)
    tables.versions["events"] += 1
    tables.fail = True
    try:
        loop.run_round(2)
    except RuntimeError:
        pass
    tables.fail = False
    assert [r.view for r in loop.run_round(3)] == ["hourly", "daily"]  # the move is not forgotten


def test_wait_answers_with_a_round_that_started_after_it():
    tables = Tables()
    loop = ContinuousMaterializer(lambda: Views(tables), poll_ms=60_000)  # rounds only when woken
    loop.start()
    try:
        first = loop.wait(["hourly", "daily"], timeout=30)
        assert [(r.view, r.outcome) for r in first] == [("hourly", "applied"), ("daily", "applied")]
        rounds = loop.done
        again = loop.wait(["daily"], timeout=30)  # nothing moved: the waiter's views are refreshed all the same
        assert loop.done > rounds and [r.view for r in again] == ["daily"] and tables.refreshed[-1] == ["daily"]

        tables.fail = True
        failed = loop.wait(["hourly"], timeout=30)
        assert failed[0].outcome == "pending" and "the table vanished" in failed[0].message
    finally:
        loop.stop()
    assert not loop.running and loop.wait(["hourly"], timeout=1) is None


def test_many_waiters_at_once_each_get_an_answer():
    tables = Tables()
    loop = ContinuousMaterializer(lambda: Views(tables), poll_ms=60_000)
    loop.start()
    answers: list = []
    try:
        threads = [threading.Thread(target=lambda: answers.append(loop.wait(["hourly"], timeout=30)))
                   for _ in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        loop.stop()
    assert len(answers) == 8 and all(a and a[0].outcome == "applied" for a in answers)


def test_a_waiter_is_answered_with_the_refresh_that_applied_its_commit():
    """The round a commit wakes may apply its rows before the waiter's own round runs (which then finds the views up
    to date): the answer is the refresh that applied them, from a round that started after the commit."""
    tables = Tables()
    loop = ContinuousMaterializer(lambda: Views(tables), poll_ms=60_000)
    loop.start()
    try:
        loop.wait(["hourly"], timeout=30)
        tables.versions["events"] += 1
        after = loop.committed("events", 1)  # a commit: the round it wakes applies it
        loop.wait([], timeout=30)
        tables.outcome = "up to date"
        answer = loop.wait(["hourly", "daily"], timeout=30, after=after)
        assert [(r.view, r.outcome) for r in answer] == [("hourly", "applied"), ("daily", "applied")]
        assert [r.outcome for r in loop.wait(["hourly"], timeout=30, after=loop.rounds)] == ["up to date"]
    finally:
        loop.stop()


def test_each_views_lag_and_each_round_are_reported_for_metrics():
    tables = Tables()
    tables.versions["events"] = 4  # the fake refresh applies source versions up to 1: three commits behind
    loop = ContinuousMaterializer(lambda: Views(tables), poll_ms=60_000)
    rounds = []
    loop.on_round.append(lambda seconds, refreshed: rounds.append((seconds >= 0, [r.view for r in refreshed])))
    loop.start()
    try:
        loop.wait(["hourly", "daily"], timeout=30)
    finally:
        loop.stop()
    lag = loop.lag()
    assert (lag["hourly"].versions, lag["hourly"].visible_ms) == (3, 12.0)
    assert lag["daily"].versions == 0  # hourly was at version 0 when the round looked; it applied up to 1
    assert rounds == [(True, ["hourly", "daily"])]
