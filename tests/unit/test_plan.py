"""Deploy planning (PRODUCT.md section 6) without a JVM: two compiled versions of a project, diffed.

The deployed side is always a real earlier compile, round-tripped through JSON as the state store keeps it.
"""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from pipeframe.compiler.graph import ResourceKey
from pipeframe.plan import records
from pipeframe.plan.diff import Change, Plan, diff
from pipeframe.plan.render import plan_lines, print_plan
from pipeframe.plan.state import ResourceState, desired_state
from pipeframe.project import Project
from tests.conftest import DAILY, EVENTS, HOURLY, write_project

EXAMPLE = Path(__file__).resolve().parents[2] / "example_project"

TOP = """\
TOKEN "dashboard" READ
NODE top
SQL >
    SELECT hour, n FROM hourly ORDER BY n DESC LIMIT 10
TYPE endpoint
"""
BASE = {"datasources/events.datasource": EVENTS, "pipes/hourly.pipe": HOURLY, "pipes/daily.pipe": DAILY,
        "pipes/top.pipe": TOP}


def states(root: Path) -> dict[ResourceKey, ResourceState]:
    return desired_state(Project(root, environ={}).require_valid())


def stored(desired: dict[ResourceKey, ResourceState]) -> dict[ResourceKey, ResourceState]:
    """What the state store gives back: every state through its record's text (`records`)."""
    return {key: records.decode_state(records.encode_state(s), str(key)) for key, s in desired.items()}


@pytest.fixture
def evolve(tmp_path):
    """evolve(after, remove=...) → the plan from BASE + `before` (deployed) to that + `after` - `remove` (desired);
    `before` maps a file to None to leave it out of BASE."""

    def run(after: dict[str, str], remove: tuple[str, ...] = (), before: dict[str, str | None] | None = None,
            allow_destructive: bool = False) -> Plan:
        files = {rel: text for rel, text in {**BASE, **(before or {})}.items() if text is not None}
        root = write_project(tmp_path / f"v{len(list(tmp_path.iterdir()))}", files)
        deployed = stored(states(root))
        write_project(root, after)
        for rel in remove:
            (root / rel).unlink()
        return diff(states(root), deployed, allow_destructive=allow_destructive)

    return run


def pending(plan: Plan) -> dict[str, tuple[str, str]]:
    return {str(c.key): (c.action, c.summary) for c in plan.pending}


def by_key(plan: Plan) -> dict[str, Change]:
    return {str(c.key): c for c in plan.changes}


# ----------------------------------------------------------------------------------------------- no change
def test_same_files_twice_change_nothing():
    desired = states(EXAMPLE)
    plan = diff(desired, stored(desired))
    assert [c.key for c in plan.changes] == list(desired)
    assert {c.action for c in plan.changes} == {"unchanged"}
    assert (plan.pending, plan.refused, plan.has_changes, plan.exit_code()) == ([], [], False, 0)
    assert plan_lines(plan) == [("green", "No changes: the deployment matches the files.")]


# ------------------------------------------------------------------------------------------------- create
def test_empty_warehouse_creates_everything_in_dependency_order():
    desired = states(EXAMPLE)
    plan = diff(desired, {})
    assert [c.key for c in plan.changes] == list(desired)
    assert {c.action for c in plan.changes} == {"create"} and plan.exit_code() == 2
    summaries = {str(c.key): c.summary for c in plan.changes}
    assert summaries["datasource:sales"] == "new table"
    assert summaries["datasource:sales_by_hour"] == "create and backfill from `sales`"
    assert summaries["datasource:sales_by_day"] == "create and backfill from `sales_by_hour`"
    assert summaries["pipe:top_products"] == "new endpoint"
    assert summaries["pipe:daily_snapshot"] == "new copy pipe"
    change = by_key(plan)["datasource:sales_by_hour"]
    assert (change.kind, change.desired, change.deployed) == ("view", desired[ResourceKey.datasource("sales_by_hour")], None)


def test_new_file_is_created_beside_unchanged_ones(evolve):
    plan = evolve({"datasources/users.datasource": "SCHEMA >\n    `id` STRING\n"})
    assert pending(plan) == {"datasource:users": ("create", "new table")}
    assert by_key(plan)["datasource:users"].deployed is None


# -------------------------------------------------------------------------------------------------- alter
def test_description_edit_is_an_alter_that_moves_no_data(evolve):
    plan = evolve({"datasources/events.datasource": EVENTS.replace("Raw events", "Raw click events")})
    assert pending(plan) == {"datasource:events": ("alter", "no data moved")}
    change = by_key(plan)["datasource:events"]
    assert (change.details, change.alter_columns, change.refused) == (("description changed",), (), None)
    assert plan.exit_code() == 2


def test_added_column_is_an_alter_with_the_columns_to_add(evolve):
    plan = evolve({"datasources/events.datasource": EVENTS.replace("`amount` INT", "`amount` INT,\n    `country` STRING")})
    assert pending(plan) == {"datasource:events": ("alter", "add column `country`")}
    change = by_key(plan)["datasource:events"]
    assert change.alter_columns == (("country", "STRING"),)
    assert change.details == ("add column `country` STRING",)


def test_two_added_columns(evolve):
    schema = "`amount` INT,\n    `country` STRING,\n    `price` DOUBLE"
    plan = evolve({"datasources/events.datasource": EVENTS.replace("`amount` INT", schema)})
    assert pending(plan) == {"datasource:events": ("alter", "add columns `country`, `price`")}
    assert by_key(plan)["datasource:events"].alter_columns == (("country", "STRING"), ("price", "DOUBLE"))


def test_sorting_key_change_is_an_alter(evolve):
    plan = evolve({"datasources/events.datasource": EVENTS.replace("KEY user_id", "KEY ts, user_id")})
    assert pending(plan) == {"datasource:events": ("alter", "no data moved")}
    assert by_key(plan)["datasource:events"].details == ("clustering: user_id → ts, user_id",)


def test_ttl_added_is_an_alter(evolve):
    plan = evolve({"datasources/events.datasource": EVENTS + "ENGINE_TTL ts + INTERVAL 90 DAYS\n"})
    assert pending(plan) == {"datasource:events": ("alter", "no data moved")}
    assert by_key(plan)["datasource:events"].details == ("ttl: none → ts + INTERVAL 90 DAYS",)


def test_endpoint_query_and_token_changes_are_alters(evolve):
    top = TOP.replace("LIMIT 10", "LIMIT 5").replace('TOKEN "dashboard" READ', 'TOKEN "dashboard" READ\nTOKEN "ci" READ')
    plan = evolve({"pipes/top.pipe": top})
    assert pending(plan) == {"pipe:top": ("alter", "no data moved")}
    assert by_key(plan)["pipe:top"].details == ("query changed", "token `ci` added (READ)")


def test_view_description_is_an_alter(evolve):
    target = "DESCRIPTION >\n    Hourly\nSCHEMA >\n    `hour` TIMESTAMP,\n    `n` BIGINT,\n    `total` BIGINT\n"
    plan = evolve({"datasources/hourly.datasource": target.replace("Hourly", "Events per hour")},
                  before={"datasources/hourly.datasource": target})
    assert pending(plan) == {"datasource:hourly": ("alter", "no data moved")}
    assert by_key(plan)["datasource:hourly"].details == ("description changed",)


# ----------------------------------------------------------------------------------- landing type changes
def test_type_change_without_forward_query_is_refused_naming_the_column(evolve):
    after = {"datasources/events.datasource": EVENTS.replace("`amount` INT", "`amount` STRING")}
    for allow in (False, True):
        plan = evolve(after, allow_destructive=allow)
        [refused] = plan.refused
        assert (str(refused.key), refused.action) == ("datasource:events", "rebuild")
        assert refused.refused == ("column `amount` changes type INT → STRING; existing rows cannot be converted "
                                   "without a FORWARD_QUERY")
        assert refused.hint == ("Add a FORWARD_QUERY > block to events.datasource that selects the old columns "
                                "into the new types, e.g. CAST(amount AS STRING) AS amount")
        assert "column `amount`: INT → STRING" in refused.details
        assert plan.exit_code() == 3


def test_type_change_with_forward_query_rebuilds_and_cascades_to_views(evolve):
    events = (EVENTS.replace("`user_id` STRING", "`user_id` BIGINT")
              + "FORWARD_QUERY >\n    ts, CAST(user_id AS BIGINT) AS user_id, amount\n")
    plan = evolve({"datasources/events.datasource": events})
    assert plan.refused == [] and plan.exit_code() == 2
    assert pending(plan) == {
        "datasource:events": ("rebuild", "rebuild: carry rows over with FORWARD_QUERY"),
        "datasource:hourly": ("rebuild", "rebuild and backfill from `events`"),
        "datasource:daily": ("rebuild", "rebuild and backfill from `hourly`"),
    }
    changes = by_key(plan)
    assert changes["datasource:events"].details == ("column `user_id`: STRING → BIGINT", "FORWARD_QUERY added")
    assert changes["datasource:events"].cause is None
    assert (str(changes["datasource:hourly"].cause), changes["datasource:hourly"].details) == (
        "datasource:events", ("upstream `events` is rebuilt",))
    assert (str(changes["datasource:daily"].cause), changes["datasource:daily"].details) == (
        "datasource:hourly", ("upstream `hourly` is rebuilt",))
    assert changes["pipe:top"].action == "unchanged"  # pipes own no table: nothing to rebuild


def test_removed_column_is_destructive(evolve):
    after = {"datasources/events.datasource": EVENTS.replace("    `user_id` STRING,\n", "").replace("KEY user_id", "KEY ts")}
    refused = evolve(after)
    [change] = refused.refused
    assert change.refused == "removing `user_id` from `events` loses its values in every existing row"
    assert change.hint == ("Re-run with --allow-destructive if those values can go; to keep them, keep the column "
                           "in the SCHEMA of events.datasource.")
    assert refused.exit_code() == 3
    allowed = evolve(after, allow_destructive=True)
    assert allowed.refused == [] and allowed.exit_code() == 2
    change = by_key(allowed)["datasource:events"]
    assert (change.action, change.summary, change.details) == (
        "rebuild", "rebuild: drop column `user_id` (its values are lost)", ("drop column `user_id`", "clustering: user_id → ts"))


def test_reordered_columns_rebuild_carrying_rows_over(evolve):
    schema = "    `user_id` STRING,\n    `ts` TIMESTAMP,\n"
    plan = evolve({"datasources/events.datasource": EVENTS.replace("    `ts` TIMESTAMP,\n    `user_id` STRING,\n",
                                                                   schema)})
    change = by_key(plan)["datasource:events"]
    assert (change.action, change.summary, change.details, change.refused) == (
        "rebuild", "rebuild: carry rows over in the new column order", ("column order changed",), None)


def test_partition_key_change_rebuilds(evolve):
    plan = evolve({"datasources/events.datasource": EVENTS + "ENGINE_PARTITION_KEY to_date(ts)\n"})
    change = by_key(plan)["datasource:events"]
    assert (change.action, change.summary, change.details) == (
        "rebuild", "rebuild: repartition rows", ("partition key: none → to_date(ts)",))
    assert pending(plan)["datasource:hourly"] == ("rebuild", "rebuild and backfill from `events`")


# ------------------------------------------------------------------------------------------ view rebuilds
def test_view_query_change_rebuilds_it_and_its_downstream_views(evolve):
    plan = evolve({"pipes/hourly.pipe": HOURLY.replace("FROM events", "FROM events WHERE amount > 0")})
    assert pending(plan) == {
        "datasource:hourly": ("rebuild", "rebuild and backfill from `events`"),
        "datasource:daily": ("rebuild", "rebuild and backfill from `hourly`"),
    }
    changes = by_key(plan)
    assert (changes["datasource:hourly"].details, changes["datasource:hourly"].cause) == (("view query changed",), None)
    assert str(changes["datasource:daily"].cause) == "datasource:hourly"
    assert changes["datasource:daily"].details == ("upstream `hourly` is rebuilt",)


def test_cascade_turns_an_alter_into_a_rebuild_keeping_its_details(evolve):
    daily = DAILY.replace("NODE daily", "DESCRIPTION >\n    Per day\nNODE daily")
    plan = evolve({"pipes/hourly.pipe": HOURLY.replace("count(*)", "count(amount)"),
                   "datasources/daily.datasource": "DESCRIPTION >\n    Per day\nSCHEMA >\n    `day` TIMESTAMP,\n"
                                                   "    `n` BIGINT\n", "pipes/daily.pipe": daily})
    change = by_key(plan)["datasource:daily"]
    assert change.action == "rebuild" and str(change.cause) == "datasource:hourly"
    assert change.details == ("description changed", "upstream `hourly` is rebuilt")


def test_backfill_skip_summaries(evolve):
    target = "SCHEMA >\n    `hour` TIMESTAMP,\n    `n` BIGINT,\n    `total` BIGINT\nBACKFILL skip\n"
    created = evolve({"datasources/hourly.datasource": target, "pipes/hourly2.pipe": HOURLY.replace(
        "DATASOURCE hourly", "DATASOURCE hourly2"), "datasources/hourly2.datasource": target})
    assert pending(created)["datasource:hourly2"] == ("create", "new table, no backfill (BACKFILL skip)")
    rebuilt = evolve({"pipes/hourly.pipe": HOURLY.replace("FROM events", "FROM events WHERE amount > 0")},
                     before={"datasources/hourly.datasource": target})
    assert pending(rebuilt)["datasource:hourly"] == ("rebuild", "rebuild, no backfill (BACKFILL skip)")


def test_following_ttl_deletes_is_an_alter_that_moves_no_data(evolve):
    change = by_key(evolve({"pipes/hourly.pipe": HOURLY + "FOLLOW_TTL true\n"}))["datasource:hourly"]
    assert (change.action, change.details) == ("alter", ("follows TTL deletes: no → yes",))


def test_landing_table_turned_into_a_view_target_is_destructive(evolve):
    target = "SCHEMA >\n    `hour` TIMESTAMP,\n    `n` BIGINT,\n    `total` BIGINT\n"
    before = {"datasources/hourly.datasource": target, "pipes/hourly.pipe": None, "pipes/daily.pipe": None,
              "pipes/top.pipe": None}
    plan = evolve({"pipes/hourly.pipe": HOURLY}, before=before)
    change = by_key(plan)["datasource:hourly"]
    assert (change.action, change.summary) == ("rebuild", "rebuild and backfill from `events`")
    assert change.refused == ("`hourly` becomes the target of materialized view `hourly`: the rows appended to it "
                              "so far would be replaced by the backfill")
    allowed = evolve({"pipes/hourly.pipe": HOURLY}, before=before, allow_destructive=True)
    assert allowed.refused == [] and by_key(allowed)["datasource:hourly"].action == "rebuild"


# ------------------------------------------------------------------------------------------------- drops
def test_removed_file_is_a_refused_drop_unless_allowed(evolve):
    plan = evolve({}, remove=("pipes/daily.pipe",))
    assert pending(plan) == {"datasource:daily": ("drop", "drop table and its rows")}
    [change] = plan.refused
    assert change.refused == "view `daily` was removed: its table and all its rows would be lost"
    assert change.hint == "Re-run with --allow-destructive to drop it, or restore its file."
    assert plan.changes[-1] is change and plan.exit_code() == 3
    allowed = evolve({}, remove=("pipes/daily.pipe",), allow_destructive=True)
    assert allowed.refused == [] and allowed.exit_code() == 2
    assert (allowed.changes[-1].action, str(allowed.changes[-1].deployed.key)) == ("drop", "datasource:daily")


def test_removed_endpoint_is_a_drop_too(evolve):
    plan = evolve({}, remove=("pipes/top.pipe",), allow_destructive=True)
    assert pending(plan) == {"pipe:top": ("drop", "remove endpoint")}


def test_dropping_what_a_view_reads_is_refused_with_dependents_even_when_allowed():
    deployed = stored(states(EXAMPLE))
    desired = {k: s for k, s in states(EXAMPLE).items() if str(k) != "datasource:sales"}
    for allow in (False, True):
        plan = diff(desired, deployed, allow_destructive=allow)
        [change] = plan.refused
        assert (str(change.key), change.action) == ("datasource:sales", "drop")
        assert change.refused == "`sales` is read by customers_by_country, sales_by_category, sales_by_hour"
        assert change.hint == ("Remove or change customers_by_country, sales_by_category, sales_by_hour first, "
                               "then drop `sales` with --allow-destructive.")
        assert plan.exit_code() == 3


def test_drops_come_last_dependents_first():
    plan = diff({}, stored(states(EXAMPLE)), allow_destructive=True)
    order = [c.key for c in plan.changes]
    assert {c.action for c in plan.changes} == {"drop"} and len(order) == len(states(EXAMPLE))
    for change in plan.changes:
        for upstream in change.deployed.depends_on:
            assert order.index(change.key) < order.index(upstream), (change.key, upstream)


# ------------------------------------------------------------------------------------------ JSON and text
def test_plan_json_for_ci(evolve):
    plan = evolve({"datasources/events.datasource": EVENTS.replace("`amount` INT", "`amount` INT,\n    `country` STRING")})
    data = json.loads(json.dumps(plan.to_json()))
    assert (data["has_changes"], data["refused"], data["exit_code"]) == (True, 0, 2)
    assert [c["key"] for c in data["changes"]] == ["datasource:events", "datasource:hourly", "pipe:top",
                                                   "datasource:daily"]
    assert data["changes"][0] == {
        "key": "datasource:events", "name": "events", "kind": "datasource", "action": "alter",
        "summary": "add column `country`", "details": ["add column `country` STRING"], "refused": None,
        "hint": None, "alter_columns": [["country", "STRING"]], "cause": None, "adopts": None}
    assert data["changes"][1]["action"] == "unchanged"
    refused = evolve({}, remove=("pipes/daily.pipe",)).to_json()
    assert (refused["refused"], refused["exit_code"], refused["changes"][-1]["action"]) == (1, 3, "drop")


def test_plan_lines_one_per_resource_with_details(evolve):
    plan = evolve({"datasources/events.datasource": EVENTS.replace("Raw events", "Raw click events"),
                   "pipes/hourly.pipe": HOURLY.replace("FROM events", "FROM events WHERE amount > 0"),
                   "datasources/users.datasource": "SCHEMA >\n    `id` STRING\n"},
                  before={"datasources/old.datasource": "SCHEMA >\n    `id` STRING\n"},
                  remove=("datasources/old.datasource",), allow_destructive=True)
    assert plan_lines(plan) == [
        ("yellow", "~ alter   datasource events  no data moved"),
        ("dim", "    description changed"),
        ("green", "+ create  datasource users   new table"),
        ("magenta", "± rebuild view       hourly  rebuild and backfill from `events`"),
        ("dim", "    view query changed"),
        ("magenta", "± rebuild view       daily   rebuild and backfill from `hourly`"),
        ("dim", "    upstream `hourly` is rebuilt"),
        ("red", "- drop    datasource old     drop table and its rows"),
        ("bold", "Plan: 1 to create, 1 to alter, 2 to rebuild, 1 to drop, 1 unchanged"),
    ]
    with_unchanged = plan_lines(plan, show_unchanged=True)
    assert ("dim", "  unchanged endpoint   top     unchanged") in with_unchanged
    assert len(with_unchanged) == len(plan_lines(plan)) + 1


REFUSED_USER_ID = ("column `user_id` changes type STRING → BIGINT; existing rows cannot be converted without a "
                   "FORWARD_QUERY")
HINT_USER_ID = ("Add a FORWARD_QUERY > block to events.datasource that selects the old columns into the new types, "
                "e.g. CAST(user_id AS BIGINT) AS user_id")


def test_plan_lines_mark_refused_changes(evolve):
    plan = evolve({"datasources/events.datasource": EVENTS.replace("`user_id` STRING", "`user_id` BIGINT")})
    assert plan_lines(plan) == [
        ("magenta", "± rebuild datasource events  rebuild: convert column types"),
        ("dim", "    column `user_id`: STRING → BIGINT"),
        ("bold red", f"    ✗ refused: {REFUSED_USER_ID}"),
        ("red", f"      fix: {HINT_USER_ID}"),
        ("magenta", "± rebuild view       hourly  rebuild and backfill from `events`"),
        ("dim", "    upstream `events` is rebuilt"),
        ("magenta", "± rebuild view       daily   rebuild and backfill from `hourly`"),
        ("dim", "    upstream `hourly` is rebuilt"),
        ("bold", "Plan: 0 to create, 0 to alter, 3 to rebuild, 0 to drop, 1 unchanged"),
        ("bold red", "Refused: 1 change(s) cannot be deployed as they are (see ✗ above); nothing will be deployed."),
    ]


def test_print_plan_escapes_markup():
    from rich.console import Console

    change = Change(key="pipe:p", name="p", kind="endpoint", action="alter", summary="no data moved",
                    details=("query changed: [/] [bold]x",))
    out = io.StringIO()
    print_plan(Plan((change,)), Console(file=out, width=200, color_system=None))
    assert out.getvalue().splitlines() == [
        "~ alter endpoint p  no data moved",
        "    query changed: [/] [bold]x",
        "Plan: 0 to create, 1 to alter, 0 to rebuild, 0 to drop, 0 unchanged",
    ]
