"""Kafka ingest: JSON messages from a 4-partition topic into the benchmark's three views, next to the events API.

Usage: python bench/kafka_bench.py [--rate 10000] [--seconds 30] [--warmup 30] [--flat-rows 1500000]
                                   [--repeats 3] [--json F] [--write]

A real broker (tests/kafka/broker.py: Apache Kafka in KRaft mode, one node on 127.0.0.1, jars from Maven Central) and
two warehouses of the benchmark's project (bench/scenario.py: `events` and its three views), each served in turn by
`python -m pipeframe serve` in its own process. In the first, `events` is a Kafka datasource reading the topic
`events` (4 partitions); in the second, the same rows (bench/ingest_bench.py's request log) are posted to
`POST /v0/events` in 1,000-row requests. Each side runs two scenarios:
  paced     --rate rows/s for --warmup + --seconds, whatever the server does (Kafka: messages produced in 10 ms
            ticks; HTTP: 1,000-row requests sent open loop at --rate / 1,000 a second). Measured per row sent in
            the window: send → visible in each view (the row's source commit is found from the commit's recorded
            keys: `kafka/<topic>/<partition>/<first>-<last>` or the request's Idempotency-Key; it is visible in a
            view when the first view commit recording that source version was made; from the Delta logs).
            The rows sent during the warm-up are reported apart: a fresh server's first refreshes compile Spark's
            plans (5-10 s each on 2 shared cores).
  flat out  --repeats runs of --flat-rows rows as fast as the sender goes (Kafka: one producer; HTTP: 8 clients,
            closed loop): rows / (first send → the last view's commit covering the last row): the sustained rate
            from the topic (or the API) to the views, backlog included.
Targets (issue 36), printed next to the figures, never asserted: ≥ 50,000 rows/s sustained topic → views, p95
produce → visible ≤ 3 s at 10,000 rows/s.
"""

from __future__ import annotations

import argparse
import bisect
import json
import os
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from datetime import UTC, datetime
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # tests/kafka/broker.py: the one launcher of the test broker

import report
from common import rounded
from ingest_bench import (
    Server,
    ViewCommit,
    caught_up,
    drive_paced,
    first_covering,
    ndjson_lines,
    percentile,
    recorded_watermark,
    table_commits,
    view_chains,
)
from scenario import EVENTS_DATASOURCE, write_pipeframe_project

from pipeframe.connectors.kafka import parse_key
from pipeframe.plan import records

DOCS = REPO / "docs"
SECTION = "## Kafka ingest: topic to views"
BEFORE = "## Views over a partitioned source"
TOPIC, PARTITIONS = "events", 4
REQUEST_ROWS = 1000  # rows per events-API request
FLAT_CLIENTS = 8
TARGETS = {"rows_per_s": ("≥ 50,000 rows/s sustained, topic → views", 50_000.0),
           "visible_p95_s": ("p95 produce → visible in every view ≤ 3 s at 10,000 rows/s", 3.0)}


def log(message: str) -> None:
    print(f"[{datetime.now():%H:%M:%S}] {message}", file=sys.stderr, flush=True)


# ------------------------------------------------------------------------------------------- pure logic
def kafka_spans(commits: Iterable) -> dict[int, list[tuple[int, int, int]]]:
    """Per partition, the (first offset, last offset, source version) of each landed batch, sorted, from the
    source's group commits' recorded keys (`kafka/<topic>/<partition>/<first>-<last>`)."""
    spans: dict[int, list[tuple[int, int, int]]] = {}
    for commit in commits:
        if not isinstance(commit.metadata, records.GroupCommit):
            continue
        for key in commit.metadata.keys:
            parsed = parse_key(key, TOPIC)
            if parsed is not None:
                spans.setdefault(parsed[0], []).append((parsed[1], parsed[2], commit.version))
    for found in spans.values():
        found.sort()
    return spans


def version_of(spans: Sequence[tuple[int, int, int]], offset: int) -> int | None:
    """The source version whose batch holds `offset` (None: not landed)."""
    index = bisect.bisect_right(spans, (offset, float("inf"), 0)) - 1
    return spans[index][2] if index >= 0 and spans[index][0] <= offset <= spans[index][1] else None


def request_versions(commits: Iterable, prefix: str) -> dict[int, int]:
    """Request number -> source version, from the Idempotency-Keys `<prefix><number>` the group commits recorded."""
    found = {}
    for commit in commits:
        if isinstance(commit.metadata, records.GroupCommit):
            for key in commit.metadata.keys:
                if key.startswith(prefix):
                    found[int(key[len(prefix):])] = commit.version
    return found


def covering_epochs(chain: Sequence[Sequence[ViewCommit]], versions: Iterable[int]) -> dict[int, float | None]:
    """Per source version, when the last view of `chain` (a view, or the views from the source down to a cascading
    one) had applied it: its covering commit's time (None: not by the end of its log)."""
    out = {}
    for version in set(versions):
        covering, wanted = None, version
        for level in chain:
            covering = first_covering(level, wanted)
            if covering is None:
                break
            wanted = covering.version
        out[version] = None if covering is None else covering.epoch
    return out


def delay_figures(sent: Sequence[tuple[float, int | None]], chains: dict[str, list[list[ViewCommit]]]) -> dict:
    """Rows as (sent at, source version or None); per view and for every view, p50/p95/max send → visible."""
    out: dict = {"rows": len(sent), "not_landed": sum(1 for _, v in sent if v is None), "views": {}}
    every: list[float] = []
    landed = [(at, v) for at, v in sent if v is not None]
    worst = [0.0] * len(landed)
    missing = 0
    for name, chain in chains.items():
        epochs = covering_epochs(chain, (v for _, v in landed))
        delays = []
        for i, (at, version) in enumerate(landed):
            epoch = epochs[version]
            if epoch is None:
                worst[i] = float("inf")
                continue
            delays.append(max(0.0, epoch - at))
            worst[i] = max(worst[i], delays[-1])
        missing = max(missing, len(landed) - len(delays))
        out["views"][name] = {"p50_s": rounded(percentile(delays, 50)), "p95_s": rounded(percentile(delays, 95)),
                              "max_s": rounded(max(delays, default=None))}
    every = [w for w in worst if w != float("inf")]
    out["not_visible"] = missing
    out["p50_all_views_s"] = rounded(percentile(every, 50))
    out["p95_all_views_s"] = rounded(percentile(every, 95))
    out["max_all_views_s"] = rounded(max(every, default=None))
    return out


def windowed(sent: Sequence[tuple[float, int | None]], window: tuple[float, float],
             chains: dict[str, list[list[ViewCommit]]]) -> dict:
    """`delay_figures` of the rows sent inside `window`, with those of the rows sent before it (the warm-up: a
    fresh server's first refreshes compile Spark's plans) under `warmup`."""
    figures = delay_figures([r for r in sent if window[0] <= r[0] <= window[1]], chains)
    warm = delay_figures([r for r in sent if r[0] < window[0]], chains)
    figures["warmup"] = {key: warm[key] for key in ("rows", "p50_all_views_s", "p95_all_views_s", "max_all_views_s")}
    return figures


# ----------------------------------------------------------------------------------------- the warehouses
def kafka_project(root: Path, bootstrap: str) -> None:
    """The benchmark's project with `events` read from the topic."""
    write_pipeframe_project(root)
    (root / "connections").mkdir()
    (root / "connections/bench_kafka.connection").write_text(
        f"TYPE kafka\nKAFKA_BOOTSTRAP_SERVERS {bootstrap}\nKAFKA_SECURITY_PROTOCOL PLAINTEXT\n")
    (root / "datasources/events.datasource").write_text(
        EVENTS_DATASOURCE + f"\nKAFKA_CONNECTION_NAME bench_kafka\nKAFKA_TOPIC {TOPIC}\nKAFKA_GROUP_ID bench\n"
        "KAFKA_AUTO_OFFSET_RESET earliest\n")


class Side:
    """One warehouse deployed and served by `pipeframe serve` in its own process."""

    def __init__(self, root: Path, work: Path, name: str) -> None:
        from pipeframe.project import Project

        log(f"{name}: deploying the benchmark project (3 views)")
        project = Project(root)
        project.deploy()
        self.snapshot = project.snapshot
        self.path = self.snapshot.table("events").path
        log(f"{name}: starting pipeframe serve")
        self.server = Server(root, work / f"serve-{name}.log")

    def chains(self) -> dict[str, list[list[ViewCommit]]]:
        return {name: [[ViewCommit(c.version, c.epoch, mark) for c in table_commits(path)
                        if (mark := recorded_watermark(c)) is not None] for path in paths]
                for name, paths in view_chains(self.snapshot, "events").items()}

    def settled(self, timeout: float = 600) -> float | None:
        return caught_up(self.snapshot, "events", timeout)

    def last_visible(self) -> float | None:
        """When every view had applied the source's latest version (the latest covering commit's time)."""
        latest = table_commits(self.path)[-1].version
        epochs = [covering_epochs(chain, [latest])[latest] for chain in self.chains().values()]
        return None if None in epochs else max(epochs)


# ----------------------------------------------------------------------------------------------- Kafka
def producer(bootstrap: str):
    from confluent_kafka import Producer

    return Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "batch.num.messages": 10_000,
                     "queue.buffering.max.messages": 2_000_000, "queue.buffering.max.kbytes": 1_048_576})


def produce_all(out, values: Sequence[bytes], on_delivery=None, due: Callable[[int], float] | None = None) -> None:
    """`values` to the topic; `due(i)`: when message i was due (epoch seconds), kept as its timestamp, so its
    latency counts from then (the producer falling behind on the shared cores cannot hide it)."""
    for index, value in enumerate(values):
        extra = {"on_delivery": on_delivery} if on_delivery else {}
        if due is not None:
            extra["timestamp"] = int(due(index) * 1000)
        while True:
            try:
                out.produce(TOPIC, value, **extra)
                break
            except BufferError:  # the local queue is full: let deliveries drain it
                out.poll(0.05)
        out.poll(0)


def kafka_paced(side: Side, bootstrap: str, lines: list[str], rate: float, warmup: float, seconds: float) -> dict:
    """Messages produced at `rate` a second in 10 ms ticks, each with its due time as its timestamp; its partition
    and offset from its delivery report."""
    assigned(side)
    out = producer(bootstrap)
    delivered: list[tuple[float, int, int]] = []  # (sent at, partition, offset)

    def done(error, message) -> None:
        if error is None:
            delivered.append((message.timestamp()[1] / 1000, message.partition(), message.offset()))

    begin = time.time()
    window = (begin + warmup, begin + warmup + seconds)
    produced = 0
    while (now := time.time()) < window[1]:
        due = min(len(lines), int((now - begin) * rate))
        if due > produced:
            produce_all(out, [v.encode() for v in lines[produced:due]], done,
                        lambda i, first=produced: begin + (first + i) / rate)
            produced = due
        time.sleep(0.01)
    out.flush(60)
    log(f"kafka paced: produced {produced:,} messages at {rate:,.0f}/s; waiting for the views")
    wait_for(lambda: kafka_landed(side) >= produced)
    settle = side.settled()
    spans = kafka_spans(table_commits(side.path))
    sent = [(at, version_of(spans.get(p, []), offset)) for at, p, offset in delivered]
    figures = windowed(sent, window, side.chains())
    figures.update(offered_rows_per_s=rate, produced=produced, catch_up_s=settle,
                   partitions_used=len({p for _, p, _ in delivered}))
    log(f"kafka paced: produce → visible p95 (every view) {figures['p95_all_views_s']} s over {figures['rows']:,} rows")
    return figures


def assigned(side: Side, timeout: float = 120) -> None:
    """Wait until the server's consumer has joined its group and holds every partition (`GET /v0/ingest`)."""
    import httpx

    deadline = time.time() + timeout
    while len(httpx.get(f"{side.server.url}/v0/ingest", timeout=60).json()["kafka"].get("events", {})
              .get("partitions", {})) < PARTITIONS:
        if time.time() > deadline:
            raise SystemExit(f"the server's consumer holds no partitions of {TOPIC!r} after {timeout:g} s")
        time.sleep(0.2)


def kafka_flat(side: Side, bootstrap: str, lines: list[str]) -> dict:
    """All `lines` produced as fast as one producer goes; rows / (first send → last view commit covering them)."""
    values = [line.encode() for line in lines]
    before = kafka_landed(side)
    out = producer(bootstrap)
    start = time.time()
    produce_all(out, values)
    out.flush(300)
    produced_s = time.time() - start
    log(f"kafka flat out: produced {len(values):,} messages in {produced_s:.1f} s; waiting for the views")
    return flat_figures(side, len(values), start, produced_s, lambda: kafka_landed(side) >= before + len(values))


def kafka_landed(side: Side) -> int:
    """Rows of the topic landed in the source so far (from the recorded keys)."""
    return sum(last - first + 1 for spans in kafka_spans(table_commits(side.path)).values()
               for first, last, _ in spans)


def wait_for(landed: Callable[[], bool], timeout: float = 900) -> None:
    deadline = time.time() + timeout
    while not landed():
        if time.time() > deadline:
            raise SystemExit(f"the rows sent did not land within {timeout:g} s")
        time.sleep(0.5)


def flat_figures(side: Side, rows: int, start: float, sent_s: float, landed: Callable[[], bool]) -> dict:
    wait_for(landed)
    side.settled()
    visible = side.last_visible()
    seconds = None if visible is None else visible - start
    figures = {"rows": rows, "sent_s": round(sent_s, 2), "sent_rows_per_s": round(rows / sent_s),
               "to_views_s": rounded(seconds, 2), "rows_per_s": None if not seconds else round(rows / seconds)}
    log(f"flat out: {rows:,} rows sent in {sent_s:.1f} s, in every view after {seconds} s: "
        f"{figures['rows_per_s']} rows/s")
    return figures


# --------------------------------------------------------------------------------------- the events API
def http_paced(side: Side, lines: list[str], rate: float, warmup: float, seconds: float, prefix: str) -> dict:
    """1,000-row requests sent open loop at rate / 1,000 a second, each with Idempotency-Key `<prefix><n>`."""
    per_s = rate / REQUEST_ROWS
    bodies = [("\n".join(lines[i:i + REQUEST_ROWS]) + "\n").encode() for i in range(0, len(lines), REQUEST_ROWS)]
    request_records, window = drive_paced(side.server.url, bodies, per_s, warmup, seconds, key_prefix=prefix)
    failed = sum(1 for _, _, status in request_records if not 200 <= status < 300)
    log(f"http paced: {len(request_records):,} requests ({failed} not 2xx); waiting for the views")
    settle = side.settled()
    begin = window[0] - warmup
    versions = request_versions(table_commits(side.path), prefix)
    sent = []
    for number in range(len(request_records)):
        sent += [(begin + number / per_s, versions.get(number))] * REQUEST_ROWS
    figures = windowed(sent, window, side.chains())
    figures.update(offered_rows_per_s=rate, requests=len(request_records), failed_requests=failed, catch_up_s=settle)
    log(f"http paced: send → visible p95 (every view) {figures['p95_all_views_s']} s")
    return figures


def http_flat(side: Side, lines: list[str], prefix: str) -> dict:
    """All `lines` in 1,000-row requests by FLAT_CLIENTS closed-loop clients, with Idempotency-Keys `<prefix><n>`."""
    import httpx

    bodies = [("\n".join(lines[i:i + REQUEST_ROWS]) + "\n").encode() for i in range(0, len(lines), REQUEST_ROWS)]
    todo = iter(range(len(bodies)))
    guard = threading.Lock()
    failed: list[int] = []

    def client() -> None:
        with httpx.Client(base_url=side.server.url, timeout=300,
                          headers={"Content-Type": "application/x-ndjson"}) as http:
            while True:
                with guard:
                    number = next(todo, None)
                if number is None:
                    return
                while True:
                    answer = http.post("/v0/events", params={"name": "events"}, content=bodies[number],
                                       headers={"Idempotency-Key": f"{prefix}{number}"})
                    if answer.status_code in (429, 503):
                        time.sleep(float(answer.headers.get("Retry-After", 1)))
                        continue
                    if not 200 <= answer.status_code < 300:
                        failed.append(number)
                    break

    before = len(request_versions(table_commits(side.path), prefix))
    start = time.time()
    threads = [threading.Thread(target=client) for _ in range(FLAT_CLIENTS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if failed:
        raise SystemExit(f"{len(failed)} flat-out requests failed")
    sent_s = time.time() - start
    return flat_figures(side, len(lines), start, sent_s,
                        lambda: len(request_versions(table_commits(side.path), prefix)) - before >= len(bodies))


# ----------------------------------------------------------------------------------------------- the run
def run(rate: float, seconds: float, warmup: float, flat_rows: int, repeats: int, keep: bool = False) -> dict:
    from tests.kafka.broker import KafkaBroker

    work = Path(tempfile.mkdtemp(prefix="pipeframe-kafka-bench-"))
    paced_rows = int(rate * (warmup + seconds)) + REQUEST_ROWS
    log(f"generating {paced_rows + flat_rows:,} rows")
    lines = ndjson_lines(0, paced_rows + flat_rows)
    paced_lines, flat_lines = lines[:paced_rows], lines[paced_rows:]
    results: dict = {"date": datetime.now(UTC).strftime("%Y-%m-%d"), "cpus": os.cpu_count(),
                     "load": [round(x, 2) for x in os.getloadavg()], "rate": rate, "seconds": seconds,
                     "warmup_s": warmup, "flat_rows": flat_rows, "repeats": repeats, "partitions": PARTITIONS}
    try:
        with KafkaBroker(work / "kafka") as broker:
            broker.create_topic(TOPIC, PARTITIONS)
            kafka_project(work / "kafka-project", broker.bootstrap)
            side = Side(work / "kafka-project", work, "kafka")
            try:
                results["kafka"] = {"paced": kafka_paced(side, broker.bootstrap, paced_lines, rate, warmup, seconds),
                                    "flat": [kafka_flat(side, broker.bootstrap, flat_lines) for _ in range(repeats)]}
            finally:
                side.server.stop()
        write_pipeframe_project(work / "http-project")
        side = Side(work / "http-project", work, "http")
        try:
            results["http"] = {"paced": http_paced(side, paced_lines, rate, warmup, seconds, "paced-"),
                               "flat": [http_flat(side, flat_lines, f"flat{n}-") for n in range(repeats)]}
        finally:
            side.server.stop()
        results["load_at_end"] = [round(x, 2) for x in os.getloadavg()]
        return results
    finally:
        import shutil

        if keep:
            log(f"kept the warehouses, the broker's data and the servers' logs in {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)


def flat_median(side: dict) -> dict:
    """The flat-out run with the median rows/s (of an odd count; the lower middle of an even one)."""
    runs = sorted(side["flat"], key=lambda f: f["rows_per_s"] or 0)
    return runs[(len(runs) - 1) // 2]


def verdicts(results: dict) -> list[tuple[str, str, bool | None]]:
    kafka = results.get("kafka")
    flat = flat_median(kafka)["rows_per_s"] if kafka else None
    p95 = kafka["paced"]["p95_all_views_s"] if kafka else None
    return [(TARGETS["rows_per_s"][0], "not measured" if flat is None else f"{flat:,} rows/s (median run)",
             None if flat is None else flat >= TARGETS["rows_per_s"][1]),
            (TARGETS["visible_p95_s"][0], "not measured" if p95 is None else
             f"{p95} s at {results['rate']:,.0f} rows/s", None if p95 is None else p95 <= TARGETS["visible_p95_s"][1])]


def section(results: dict) -> list[str]:
    """The "Kafka ingest" section of docs/benchmarks.md."""
    lines = [SECTION, "",
             (f"`bench/kafka_bench.py` ({results['date']}, `{results.get('command', '')}`; load average "
              f"{results['load'][0]} at the start and {results.get('load_at_end', ['?'])[0]} at the end on "
              f"{results['cpus']} cores, the broker, the producer and the server on the same cores). A real Kafka "
              f"broker (KRaft, one node) and the benchmark's project with `events` read from a {results['partitions']}-"
              "partition topic by `pipeframe serve`; then, on a second warehouse, the same rows posted to "
              f"`POST /v0/events` in {REQUEST_ROWS:,}-row requests (bench/ingest_bench.py's request log: six flat "
              "columns). **Paced**: "
              f"{results['rate']:,.0f} rows/s for {results['warmup_s']:g} s of warm-up, then {results['seconds']:g} s "
              "measured; each row from its send (the producer's call, or the request's due time) to the first commit "
              "of the view that applied the source commit holding it (found by the commit's recorded key: the Kafka "
              "batch's offsets, or the request's Idempotency-Key). **Flat out**, "
              f"{results['repeats']} runs after it: {results['flat_rows']:,} rows as fast as one producer (or "
              f"{FLAT_CLIENTS} HTTP clients) sends them; rows / (first send → the last view commit covering the last "
              "row): the rate from the topic into every view, the backlog included."), "",
             ("| side | paced: send → visible p50 / p95 / max (every view) | slowest view p95 | during the warm-up: "
              "p50 / p95 / max | flat out: sent rows/s | flat out: rows/s into every view (each run) |"),
             "|---|---|---|---|---|---|"]
    for name, label in (("kafka", "Kafka topic"), ("http", "`POST /v0/events`")):
        side = results.get(name)
        if not side:
            continue
        paced, warm, flat = side["paced"], side["paced"]["warmup"], flat_median(side)
        slowest = max(paced["views"].items(), key=lambda kv: kv[1]["p95_s"] or 0)
        runs = ", ".join(f"{f['rows_per_s'] or 0:,} ({f['to_views_s']} s)" for f in side["flat"])
        lines.append(f"| {label} | {paced['p50_all_views_s']} / {paced['p95_all_views_s']} / "
                     f"{paced['max_all_views_s']} s | {slowest[0]} {slowest[1]['p95_s']} s | "
                     f"{warm['p50_all_views_s']} / {warm['p95_all_views_s']} / {warm['max_all_views_s']} s | "
                     f"{flat['sent_rows_per_s']:,} | **{flat['rows_per_s'] or 0:,}** median: {runs} |")
    lines += ["", "| target | measured | met |", "|---|---|---|"]
    for label, text, met in verdicts(results):
        lines.append(f"| {label} | {text} | {'—' if met is None else 'yes' if met else '**no**'} |")
    if results.get("kafka") and results.get("http"):
        kafka, http = flat_median(results["kafka"])["rows_per_s"] or 0, flat_median(results["http"])["rows_per_s"] or 1
        lines += ["", (f"Flat out, the topic reaches the views at {kafka / http:.2f}x the events API's rate. Where the "
                       "Kafka side spends more on the same cores: the server's consumer thread handles each message "
                       "in Python (a client message object; the value parsed once to check it is a JSON object, then "
                       "sent as written with the metadata spliced in), each row carries six more columns to type "
                       "and write (`__topic`, `__partition`, `__offset`, `__timestamp`, `__key`, `__value`), and the "
                       "broker serves the fetches. The warm-up column is a fresh server's: its first refreshes compile "
                       "Spark's plans while rows keep coming, so the first rows wait longest (the Kafka server starts "
                       "consuming at once, with the producer on the same cores).")]
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog="\n".join(__doc__.splitlines()[2:]))
    parser.add_argument("--rate", type=float, default=10_000, help="rows/s of the paced scenario")
    parser.add_argument("--seconds", type=float, default=30, help="measured seconds of the paced scenario")
    parser.add_argument("--warmup", type=float, default=30, help="seconds sent before the measured window")
    parser.add_argument("--flat-rows", type=int, default=1_500_000, help="rows of each flat-out run")
    parser.add_argument("--repeats", type=int, default=3, help="flat-out runs per side")
    parser.add_argument("--keep", action="store_true", help="keep the warehouses and logs")
    parser.add_argument("--json", type=Path, default=None, help="also write the results to this file")
    parser.add_argument("--write", action="store_true", help="put the results into docs/benchmarks.json and .md")
    args = parser.parse_args()
    results = run(args.rate, args.seconds, args.warmup, args.flat_rows, args.repeats, args.keep)
    results["command"] = " ".join(["python", "bench/kafka_bench.py", *sys.argv[1:]])
    print("\n".join(section(results)))
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n")
    if args.write:
        report.save_section(DOCS / "benchmarks.md", "kafka", results, SECTION, section(results), BEFORE)
    return 0


if __name__ == "__main__":
    sys.exit(main())
