"""The warehouse's records (`plan/records.py`): every kind round-trips, the records the previous release wrote
(format 1, copied from warehouses it made) still read, a newer format is refused (PF610) and an unknown key is an
error (PF611). No JVM."""

from __future__ import annotations

import json
from dataclasses import fields, replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeframe.compiler import maintenance
from pipeframe.compiler.graph import ResourceKey
from pipeframe.compiler.maintenance_sql import maintenance_plan
from pipeframe.errors import PipeframeError
from pipeframe.plan import records
from pipeframe.plan.diff import NO_DATA_MOVED, diff
from pipeframe.plan.snapshot import DeployedResource
from pipeframe.plan.state import ResourceState

TEXT = st.text(max_size=12)
VERSION = st.integers(min_value=0, max_value=2**53)
COUNTS = st.dictionaries(TEXT, st.tuples(VERSION, VERSION), max_size=3)
JOINED = st.dictionaries(TEXT, VERSION, max_size=3)
OPTIONAL_TEXT = st.none() | TEXT
OPTIONAL_VERSION = st.none() | VERSION
BY_KIND = {
    records.Ingest: st.builds(records.Ingest, TEXT, COUNTS),
    records.GroupCommit: st.builds(records.GroupCommit, TEXT, COUNTS, VERSION, TEXT),
    records.FixtureLoad: st.builds(records.FixtureLoad, TEXT, COUNTS, TEXT, TEXT),
    records.ViewCommit: st.builds(records.ViewCommit, TEXT, TEXT, OPTIONAL_TEXT, OPTIONAL_VERSION, OPTIONAL_TEXT,
                                  OPTIONAL_VERSION, OPTIONAL_TEXT, JOINED, st.booleans(), OPTIONAL_TEXT),
    records.PopulateChunk: st.builds(records.PopulateChunk, TEXT, TEXT, VERSION, TEXT, JOINED),
    records.Compaction: st.builds(records.Compaction, TEXT, VERSION),
    records.CompactionRestore: st.builds(records.CompactionRestore, TEXT, VERSION, TEXT),
    records.Retention: st.just(records.Retention()),
    records.Partials: st.builds(records.Partials, VERSION, OPTIONAL_TEXT, TEXT, VERSION),
}
RECORDS = st.one_of(*(BY_KIND[kind] for kind in records.KINDS))  # a kind without a strategy: KeyError


@settings(max_examples=400, deadline=None)
@given(RECORDS)
def test_every_kind_of_commit_record_reads_back_as_written(record):
    text = records.encode(record)
    assert json.loads(text)["pipeframe"]["format"] == records.FORMAT
    assert records.decode(text, "commit 1 of t") == record


# Format 1: userMetadata exactly as the previous release (commit 2fc6979, no "format" key) wrote it, copied from the
# _delta_log of warehouses its code made: the starter project (`pipeframe init`'s) deployed, its fixtures loaded,
# rows appended as a list (a group commit) and as a file with an idempotency key, the view populated in chunks
# (--truncate) and optimized; and the warehouses of its spark tests (test_retractions' join views through partial
# states, test_views' FOLLOW_TTL). Each with what it reads as.
EVENTS = "/tmp/pf-harvest/popen-gw0/spark_project0/views/follow_ttl/.pipeframe/warehouse/tables/events/v1"
ORDERS = "/tmp/pf-harvest/popen-gw1/spark_project0/diff_joins_dda8d4b4/.pipeframe/warehouse/tables/orders/v1"
FORMAT_1 = [
    # the starter project's warehouse
    (('{"pipeframe": {"op": "fixture", "fixture": "477e8955bd65d85e", "file": "fixtures/events.ndjson", '
     '"commit": "b6e61c1327ac4252a53414ab02750939"}}'),
     records.FixtureLoad("b6e61c1327ac4252a53414ab02750939", {}, "477e8955bd65d85e", "fixtures/events.ndjson")),
    ('{"pipeframe": {"op": "events", "requests": 1, "parse": "arrow", "commit": "18680916249f4d799ce17cdfb2b6ddea"}}',
     records.GroupCommit("18680916249f4d799ce17cdfb2b6ddea", {}, 1, "arrow")),
    ('{"pipeframe": {"commit": "0b5e721c876d4656b4c4eb3084ebd587", "keys": {"k1": [1, 0]}}}',
     records.Ingest("0b5e721c876d4656b4c4eb3084ebd587", {"k1": (1, 0)})),
    (('{"pipeframe": {"view": "events_per_hour", "op": "populate", "run": "85552e27e9fd", "chunk": 1, '
     '"commit": "b288a20a02934e3fb833d3978762a610"}}'),
     records.PopulateChunk("events_per_hour", "85552e27e9fd", 1, "b288a20a02934e3fb833d3978762a610")),
    (('{"pipeframe": {"view": "events_per_hour", "backfill": "full", "commit": "c5a5054049ad4ae98d8f6b2833bf42f9", '
     '"source": "events", "source_version": 4, '
     '"source_path": "/tmp/pf-h/project/.pipeframe/warehouse/tables/events/v1"}}'),
     records.ViewCommit("events_per_hour", "c5a5054049ad4ae98d8f6b2833bf42f9", "events", 4,
                        "/tmp/pf-h/project/.pipeframe/warehouse/tables/events/v1", backfill="full")),
    ('{"pipeframe": {"view": "events_per_hour", "op": "compact", "compacted": 2}}',
     records.Compaction("events_per_hour", 2)),
    # the spark tests' warehouses: a join view through its source's partial states, FOLLOW_TTL
    (('{"pipeframe": {"view": "by_country", "backfill": "full", "joined": {"customers": 0}, '
     '"commit": "32f144e80c9047c38d7d23510758180d", "source": "orders", "source_version": 0, '
     f'"source_path": "{ORDERS}"}}}}'),
     records.ViewCommit("by_country", "32f144e80c9047c38d7d23510758180d", "orders", 0, ORDERS,
                        joined={"customers": 0}, backfill="full")),
    (('{"pipeframe": {"view": "by_country", "rows": 0, "path": "append", "joined": {"customers": 0}, '
     '"commit": "6430982a1d814178bc5a64f09f3c056a", "source": "orders", "source_version": 1, '
     f'"source_path": "{ORDERS}"}}}}'),
     records.ViewCommit("by_country", "6430982a1d814178bc5a64f09f3c056a", "orders", 1, ORDERS, 0, "append",
                        {"customers": 0})),
    (('{"pipeframe": {"view": "by_country", "path": "join-negate", "joined": {"customers": 1}, "rows": 1, '
     '"partials": true, "commit": "3c6432590e5f4fa7a8e71e1be4b83164", "source": "orders", "source_version": 2, '
     f'"source_path": "{ORDERS}"}}}}'),
     records.ViewCommit("by_country", "3c6432590e5f4fa7a8e71e1be4b83164", "orders", 2, ORDERS, 1, "join-negate",
                        {"customers": 1}, partials=True)),
    (('{"pipeframe": {"op": "partials", "source_version": 2, '
     f'"source_path": "{ORDERS}", "sql": "fa66ed838c422046", "appended": 0}}}}'),
     records.Partials(2, ORDERS, "fa66ed838c422046", 0)),
    ('{"pipeframe": {"op": "ttl"}}', records.Retention()),
    # a retraction through a MERGE (`replace_groups`) and one appended negated
    (('{"pipeframe": {"view": "followed", "rows": 3, "path": "recompute", '
      '"commit": "1359d76948f0454ead9ad5d95ec2d72f", '
     f'"source": "events", "source_version": 6, "source_path": "{EVENTS}"}}}}'),
     records.ViewCommit("followed", "1359d76948f0454ead9ad5d95ec2d72f", "events", 6, EVENTS, 3, "recompute")),
    (('{"pipeframe": {"view": "counted", "rows": 3, "path": "negate", "commit": "ff8a63834eca48fbb2bfca37effc4b0d", '
     f'"source": "events", "source_version": 6, "source_path": "{EVENTS}"}}}}'),
     records.ViewCommit("counted", "ff8a63834eca48fbb2bfca37effc4b0d", "events", 6, EVENTS, 3, "negate")),
    # no warehouse made here has one (a refresh must commit during `optimize`'s rewrite): the previous release's
    # `write_states(..., metadata={"op": "compact", "restored": version})` wrote {"view", **metadata, "commit"}
    ('{"pipeframe": {"view": "daily", "op": "compact", "restored": 4, "commit": "5d1c0a4a1f2b4e0c9d7e6f5a4b3c2d1e"}}',
     records.CompactionRestore("daily", 4, "5d1c0a4a1f2b4e0c9d7e6f5a4b3c2d1e")),
]


@pytest.mark.parametrize(("text", "expected"), FORMAT_1)
def test_records_the_previous_release_wrote_still_read(text, expected):
    assert "format" not in json.loads(text)["pipeframe"]
    assert records.decode(text, "commit 3 of the table at /w/t") == expected


def test_format_1_covers_every_kind():
    assert {type(expected) for _, expected in FORMAT_1} == set(records.KINDS)


def test_userMetadata_that_is_not_pipeframes_is_no_record():
    for text in (None, "", "free text", '{"other": {"op": "ttl"}}', "[1, 2]", '{"pipeframe": "x"}'):
        assert records.decode(text, "c") is None


@pytest.mark.parametrize("body", [
    {"format": records.FORMAT + 1, "view": "v", "source_version": 3},
    {"format": records.FORMAT + 7, "op": "a kind from the future", "anything": [1]},
])
def test_a_record_of_a_newer_format_is_refused_with_the_table_and_the_fix(body):
    with pytest.raises(PipeframeError) as err:
        records.decode(json.dumps({"pipeframe": body}), "Commit 4 of the table at /w/tables/v/v1")
    assert err.value.code == "PF610"
    assert "Commit 4 of the table at /w/tables/v/v1" in str(err.value) and f"format {body['format']}" in str(err.value)
    assert "Upgrade pipeframe" in err.value.diagnostics[0].hint


@pytest.mark.parametrize(("body", "named"), [
    ({"view": "v", "source_version": 3, "colour": "red"}, "colour"),  # format 1
    ({"format": records.FORMAT, "commit": "c", "keys": {}, "extra": 1}, "extra"),
    ({"format": 1, "op": "ttl", "view": "v"}, "view"),
    ({"op": "events", "commit": "c", "requests": 2, "parse": "arrow", "view": "v"}, "view"),
    ({"op": "partials", "source_version": 1, "source_path": None, "sql": "s", "appended": 0, "n": 1}, "n"),
    ({"op": "merge", "view": "v"}, "merge"),  # a kind no release wrote
    ({"view": "v", "source_version": "3"}, "wrong type"),
    ({"op": "compact", "view": "v"}, "wrong type"),  # neither compacted nor restored
    ({"format": 0, "view": "v"}, "format `0`"),
    ({"format": "2", "view": "v"}, "format `2`"),
])
def test_a_record_with_what_this_version_does_not_know_is_an_error_not_dropped(body, named):
    with pytest.raises(PipeframeError) as err:
        records.decode(json.dumps({"pipeframe": body}), "Commit 9 of the table at /w/t")
    assert err.value.code == "PF611"
    assert "Commit 9 of the table at /w/t" in str(err.value) and named in str(err.value)


# ----------------------------------------------------------------------------------------- the state store
# Resource records exactly as the previous release wrote them (`state` column of `_pipeframe/state`, no format),
# copied from the same warehouse: the landing datasource and the materialized view of the starter project.
STATE_FORMAT_1: list[str] = [
    ('{"key": "datasource:events", "name": "events", "kind": "datasource", "columns": [["ts", "TIMESTA'
     'MP"], ["user_id", "STRING"], ["event", "STRING"], ["value", "DOUBLE"]], "partition_key": "to_dat'
     'e(ts)", "sorting_key": ["event", "ts"], "view_pipe": null, "source": null, "joined": [], "state_'
     'sql": null, "keys": [], "read_sql": null, "compact_sql": null, "negate_sql": null, "backfill": n'
     'ull, "follow_ttl": false, "description": "Product analytics events, one row per user action.", "'
     'ttl": null, "tokens": [["ingest", "APPEND"]], "engine": null, "forward_query": null, "sql": null'
     ', "depends_on": []}'),
    ('{"key": "datasource:events_per_hour", "name": "events_per_hour", "kind": "view", "columns": [["h'
     'our", "TIMESTAMP"], ["event", "STRING"], ["events", "BIGINT"], ["total_value", "DOUBLE"], ["user'
     's", "BINARY"]], "partition_key": null, "sorting_key": [], "view_pipe": "events_per_hour", "sourc'
     'e": "events", "joined": [], "state_sql": "SELECT DATE_TRUNC(\'HOUR\', ts) AS hour, event, COUNT(*)'
     " AS `events`, SUM(value) AS `total_value`, HLL_SKETCH_AGG(IF(CAST(user_id AS STRING) = '', '\\\\0'"
     ", CAST(user_id AS STRING))) AS `users` FROM __pf_batch AS events GROUP BY DATE_TRUNC('HOUR', ts)"
     ', event", "keys": ["hour", "event"], "read_sql": "SELECT `hour`, `event`, sum(`events`) AS `even'
     'ts`, sum(`total_value`) AS `total_value`, hll_sketch_estimate(hll_union_agg(`users`, true)) AS `'
     'users` FROM {table} GROUP BY `hour`, `event` HAVING sum(`events`) > 0", "compact_sql": "SELECT `'
     'hour`, `event`, sum(`events`) AS `events`, sum(`total_value`) AS `total_value`, hll_union_agg(`u'
     'sers`, true) AS `users` FROM {table} GROUP BY `hour`, `event` HAVING sum(`events`) > 0", "negate'
     '_sql": null, "backfill": null, "follow_ttl": false, "description": "", "ttl": null, "tokens": []'
     ', "engine": null, "forward_query": null, "sql": null, "depends_on": ["datasource:events"]}'),
    ('{"key": "pipe:top_events", "name": "top_events", "kind": "endpoint", "columns": [], "partition_k'
     'ey": null, "sorting_key": [], "view_pipe": null, "source": null, "joined": [], "state_sql": null'
     ', "keys": [], "read_sql": null, "compact_sql": null, "negate_sql": null, "backfill": null, "foll'
     'ow_ttl": false, "description": "The most frequent events, with their total value.", "ttl": null,'
     ' "tokens": [["dashboard", "READ"]], "engine": null, "forward_query": null, "sql": "SELECT event,'
     ' SUM(events) AS events, ROUND(SUM(total_value), 2) AS total_value FROM events_per_hour GROUP BY '
     'event ORDER BY events DESC, event LIMIT 5", "depends_on": ["datasource:events_per_hour"]}'),
]


def test_resource_states_the_previous_release_wrote_still_read_and_write_back_with_a_format():
    assert STATE_FORMAT_1
    for text in STATE_FORMAT_1:
        state = records.decode_state(text, "the record of x")
        # nothing lost, nothing added but the maintenance plan those records did not have (format 3)
        assert json.loads(json.dumps(state.to_json())) == {**json.loads(text), "maintenance": None}
        again = records.encode_state(state)
        assert json.loads(again) == {"format": records.FORMAT, **json.loads(text), "maintenance": None}
        assert records.decode_state(again, "the record of x") == state


PARTIALS = st.builds(maintenance.Partials, st.lists(TEXT, max_size=2).map(tuple), TEXT, TEXT, TEXT,
                     st.lists(st.tuples(TEXT, TEXT), max_size=2).map(tuple))
PLANS = st.none() | st.builds(maintenance.MaintenancePlan, TEXT, st.lists(TEXT, max_size=2).map(tuple),
                              st.none() | PARTIALS)
STATES = st.builds(
    ResourceState, st.sampled_from([ResourceKey.datasource("s"), ResourceKey.pipe("p")]), TEXT,
    st.sampled_from(["datasource", "view", "endpoint", "copy", "materialized", "pipe"]),
    columns=st.lists(st.tuples(TEXT, TEXT), max_size=3).map(tuple), partition_key=OPTIONAL_TEXT,
    sorting_key=st.lists(TEXT, max_size=2).map(tuple), joined=st.lists(TEXT, max_size=2).map(tuple),
    keys=st.lists(TEXT, max_size=2).map(tuple), negate_sql=OPTIONAL_TEXT, follow_ttl=st.booleans(), maintenance=PLANS,
    tokens=st.lists(st.tuples(TEXT, TEXT), max_size=2).map(tuple),
    depends_on=st.lists(st.sampled_from([ResourceKey.datasource("a"), ResourceKey.pipe("b")]), max_size=2).map(tuple))


@settings(max_examples=200, deadline=None)
@given(STATES)
def test_resource_states_read_back_as_written(state):
    assert records.decode_state(records.encode_state(state), "r") == state


def test_a_resource_record_of_a_newer_format_or_with_an_unknown_key_is_refused():
    stored = json.loads(records.encode_state(ResourceState(ResourceKey.datasource("s"), "s", "datasource")))
    with pytest.raises(PipeframeError) as err:
        records.decode_state(json.dumps({**stored, "format": records.FORMAT + 1}), "The record of `datasource:s`")
    assert err.value.code == "PF610" and "The record of `datasource:s`" in str(err.value)
    for extra in ({"retention_days": 3}, {"format": 1, "retention_days": 3}):
        with pytest.raises(PipeframeError) as err:
            records.decode_state(json.dumps({**stored, **extra}), "The record of `datasource:s`")
        assert err.value.code == "PF611" and "retention_days" in str(err.value)
    for broken in ("not json", "[]", json.dumps({k: v for k, v in stored.items() if k != "kind"})):
        with pytest.raises(PipeframeError) as err:
            records.decode_state(broken, "The record of `datasource:s`")
        assert err.value.code == "PF611"


def test_a_view_deployed_before_plans_were_recorded_is_refused_until_a_deploy_records_its_plan():
    """The view of a format-1 warehouse reads with no plan; the engine does not derive one from its SQL but refuses
    it (PF612, naming the fix); the deploy plan records it as a change of state only, and the view it writes back
    is maintained."""
    from pipeframe.engine.materialize import maintained

    deployed = {s.key: s for s in (records.decode_state(t, "r") for t in STATE_FORMAT_1)}
    old = deployed[ResourceKey.datasource("events_per_hour")]
    assert old.kind == "view" and old.maintenance is None
    with pytest.raises(PipeframeError) as err:
        maintained(DeployedResource(old, 1, "/w/events_per_hour"))
    assert err.value.code == "PF612" and "`events_per_hour`" in str(err.value) and "Run `pipeframe deploy`" in str(err.value)
    plan = maintenance_plan(old.state_sql, old.compact_sql, old.negate_sql, old.joined,
                            [("ts", "TIMESTAMP"), ("user_id", "STRING"), ("event", "STRING"), ("value", "DOUBLE")], {},
                            old.keys)
    desired = {**deployed, old.key: replace(old, maintenance=plan)}
    changes = {c.key: c for c in diff(desired, deployed).changes}
    change = changes[old.key]
    assert (change.action, change.summary) == ("alter", NO_DATA_MOVED)
    assert change.details == ("maintenance plan recorded (deployed by an older pipeframe)",)
    assert all(c.action == "unchanged" for k, c in changes.items() if k != old.key)
    written = records.decode_state(records.encode_state(change.desired), "r")
    assert maintained(DeployedResource(written, 1, "/w/events_per_hour")) == plan
    assert "FROM {table} AS events GROUP BY" in plan.state_sql


def test_a_maintenance_plan_with_a_key_this_pipeframe_does_not_know_is_refused():
    state = ResourceState(ResourceKey.datasource("v"), "v", "view", maintenance=maintenance.MaintenancePlan(
        "SELECT 1 FROM {table}", partials=maintenance.Partials((), "a", "b", "c", ())))
    stored = json.loads(records.encode_state(state))
    for broken in ({**stored["maintenance"], "strategy": "x"},
                   {**stored["maintenance"], "partials": {**stored["maintenance"]["partials"], "strategy": "x"}}):
        with pytest.raises(PipeframeError) as err:
            records.decode_state(json.dumps({**stored, "maintenance": broken}), "The record of `datasource:v`")
        assert err.value.code == "PF611" and "strategy" in str(err.value)
    with pytest.raises(PipeframeError) as err:
        records.decode_state(json.dumps({**stored, "maintenance": "SELECT"}), "The record of `datasource:v`")
    assert err.value.code == "PF611"


def test_a_resource_record_names_every_field_of_a_resource():
    stored = json.loads(records.encode_state(ResourceState(ResourceKey.datasource("s"), "s", "datasource")))
    # `writers` only where there are some (a datasource several pipes write): other records hash as they did before
    assert set(stored) == {"format"} | {f.name for f in fields(ResourceState)} - {"writers"}
    shared = ResourceState(ResourceKey.datasource("s"), "s", "shared", writers=("s__a", "s__b"))
    assert json.loads(records.encode_state(shared))["writers"] == ["s__a", "s__b"]
    assert records.decode_state(records.encode_state(shared), "s") == shared
