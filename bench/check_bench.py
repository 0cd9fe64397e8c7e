"""Times `pipeframe check` on a generated 1,000-resource project in fresh processes (PRODUCT.md section 8),
and, with --dbt, `dbt parse` on an equivalent 1,000-model dbt project side by side.

Usage: python bench/check_bench.py [--resources 1000] [--repeats 5] [--dbt] [--keep DIR] [--json F]
Prints a JSON summary; the targets (issue 12): at most 0.5 s warm and 1.5 s cold per run, pyspark never imported.

Both tools are timed as their CLIs in fresh processes, cold (pipeframe: no check cache in the project's
`.pipeframe/cache/` and an empty template cache; dbt: no partial-parse file) and warm (pipeframe: both caches
filled by the previous run; dbt: partial parsing on, nothing changed). pipeframe is also timed warm after one
endpoint file changed (`edited`), what a re-run after a save sees.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import emit, ratio, summary  # bench/common.py (the script's folder is on sys.path)

PROBE = """
import sys, time, json
t0 = time.perf_counter()
from pipeframe.project import Project
report = Project(sys.argv[1]).check()
elapsed = time.perf_counter() - t0
print(json.dumps({"elapsed": elapsed, "errors": len(report.errors), "warnings": len(report.warnings),
                  "pipes": len(report.project.pipes), "datasources": len(report.project.datasources),
                  "pyspark_imported": any(m == "pyspark" or m.startswith("pyspark.") for m in sys.modules)}))
"""


def generate(root: Path, resources: int) -> dict[str, int]:
    """A project of `resources` files: landing datasources, materialized pipes and templated endpoints."""
    groups = max(1, resources // 3)
    extra = max(0, resources - 3 * groups)  # landing datasources without views, to hit the exact count
    (root / "datasources").mkdir(parents=True)
    (root / "pipes").mkdir()
    counts = {"datasources": 0, "materialized": 0, "endpoints": 0}
    for i in range(groups + extra):
        (root / "datasources" / f"events_{i}.datasource").write_text(f"""DESCRIPTION >
    Raw events of service {i}
TOKEN "ingest" APPEND
SCHEMA >
    `ts` DateTime `json:$.timestamp`,
    `user_id` String `json:$.user.id`,
    `endpoint` LowCardinality(String) `json:$.endpoint`,
    `status` Int32 `json:$.status`,
    `latency_ms` Float64 `json:$.latency` DEFAULT 0,
    `bytes` Int64 `json:$.bytes`
ENGINE_PARTITION_KEY to_date(ts)
ENGINE_SORTING_KEY endpoint, ts
ENGINE_TTL ts + INTERVAL 90 DAYS
""")
        counts["datasources"] += 1
        if i >= groups:
            continue
        (root / "pipes" / f"hourly_{i}.pipe").write_text(f"""DESCRIPTION >
    Hourly traffic of service {i}
NODE filtered
SQL >
    SELECT ts, user_id, endpoint, status, latency_ms, bytes
    FROM events_{i}
    WHERE status >= 100 AND endpoint IS NOT NULL
NODE hourly
SQL >
    SELECT date_trunc('hour', ts) AS hour, endpoint, status,
           count(*) AS requests, sum(bytes) AS bytes, avg(latency_ms) AS avg_latency,
           approx_count_distinct(user_id) AS users, percentile_approx(latency_ms, 0.95) AS p95
    FROM filtered
    GROUP BY 1, 2, 3
TYPE materialized
DATASOURCE hourly_{i}
""")
        (root / "pipes" / f"api_{i}.pipe").write_text(f"""TOKEN "dashboard" READ
NODE window
SQL >
    %
    SELECT * FROM hourly_{i}
    WHERE hour >= {{{{ DateTime(start, '2024-01-01 00:00:00', description="first hour") }}}}
    {{% if defined(endpoint) %}} AND endpoint = {{{{ String(endpoint) }}}} {{% end %}}
NODE endpoint
SQL >
    %
    SELECT endpoint, sum(requests) AS requests, max(p95) AS p95
    FROM window
    GROUP BY endpoint
    ORDER BY requests DESC
    LIMIT {{{{ Int(limit, 10) }}}}
TYPE endpoint
""")
        counts["materialized"] += 1
        counts["endpoints"] += 1
    return counts


def generate_dbt(root: Path, resources: int) -> dict[str, int]:
    """The same project for dbt, as models: a staging model per datasource (its typed columns), an incremental
    hourly model per materialized pipe (merge on Delta, the filter node as a CTE) and a model per endpoint
    (its parameters as `var()` with the same defaults), 1,000 models for 1,000 resources."""
    groups = max(1, resources // 3)
    extra = max(0, resources - 3 * groups)
    for folder in ("staging", "hourly", "api"):
        (root / "models" / folder).mkdir(parents=True)
    (root / "dbt_project.yml").write_text("name: parse_bench\nversion: '1.0'\nprofile: parse_bench\n"
                                          "model-paths: [models]\n")
    (root / "profiles.yml").write_text("parse_bench:\n  target: dev\n  outputs:\n    dev:\n      type: spark\n"
                                       "      method: session\n      host: NA\n      schema: bench\n")
    tables = "\n".join(f"      - name: events_{i}\n        description: Raw events of service {i}"
                       for i in range(groups + extra))
    (root / "models" / "sources.yml").write_text(f"version: 2\nsources:\n  - name: raw\n    tables:\n{tables}\n")
    counts = {"staging": 0, "incremental": 0, "endpoints": 0}
    for i in range(groups + extra):
        (root / "models/staging" / f"stg_events_{i}.sql").write_text(f"""\
{{{{ config(materialized='incremental', file_format='delta', partition_by=['day']) }}}}
SELECT CAST(ts AS TIMESTAMP) AS ts, CAST(user_id AS STRING) AS user_id, CAST(endpoint AS STRING) AS endpoint,
       CAST(status AS INT) AS status, coalesce(CAST(latency_ms AS DOUBLE), 0) AS latency_ms,
       CAST(bytes AS BIGINT) AS bytes, to_date(ts) AS day
FROM {{{{ source('raw', 'events_{i}') }}}}
{{% if is_incremental() %}}WHERE ts > (SELECT max(ts) FROM {{{{ this }}}}){{% endif %}}
""")
        counts["staging"] += 1
        if i >= groups:
            continue
        (root / "models/hourly" / f"hourly_{i}.sql").write_text(f"""\
{{{{ config(materialized='incremental', incremental_strategy='merge', file_format='delta',
            unique_key=['hour', 'endpoint', 'status']) }}}}
WITH filtered AS (
    SELECT ts, user_id, endpoint, status, latency_ms, bytes
    FROM {{{{ ref('stg_events_{i}') }}}}
    WHERE status >= 100 AND endpoint IS NOT NULL
    {{% if is_incremental() %}}AND ts >= (SELECT max(hour) FROM {{{{ this }}}}){{% endif %}}
)
SELECT date_trunc('hour', ts) AS hour, endpoint, status,
       count(*) AS requests, sum(bytes) AS bytes, avg(latency_ms) AS avg_latency,
       approx_count_distinct(user_id) AS users, percentile_approx(latency_ms, 0.95) AS p95
FROM filtered
GROUP BY 1, 2, 3
""")
        (root / "models/api" / f"api_{i}.sql").write_text(f"""\
{{{{ config(materialized='view') }}}}
WITH window AS (
    SELECT * FROM {{{{ ref('hourly_{i}') }}}}
    WHERE hour >= '{{{{ var("start", "2024-01-01 00:00:00") }}}}'
    {{% if var("endpoint", none) is not none %}} AND endpoint = '{{{{ var("endpoint") }}}}' {{% endif %}}
)
SELECT endpoint, sum(requests) AS requests, max(p95) AS p95
FROM window
GROUP BY endpoint
ORDER BY requests DESC
LIMIT {{{{ var("limit", 10) }}}}
""")
        counts["incremental"] += 1
        counts["endpoints"] += 1
    return counts


def run_once(project: Path, cache: Path, cold: bool = False) -> float:
    """`pipeframe check` as its CLI in a fresh process: the wall time. `cold` first removes the project's check
    cache and the template cache, as on a new CI machine."""
    if cold:
        shutil.rmtree(project / ".pipeframe" / "cache", ignore_errors=True)
        shutil.rmtree(cache, ignore_errors=True)
    env = {**os.environ, "XDG_CACHE_HOME": str(cache)}
    env.pop("PIPEFRAME_NO_CACHE", None)
    started = time.perf_counter()
    subprocess.run([sys.executable, "-m", "pipeframe.cli", "check", str(project)], capture_output=True, text=True,
                   check=True, env=env)
    return time.perf_counter() - started


def edit_endpoint(project: Path, repeat: int) -> None:
    """Change one endpoint's default LIMIT, as a save in the editor would."""
    path = project / "pipes" / "api_0.pipe"
    text = path.read_text()
    start = text.index("Int(limit, ") + len("Int(limit, ")
    path.write_text(text[:start] + str(100 + repeat) + text[text.index(")", start):])  # never the default 10


def probe(project: Path, cache: Path) -> dict:
    """`Project.check()` in a fresh process with the caches warm: its own time, what it compiled, and whether
    pyspark was imported."""
    env = {**os.environ, "XDG_CACHE_HOME": str(cache)}
    env.pop("PIPEFRAME_NO_CACHE", None)
    out = subprocess.run([sys.executable, "-c", PROBE, str(project)], capture_output=True, text=True, check=True,
                         env=env)
    return json.loads(out.stdout.strip().splitlines()[-1])


def dbt_parse(project: Path, fresh: bool) -> float:
    """`dbt parse` as its CLI in a fresh process; `fresh` removes what a previous parse left (target/)."""
    if fresh:
        shutil.rmtree(project / "target", ignore_errors=True)
    dbt = shutil.which("dbt") or str(Path(sys.executable).parent / "dbt")
    started = time.perf_counter()
    done = subprocess.run([dbt, "parse", "--project-dir", str(project), "--profiles-dir", str(project)],
                          capture_output=True, text=True, check=False)
    elapsed = time.perf_counter() - started
    if done.returncode != 0:
        sys.exit(f"dbt parse failed on the generated project:\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}")
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--resources", type=int, default=1000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--dbt", action="store_true", help="also time `dbt parse` on the equivalent dbt project")
    parser.add_argument("--keep", type=Path, default=None, help="write the generated project(s) here and keep them")
    parser.add_argument("--json", type=Path, default=None, help="Also write the summary to this file.")
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="pf-check-bench-"))
    base = args.keep or tmp
    project, dbt_project = base / "project", base / "dbt_project"
    for folder in (project, dbt_project):
        shutil.rmtree(folder, ignore_errors=True)
    counts = generate(project, args.resources)
    if args.dbt:
        dbt_counts = generate_dbt(dbt_project, args.resources)
    cold, warm, edited, dbt_cold, dbt_warm = [], [], [], [], []
    for i in range(args.repeats):
        cache = tmp / f"cache-{i}"  # a new, empty template cache: what a fresh CI machine sees
        cold.append(run_once(project, cache, cold=True))
        warm.append(run_once(project, cache))  # the same files again: what CI re-runs and the dev loop see
        edit_endpoint(project, i)
        edited.append(run_once(project, cache))
        if args.dbt:
            dbt_cold.append(dbt_parse(dbt_project, fresh=True))
            dbt_warm.append(dbt_parse(dbt_project, fresh=False))
    inside = [probe(project, tmp / "cache-0") for _ in range(args.repeats)]
    shutil.rmtree(tmp, ignore_errors=True)
    result = {
        "files": sum(counts.values()), **counts,
        "compiled_pipes": inside[0]["pipes"], "compiled_datasources": inside[0]["datasources"],
        "errors": inside[0]["errors"], "warnings": inside[0]["warnings"],
        "cold_process_wall_s": summary(cold),
        "warm_process_wall_s": summary(warm),
        "edited_process_wall_s": summary(edited),
        "warm_check_s": summary([r["elapsed"] for r in inside]),
        "pyspark_imported": any(r["pyspark_imported"] for r in inside),
        "target_s": 0.5,  # warm
        "cold_target_s": 1.5,
    }
    if args.dbt:
        result["dbt"] = {"models": sum(dbt_counts.values()), **dbt_counts, "cold_parse_s": summary(dbt_cold),
                         "warm_parse_s": summary(dbt_warm), "cold_over_pipeframe": ratio(dbt_cold, cold),
                         "warm_over_pipeframe": ratio(dbt_warm, warm)}
    emit(result, args.json)
    if result["pyspark_imported"]:
        sys.exit("pyspark was imported by `pipeframe check`: the compiler must stay JVM-free")
    if result["errors"]:
        sys.exit("the generated project has errors; the benchmark project must compile cleanly")


if __name__ == "__main__":
    main()
