"""What every benchmark script reports: min / median / max over repeats, ratios of paired runs, one JSON."""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path


def summary(values: list[float]) -> dict:
    return {"min": round(min(values), 3), "median": round(statistics.median(values), 3),
            "max": round(max(values), 3), "runs": [round(v, 3) for v in values]}


def rounded(value: float | None, digits: int = 3) -> float | None:
    """`round`, passing None through (a figure that was not measured)."""
    return None if value is None else round(value, digits)


def ratio(slow: list[float], fast: list[float]) -> dict:
    """slow[i] / fast[i] for runs measured side by side, as min / median / max."""
    pairs = [s / f for s, f in zip(slow, fast, strict=True)]
    return {"min": round(min(pairs), 2), "median": round(statistics.median(pairs), 2), "max": round(max(pairs), 2)}


def emit(results: dict, path: Path | None) -> None:
    """Print the results as JSON, and write them to `path` too when given."""
    text = json.dumps(results, indent=2)
    print(text)
    if path is not None:
        path.write_text(text)


def options(doc: str) -> argparse.Namespace:
    """The options of a benchmark script that runs one measure `--repeats` times and may save it (`--json F`)."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--json", type=Path, default=None, help="Also write the summary to this file.")
    return parser.parse_args()
