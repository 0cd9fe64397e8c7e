"""The ingestion benchmark's pure logic (bench/ingest_bench.py): percentiles, which view commit made a source commit
visible (directly and through a cascade), what the clients saw, and where its section goes on the page; and the
open-loop sender against a real HTTP server on 127.0.0.1."""

import itertools
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import ClassVar

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

import ingest_bench as bench
from ingest_bench import ViewCommit


def test_percentile_interpolates_between_ranks():
    assert bench.percentile([], 95) is None
    assert bench.percentile([4.0], 99) == 4.0
    assert bench.percentile([1, 2, 3, 4, 5], 50) == 3
    assert bench.percentile([5, 1, 4, 2, 3], 0) == 1
    assert bench.percentile([1, 2, 3, 4, 5], 100) == 5
    assert bench.percentile(list(range(1, 101)), 95) == 95.05


def test_a_source_commit_is_visible_at_the_first_view_commit_that_covers_it():
    view = [ViewCommit(1, 10.0, 0), ViewCommit(2, 12.0, 3), ViewCommit(3, 15.0, 5)]
    source = [(1, 9.0), (3, 11.0), (4, 11.5), (5, 14.0), (6, 16.0)]
    assert bench.visible_delays(source, [view]) == [3.0, 1.0, 3.5, 1.0, None]


def test_a_later_commit_with_a_lower_watermark_does_not_hide_an_earlier_cover():
    view = [ViewCommit(1, 10.0, 4), ViewCommit(2, 11.0, 0), ViewCommit(3, 12.0, 6)]
    assert bench.first_covering(view, 3) == view[0]
    assert bench.first_covering(view, 5) == view[2]
    assert bench.first_covering(view, 7) is None


def test_a_cascading_view_is_visible_through_its_upstream_views_commits():
    upstream = [ViewCommit(4, 10.0, 2), ViewCommit(5, 13.0, 4)]  # covers source versions 2, then 4
    cascade = [ViewCommit(7, 12.0, 4), ViewCommit(8, 16.0, 5)]  # covers upstream versions 4, then 5
    source = [(2, 9.0), (3, 9.5), (4, 12.5), (5, 14.0)]
    assert bench.visible_delays(source, [upstream, cascade]) == [3.0, 6.5, 3.5, None]


def test_request_figures_count_what_ended_inside_the_window():
    records = [(0.0, 0.5, 202), (0.5, 1.5, 202), (1.0, 2.0, 202), (1.5, 2.5, 429), (2.0, 3.5, 202), (3.0, 5.5, 202)]
    figures = bench.request_figures(records, (1.0, 5.0), rows=10)
    assert figures["requests"] == 3  # 1.5, 2.0 and 3.5 ended inside; 0.5 before, 5.5 after
    assert figures["statuses"] == {"202": 3, "429": 1}
    assert figures["requests_per_s"] == 0.8 and figures["rows_per_s"] == 7.5
    assert figures["latency_p50_s"] == 1.0 and figures["latency_max_s"] == 1.5


def test_verdicts_compare_each_target():
    results = {"scenarios": {
        "A": {"requests_per_s": 250.0, "latency_p95_s": 0.4, "visible": {"p95_slowest_view_s": 2.0}},
        "B": {"rows_per_s": 20_000.0, "latency_p95_s": 0.6, "visible": {"p95_slowest_view_s": 4.0}}}}
    met = {label: ok for label, _, ok in bench.verdicts(results)}
    assert met == {"≥ 200 requests/s of 10-row batches": True, "≥ 50,000 rows/s in 1,000-row batches": False,
                   "p95 request latency ≤ 0.5 s": False, "p95 commit → visible in every view ≤ 3 s": False}
    assert all(ok is None for _, _, ok in bench.verdicts({}))
    # Sent at the targets' rates (open loop), latency and visibility are taken there: at saturation a closed loop
    # of K clients waits about K / throughput whatever the server does.
    results["paced"] = {
        "A": {"offered_per_s": 200.0, "rows_per_request": 10, "latency_p95_s": 0.3,
              "visible": {"p95_slowest_view_s": 1.5}},
        "B": {"offered_per_s": 50.0, "rows_per_request": 1000, "latency_p95_s": 0.45,
              "visible": {"p95_slowest_view_s": 2.9}}}
    paced = {label: (text, ok) for label, text, ok in bench.verdicts(results)}
    assert paced["p95 request latency ≤ 0.5 s"] == (
        "A sent at 200 requests/s (2,000 rows/s): 0.3 s, B sent at 50 requests/s (50,000 rows/s): 0.45 s", True)
    assert paced["p95 commit → visible in every view ≤ 3 s"][1] is True
    assert paced["≥ 50,000 rows/s in 1,000-row batches"][1] is False, "throughput stays the closed loop's"


def test_the_section_is_replaced_in_place_or_added_before_the_kept_sections(tmp_path):
    page = tmp_path / "benchmarks.md"
    page.write_text("# Benchmarks\n\n## A\n\ntext\n\n## Sections kept from an earlier run\n\n- views\n")
    (tmp_path / "benchmarks.json").write_text('{"views": 1}')

    def write(text: str) -> str:
        bench.report.save_section(page, "ingest", {"text": text}, bench.SECTION, [bench.SECTION, "", text],
                                  bench.BEFORE)
        return page.read_text()

    once = write("first")
    assert once.index("## Real-time ingestion") < once.index("## Sections kept")
    twice = write("second")
    assert "first" not in twice and twice.count("## Real-time ingestion") == 1
    assert twice.index("## A") < twice.index("second") < twice.index("## Sections kept")
    assert (tmp_path / "benchmarks.json").read_text() == '{\n  "views": 1,\n  "ingest": {\n    "text": "second"\n  }\n}\n'
    page.write_text("# B\n")
    assert write("x") == "# B\n\n## Real-time ingestion\n\nx\n"


def test_ndjson_rows_are_deterministic_and_fit_the_events_schema():
    import json

    lines = bench.ndjson_lines(0, 3)
    assert lines == bench.ndjson_lines(0, 3)
    row = json.loads(lines[0])
    assert set(row) == {"ts", "user_id", "endpoint", "status", "latency", "bytes"}
    assert row["ts"].startswith("2024-05-01T00:0") and row["ts"].endswith("Z")


def scenario(requests_per_s: float, rows: int) -> dict:
    views = {name: {"p50_s": 1.0, "p95_s": 2.5, "max_s": 3.0, "not_visible": 0, "view_commits": 4}
             for name in ("requests_by_hour", "users_by_day")}
    return {"requests_per_s": requests_per_s, "rows_per_s": requests_per_s * rows, "latency_p50_s": 0.2,
            "latency_p95_s": 0.4, "latency_p99_s": 0.45, "statuses": {"202": 10}, "catch_up_s": 1.0, "clients": 8,
            "rows_per_request": rows, "cpu": {"server_cores": 1.5, "server_python_cores": 0.1, "clients_cores": 0.2},
            "server": {"materializer_rounds": 3},
            "visible": {"views": views, "p95_slowest_view_s": 2.5, "p95_all_views_s": 2.5,
                        "commits": {"count": 5, "requests_median": 8, "requests_max": 8, "rows_median": 80,
                                    "interval_median_s": 0.5}}}


def test_the_section_shows_every_figure_and_verdict():
    plain = {"requests_per_s": 2.0, "rows_per_s": 20.0, "requests": 60, "latency_p50_s": 0.4, "latency_p95_s": 0.6,
             "latency_p99_s": 0.7}
    results = {"date": "2026-11-22", "command": "python bench/ingest_bench.py", "load": [1.0], "cpus": 2,
               "settings": {"flush_ms": 50}, "scenarios": {"A": scenario(250.0, 10), "B": scenario(40.0, 1000)},
               "plain": {"A": plain, "B": plain},
               "conform": {"10": {"conform_count_s": 0.5, "from_json_count_s": 0.2, "requests": 1},
                           "40000": {"conform_count_s": 3.0, "from_json_count_s": 0.4, "requests": 40}},
               "append": {"batch_rows": 100, "plain_s": {"median": 1.0}, "pipeframe_s": {"median": 3.0},
                          "pipeframe_over_plain": {"min": 2.5, "median": 3.0, "max": 3.5},
                          "steps_s": {"source: Delta commit (write the rows)": 1.0, "other": 0.001},
                          "steps_total_s": 3.0}}
    results["paced"] = {"B": dict(scenario(50.0, 1000), offered_per_s=50.0, clients=None)}
    text = bench.section(results)
    assert text.startswith(bench.SECTION)
    assert "| B: `POST /v0/events`, 1,000-row requests, sent at 50 requests/s | 50.0 | 50,000 | 0.2 / 0.4 / 0.45 s |" in text
    assert "Scenario B sent at 50 requests/s, per view:" in text
    assert "| ≥ 200 requests/s of 10-row batches | 250 requests/s (scenario A) | met |  |" in text
    assert "| ≥ 50,000 rows/s in 1,000-row batches | 40,000 rows/s (scenario B) | **not met** | parsing, typing and writing" in text
    assert "| source: Delta commit (write the rows) | 1.000 | 33% |" in text and "| other |" not in text
    assert "**3.0** / 3.5x (PRODUCT.md section 8: ≤ 2x)" in text
    assert "### What limits throughput" in text
    assert "| A: plain Delta append, 10-row batches, sequential | 2.0 | 20 | 0.4 / 0.6 / 0.7 s | (no views) | 60 | |\n" \
        in text


def test_the_real_shaped_section_shows_its_scenarios_floor_and_the_ways_commits_took():
    plain = {"requests_per_s": 3.0, "rows_per_s": 3000.0, "requests": 9, "latency_p50_s": 0.3, "latency_p95_s": 0.5,
             "latency_p99_s": 0.6}
    closed = dict(scenario(120.0, 10), server={"commits": 40, "arrow_parsed_commits": 30,
                                               "arrow_committed_commits": 40, "quarantined_rows": 12})
    fresh = dict(closed, fresh_connections=True)
    lines = bench.real_section({"real": {"scenarios": {"RA": closed, "RC": fresh}, "plain": {"RB": plain}}})
    assert "| RA: 10-row requests, 8 clients | 120.0 | 1,200 | 0.2 / 0.4 / 0.45 s | 2.5 s | 40 | 75% / 100% | 12 | 1.5 |" \
        in lines
    assert "| RC: 10-row requests, 8 clients, a new connection per request | 120.0 | 1,200 | 0.2 / 0.4 / 0.45 s | " \
        "2.5 s | 40 | 75% / 100% | 12 | 1.5 |" in lines
    assert "| RB: plain Delta append, 1,000-row batches, sequential | 3.0 | 3,000 | 0.3 / 0.5 / 0.6 s | (no views) | 9 " \
        "| | | |" in lines


class _Slow(BaseHTTPRequestHandler):
    """Answers every POST 202 after `delay` seconds, on keep-alive connections; counts what it read."""

    protocol_version = "HTTP/1.1"
    delay = 0.0
    bodies: ClassVar[list[bytes]] = []

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        type(self).bodies.append(body)
        time.sleep(self.delay)
        answer = b'{"successful_rows": 1}'
        self.send_response(202)
        self.send_header("Content-Length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)

    def log_message(self, *args) -> None:
        pass


@pytest.fixture()
def slow_server():
    def start(delay: float):
        handler = type("Handler", (_Slow,), {"delay": delay, "bodies": []})
        server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        started.append(server)
        return f"http://127.0.0.1:{server.server_address[1]}", handler

    started: list = []
    yield start
    for server in started:
        server.shutdown()
        server.server_close()


def test_an_open_loop_sends_on_time_and_counts_latency_from_when_each_request_was_due(slow_server):
    url, handler = slow_server(0.02)
    records, (start, end) = bench.drive_paced(url, [b"a\n", b"bb\n"], rate=100, warmup=0.1, seconds=0.4)
    records.sort()
    assert len(records) == 50 and {r[2] for r in records} == {202}
    assert sorted(handler.bodies) == sorted([b"a\n", b"bb\n"] * 25)
    due = [r[0] for r in records]
    assert all(abs((b - a) - 0.01) < 1e-6 for a, b in itertools.pairwise(due))  # every 10 ms, whatever the answers
    assert end - start == pytest.approx(0.4) and all(r[1] - r[0] >= 0.02 for r in records)


def test_a_server_slower_than_the_rate_shows_in_the_latency_not_in_the_sending(slow_server):
    url, _ = slow_server(0.2)
    records, window = bench.drive_paced(url, [b"x\n"], rate=50, warmup=0, seconds=0.4, connections=2)
    records.sort()
    due = [r[0] for r in records]
    assert len(records) == 20 and all(abs((b - a) - 0.02) < 1e-6 for a, b in itertools.pairwise(due))
    # Two connections answer 10 requests/s: the 20th waited its turn behind 18 others, ~1.8 s after it was due.
    latencies = [r[1] - r[0] for r in records]
    assert latencies[-1] > 1.5
    figures = bench.request_figures(records, (window[0], window[0] + 10), rows=1)
    assert figures["latency_max_s"] > 1.5
