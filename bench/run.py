"""Run every benchmark at one scale and write docs/benchmarks.md (tables) and docs/img/bench-*.png (charts).

Usage: python bench/run.py [--rows 1000000] [--appends 20] [--growth-appends 3] [--repeats 5] [--skip check,dev]
                          [--cluster] [--cluster-rows 100000] [--retract] [--retract-rows 10000000] [--kafka]

Sections (PRODUCT.md section 8), all in one run on this machine:
  views     the events scenario: one Delta source, three views (hourly counts and sums by endpoint and status;
            daily distinct users, HLL; p50/p95 latency per endpoint, KLL). The source starts at --rows / 10,
            grows to 3 * --rows / 10 and then --rows; at each size batches of 1% of --rows are appended
            (--growth-appends times at the two smaller sizes, --appends times at --rows), and after each append
            every side brings its views up to date, timed: pipeframe refresh, CREATE OR REPLACE TABLE AS SELECT,
            dbt-spark incremental models, Spark Declarative Pipelines materialized views. Then the exact view
            is compared across all sides, an endpoint over the hourly view is timed against the same answer over
            the raw rows, and `Project.append` (three views attached) against a plain Delta append, each
            `Project.append` split into its steps (bench/ingest_bench.py's profile).
  check     `pipeframe check` on a 1,000-resource project vs `dbt parse` on an equivalent 1,000-model dbt
            project, each in fresh processes (bench/check_bench.py).
  control   a no-op `pipeframe deploy` next to a bare Spark start, both fresh processes (bench/control_bench.py).
  dev       the dev loop: save an endpoint file -> new HTTP answer, and two saves in quick succession
            (bench/dev_bench.py).
  ingest    real-time ingestion: K HTTP clients posting NDJSON to a `pipeframe serve` process (10-row and 1,000-row
            requests, --ingest-seconds each), commit -> visible in the views from the Delta logs, next to a plain
            Delta append loop; and where one `Project.append` spends its time (bench/ingest_bench.py; its
            `Project.append` figures are the views section's when that section runs too).
  serve     endpoints on the read path (DuckDB over the tables' snapshots, no JVM) next to the same endpoints on
            Spark: `pipeframe serve --engine auto` and `--engine spark` over a --serve-rows source and its three views,
            one client in turn (p50/p95/p99), 16 clients while 50 event requests/s land, view vs raw rows, and
            `pipeframe endpoint`/`status` in fresh processes (bench/serve_bench.py, in a fresh process).
  cluster   with --cluster only: the refresh and append figures on a local Spark standalone cluster (a master and a
            worker from pyspark's jars, on 127.0.0.1) next to `local[*]`, two drivers measured alternately, with the
            cluster / local ratio (bench/cluster_bench.py; --cluster-rows source rows, --appends capped at 10
            refreshes, --repeats capped at 5 appends). A run without --cluster keeps the previous run's cluster
            figures. With every other section skipped (`--cluster --skip views,check,control,dev,ingest`) only that
            section of the page and its key in the JSON are rewritten; the rest stays exactly as it was.
  retract   with --retract only: deletes and updates reaching views (bench/retract_bench.py, in a fresh process):
            a source of --retract-rows rows, an invertible view (path `negate`) and one with max/HLL (path
            `recompute`); a GDPR-style DELETE of one user's 0.1% of the rows and a 1% UPDATE, each followed by the
            views' incremental refresh and, side by side, their rebuild (`refresh --full`), the views' rows compared
            (--repeats capped at 2 of each). A run without --retract keeps the previous run's figures; with every
            other section skipped (`--retract --skip views,check,control,dev,ingest`) only that section of the page
            and its key in the JSON are rewritten.
  kafka     with --kafka only: Kafka ingest (bench/kafka_bench.py, in a fresh process): a real broker and a
            4-partition topic read by `pipeframe serve` into the views' source, at 10,000 rows/s (produce ->
            visible in every view, p50/p95) and flat out (rows/s topic -> views), side by side with the same rows
            through `POST /v0/events`. Kept from the previous run without --kafka; alone (`--kafka --skip
            views,check,control,dev,serve,ingest`) only its section and key are rewritten.
Raw results go to docs/benchmarks.json; `python bench/report.py` re-renders the page from them. A section left
out with --skip keeps its figures from the previous run (the page says which run each section comes from).
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

import ingest_bench
import kafka_bench
import report
import retract_bench
from common import ratio, summary
from peers import Ctas, Dbt, Pipeframe, Sdp, remove, versions
from scenario import EXACT_VIEW, SECONDS_PER_ROW, START_EPOCH, generate, write_pipeframe_project

BENCH = Path(__file__).resolve().parent
DOCS = BENCH.parent / "docs"
SECTIONS = ("views", "check", "control", "dev", "serve", "ingest")


def log(message: str) -> None:
    print(f"[{datetime.now():%H:%M:%S}] {message}", file=sys.stderr, flush=True)


def timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def machine() -> dict:
    cpu = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        cpu = platform.processor() or "unknown"
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    return {"cpus": os.cpu_count(), "cpu": cpu, "memory_gib": round(memory, 1), "os": platform.platform(),
            "load_at_start": [round(x, 2) for x in os.getloadavg()]}


def views_section(rows: int, appends: int, growth_appends: int, repeats: int) -> dict:
    from pipeframe.project import Project

    work = Path(tempfile.mkdtemp(prefix="pipeframe-bench-"))
    sides = []
    try:
        root = work / "project"
        write_pipeframe_project(root)
        project = Project(root)
        spark = project.spark
        project.deploy()
        source = project.snapshot.table("events").path
        batch = max(1, rows // 100)
        sizes = [rows // 10, rows * 3 // 10, rows]
        landed = 0

        def land(count: int) -> None:  # another job appends to the source; every side then catches up
            nonlocal landed
            generate(spark, landed, count).write.format("delta").mode("append").save(source)
            landed += count

        land(sizes[0])
        conf = {key: value for key, value in spark.sparkContext.getConf().getAll()}
        log("starting the Spark Connect server for Spark Declarative Pipelines")
        sides = [Pipeframe(project), Ctas(spark, source, work), Dbt(spark, source, work),
                 Sdp(spark, source, work, conf)]
        out: dict = {"rows": rows, "batch_rows": batch, "sizes": sizes, "sides": [s.name for s in sides],
                     "initial_s": {}, "catch_up_s": [], "appends": []}
        for side in sides:
            out["initial_s"][side.name] = round(timed(side.update), 3)
            log(f"{side.name}: built the views over {landed:,} rows in {out['initial_s'][side.name]:.1f} s")
        for size in sizes:
            if landed < size:
                land(size - landed)
                out["catch_up_s"].append({"rows": landed, **{s.name: round(timed(s.update), 3) for s in sides}})
                log(f"grew the source to {landed:,} rows; every side caught up")
            for number in range(appends if size == rows else growth_appends):
                before = landed
                land(batch)
                seconds = {side.name: round(timed(side.update), 3) for side in sides}
                record = {"size": size, "rows_before": before, "seconds": seconds,
                          "sdp_run_phase_s": sides[-1].run_phase[-1]}
                out["appends"].append(record)
                log(f"append {number + 1} at {before:,} rows: " + ", ".join(f"{k} {v:.1f} s" for k, v in seconds.items()))

        out["cross_check"] = cross_check(sides)
        out["endpoint"] = endpoint_reads(project, repeats, landed)
        out["append"] = ingest_bench.append_profile(project, spark, work, landed, batch, max(3, repeats // 2))
        return out
    finally:
        for side in sides:
            if hasattr(side, "close"):
                side.close()
        remove(work)


def cross_check(sides) -> dict:
    """Every side's exact view against the recomputation (CTAS): the same rows, or the count that differ."""
    truth = next(s for s in sides if s.name == "ctas").exact()
    verdicts = {"view": EXACT_VIEW, "rows": truth.count()}
    for side in sides:
        frame = side.exact()
        differ = frame.exceptAll(truth).count() + truth.exceptAll(frame).count()
        verdicts[side.name] = "equal" if differ == 0 else f"{differ} rows differ"
    log(f"cross-check of {EXACT_VIEW}: {verdicts}")
    return verdicts


def endpoint_reads(project, repeats: int, landed: int) -> dict:
    """`traffic` (over the hourly view) against `traffic_raw` (the same answer from the raw rows), over the
    newer half of the source."""
    endpoints = project.endpoints(project.snapshot)  # as the HTTP server holds them
    middle = START_EPOCH + int(landed * SECONDS_PER_ROW / 2)
    start = datetime.fromtimestamp(middle - middle % 3600, UTC).strftime("%Y-%m-%d %H:%M:%S")
    view_s, raw_s = [], []
    answers = {}
    for _ in range(repeats + 1):  # the first pair warms both plans up and is not counted
        for pipe, times in (("traffic", view_s), ("traffic_raw", raw_s)):
            started = time.perf_counter()
            answers[pipe] = endpoints.run(pipe, {"start": start})
            times.append(time.perf_counter() - started)
    view_s, raw_s = view_s[1:], raw_s[1:]
    if answers["traffic"].data != answers["traffic_raw"].data:
        raise SystemExit("the endpoint over the view and over the raw rows disagree")
    return {"view_s": summary(view_s), "raw_s": summary(raw_s), "raw_over_view": ratio(raw_s, view_s),
            "view_rows_read": answers["traffic"].rows_read, "raw_rows_read": answers["traffic_raw"].rows_read,
            "start": start}


def run_script(name: str, *args: str) -> dict:
    out = Path(tempfile.mkstemp(suffix=".json")[1])
    try:
        subprocess.run([sys.executable, str(BENCH / name), *args, "--json", str(out)], check=True,
                       stdout=subprocess.DEVNULL)
        return json.loads(out.read_text())
    finally:
        out.unlink(missing_ok=True)


def cluster_section(args: argparse.Namespace) -> dict:
    log("cluster: refresh and append on a local standalone cluster next to local[*]")
    results = run_script("cluster_bench.py", "--rows", str(args.cluster_rows), "--appends", str(min(args.appends, 10)),
                         "--repeats", str(min(args.repeats, 5)))
    results["command"] = " ".join(["python", "bench/run.py", *sys.argv[1:]])
    return results


def retract_section(args: argparse.Namespace) -> dict:
    log(f"retract: a delete and an update of a {args.retract_rows:,}-row source reaching two views, incremental vs "
        "--full")
    results = run_script("retract_bench.py", "--rows", str(args.retract_rows), "--repeats", str(min(args.repeats, 2)))
    results["command"] = " ".join(["python", "bench/run.py", *sys.argv[1:]])
    return results


def kafka_section(args: argparse.Namespace) -> dict:
    log("kafka: a 4-partition topic into the three views, paced and flat out, next to POST /v0/events")
    results = run_script("kafka_bench.py")
    results["command"] = " ".join(["python", "bench/run.py", *sys.argv[1:]])
    return results


def cluster_only(args: argparse.Namespace) -> int:
    """Measure the cluster section alone and rewrite only it: its key in the JSON and its section of the page."""
    results = cluster_section(args)
    report.save_section(args.out, "cluster", results, report.CLUSTER_SECTION, report.cluster_text(results))
    log(f"wrote the cluster section of {args.out} and `cluster` in {args.out.with_suffix('.json')}")
    return 0


def retract_only(args: argparse.Namespace) -> int:
    """Measure the retract section alone and rewrite only it: its key in the JSON and its section of the page."""
    results = retract_section(args)
    report.save_section(args.out, "retract", results, retract_bench.SECTION, retract_bench.section(results))
    log(f"wrote the retract section of {args.out} and `retract` in {args.out.with_suffix('.json')}")
    return 0


def kafka_only(args: argparse.Namespace) -> int:
    """Measure the Kafka section alone and rewrite only it: its key in the JSON and its section of the page."""
    results = kafka_section(args)
    report.save_section(args.out, "kafka", results, kafka_bench.SECTION, kafka_bench.section(results),
                        kafka_bench.BEFORE)
    log(f"wrote the kafka section of {args.out} and `kafka` in {args.out.with_suffix('.json')}")
    return 0


def _importable(module: str) -> bool:
    try:
        importlib.import_module(module)
    except ImportError:
        return False
    return True


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog="\n".join(__doc__.splitlines()[2:]))
    parser.add_argument("--rows", type=int, default=1_000_000, help="source rows (10,000,000 for the record)")
    parser.add_argument("--appends", type=int, default=20, help="1%% appends at --rows")
    parser.add_argument("--growth-appends", type=int, default=3, help="1%% appends at --rows/10 and 3*--rows/10")
    parser.add_argument("--repeats", type=int, default=5, help="repeats of the check, endpoint and dev measures")
    parser.add_argument("--skip", default="", help=f"comma-separated sections to leave out: {', '.join(SECTIONS)}")
    parser.add_argument("--ingest-seconds", type=float, default=30, help="measured seconds per ingestion scenario")
    parser.add_argument("--ingest-clients", type=int, default=64, help="concurrent HTTP clients of the ingestion section")
    parser.add_argument("--cluster", action="store_true",
                        help="also measure refresh and append on a local standalone cluster next to local[*]")
    parser.add_argument("--cluster-rows", type=int, default=100_000, help="source rows of the cluster section")
    parser.add_argument("--retract", action="store_true",
                        help="also measure deletes and updates reaching views: incremental refresh vs --full")
    parser.add_argument("--retract-rows", type=int, default=10_000_000, help="source rows of the retract section")
    parser.add_argument("--kafka", action="store_true",
                        help="also measure Kafka ingest (a real broker) next to the events API")
    parser.add_argument("--serve-rows", type=int, default=10_000_000, help="source rows of the serve section")
    parser.add_argument("--out", type=Path, default=DOCS / "benchmarks.md")
    args = parser.parse_args()
    skip = {s.strip() for s in args.skip.split(",") if s.strip()}
    if skip - set(SECTIONS):
        parser.error(f"unknown section(s) in --skip: {', '.join(sorted(skip - set(SECTIONS)))}")
    opted = [name for name, on in (("cluster", args.cluster), ("retract", args.retract), ("kafka", args.kafka)) if on]
    if skip == set(SECTIONS) and len(opted) == 1:  # only one opt-in section: rewrite only it
        return {"cluster": cluster_only, "retract": retract_only, "kafka": kafka_only}[opted[0]](args)
    needed = ("dbt.adapters.spark", "matplotlib", "pandas", "grpc", "httpx") if "views" not in skip else \
        ("matplotlib", "httpx")
    missing = [name for name in needed
               if importlib.util.find_spec(name.split(".")[0]) is None or not _importable(name)]
    if missing:
        sys.exit(f"missing benchmark dependencies ({', '.join(missing)}): "
                 "run `python -m pip install -r bench/requirements.txt` first")

    results: dict = {"date": datetime.now(UTC).strftime("%Y-%m-%d"), "machine": machine(), "versions": versions(),
                     "command": " ".join(["python", "bench/run.py", *sys.argv[1:]])}
    started = time.perf_counter()
    data = args.out.with_suffix(".json")
    previous = json.loads(data.read_text()) if data.exists() else {}
    for section in sorted(skip):  # kept from the run that measured it, and said so on the page
        if section in previous:
            results[section] = previous[section]
            own = previous[section] if {"date", "command"} <= set(previous[section]) else {}  # run alone
            results.setdefault("kept", {})[section] = {"date": own["date"], "command": own["command"]} if own else \
                previous.get("kept", {}).get(section) or {"date": previous.get("date"),
                                                          "command": previous.get("command")}

    def save() -> None:  # after every section, so a late failure keeps what was measured
        results["machine"]["load_at_end"] = [round(x, 2) for x in os.getloadavg()]
        results["minutes"] = round((time.perf_counter() - started) / 60, 1)
        data.write_text(json.dumps(results, indent=2) + "\n")

    if "check" not in skip:
        log("check: pipeframe check vs dbt parse on 1,000 resources")
        results["check"] = run_script("check_bench.py", "--repeats", str(args.repeats), "--dbt")
        save()
    if "views" not in skip:
        results["views"] = views_section(args.rows, args.appends, args.growth_appends, args.repeats)
        save()
    if "control" not in skip:
        log("control: a no-op deploy vs a bare Spark start")
        results["control"] = run_script("control_bench.py", "--repeats", str(args.repeats))
        save()
    if "dev" not in skip:
        log("dev: save -> new answer in pipeframe dev")
        results["dev"] = run_script("dev_bench.py", "--repeats", str(args.repeats))
        save()
    if args.cluster:
        results["cluster"] = cluster_section(args)
        save()
    elif "cluster" in previous:  # its own date and command are on the page
        results["cluster"] = previous["cluster"]
    if args.retract:
        results["retract"] = retract_section(args)
        save()
    elif "retract" in previous:  # its own date and command are on the page
        results["retract"] = previous["retract"]
    if args.kafka:
        results["kafka"] = kafka_section(args)
        save()
    elif "kafka" in previous:  # its own date and command are on the page
        results["kafka"] = previous["kafka"]
    if "local" in previous:  # measured by bench/local_bench.py alone; its own date is on the page
        results["local"] = previous["local"]
    if "serve" not in skip:
        log("serve: endpoints on the read path vs on Spark")
        results["serve"] = run_script("serve_bench.py", "--rows", str(args.serve_rows))
        results["serve"]["command"] = " ".join(["python", "bench/run.py", *sys.argv[1:]])
        save()
    if "ingest" not in skip:
        log("ingest: POST /v0/events against pipeframe serve, a plain Delta append loop, Project.append's steps")
        measured = "views" not in skip  # its Project.append figures: reused, not measured twice
        results["ingest"] = run_script("ingest_bench.py", "--seconds", str(args.ingest_seconds), "--clients",
                                       str(args.ingest_clients), *(["--profile-rows", "0"] if measured else []))
        if measured:
            results["ingest"]["append"] = dict(results["views"]["append"],
                                               **{"from": "measured by the views section of the same run"})
    save()
    report.write(results, args.out)
    log(f"wrote {args.out}, {data} and the charts in {args.out.parent / 'img'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
