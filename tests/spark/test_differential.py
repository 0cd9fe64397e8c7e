"""Differential tests: an incremental materialized view, read by its name, equals its query run once over all
the raw rows.

Rows are appended through pipeframe in random batch splits (some batches empty), so every view sees them block
by block; the reference is the same aggregation over the landing datasource. Exact aggregates must match
exactly (the generated data uses multiples of 1/4, so sums do not depend on the order of addition), HLL states
(approx_count_distinct, uniq) within 5% + 1 of the exact distinct count, and KLL states (percentile_approx,
quantiles) between the true quantiles at ranks p - 0.05 and p + 0.05.

1. The example project: its fixtures in random batches through every view (including the cascade
   sales_by_day over sales_by_hour, the dimension lookup and the explicit uniqState/sumState target).
2. Hypothesis-generated materialized pipes over a generated datasource: random filters, group keys and time
   buckets, every mergeable aggregate of the state catalog in plain, ClickHouse and explicit State spellings
   (some with `FILTER (WHERE ...)`), with `populate --truncate` and `optimize` between appends.
3. Edge cases these tests found (fixed): an empty KLL sketch, a constant group's variance, plain ClickHouse
   aggregate spellings.
"""

from __future__ import annotations

import math
import random
import shutil
import threading
import uuid
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path

import pytest
from hypothesis import HealthCheck, Phase, assume, given, note, settings
from hypothesis import strategies as st

from pipeframe.project import Project
from tests.conftest import answered

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "example_project"
FIXTURES = EXAMPLE / "fixtures"


# ------------------------------------------------------------------------------------------------ comparing
def exact(got, want) -> bool:
    return got == want


def close(got, want, rel: float = 1e-12, abs_: float = 1e-12) -> bool:
    if got is None or want is None:
        return got is None and want is None
    return math.isclose(got, want, rel_tol=rel, abs_tol=abs_)


def moment(got, want) -> bool:
    """Variances combined with Chan's formula: equal up to rounding."""
    return close(got, want, rel=1e-6, abs_=1e-9)


def hll(got, want) -> bool:
    """An HLL estimate against the exact distinct count: relative error at most 5%, plus 1 for small counts."""
    return got is not None and want is not None and abs(got - want) <= 0.05 * want + 1


def quantile(got, want) -> bool:
    """A KLL quantile against [true quantile at p - 0.05, true quantile at p + 0.05]."""
    if want is None:
        return got is None
    low, high = want
    return got is not None and low <= got <= high


def assert_same(got: list[dict], want: list[dict], keys: Iterable[str], checks: dict[str, Callable],
                context: str = "") -> None:
    """The view's rows (`got`) and the reference rows (`want`): the same keys, one row each, every column
    passing its check."""
    keys = tuple(keys)
    by_key = {tuple(r[k] for k in keys): r for r in got}
    assert len(by_key) == len(got), f"more than one row per key in the view\n{context}"
    expected = {tuple(r[k] for k in keys): r for r in want}
    assert sorted(by_key, key=repr) == sorted(expected, key=repr), f"the view has other keys\n{context}"
    bad = [(key, column, by_key[key][column], row[column])
           for key, row in expected.items() for column, check in checks.items()
           if not check(by_key[key][column], row[column])]
    assert not bad, "view differs from full recomputation (key, column, view, reference):\n" + "\n".join(
        map(repr, bad[:20])) + f"\n{context}"


# ---------------------------------------------------------------------------------------------- projects
def fresh_root(spark_config, name: str, copy_from: Path | None = None) -> Path:
    """A project folder under the Spark tests' project, with its pipeframe.yaml (same Spark settings)."""
    root = Path(spark_config.root) / f"diff_{name}"
    shutil.rmtree(root, ignore_errors=True)
    if copy_from is not None:
        shutil.copytree(copy_from, root, ignore=shutil.ignore_patterns(".pipeframe"))
    root.mkdir(parents=True, exist_ok=True)
    shutil.copy(Path(spark_config.root) / "pipeframe.yaml", root / "pipeframe.yaml")
    return root


def split(rng: random.Random, items: list, batches: int) -> list[list]:
    """`items` shuffled and cut into `batches` consecutive parts; about a third of the parts are empty."""
    items = list(items)
    rng.shuffle(items)
    weights = [rng.choice((0, 1, 2, 3)) for _ in range(batches)]
    if not any(weights):
        weights[-1] = 1
    total, parts, start, acc = sum(weights), [], 0, 0
    for weight in weights:
        acc += weight
        end = len(items) * acc // total
        parts.append(items[start:end])
        start = end
    return parts


def append(p: Project, name: str, data, expected_rows: int) -> None:
    result = p.append(name, data)
    assert (result.accepted, result.quarantined) == (expected_rows, 0), result.reasons
    failed = [v for v in result.views if v.outcome not in ("applied", "up to date")]
    assert not failed, failed


def append_concurrently(p: Project, batches: list[tuple[str, list[str]]]) -> None:
    """Each batch appended by its own thread (as NDJSON lines: group-committed), the views left alone, while two
    threads refresh every view in a loop; a last refresh once everything landed."""
    landed = threading.Event()
    problems: list = []

    def refresher() -> None:
        mine = Project(p.root, spark=p.spark, environ={})
        while not landed.is_set():
            problems.extend(r for r in mine.refresh() if r.outcome not in ("applied", "up to date"))

    def appender(batch: tuple[str, list[str]]):
        name, lines = batch
        return p.append(name, lines, views=False)

    refreshers = [threading.Thread(target=refresher) for _ in range(2)]
    for thread in refreshers:
        thread.start()
    try:
        with ThreadPoolExecutor(len(batches)) as pool:
            results = list(pool.map(appender, batches))
    finally:
        landed.set()
        for thread in refreshers:
            thread.join()
    assert [(r.accepted, r.quarantined) for r in results] == [(len(lines), 0) for _, lines in batches]
    problems.extend(r for r in p.refresh() if r.outcome not in ("applied", "up to date"))
    assert not problems, problems


# --------------------------------------------------------------------------------- 1. the example project
@dataclass(frozen=True)
class ExampleView:
    """How to read one view of the example project, its query over the raw rows, and how to compare them."""

    read: str
    reference: str
    keys: tuple[str, ...]
    checks: dict[str, Callable]


EXAMPLE_VIEWS = (
    ExampleView(
        read="SELECT * FROM sales_by_hour",
        reference=("SELECT date_trunc('hour', ts) AS hour, product, count(*) AS orders, sum(amount) AS revenue, "
                   "avg(amount) AS avg_ticket, count(DISTINCT customer_id) AS buyers, max(amount) AS max_ticket "
                   "FROM sales GROUP BY 1, 2"),
        keys=("hour", "product"),
        checks={"orders": exact, "revenue": close, "avg_ticket": close, "buyers": hll, "max_ticket": exact}),
    ExampleView(  # the cascade: rolled up from sales_by_hour's states, compared with the raw sales
        read="SELECT * FROM sales_by_day",
        reference=("SELECT date_trunc('day', ts) AS day, product, count(*) AS orders, sum(amount) AS revenue, "
                   "max(amount) AS max_ticket FROM sales GROUP BY 1, 2"),
        keys=("day", "product"),
        checks={"orders": exact, "revenue": close, "max_ticket": exact}),
    ExampleView(  # explicit uniqState/sumState columns: read through uniqMerge/sumMerge
        read=("SELECT country, uniqMerge(customers) AS customers, sumMerge(revenue) AS revenue "
              "FROM customers_by_country GROUP BY country"),
        reference=("SELECT country, count(DISTINCT customer_id) AS customers, sum(amount) AS revenue "
                   "FROM sales GROUP BY country"),
        keys=("country",),
        checks={"customers": hll, "revenue": close}),
    ExampleView(
        read="SELECT * FROM sales_by_category",
        reference=("SELECT coalesce(p.category, 'uncategorized') AS category, count(*) AS order_lines, "
                   "sum(s.quantity) AS units, sum(s.amount) AS revenue "
                   "FROM sales AS s LEFT JOIN products AS p ON s.product = p.product "
                   "GROUP BY coalesce(p.category, 'uncategorized')"),
        keys=("category",),
        checks={"order_lines": exact, "units": exact, "revenue": close}),
    ExampleView(
        read="SELECT * FROM latency_by_path",
        reference=("SELECT path, date_trunc('day', ts) AS day, count(*) AS views, "
                   "percentile_approx(latency_ms, array(0.45, 0.55), 1000000) AS p50, "
                   "percentile_approx(latency_ms, array(0.9, 1.0), 1000000) AS p95 "
                   "FROM page_views WHERE path NOT LIKE '/static/%' GROUP BY path, date_trunc('day', ts)"),
        keys=("path", "day"),
        checks={"views": exact, "p50": quantile, "p95": quantile}),
)


def _write_batch(folder: Path, name: str, header: str | None, lines: list[str]) -> Path:
    path = folder / name
    path.write_text("".join(f"{line}\n" for line in ([header] if header else []) + lines), encoding="utf-8")
    return path


@pytest.mark.parametrize("seed, mode", [(11, "concurrent"), (29, "populate-optimize")])
def test_example_project_views_equal_full_recomputation(spark, spark_config, tmp_path, seed, mode):
    """`populate-optimize`: files appended one by one, each refreshing the views, with an optimize and a rebuild
    between them. `concurrent`: the batches as rows appended from several threads at once (group-committed: they
    share commits) leaving the views alone, while two other threads keep refreshing every view at the same time."""
    rng = random.Random(seed)
    root = fresh_root(spark_config, f"example_{seed}", copy_from=EXAMPLE)
    (root / "pipeframe.yaml").write_text((root / "pipeframe.yaml").read_text() + "vars:\n  currency: EUR\n")
    p = Project(root, spark=spark, environ={})
    assert p.check().ok
    p.deploy()

    header, *products = (FIXTURES / "products.csv").read_text().splitlines()
    for i, part in enumerate(split(rng, products, 2)):  # the lookup dimension first
        append(p, "products", str(_write_batch(tmp_path, f"products_{i}.csv", header, part)), len(part))

    batches = [(name, part) for name in ("sales", "page_views")
               for part in split(rng, (FIXTURES / f"{name}.ndjson").read_text().splitlines(), rng.randint(3, 4))]
    rng.shuffle(batches)
    if mode == "concurrent":
        append_concurrently(p, [b for b in batches if b[1]])
    for i, (name, part) in enumerate(batches if mode != "concurrent" else []):
        append(p, name, str(_write_batch(tmp_path, f"{name}_{i}.ndjson", None, part)), len(part))
        if i == 2:
            p.optimize()
        if i == 4:
            p.populate("sales_by_hour", truncate=True)  # rebuilds its cascade sales_by_day too

    totals = answered(p, "SELECT (SELECT count(*) FROM sales) AS s, (SELECT count(*) FROM page_views) AS v")
    assert totals == [{"s": 200, "v": 200}]
    for view in EXAMPLE_VIEWS:
        assert_same(answered(p, view.read), answered(p, view.reference), view.keys, view.checks, view.read)


# ------------------------------------------------------------------------ 2. generated materialized pipes
EVENTS = """\
SCHEMA >
    `ts` TIMESTAMP,
    `a` STRING,
    `b` STRING,
    `u` STRING,
    `x` DOUBLE,
    `y` INT,
    `lat` INT
"""
START = datetime(2024, 5, 1)


@dataclass(frozen=True)
class Aggregate:
    """One aggregate of the state catalog: its plain spellings (Spark and ClickHouse), its explicit State form
    with the xMerge that finalizes it on read, and the plain Spark aggregate over the raw rows."""

    kind: str
    plain: tuple[str, ...]
    state: str
    merge: str  # {c}: the state column
    reference: str
    check: Callable


# {p}/{lo}/{hi}: the quantile and its rank bounds.
CATALOG = (
    Aggregate("count", ("count(*)", "count(1)"), "countState()", "countMerge({c})", "count(*)", exact),
    Aggregate("sum", ("sum(x)",), "sumState(x)", "sumMerge({c})", "sum(x)", exact),
    Aggregate("sum_int", ("sum(y)",), "sumState(y)", "sumMerge({c})", "sum(y)", exact),
    Aggregate("min", ("min(x)",), "minState(x)", "minMerge({c})", "min(x)", exact),
    Aggregate("max", ("max(u)",), "maxState(u)", "maxMerge({c})", "max(u)", exact),
    Aggregate("any", ("any_value(x)", "anySimpleState(x)"), "anyState(x)", "anyMerge({c})", "min(x)", exact),
    Aggregate("avg", ("avg(x)", "mean(x)"), "avgState(x)", "avgMerge({c})", "avg(x)", close),
    Aggregate("uniq", ("approx_count_distinct(u)", "uniq(u)"), "uniqState(u)", "uniqMerge({c})", "count(DISTINCT u)", hll),
    Aggregate("uniq_exact", ("count(DISTINCT u)", "uniqExact(u)"), "uniqExactState(u)", "uniqExactMerge({c})",
              "count(DISTINCT u)", exact),
    # quantileMerge (one level, a number): quantilesMerge({p}) is an array of one, as in ClickHouse.
    Aggregate("quantile", ("percentile_approx(lat, {p})", "approx_percentile(lat, {p})", "quantile({p})(lat)"), "quantilesState({p})(lat)",
              "quantileMerge({p})({c})", "percentile_approx(lat, array({lo}, {hi}), 1000000)", quantile),
    Aggregate("arg_max", ("max_by(y, ts)", "argMax(y, ts)"), "argMaxState(y, ts)", "argMaxMerge({c})",
              "max_by(y, ts)", exact),
    Aggregate("arg_min", ("min_by(x, ts)", "argMin(x, ts)"), "argMinState(x, ts)", "argMinMerge({c})",
              "min_by(x, ts)", exact),
    Aggregate("count_if", ("countIf(x > 0)", "count_if(x > 0)"), "countStateIf(x > 0)", "countMerge({c})",
              "count_if(x > 0)", exact),
    Aggregate("sum_if", ("sumIf(y, a = 'k1')",), "sumStateIf(y, a = 'k1')", "sumMerge({c})",
              "sum(CASE WHEN a = 'k1' THEN y END)", exact),
    Aggregate("avg_if", ("avgIf(x, y > 100)",), "avgStateIf(x, y > 100)", "avgMerge({c})",
              "avg(CASE WHEN y > 100 THEN x END)", close),
    Aggregate("var_samp", ("var_samp(x)", "variance(x)"), "varSampState(x)", "varSampMerge({c})", "var_samp(x)",
              moment),
    Aggregate("stddev_samp", ("stddev_samp(x)", "stddev(x)", "std(x)"), "stddevSampState(x)",
              "stddevSampMerge({c})", "stddev_samp(x)", moment),
    Aggregate("var_pop", ("var_pop(x)",), "varPopState(x)", "varPopMerge({c})", "var_pop(x)", moment),
    Aggregate("stddev_pop", ("stddev_pop(x)",), "stddevPopState(x)", "stddevPopMerge({c})", "stddev_pop(x)", moment),
    # FILTER (WHERE ...) kept in the state (a regression: it was refused as "combines aggregates")
    Aggregate("count_filter", ("count(*) FILTER (WHERE y > 100)",), "countState() FILTER (WHERE y > 100)",
              "countMerge({c})", "count(*) FILTER (WHERE y > 100)", exact),
    Aggregate("avg_filter", ("avg(x) FILTER (WHERE a = 'k1')",), "avgState(x) FILTER (WHERE a = 'k1')",
              "avgMerge({c})", "avg(CASE WHEN a = 'k1' THEN x END)", close),
    Aggregate("uniq_filter", ("approx_count_distinct(u) FILTER (WHERE lat < 1000)",),
              "uniqState(u) FILTER (WHERE lat < 1000)", "uniqMerge({c})",
              "count(DISTINCT CASE WHEN lat < 1000 THEN u END)", hll),
)

# WHERE conditions, with the same condition in Python (None compares as SQL NULL: the row does not pass).
FILTERS: dict[str | None, Callable[[dict], bool]] = {
    None: lambda r: True,
    "x > 0": lambda r: r["x"] is not None and r["x"] > 0,
    "a = 'k1'": lambda r: r["a"] == "k1",
    "y IS NOT NULL": lambda r: r["y"] is not None,
    "lat < 800": lambda r: r["lat"] < 800,
    "ts >= TIMESTAMP '2024-05-02 00:00:00'": lambda r: r["ts"] >= "2024-05-02 00:00:00",
    "b IN ('p', 'q') OR x < 0": lambda r: r["b"] in ("p", "q") or (r["x"] is not None and r["x"] < 0),
}
BUCKETS = (None, "date_trunc('hour', ts)", "date_trunc('day', ts)", "to_date(ts)")


@dataclass(frozen=True)
class Column:
    alias: str
    aggregate: Aggregate
    written: str  # as the pipe writes it
    check: Callable


@dataclass(frozen=True)
class PipeSpec:
    """One generated materialized pipe `mv_<n>` writing the view `view_<n>`."""

    index: int
    explicit: bool  # State forms (the view is read with xMerge) rather than plain aggregates
    keys: tuple[tuple[str, str], ...]  # (alias, expression)
    where: str | None
    columns: tuple[Column, ...]
    count_distinct: str | None  # COUNT_DISTINCT exact|sketch, when the pipe writes count(DISTINCT u)
    group_by_ordinal: bool
    quantile: float

    @property
    def pipe(self) -> str:
        return f"mv_{self.index}"

    @property
    def view(self) -> str:
        return f"view_{self.index}"

    @property
    def is_global(self) -> bool:
        return not self.keys

    def _group_by(self, ordinal: bool) -> str:
        if not self.keys:
            return ""
        keys = [str(i + 1) for i in range(len(self.keys))] if ordinal else [e for _, e in self.keys]
        return f" GROUP BY {', '.join(keys)}"

    def _where(self) -> str:
        return f" WHERE {self.where}" if self.where else ""

    def _params(self) -> dict[str, str]:
        p = self.quantile
        return {"p": str(p), "lo": str(round(max(0.0, p - 0.05), 2)), "hi": str(round(min(1.0, p + 0.05), 2))}

    def datafile(self) -> str:
        select = [f"{e} AS {a}" if e != a else a for a, e in self.keys] + \
                 [f"{c.written} AS {c.alias}" for c in self.columns]
        lines = ["NODE aggregate", "SQL >", "    SELECT " + ",\n        ".join(select), "    FROM events"]
        if self.where:
            lines.append(f"    WHERE {self.where}")
        if self.keys:
            lines.append("   " + self._group_by(self.group_by_ordinal))
        lines += ["TYPE materialized", f"DATASOURCE {self.view}"]
        if self.count_distinct:
            lines.append(f"COUNT_DISTINCT {self.count_distinct}")
        return "\n".join(lines) + "\n"

    def view_sql(self) -> str:
        """Reads the view by name: plain targets as they are, explicit State targets through xMerge."""
        if not self.explicit:
            return f"SELECT * FROM {self.view}"
        keys = [a for a, _ in self.keys]
        merges = [c.aggregate.merge.format(c=c.alias, **self._params()) + f" AS {c.alias}" for c in self.columns]
        group = f" GROUP BY {', '.join(keys)}" if keys else ""
        return f"SELECT {', '.join(keys + merges)} FROM {self.view}{group}"

    def reference_sql(self) -> str:
        select = [f"{e} AS {a}" for a, e in self.keys] + \
                 [c.aggregate.reference.format(**self._params()) + f" AS {c.alias}" for c in self.columns]
        return f"SELECT {', '.join(select)} FROM events{self._where()}{self._group_by(False)}"

    def checks(self) -> dict[str, Callable]:
        return {c.alias: c.check for c in self.columns}


@dataclass(frozen=True)
class Scenario:
    pipes: tuple[PipeSpec, ...]
    batches: tuple[tuple[dict, ...], ...] = field(repr=False)
    populate_after: int | None  # populate --truncate one pipe after this batch
    populate_pipe: int
    populate_chunks: tuple[str, int] | None  # (chunk_by, chunk_rows)
    optimize_after: int | None

    @property
    def rows(self) -> list[dict]:
        return [row for batch in self.batches for row in batch]

    def files(self) -> dict[str, str]:
        return {"datasources/events.datasource": EVENTS, **{f"pipes/{p.pipe}.pipe": p.datafile() for p in self.pipes}}

    def describe(self) -> str:
        sizes = [len(b) for b in self.batches]
        steps = (f"batches {sizes}; populate mv_{self.populate_pipe} after batch {self.populate_after} "
                 f"(chunks {self.populate_chunks}); optimize after batch {self.optimize_after}")
        return "\n".join([p.datafile() for p in self.pipes] + [steps])


def generate_rows(rnd: random.Random, n: int) -> list[dict]:
    """Rows with NULLs in every numeric and string column but `ts` and `lat`, repeated strings, and x drawn from
    a pool of multiples of 1/4 (sometimes a single value, so groups with zero variance occur). `ts` is unique,
    so max_by/min_by have no ties."""
    x_pool = [rnd.randint(-400, 400) / 4 for _ in range(rnd.choice((1, 3, 40, 400)))]
    users = [f"user-{i:03d}" for i in range(rnd.choice((5, 60, 250)))]
    rows = []
    for second in sorted(rnd.sample(range(3 * 86400), n)):
        rows.append({
            "ts": (START + timedelta(seconds=second)).strftime("%Y-%m-%d %H:%M:%S"),
            "a": rnd.choice(("k1", "k2", "k3", None)),
            "b": rnd.choice(("p", "q", "r", "s", "t", None)),
            "u": None if rnd.random() < 0.1 else rnd.choice(users),
            "x": None if rnd.random() < 0.15 else rnd.choice(x_pool),
            "y": None if rnd.random() < 0.15 else rnd.randint(-50, 1000),
            "lat": rnd.randint(1, 2000),
        })
    return rows


@st.composite
def pipe_specs(draw, count: int) -> tuple[PipeSpec, ...]:
    """`count` pipes (the second one in State forms) sharing out every aggregate of the catalog:
    each pipe gets a random non-empty subset, so every example exercises the whole catalog."""
    styles = [False, True] if count > 1 else [draw(st.booleans())]
    owners = [draw(st.integers(0, count - 1)) for _ in CATALOG]
    for i in range(count):  # no pipe without aggregates
        if i not in owners:
            owners[draw(st.integers(0, len(owners) - 1))] = i
    assume(len(set(owners)) == count)
    specs = []
    for i, explicit in enumerate(styles):
        keys = [(k, k) for k in draw(st.permutations(["a", "b"]))[: draw(st.integers(0, 2))]]
        bucket = draw(st.sampled_from(BUCKETS))
        if bucket:
            keys.insert(draw(st.integers(0, len(keys))), ("bucket", bucket))
        columns, count_distinct = [], None
        for aggregate, owner in zip(CATALOG, owners, strict=True):
            if owner != i:
                continue
            written, check = draw(st.sampled_from(aggregate.plain)), aggregate.check
            if explicit:
                written = aggregate.state
            elif "DISTINCT" in written:
                count_distinct = draw(st.sampled_from(["exact", "sketch"]))
                check = exact if count_distinct == "exact" else hll
            columns.append(Column(f"{aggregate.kind}_{len(columns)}", aggregate, written, check))
        quantile_p = draw(st.sampled_from([0.5, 0.9, 0.25]))
        columns = [Column(c.alias, c.aggregate, c.written.format(p=quantile_p), c.check) for c in columns]
        specs.append(PipeSpec(i, explicit, tuple(keys), draw(st.sampled_from(list(FILTERS))), tuple(columns),
                              count_distinct, draw(st.booleans()), quantile_p))
    return tuple(specs)


@st.composite
def scenarios(draw) -> Scenario:
    pipes = draw(pipe_specs(draw(st.integers(1, 2))))
    rnd = draw(st.randoms(use_true_random=False))
    rows = generate_rows(rnd, draw(st.integers(40, 300)))
    batches = tuple(tuple(b) for b in split(rnd, rows, draw(st.integers(3, 4))))
    positions = st.none() | st.integers(0, len(batches) - 2)
    chunks = st.none() | st.tuples(st.sampled_from(["ts", "x", "a"]), st.integers(100, 200))
    return Scenario(pipes, batches, draw(positions), draw(st.integers(0, len(pipes) - 1)), draw(chunks),
                    draw(positions))


def write_scenario(root: Path, scenario: Scenario) -> None:
    for rel, text in scenario.files().items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text, encoding="utf-8")


def accepted(root: Path, scenario: Scenario, spark=None) -> bool:
    write_scenario(root, scenario)
    report = Project(root, environ={}, spark=spark).check()
    note("; ".join(f"{d.code} {d.message}" for d in report.errors))
    return report.ok


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios())
def test_generated_pipes_are_accepted_by_the_compiler(tmp_path_factory, scenario):
    """No Spark: the strategy generates pipes `check` accepts, so the Spark test below hardly ever discards one."""
    root = tmp_path_factory.mktemp("generated")
    assert accepted(root, scenario), scenario.describe()


# Shrinking would re-run whole ingestions (tens of seconds each); a failure prints the pipes and batch sizes.
@settings(max_examples=4, deadline=None, phases=(Phase.explicit, Phase.reuse, Phase.generate),
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(scenario=scenarios())
def test_generated_views_equal_full_recomputation(spark, spark_config, scenario):
    rows = scenario.rows
    root = fresh_root(spark_config, f"generated_{uuid.uuid4().hex[:8]}")
    assert accepted(root, scenario, spark), scenario.describe()
    note(scenario.describe())
    p = Project(root, spark=spark, environ={})
    p.deploy()
    for i, batch in enumerate(scenario.batches):
        append(p, "events", list(batch), len(batch))
        if i == scenario.populate_after:
            chunk_by, chunk_rows = scenario.populate_chunks or (None, None)
            p.populate(scenario.pipes[scenario.populate_pipe].pipe, truncate=True, chunk_by=chunk_by,
                       chunk_rows=chunk_rows)
        if i == scenario.optimize_after:
            p.optimize()
    assert answered(p, "SELECT count(*) AS n FROM events") == [{"n": len(rows)}]
    for pipe in scenario.pipes:
        assert_same(answered(p, pipe.view_sql()), answered(p, pipe.reference_sql()), [a for a, _ in pipe.keys],
                    pipe.checks(), scenario.describe())
    shutil.rmtree(root, ignore_errors=True)


# -------------------------------------------------------------------------------- 3. edge cases, fixed
def small_project(spark, spark_config, name: str, select: str) -> Project:
    root = fresh_root(spark_config, name)
    (root / "datasources").mkdir()
    (root / "pipes").mkdir()
    (root / "datasources/events.datasource").write_text(EVENTS)
    (root / "pipes/mv.pipe").write_text(f"NODE n\nSQL >\n    {select}\nTYPE materialized\nDATASOURCE view\n")
    p = Project(root, spark=spark, environ={})
    p.deploy()
    return p


def event(ts: str, a: str, x: float | None = None, u: str | None = None, lat: int | None = None) -> dict:
    return {"ts": f"2024-05-01 {ts}", "a": a, "x": x, "u": u, "lat": lat}


def test_quantile_of_a_group_without_values_reads_as_null(spark, spark_config):
    p = small_project(spark, spark_config, "bug_kll_empty",
                      "SELECT a, percentile_approx(x, 0.5) AS p FROM events GROUP BY a")
    append(p, "events", [event("10:00:00", "k1", x=5.0), event("10:00:01", "k2")], 2)
    reference = "SELECT a, percentile_approx(x, array(0.45, 0.55), 1000000) AS p FROM events GROUP BY a"
    assert_same(answered(p, "SELECT * FROM view"), answered(p, reference), ["a"], {"p": quantile})


def test_stddev_of_a_constant_group_is_zero_not_nan(spark, spark_config):
    p = small_project(spark, spark_config, "bug_stddev_nan",
                      "SELECT a, stddev_samp(x) AS sd, var_samp(x) AS v FROM events GROUP BY a")
    append(p, "events", [event("10:00:00", "k1", x=0.1), event("10:00:01", "k1", x=0.1)], 2)
    append(p, "events", [event("10:00:02", "k1", x=0.1)], 1)
    reference = "SELECT a, stddev_samp(x) AS sd, var_samp(x) AS v FROM events GROUP BY a"
    assert_same(answered(p, "SELECT * FROM view"), answered(p, reference), ["a"], {"sd": moment, "v": moment})


def test_plain_clickhouse_spellings_are_aggregates(spark, spark_config):
    p = small_project(spark, spark_config, "plain_clickhouse",
                      "SELECT a, uniqExact(u) AS n, uniq(u) AS approx, quantile(0.5)(x) AS median "
                      "FROM events GROUP BY a")
    append(p, "events", [event("10:00:00", "k1", x=1.0, u="a"), event("10:00:01", "k1", x=2.0, u="a"),
                         event("10:00:02", "k1", x=3.0, u="b")], 3)
    append(p, "events", [event("10:00:03", "k1", x=4.0, u="c"), event("10:00:04", "k2", u="a")], 2)
    reference = ("SELECT a, count(DISTINCT u) AS n, count(DISTINCT u) AS approx, "
                 "percentile_approx(x, array(0.45, 0.55), 1000000) AS median FROM events GROUP BY a")
    assert_same(answered(p, "SELECT * FROM view"), answered(p, reference), ["a"],
                {"n": exact, "approx": hll, "median": quantile})
    # The same spellings over raw rows (an ad-hoc query or an endpoint) are the plain Spark aggregates.
    assert answered(p, "SELECT uniqExact(u) AS n FROM events") == [{"n": 3}]
