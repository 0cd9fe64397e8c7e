"""Applies a deploy Plan to the warehouse: builds new table versions beside the live ones, backfills them,
then swaps every change in with one state-store commit. A failure before that commit changes nothing live."""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from pipeframe.compiler.graph import ResourceKey
from pipeframe.engine import tables
from pipeframe.engine.conflicts import table_lock
from pipeframe.engine.materialize import Materializer
from pipeframe.engine.optimize import apply_ttl
from pipeframe.engine.warehouse import Warehouse, new_deployment_id, now
from pipeframe.errors import PipeframeError
from pipeframe.plan.diff import Change, Plan
from pipeframe.plan.snapshot import DeployedResource, DeployedSnapshot
from pipeframe.plan.state import ResourceState
from pipeframe.sqltext import first_line, quote_path, quote_string

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


Live = dict[ResourceKey, DeployedResource]


class ConflictingPlan(PipeframeError):
    """The deployed state changed between making a plan and applying it (another deploy or a rebuild landed)."""

    exit_code = 4
    http_status = 409


@dataclass(frozen=True)
class DeployResult:
    deployment: str
    changes: int
    plan: Plan


class Deployer:
    """Applies one plan. `on_step` hears about each step (progress output, and tests that act mid-deploy)."""

    def __init__(self, spark: SparkSession, warehouse: Warehouse,
                 on_step: Callable[[str, Change], None] | None = None) -> None:
        self.spark = spark
        self.warehouse = warehouse
        self.on_step = on_step or (lambda _step, _change: None)

    @functools.cached_property
    def _creates_directly(self) -> bool:
        return tables.creates_directly(self.spark, self.warehouse.shares_disk)

    def apply(self, plan: Plan, git_commit: str | None) -> DeployResult:
        """Apply `plan` under the deploy lock, to the deployed state it was made from: when another deploy (or a
        rebuild) changed that state since the plan was made, nothing is applied (ConflictingPlan, PF608)."""
        if plan.refused:
            raise PipeframeError("PF604", f"The plan has {len(plan.refused)} refused change(s); nothing was deployed.",
                                 "Fix the refused changes shown in the plan (or pass --allow-destructive for drops).")
        deployment = new_deployment_id()
        self.warehouse.acquire_lock(deployment)
        created: list[str] = []
        try:
            deployed = self.warehouse.snapshot(fresh=True)
            if plan.base is not None and deployed.fingerprint != plan.base:
                raise ConflictingPlan(
                    "PF608", "The deployed state changed since this plan was made (another deploy or a view rebuild "
                    "landed meanwhile); nothing was applied.",
                    "Run the command again: it plans against what is deployed now.")
            self.warehouse.record_start(deployment, git_commit, plan.to_json())
            live: Live = dict(deployed)
            for change in plan.changes:
                self.on_step("start", change)
                self._apply_change(change, live, created)
                self.on_step("done", change)
            self.warehouse.commit(deployment, live.values())
        except BaseException as exc:
            self._cleanup(created)
            started = not isinstance(exc, ConflictingPlan)
            message = exc.diagnostics[0].message if isinstance(exc, PipeframeError) else first_line(exc)
            try:
                if started:
                    self.warehouse.record_failure(deployment, message)
            finally:
                self.warehouse.release_lock(deployment)
            if isinstance(exc, PipeframeError) or not isinstance(exc, Exception):
                raise
            raise PipeframeError("PF603", f"Deploy failed: {message}",
                                 "Nothing was changed: the previous version is still live. Fix the cause and "
                                 "deploy again.") from None
        self.warehouse.release_lock(deployment)
        self._reset_view_records(plan, deployed, live)
        # After the swap: old versions of rebuilt tables and dropped tables are no longer read by anyone (a table a
        # view took over under another name is).
        kept = {r.path for r in live.values() if r.path}
        for change in plan.pending:
            before = deployed.get(change.key)
            after = live.get(change.key)
            if before is not None and before.path and before.path not in kept:
                self._remove(before.path)
            if after is not None and after.state.has_table and after.state.ttl and change.action != "drop":
                self._apply_ttl(after)
        return DeployResult(deployment, len(plan.pending), plan)

    def _reset_view_records(self, plan: Plan, before: DeployedSnapshot, after: Live) -> None:
        """A view built anew starts clean: no error, not stale, and paused only if paused with --permanent."""
        records = self.warehouse.view_records()
        for change in plan.pending:
            old, new = before.get(change.key), after.get(change.key)
            record = records.get(change.name)
            if record is None or (old is not None and new is not None and old.path == new.path):
                continue
            paused = record.paused and record.permanent and new is not None
            self.warehouse.save_view_record(replace(record, paused=paused, permanent=paused, stale_reason=None,
                                                        error=None, backfill=None))

    # --------------------------------------------------------------------------------- changes
    def _apply_change(self, change: Change, live: Live, created: list[str]) -> None:
        desired, current = change.desired, live.get(change.adopts or change.key)
        if change.action == "unchanged":
            return
        if change.action == "drop":
            live.pop(change.key, None)
            return
        assert desired is not None
        if not desired.has_table:
            live[change.key] = DeployedResource(desired, deployed_at=now())
            return
        if change.action == "alter" and current is not None and current.path:
            self._alter(current.path, change)
            live[change.key] = replace(current, state=desired)
            return
        version = (current.version + 1) if current is not None else 1
        path = self.warehouse.table_path(desired.name, version)
        self._remove(path)  # a leftover of an earlier failed deploy
        created.append(path)
        tables.create_table(self.spark, path, desired, self._creates_directly)
        new = DeployedResource(desired, version, path, now())
        if desired.kind == "view":
            self.on_step("backfill", change)
            self._backfill(new, {**live, change.key: new})
        elif current is not None and current.path:
            self._carry_over(current, desired, path)
        live[change.key] = new

    def _alter(self, path: str, change: Change) -> None:
        with table_lock(path):  # group commits of this process to the table wait (engine/deltaappend.py)
            self._alter_locked(path, change)

    def _alter_locked(self, path: str, change: Change) -> None:
        desired, table = change.desired, quote_path(path)
        assert desired is not None
        existing = {f.name for f in self.spark.read.format("delta").load(path).schema.fields}
        missing = [(n, t) for n, t in change.alter_columns if n not in existing]  # idempotent after a failure
        if missing:
            self.spark.sql(f"ALTER TABLE {table} ADD COLUMNS ({', '.join(f'`{n}` {t}' for n, t in missing)})")
        properties = {"comment": desired.description, "pipeframe.ttl": desired.ttl or "",
                      "delta.enableChangeDataFeed": "true"}
        props = ", ".join(f"'{k}' = {quote_string(v)}" for k, v in properties.items())
        self.spark.sql(f"ALTER TABLE {table} SET TBLPROPERTIES ({props})")
        before = change.deployed
        if before is not None and before.sorting_key != desired.sorting_key and not desired.partition_key:
            keys = ", ".join(f"`{k}`" for k in desired.sorting_key) or "NONE"
            self.spark.sql(f"ALTER TABLE {table} CLUSTER BY ({keys})" if desired.sorting_key
                           else f"ALTER TABLE {table} CLUSTER BY NONE")

    def _backfill(self, view: DeployedResource, live: Live) -> None:
        materializer = Materializer(self.spark, self.warehouse, DeployedSnapshot.of(live.values()))
        materializer.backfill_new_table(view)

    def _carry_over(self, current: DeployedResource, desired: ResourceState, path: str) -> None:
        """Copy a landing datasource's rows into its new version, through FORWARD_QUERY when given."""
        old = quote_path(current.path or "")
        if desired.forward_query:
            select = " ".join(desired.forward_query.split())
        else:
            kept = {name for name, _ in current.state.columns}
            select = ", ".join(f"`{n}`" if n in kept else f"CAST(NULL AS {t}) AS `{n}`" for n, t in desired.columns)
        frame = self.spark.sql(f"SELECT {select} FROM {old}")
        missing = [n for n, _ in desired.columns if n not in frame.columns]
        if missing:
            raise PipeframeError("PF606", f"FORWARD_QUERY of `{desired.name}` does not produce column(s) "
                                 f"{', '.join(missing)}.", "Select every column of the new SCHEMA in FORWARD_QUERY.")
        columns = [f"CAST(`{n}` AS {t}) AS `{n}`" for n, t in desired.columns]
        frame.selectExpr(*columns).write.format("delta").mode("append").save(path)

    def _apply_ttl(self, resource: DeployedResource) -> None:
        apply_ttl(self.spark, resource)

    # ------------------------------------------------------------------------------------ files
    def _cleanup(self, paths: list[str]) -> None:
        for path in paths:
            # Best effort: a later deploy removes any leftover before it reuses the path.
            with contextlib.suppress(Exception):
                self._remove(path)

    def _remove(self, path: str) -> None:
        tables.remove_path(self.spark, path)
