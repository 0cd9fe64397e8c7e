"""When a group commit is cut (engine/groupcommit.py `_gather`), without a JVM or a clock: requests arrive only when
the committer waits, one per wait, so a test tells exactly how many it waited for."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from pipeframe.config import IngestSettings
from pipeframe.engine.commits import Commit
from pipeframe.engine.deltaappend import ENGINE
from pipeframe.engine.groupcommit import GroupCommitter, _Queue, _Request
from pipeframe.engine.ingest import ingest_paths
from pipeframe.plan.records import GroupCommit, Ingest

MINUTE_MS = 60_000  # a flush_ms no group here reaches: every cut below is made by another rule


class Arrivals:
    """A queue's condition whose every wait is answered by the next request arriving; a wait with none left to
    come fails the test (the committer would have waited for clients that are not coming)."""

    def __init__(self, queue: _Queue, coming: list[_Request]) -> None:
        self.queue, self.coming, self.waits = queue, coming, 0

    def wait(self, timeout: float | None = None) -> bool:
        if not self.coming:
            raise AssertionError(f"waited {timeout:.0f} s for a request that is not coming")
        self.waits += 1
        arriving = self.coming.pop(0)
        self.queue.pending.append(arriving)
        self.queue.stats.buffered_bytes += arriving.size
        return True


def requests(count: int, lines: int = 1) -> list[_Request]:
    return [_Request([f'{{"n": {i}}}'] * lines, None, 10 * lines, arrived=0.0) for i in range(count)]


def gather(last_group: int, waiting: int, coming: int, **settings: int) -> tuple[int, int, int]:
    """How many requests the group took, how many the committer waited for, and how many never arrived."""
    committer = GroupCommitter(None, None, lambda name: None,
                               IngestSettings(**{"flush_ms": MINUTE_MS, **settings}))  # type: ignore[arg-type]
    queue = _Queue("events")
    queue.last_group = last_group
    sent = requests(waiting + coming)
    queue.pending = sent[:waiting]
    queue.stats.buffered_bytes = sum(r.size for r in queue.pending)
    arrivals = Arrivals(queue, sent[waiting:])
    queue.cond = arrivals  # type: ignore[assignment]
    queue.committed = 1e12  # the group's flush_ms clock starts after this: never reached
    group = committer._gather(queue)
    assert group == sent[:len(group)], "requests are taken in their order"
    return len(group), arrivals.waits, len(arrivals.coming)


def test_a_group_is_cut_once_as_many_requests_wait_as_the_last_commit_answered():
    """Closed-loop clients (each waits for its answer before sending again): when the three the last commit
    answered are all back, nobody else is coming, so the group is cut without waiting for flush_ms."""
    assert gather(last_group=3, waiting=1, coming=2) == (3, 2, 0)
    assert gather(last_group=3, waiting=1, coming=5) == (3, 2, 3), "the fourth is not waited for"
    assert gather(last_group=2, waiting=4, coming=0) == (4, 0, 0), "more than were answered: cut at once"


def test_without_a_last_commit_or_short_of_it_the_group_waits_for_its_other_rules():
    assert gather(last_group=0, waiting=1, coming=3, flush_rows=4) == (4, 3, 0), "the first group: flush_rows cuts"
    assert gather(last_group=5, waiting=1, coming=2, flush_rows=3) == (3, 2, 0)
    with pytest.raises(AssertionError, match="not coming"):
        gather(last_group=4, waiting=1, coming=2)  # two of four are not back: it waits (here, for flush_ms)


def test_status_counts_each_way_a_group_commit_was_made():
    """`ingest_paths` (what `pipeframe status` shows per landing datasource) counts only group commits: typed
    without Spark by their record's `parse`, committed by pyarrow by the commit's engineInfo."""
    spark_writer = "Apache-Spark/3.5.3 Delta-Lake/3.2.1"
    made = [("arrow", ENGINE), ("spark", ENGINE), ("arrow", spark_writer), ("stream", spark_writer)]
    commits = [Commit(v, datetime(2024, 6, 1, tzinfo=UTC), 0.0, "WRITE", metadata=GroupCommit(requests=2, parse=parse),
                      engine=engine) for v, (parse, engine) in enumerate(made)]
    commits.append(Commit(9, datetime(2024, 6, 1, tzinfo=UTC), 0.0, "WRITE", metadata=Ingest(), engine=ENGINE))
    assert ingest_paths(commits) == {"commits_read": 5, "group_commits": 4, "typed_without_spark": 2,
                                     "committed_by_pyarrow": 2}
    assert ingest_paths([]) == {"commits_read": 0, "group_commits": 0, "typed_without_spark": 0,
                                "committed_by_pyarrow": 0}
