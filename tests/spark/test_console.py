"""The web console (`/ui`) in a real headless Chromium (Debian's, driven by playwright), against a real server over
Spark + Delta: the page loads and asks for a token, the graph shows every resource, pausing a view from the console
pauses it, a bad append shows in the quarantine browser, and the playground answers as the API does.

One project, one server (tests/spark/conftest.py's `server` and `http`) and one browser serve the module; the tests run in file order. Each waits on what the page
shows (playwright's `expect`), never on time. The same run writes the screenshots of docs/operations.md
(docs/img/console-*.png).
"""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from playwright.sync_api import Browser, Page, expect, sync_playwright

from pipeframe.project import Project
from pipeframe.server import RunningServer
from pipeframe.server.console import HEADERS
from tests.spark.conftest import deployed, until

CHROMIUM = "/usr/bin/chromium"
# As root in a sandbox-less container, and quiet: no GPU, no QUIC, none of Chromium's own calls to Google's hosts
# (this machine's network refuses them, and they are not what is tested).
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]
SCREENSHOTS = Path(__file__).resolve().parents[2] / "docs" / "img"
SAID: list[str] = []  # what the console's pages wrote to the browser's console (a CSP violation is said there)
WAIT_MS = 120_000  # an upper bound for a page condition (a pause or a resume commits to Delta), never a pace

EVENTS = """\
DESCRIPTION >
    Shop events, one per order line
TOKEN "ingest" APPEND
SCHEMA >
    `ts` TIMESTAMP `json:$.ts`,
    `product` STRING `json:$.product`,
    `amount` DOUBLE `json:$.amount` DEFAULT 0
"""
PRODUCTS = """\
DESCRIPTION >
    Product names and categories: a dimension the hourly view looks up
SCHEMA >
    `product` STRING,
    `category` STRING
"""
HOURLY = """\
NODE hourly
SQL >
    SELECT date_trunc('hour', e.ts) AS hour, e.product, p.category, count(*) AS orders, sum(e.amount) AS revenue
    FROM events e JOIN products p ON e.product = p.product
    GROUP BY 1, 2, 3
DIMENSIONS products
TYPE materialized
DATASOURCE hourly
"""
TOP = """\
TOKEN "reader" READ
DESCRIPTION >
    Products by revenue, from the hourly view
NODE endpoint
SQL >
    %
    SELECT product, category, sum(orders) AS orders, round(sum(revenue), 2) AS revenue FROM hourly
    {% if defined(category) %} WHERE category = {{ String(category, description="Only this category") }} {% end %}
    GROUP BY product, category
    ORDER BY revenue DESC, product
    LIMIT {{ Int(limit, 10, description="Maximum number of products") }}
TYPE endpoint
"""
SNAPSHOT = """\
NODE snapshot
SQL >
    SELECT product, sum(revenue) AS revenue FROM hourly GROUP BY product
TYPE copy
TARGET_DATASOURCE revenue_snapshot
COPY_SCHEDULE @on-demand
"""
REVENUE_SNAPSHOT = """\
SCHEMA >
    `product` STRING,
    `revenue` DOUBLE
"""
FIXTURE = [
    {"ts": "2024-05-01 10:00:00", "product": "mug", "amount": 12.5},
    {"ts": "2024-05-01 10:20:00", "product": "tea", "amount": 4.0},
    {"ts": "2024-05-01 11:05:00", "product": "pot", "amount": 30.0},
    {"ts": "2024-05-02 09:00:00", "product": "mug", "amount": 12.5},
]
PRODUCTS_FIXTURE = [{"product": "mug", "category": "kitchen"}, {"product": "pot", "category": "kitchen"},
                    {"product": "tea", "category": "pantry"}]
SECRETS = {"admin": "console-admin-secret", "reader": "console-reader-secret", "ingest": "console-ingest-secret"}
ADMIN = {"Authorization": f"Bearer {SECRETS['admin']}"}


def install_chromium() -> str:
    """Debian's Chromium at CHROMIUM, installed with apt-get when missing (the tests run as root). A file lock keeps
    the two pytest-xdist workers from running apt-get at once. Fails the run, with apt-get's own words, when it
    cannot be installed: a console left untested must not pass unnoticed."""
    if Path(CHROMIUM).exists():
        return CHROMIUM
    with open(Path(tempfile.gettempdir()) / "pipeframe-chromium.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if Path(CHROMIUM).exists():  # the other worker installed it meanwhile
            return CHROMIUM
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        for command in (["apt-get", "update", "-q"],
                        ["apt-get", "install", "-y", "-q", "--no-install-recommends", "chromium"]):
            try:
                done = subprocess.run(command, capture_output=True, text=True, env=env, check=False)
            except OSError as exc:
                pytest.fail(f"Cannot install Chromium for the console tests: `{' '.join(command)}` cannot run "
                            f"({exc}). Install Debian's `chromium` package (it provides {CHROMIUM}).")
            if done.returncode != 0:
                pytest.fail(f"Cannot install Chromium for the console tests: `{' '.join(command)}` exited with "
                            f"{done.returncode}:\n{(done.stdout + done.stderr)[-2000:]}\nInstall Debian's `chromium` "
                            f"package (it provides {CHROMIUM}).")
    if not Path(CHROMIUM).exists():
        pytest.fail(f"apt-get installed `chromium`, but {CHROMIUM} is still missing.")
    return CHROMIUM


@pytest.fixture(scope="session")
def chromium() -> str:
    return install_chromium()


@pytest.fixture(scope="module")
def project(spark, spark_config) -> Project:
    tokens = "tokens:\n" + "".join(f"  {name}: {secret}\n" for name, secret in SECRETS.items())
    return deployed(spark, spark_config, "console", {
        "datasources/events.datasource": EVENTS, "datasources/products.datasource": PRODUCTS,
        "pipes/hourly.pipe": HOURLY, "pipes/top.pipe": TOP, "pipes/snapshot.pipe": SNAPSHOT,
        "datasources/revenue_snapshot.datasource": REVENUE_SNAPSHOT,
        "fixtures/events.ndjson": "".join(json.dumps(row) + "\n" for row in FIXTURE),
        "fixtures/products.ndjson": "".join(json.dumps(row) + "\n" for row in PRODUCTS_FIXTURE),
    }, tokens + "service_log:\n  flush_ms: 100\n")  # the request log written soon after each request


@pytest.fixture(scope="module")
def browser(chromium: str) -> Iterator[Browser]:
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=chromium, args=CHROMIUM_ARGS, headless=True)
        yield launched
        launched.close()


@pytest.fixture(scope="module")
def page(browser: Browser, server: RunningServer) -> Iterator[Page]:
    context = browser.new_context(viewport={"width": 1280, "height": 760}, base_url=server.url)
    opened = context.new_page()
    opened.on("console", lambda message: SAID.append(message.text))
    expect.set_options(timeout=WAIT_MS)
    yield opened
    context.close()


def show(page: Page, tab: str) -> None:
    """Open the console's `tab` and wait until its data is shown."""
    page.goto(f"/ui/#{tab}")
    expect(page.locator(f"section#{tab}")).to_have_attribute("data-loaded", "true")


def screenshot(page: Page, name: str) -> None:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / f"console-{name}.png"), full_page=True)


def test_the_page_asks_for_a_token_then_shows_every_resource_in_the_graph(page, http, project):
    page.goto("/ui")  # redirected to /ui/: the static files need no token ...
    expect(page).to_have_title("pipeframe console")
    expect(page.locator("#graph-canvas .error")).to_contain_text("PF811")  # ... the data does
    page.fill("#token", SECRETS["reader"])
    page.click("#token-form button")
    expect(page.locator("#graph-canvas .error")).to_contain_text("PF813")  # the views API's rule: the admin token
    page.fill("#token", SECRETS["admin"])
    page.click("#token-form button")
    expect(page.locator("#graph-canvas svg.graph")).to_be_visible()

    drawn = {g.get_attribute("data-id"): g.get_attribute("data-kind") for g in page.locator("g.node").all()}
    assert drawn == {"datasource:events": "datasource", "datasource:products": "datasource",
                     "pipe:hourly": "materialized", "datasource:hourly": "view target", "pipe:top": "endpoint",
                     "pipe:snapshot": "copy", "datasource:revenue_snapshot": "datasource"}
    assert set(drawn) == {str(key) for key in project.compiled.order}
    edges = {(p.get_attribute("data-from"), p.get_attribute("data-to"), p.get_attribute("class"))
             for p in page.locator("path.edge").all()}
    assert edges == {("datasource:events", "pipe:hourly", "edge triggers"),
                     ("datasource:products", "pipe:hourly", "edge lookup"),
                     ("pipe:hourly", "datasource:hourly", "edge writes"),
                     ("datasource:hourly", "pipe:top", "edge reads"),
                     ("datasource:hourly", "pipe:snapshot", "edge reads"),
                     ("pipe:snapshot", "datasource:revenue_snapshot", "edge copies")}
    # Data flows left to right: every edge starts left of where it ends.
    boxes = {g.get_attribute("data-id"): g.bounding_box() for g in page.locator("g.node").all()}
    assert all(boxes[a]["x"] < boxes[b]["x"] for a, b, _ in edges)
    assert "Diagnostics" not in page.locator("#tabs").inner_text()  # a `serve`, not a `dev`: no compile to show
    screenshot(page, "graph")


def test_pausing_a_view_from_the_console_pauses_it(page, http):
    show(page, "views")
    hourly = page.locator('tr[data-view="hourly"]')
    expect(hourly.locator(".status")).to_have_text("active")
    hourly.locator('button[data-action="pause"]').click()
    expect(hourly.locator(".status")).to_have_text("paused")
    expect(page.locator("#notice")).to_contain_text("hourly is paused")
    assert http.get("/v0/views/hourly", headers=ADMIN).json()["status"] == "paused"

    landed = http.post("/v0/events", params={"name": "events", "wait": "true"}, headers=ADMIN,
                       content=json.dumps({"ts": "2024-05-03 08:00:00", "product": "tea", "amount": 2.0}).encode())
    assert landed.status_code == 200, landed.text
    page.click("#views button.refresh")
    expect(hourly.locator(".lag")).to_contain_text("1 version")  # the paused view waits for the new rows
    screenshot(page, "views")

    hourly.locator('button[data-action="resume"]').click()
    expect(hourly.locator(".status")).to_have_text("active")
    assert http.get("/v0/views/hourly", headers=ADMIN).json()["lag_versions"] == 0


def test_a_bad_append_shows_in_the_quarantine_browser(page, http):
    show(page, "quarantine")
    expect(page.locator("#quarantine-rows")).to_contain_text("Nothing quarantined in events")
    bad = json.dumps({"ts": "the day after tomorrow", "product": "kettle", "amount": 45})
    landed = http.post("/v0/events", params={"name": "events", "wait": "true"}, headers=ADMIN, content=bad.encode())
    assert landed.status_code == 200 and landed.json()["quarantined_rows"] == 1, landed.text

    page.click("#quarantine button.refresh")
    newest = page.locator("#quarantine-rows tbody tr").first
    expect(newest).to_contain_text("the day after tomorrow")
    columns = page.locator("#quarantine-rows th").all_inner_texts()
    cells = dict(zip(columns, newest.locator("td").all_inner_texts(), strict=True))
    assert json.loads(cells["raw"]) == json.loads(bad) and "ts" in cells["reason"]
    api = http.get("/v0/datasources/events/quarantine", headers=ADMIN).json()
    assert api["rows"] == 1 and api["data"][0]["raw"] == cells["raw"]


def test_the_playground_answers_as_the_api_does(page, http):
    show(page, "playground")
    page.select_option("#pg-endpoint", "top")
    params = page.locator("#pg-params [data-param]")
    expect(params).to_have_count(2)
    assert sorted(p.get_attribute("data-param") for p in params.all()) == ["category", "limit"]  # from the document
    page.fill('[data-param="category"]', "kitchen")
    page.fill('[data-param="limit"]', "5")
    expect(page.locator("#pg-url")).to_have_text("GET /v0/pipes/top.json?category=kitchen&limit=5")
    page.click("#pg-run")
    expect(page.locator("#pg-result")).to_have_attribute("data-state", "done")

    shown = json.loads(page.locator("#pg-json").text_content())
    api = http.get("/v0/pipes/top.json", params={"category": "kitchen", "limit": "5"},
                   headers={"Authorization": f"Bearer {SECRETS['reader']}"}).json()
    assert (shown["meta"], shown["data"]) == (api["meta"], api["data"])
    assert [r["product"] for r in api["data"]] == ["pot", "mug"]
    table = page.locator("#pg-result table.rows")
    assert table.locator("th").all_inner_texts() == [m["name"] for m in api["meta"]]
    assert table.locator("tbody tr").count() == api["rows"]
    screenshot(page, "playground")

    page.fill('[data-param="limit"]', "many")
    page.click("#pg-run")
    expect(page.locator("#pg-result .error")).to_contain_text("limit")  # the API's 400, shown as it says it


def logged_requests(http: httpx.Client, pipe: str) -> int:
    answer = http.get("/v0/service/requests", params={"minutes": "60"}, headers=ADMIN)
    assert answer.status_code == 200, answer.text
    return sum(r["requests"] for r in answer.json()["data"] if r["pipe_name"] == pipe)


def test_the_latency_chart_draws_the_request_log(page, http):
    """The requests to `top` of the test before (the playground's two, one refused, and the API's one) are in the
    request log once it is written (every 100 ms here): the chart draws the minutes the API answers, with their
    requests and errors."""
    assert until(lambda: logged_requests(http, "top"), 3) == 3
    rows = [r for r in http.get("/v0/service/requests", params={"minutes": "60"}, headers=ADMIN).json()["data"]
            if r["pipe_name"] == "top"]
    show(page, "latency")
    expect(page.locator("#latency-pipe")).to_have_value("top")
    expect(page.locator("#latency-chart svg.chart")).to_be_visible()
    total, errors = sum(r["requests"] for r in rows), sum(r["errors"] for r in rows)
    expect(page.locator("#latency-chart p.hint")).to_contain_text(
        f"top: {total} requests, {errors} errors in {len(rows)} minute(s)")
    assert page.locator("#latency-chart g.bar").count() == len(rows) and errors == 1
    assert page.locator("#latency-chart circle.dot.p95").count() == sum(r["p95_ms"] is not None for r in rows)
    screenshot(page, "latency")


def test_ingest_rates_are_shown_per_datasource(page, http):
    show(page, "ingest")
    events = page.locator('#ingest-table tr[data-datasource="events"]')
    expect(events).to_be_visible()
    stats = http.get("/v0/ingest", headers=ADMIN).json()["datasources"]["events"]
    assert events.locator("td").nth(3).inner_text() == f"{stats['rows']:,}"


def test_the_console_runs_no_code_but_its_own(page, http):
    """Its files come with a Content-Security-Policy: no page of the console broke it in the tests above, and a script
    put into the page (as a row's value would be, were it written as HTML) does not run."""
    for file in ("", "app.js", "app.css"):
        assert {name: http.get(f"/ui/{file}").headers.get(name) for name in HEADERS} == HEADERS, file
    show(page, "ingest")  # its rate bars are sized through the style property, which the policy allows
    assert [said for said in SAID if "Content Security Policy" in said] == []
    page.evaluate("""() => { const script = document.createElement("script");
                             script.textContent = "window.injected = true"; document.body.append(script); }""")
    assert page.evaluate("() => window.injected") is None
    assert any("Content Security Policy" in said for said in SAID)


DEV_TOP = """\
NODE endpoint
SQL >
    %
    SELECT user_id, sum(amount) AS total FROM events GROUP BY user_id ORDER BY total DESC
TYPE endpoint
"""


def test_under_dev_the_diagnostics_tab_shows_the_last_compiles_errors(browser, spark, spark_config):
    """Under `pipeframe dev` the Diagnostics tab appears and shows what the last compile reported: no errors after a
    good build, then a broken save's error with its code, file and line and the fix (the other servers above have no
    such tab: the first test)."""
    import re
    import shutil

    from pipeframe.dev import DevLoop
    from pipeframe.server import Service, start_server
    from tests.conftest import EVENTS, write_project

    root = Path(spark_config.root) / "console_dev"
    shutil.rmtree(root, ignore_errors=True)
    write_project(root, {"datasources/events.datasource": EVENTS, "pipes/top.pipe": DEV_TOP})
    shutil.copy(Path(spark_config.root) / "pipeframe.yaml", root / "pipeframe.yaml")
    loop = DevLoop(root, echo=lambda _line: None, spark=spark)
    assert loop.initial_build().ok
    loop.service = Service(loop.project, last_compile=lambda: loop.last_compile)
    server = start_server(loop.service, port=0)
    context = browser.new_context(viewport={"width": 1280, "height": 760}, base_url=server.url)
    try:
        page = context.new_page()
        show(page, "diagnostics")
        expect(page.locator('#tabs a[href="#diagnostics"]')).to_be_visible()
        expect(page.locator("#diagnostics-list p")).to_have_text(re.compile(r"✓ no errors, 0 warning"))

        pipe = root / "pipes/top.pipe"
        pipe.write_text(pipe.read_text().replace("FROM events", "FROM evnets"))
        assert not loop.rebuild({str(pipe)}).ok
        page.reload()
        expect(page.locator("section#diagnostics")).to_have_attribute("data-loaded", "true")
        expect(page.locator("#diagnostics-list p")).to_have_text(re.compile(r"✗ 1 error"))
        error = page.locator("#diagnostics-list li").filter(has_text="PF301")
        expect(error).to_contain_text("pipes/top.pipe:4")
        expect(error).to_contain_text("fix:")
        expect(error).to_contain_text("events")
    finally:
        context.close()
        server.stop()
