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


def cluster_results() -> dict:
    def measure(local: float, cluster: float) -> dict:
        return {"local": {"min": local, "median": local, "max": local},
                "cluster": {"min": cluster, "median": cluster, "max": cluster},
                "cluster_over_local": {"min": cluster / local, "median": cluster / local, "max": cluster / local}}

    return {"date": "2026-11-22", "command": "python bench/run.py --cluster", "rows": 100_000, "batch_rows": 1000,
            "appends": 5, "repeats": 3, "load_at_start": [3.0], "load_at_end": [4.0],
            "cluster": {"workers": 1, "cores": 2, "executor_memory": "1g", "app_cores": 2},
            "settings": {"spark.sql.shuffle.partitions": "4", "spark.databricks.delta.snapshotPartitions": "2"},
            "measures": {"refresh_s": measure(2.0, 3.0), "append_s": measure(4.0, 5.0),
                         "plain_append_s": measure(1.0, 1.5)}}


def test_the_cluster_section_puts_local_and_cluster_side_by_side_with_the_ratio():
    page = report.render({**results(pipeframe_s=2.0, ctas_s=10.0, raw_s=3.0), "cluster": cluster_results()})
    assert report.CLUSTER_SECTION in page
    assert page.index(report.CLUSTER_SECTION) < page.index("## Where pipeframe loses")
    row = target_row(page, "| `Project.refresh()` after a 1% append")
    assert "2.00 / 2.00 / 2.00 s | 3.00 / 3.00 / 3.00 s | 1.5 / **1.5** / 1.5x |" in row
    assert "1.2 / **1.2** / 1.2x" in target_row(page, "| `Project.append` of 1%")
    assert "2 cores" in page and "100k" in page
    assert report.CLUSTER_SECTION not in report.render(results(pipeframe_s=2.0, ctas_s=10.0, raw_s=3.0))


def test_inserting_the_cluster_section_leaves_the_rest_of_the_page_as_it_was():
    page = "# Benchmarks\n\nintro\n\n## Targets\n\nrows\n\n## Where pipeframe loses, and why\n\n- x\n\n## Tail\n\nend\n"
    section = report.cluster_text(cluster_results())
    once = report.insert_section(page, report.CLUSTER_SECTION, section)
    assert once.replace("\n".join(section) + "\n\n", "") == page
    assert once.index(report.CLUSTER_SECTION) < once.index("## Where pipeframe loses")
    again = report.insert_section(once, report.CLUSTER_SECTION, section)  # replaced in place, not added twice
    assert again == once
    changed = cluster_results()
    changed["measures"]["refresh_s"]["cluster"]["median"] = 9.0
    replaced = report.insert_section(once, report.CLUSTER_SECTION, report.cluster_text(changed))
    assert replaced.count(report.CLUSTER_SECTION) == 1 and "9.00" in replaced
    assert replaced.split(report.CLUSTER_SECTION)[0] == once.split(report.CLUSTER_SECTION)[0]
    assert replaced.split("## Where pipeframe loses")[1] == once.split("## Where pipeframe loses")[1]
