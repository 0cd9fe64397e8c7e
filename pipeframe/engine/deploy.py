"""Applies a deploy Plan to the warehouse: builds new table versions beside the live ones, backfills them,
then swaps every change in with one state-store commit. A failure before that commit changes nothing live."""

from __future__ import annotations

import contextlib
import json
import re
import shutil
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from pipeframe.engine.warehouse import DeployedResource, Warehouse, _first_line, new_deployment_id, now, quote_path
from pipeframe.errors import PipeframeError
from pipeframe.plan.diff import Change, Plan
from pipeframe.plan.state import ResourceState

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

BATCH_VIEW = "__pf_batch"
PARTITION_COLUMN = "__pf_partition"
IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


@dataclass(frozen=True)
class DeployResult:
    deployment: str
    changes: int
    plan: Plan


def watermark_app_id(view: str) -> str:
    """Delta idempotent-write id under which a view records the last source version it applied."""
    return f"pipeframe:{view}"


def write_states(frame: DataFrame, state: ResourceState, path: str, source_version: int) -> None:
    """Append view rows and record the source version they cover, in the same Delta commit (Delta's
    idempotent writes: a replay of the same version is skipped)."""
    columns = [f"CAST(`{name}` AS {type_}) AS `{name}`" for name, type_ in state.columns]
    metadata = json.dumps({"pipeframe": {"view": state.name, "source": state.source,
                                         "source_version": source_version}})
    (frame.selectExpr(*columns).write.format("delta").mode("append")
     .option("txnAppId", watermark_app_id(state.name)).option("txnVersion", source_version)
     .option("userMetadata", metadata).save(path))


class Deployer:
    """Applies one plan. `on_step` hears about each step (progress output, and tests that act mid-deploy)."""

    def __init__(self, spark: SparkSession, warehouse: Warehouse,
                 on_step: Callable[[str, Change], None] | None = None) -> None:
        self.spark = spark
        self.warehouse = warehouse
        self.on_step = on_step or (lambda _step, _change: None)

    def apply(self, plan: Plan, desired_order: list[str], git_commit: str | None) -> DeployResult:
        if plan.refused:
            raise PipeframeError("PF604", f"The plan has {len(plan.refused)} refused change(s); nothing was deployed.",
                                 "Fix the refused changes shown in the plan (or pass --allow-destructive for drops).")
        deployment = new_deployment_id()
        self.warehouse.acquire_lock(deployment)
        created: list[str] = []
        try:
            self.warehouse.record_start(deployment, git_commit, plan.to_json())
            deployed = self.warehouse.deployed()
            live = dict(deployed)
            for change in plan.changes:
                self.on_step("start", change)
                self._apply_change(change, live, created)
                self.on_step("done", change)
            order = [k for k in desired_order if k in live]
            self.warehouse.commit(deployment, [live[k] for k in order], order)
        except BaseException as exc:
            self._cleanup(created)
            message = exc.diagnostics[0].message if isinstance(exc, PipeframeError) else _first_line(exc)
            try:
                self.warehouse.record_failure(deployment, message)
            finally:
                self.warehouse.release_lock(deployment)
            if isinstance(exc, PipeframeError) or not isinstance(exc, Exception):
                raise
            raise PipeframeError("PF603", f"Deploy failed: {message}",
                                 "Nothing was changed: the previous version is still live. Fix the cause and "
                                 "deploy again.") from None
        self.warehouse.release_lock(deployment)
        # After the swap: old versions of rebuilt tables and dropped tables are no longer read by anyone.
        for change in plan.pending:
            before = deployed.get(change.key)
            after = live.get(change.key)
            if before is not None and before.path and (after is None or after.path != before.path):
                self._remove(before.path)
            if after is not None and after.state.has_table and after.state.ttl and change.action != "drop":
                self._apply_ttl(after)
        return DeployResult(deployment, len(plan.pending), plan)

    # --------------------------------------------------------------------------------- changes
    def _apply_change(self, change: Change, live: dict[str, DeployedResource], created: list[str]) -> None:
        desired, current = change.desired, live.get(change.key)
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
        self._create_table(path, desired)
        new = DeployedResource(desired, version, path, now())
        if desired.kind == "view":
            if desired.backfill != "skip":
                live_with_new = {**live, change.key: new}
                self.on_step("backfill", change)
                self._backfill(desired, path, live_with_new)
        elif current is not None and current.path:
            self._carry_over(current, desired, path)
        live[change.key] = new

    def _create_table(self, path: str, state: ResourceState) -> None:
        columns = [f"`{name}` {type_}" for name, type_ in state.columns]
        layout = ""
        if state.partition_key:
            key = state.partition_key.strip()
            if IDENTIFIER.fullmatch(key.strip("`")) and key.strip("`") in dict(state.columns):
                layout = f" PARTITIONED BY (`{key.strip('`')}`)"
            else:
                ddl = ", ".join(columns)
                part_type = self.spark.createDataFrame([], ddl).selectExpr(f"{key} AS p").schema[0].dataType
                columns.append(f"`{PARTITION_COLUMN}` {part_type.simpleString()} GENERATED ALWAYS AS ({key})")
                layout = f" PARTITIONED BY (`{PARTITION_COLUMN}`)"
        elif state.sorting_key:
            layout = f" CLUSTER BY ({', '.join(f'`{k}`' for k in state.sorting_key)})"
        properties = {"pipeframe.resource": state.name, "pipeframe.kind": state.kind}
        if state.ttl:
            properties["pipeframe.ttl"] = state.ttl
        if state.partition_key and state.sorting_key:
            properties["pipeframe.zorder"] = ", ".join(state.sorting_key)  # used by OPTIMIZE ... ZORDER BY
        props = ", ".join(f"'{k}' = {_literal(v)}" for k, v in properties.items())
        self.spark.sql(f"CREATE TABLE {quote_path(path)} ({', '.join(columns)}) USING DELTA{layout} "
                       f"COMMENT {_literal(state.description)} TBLPROPERTIES ({props})")

    def _alter(self, path: str, change: Change) -> None:
        desired, table = change.desired, quote_path(path)
        assert desired is not None
        existing = {f.name for f in self.spark.read.format("delta").load(path).schema.fields}
        missing = [(n, t) for n, t in change.alter_columns if n not in existing]  # idempotent after a failure
        if missing:
            self.spark.sql(f"ALTER TABLE {table} ADD COLUMNS ({', '.join(f'`{n}` {t}' for n, t in missing)})")
        properties = {"comment": desired.description, "pipeframe.ttl": desired.ttl or ""}
        props = ", ".join(f"'{k}' = {_literal(v)}" for k, v in properties.items())
        self.spark.sql(f"ALTER TABLE {table} SET TBLPROPERTIES ({props})")
        before = change.deployed
        if before is not None and before.sorting_key != desired.sorting_key and not desired.partition_key:
            keys = ", ".join(f"`{k}`" for k in desired.sorting_key) or "NONE"
            self.spark.sql(f"ALTER TABLE {table} CLUSTER BY ({keys})" if desired.sorting_key
                           else f"ALTER TABLE {table} CLUSTER BY NONE")

    def _backfill(self, state: ResourceState, path: str, live: dict[str, DeployedResource]) -> None:
        """Fill a new view table from its source as of a pinned Delta version, recording that version."""
        from delta.tables import DeltaTable

        source = live.get(f"datasource:{state.source}")
        if source is None or not source.path:
            raise PipeframeError("PF605", f"View `{state.name}` reads `{state.source}`, which has no table.",
                                 "Deploy the source datasource first.")
        self.warehouse.register(live)
        version = DeltaTable.forPath(self.spark, source.path).history(1).select("version").first()[0]
        frame = self.spark.read.format("delta").option("versionAsOf", version).load(source.path)
        if source.state.kind == "datasource":
            frame = frame.select(*[f"`{name}`" for name, _ in source.state.columns])
        frame.createOrReplaceTempView(BATCH_VIEW)
        write_states(self.spark.sql(state.state_sql or ""), state, path, int(version))

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
        ttl = resource.state.ttl
        if resource.path and ttl:
            self.spark.sql(f"DELETE FROM {quote_path(resource.path)} WHERE ({ttl}) < current_timestamp()")

    # ------------------------------------------------------------------------------------ files
    def _cleanup(self, paths: list[str]) -> None:
        for path in paths:
            # Best effort: a later deploy removes any leftover before it reuses the path.
            with contextlib.suppress(Exception):
                self._remove(path)

    def _remove(self, path: str) -> None:
        if "://" not in path or path.startswith("file:"):
            shutil.rmtree(path.removeprefix("file:"), ignore_errors=True)
            return
        jvm = self.spark.sparkContext._jvm  # type: ignore[attr-defined]
        hadoop_path = jvm.org.apache.hadoop.fs.Path(path)
        fs = hadoop_path.getFileSystem(self.spark.sparkContext._jsc.hadoopConfiguration())  # type: ignore[attr-defined]
        if fs.exists(hadoop_path):
            fs.delete(hadoop_path, True)


def _literal(value: str) -> str:
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"
