"""The benchmark page puts every measured ratio next to its target with an honest verdict (bench/report.py)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

import report


def results(pipeframe_s: float, ctas_s: float, raw_s: float) -> dict:
    sizes = [100, 300, 1000]
    appends = [{"size": size, "rows_before": size, "sdp_run_phase_s": 1.0,
                "seconds": {"pipeframe": pipeframe_s, "ctas": ctas_s * size / 1000, "dbt": 2.0, "sdp": 3.0}}
               for size in sizes for _ in range(2)]
    timing = {"min": 1.0, "median": 1.0, "max": 1.0}
    return {
        "date": "2026-11-22", "command": "python bench/run.py", "minutes": 1.0,
        "machine": {"cpus": 2, "cpu": "x", "memory_gib": 24, "os": "linux", "load_at_start": [1.0]},
        "versions": {"pyspark": "4.1.4"},
        "views": {"rows": 1000, "batch_rows": 10, "sizes": sizes, "sides": ["pipeframe", "ctas", "dbt", "sdp"],
                  "initial_s": {"pipeframe": 1, "ctas": 1, "dbt": 1, "sdp": 1}, "appends": appends,
                  "cross_check": {"view": "requests_by_hour", "rows": 5, "pipeframe": "equal", "ctas": "equal",
                                  "dbt": "equal", "sdp": "equal"},
                  "endpoint": {"view_s": timing, "raw_s": {**timing, "median": raw_s}, "start": "2024-05-01",
                               "raw_over_view": {"min": raw_s, "median": raw_s, "max": raw_s},
                               "view_rows_read": 10, "raw_rows_read": 1000}},
    }


def target_row(page: str, start: str) -> str:
    return next(line for line in page.splitlines() if line.startswith(start))


def test_a_missed_target_reads_not_met_and_is_explained():
    page = report.render(results(pipeframe_s=2.0, ctas_s=10.0, raw_s=3.0))
    assert target_row(page, "| refresh after a 1%").endswith("| **not met** |")
    assert "5.0" in target_row(page, "| refresh after a 1%")
    assert target_row(page, "| endpoint over an MV").endswith("| **not met** |")
    assert "The ≥ 20x refresh target: 5.0x" in page
    assert "The ≥ 10x endpoint target" in page


def test_a_met_target_reads_met():
    page = report.render(results(pipeframe_s=0.1, ctas_s=10.0, raw_s=12.0))
    assert target_row(page, "| refresh after a 1%").endswith("| met |")
    assert target_row(page, "| endpoint over an MV").endswith("| met |")
    assert target_row(page, "| refresh cost grows").endswith("| met |")
    assert "The ≥ 20x refresh target" not in page
