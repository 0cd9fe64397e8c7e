"""The example project's answers computed in plain Python from the sales events appended (no Spark).

Events are the checkout service's nested JSON (example_project/fixtures/sales.ndjson); `amount` defaults to 0.
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

UNITS_COLUMN = "units"  # the column the rebuild adds to sales_by_hour: sum(quantity)


def fixture_sales(root: Path) -> list[dict]:
    return [json.loads(line) for line in (root / "fixtures" / "sales.ndjson").read_text().splitlines() if line.strip()]


def sale(timestamp: str, order: str, product: str, amount: float | None, quantity: int, customer: str) -> dict:
    line = {"id": order, "product": product, "quantity": quantity}
    if amount is not None:
        line["amount"] = amount
    return {"timestamp": timestamp, "order": line, "customer": {"id": customer, "country": "PT"}, "tags": ["cluster"]}


def sample_sales() -> list[dict]:
    """Rows appended after the fixtures (refresh): known products and one new, one free sample (no amount)."""
    return [sale("2024-05-17 08:15:00", "o-20001", "espresso-machine", 549.0, 1, "c-0901"),
            sale("2024-05-17 08:15:00", "o-20001", "coffee-grinder", 139.9, 2, "c-0901"),
            sale("2024-05-17 09:40:00", "o-20002", "cluster-mug", 12.5, 4, "c-0902"),
            sale("2024-05-17 10:05:00", "o-20003", "gift-card", None, 1, "c-0903")]


def event_sales() -> list[dict]:
    """Rows posted to `POST /v0/events` while serving."""
    return [sale("2024-05-18 12:00:00", "o-30001", "cluster-mug", 12.5, 2, "c-0904"),
            sale("2024-05-18 12:30:00", "o-30002", "desk-lamp", 68.0, 1, "c-0905"),
            sale("2024-05-18 13:10:00", "o-30003", "cluster-mug", 12.5, 1, "c-0906")]


def expected_top_products(events: list[dict], limit: int = 100) -> list[dict]:
    """top_products with its defaults (every hour since 2024-05-01): orders and revenue per product."""
    orders: dict[str, int] = defaultdict(int)
    revenue: dict[str, float] = defaultdict(float)
    for event in events:
        product = event["order"]["product"]
        orders[product] += 1
        revenue[product] += event["order"].get("amount", 0.0)
    rows = [{"product": p, "orders": orders[p], "revenue": round(revenue[p], 2), "currency": "EUR"} for p in orders]
    rows.sort(key=lambda r: (-r["revenue"], r["product"]))
    return rows[:limit]


def expected_units(events: list[dict]) -> dict[str, int]:
    units: dict[str, int] = defaultdict(int)
    for event in events:
        units[event["order"]["product"]] += event["order"]["quantity"]
    return dict(units)


class Life:
    """What a life worker saw (`seen`, written as JSON for the test) and every answer that differed (`failures`)."""

    def __init__(self) -> None:
        import time

        self.failures: list[str] = []
        self.seen: dict = {"steps": []}
        self._clock = time.perf_counter
        self._started = self._clock()

    def check(self, step: str, got, want) -> None:
        from pipeframe.testing import same

        self.seen["steps"].append([step, round(self._clock() - self._started, 1)])
        if not same(want, got):
            self.failures.append(f"{step}: got {got!r}, expected {want!r}")

    def top_products(self, project) -> list[dict]:
        """The endpoint's rows; which engine answered each call is kept in `seen["engines"]`."""
        answer = project.endpoint("top_products", limit=100)
        self.seen.setdefault("engines", []).append([answer.engine, answer.engine_reason])
        return answer.data

    def load_fixtures(self, project, root: Path) -> list[dict]:
        """Append the example's fixtures, run its own endpoint tests (answers computed on local[*]) and check
        top_products against Python; the fixtures' sales rows."""
        from pipeframe.testing import load_cases, run_cases

        loaded = project.load_fixtures()
        self.seen["fixtures"] = {r.datasource: r.accepted for r in loaded}
        rows = fixture_sales(root)
        report = run_cases(project, load_cases(project))
        self.seen["endpoint_cases"] = len(report.results)
        self.failures.extend(f"endpoint test {r.case.id}: {r.failure}" for r in report.failed)
        self.check("fixtures: top_products", self.top_products(project), expected_top_products(rows))
        return rows
