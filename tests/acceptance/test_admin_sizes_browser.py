"""The admin at real screen sizes: a desktop (1920 px), a laptop with the sidebar open (1400 px) and a
phone (390 px), in Debian's Chromium.

The dashboard, the runs list (several flows, long flow names, runs finished, failed, running and
delayed) and a run page (a DAG and a timeline of a flow with several steps) are measured in the page:
the page never scrolls sideways (a wide picture scrolls inside its own box), no visible text is smaller than
9 px (an SVG's text is measured at the size it is drawn, its font size times the picture's scale),
every column of the runs list lies whole inside the list's visible box (no scroll inside the table,
no cut cell), and each runs-per-minute chart shows its whole time axis up to "now". Each page is
saved in test-artifacts/ for a person to look at: ``admin-sizes-<page>-<width>.png`` (the first
screen) and ``admin-sizes-<page>-<width>-page.png`` (the whole page)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest

from pgflow_django import Concurrency, Flow, start_flow
from pgflow_django.flows.compiler import compile_flow
from tests.acceptance.test_admin_browser import ARTIFACTS, CHROMEDRIVER, CHROMIUM
from tests.acceptance.test_admin_browser import browser as browser  # the Chromium fixture
from tests.sql import support

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(
        CHROMIUM is None or CHROMEDRIVER is None,
        reason="Chromium is not installed: apt-get install chromium chromium-driver (.ci/install-test-tools)",
    ),
]

WIDTHS = (1920, 1400, 390)
HEIGHT = 900
SMALLEST_TEXT = 9.0
RECONCILE = "invoice_reconciliation_against_bank_statement"  # 45 of the 47 characters a slug may have
ONBOARDING = "customer_onboarding_welcome_email_sequence"
MAIL = "adm_sizes_mail"
SLUGS = (RECONCILE, ONBOARDING, MAIL)

MEASURE = """
const doc = document.documentElement;
const width = doc.clientWidth;
// The part of an element that is not hidden by an ancestor that clips or scrolls, nor by the window.
const shown = (el) => {
  const r = el.getBoundingClientRect();
  let left = Math.max(r.left, 0), right = Math.min(r.right, width);
  for (let up = el.parentElement; up && up !== doc; up = up.parentElement) {
    if (getComputedStyle(up).overflowX !== 'visible') {
      const c = up.getBoundingClientRect();
      left = Math.max(left, c.left + up.clientLeft);
      right = Math.min(right, c.left + up.clientLeft + up.clientWidth);
    }
  }
  return {left: left, right: right, whole: left <= r.left + 0.5 && right >= r.right - 0.5};
};
const small = [];
const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
for (let node = walker.nextNode(); node; node = walker.nextNode()) {
  const el = node.parentElement;
  if (!node.data.trim() || !el || el.closest('title, script, style, option')) continue;
  const range = document.createRange();
  range.selectNodeContents(node);
  const drawn = [...range.getClientRects()].some((r) => r.width > 0.5 && r.height > 0.5);
  const box = el.getBoundingClientRect();
  if (!drawn || box.width < 1 || box.height < 1) continue;  // not laid out, or collapsed (an id's head)
  let size = parseFloat(getComputedStyle(el).fontSize);
  if (el instanceof SVGElement) {
    const m = el.getScreenCTM();
    size *= Math.hypot(m.a, m.b);  // the picture's scale: what the eye gets
  }
  if (size < arguments[0]) small.push({text: node.data.trim().slice(0, 40), px: Math.round(size * 10) / 10});
}
const columns = [];
const table = document.querySelector('#result_list');
let listScroll = null;
if (table) {
  const frame = table.closest('.results') || table.parentElement;
  listScroll = {scrollWidth: frame.scrollWidth, clientWidth: frame.clientWidth};
  const row = table.querySelector('tbody tr');
  // a narrow window may show each row as a card, each cell labelled with its column's header
  const cards = row !== null && getComputedStyle(row).display !== 'table-row';
  for (const th of table.querySelectorAll('thead th')) {
    const name = [...th.classList].find((c) => c.startsWith('column-'));
    if (!name) continue;
    const field = name.slice('column-'.length);
    const header = th.textContent.trim().toLowerCase();
    const cells = [...table.querySelectorAll('tbody tr > .field-' + field)];
    const headerShown = th.getClientRects().length > 0;
    const problems = [];
    if (!cards && !headerShown) problems.push('header hidden');
    if (headerShown && !shown(th).whole) problems.push('header cut');
    for (const cell of cells) {
      const label = getComputedStyle(cell, '::before').content.replace(/^"|"$/g, '').toLowerCase();
      if (!cell.getClientRects().length) problems.push('cell hidden');
      else if (!shown(cell).whole) problems.push('cell cut: ' + cell.textContent.trim().slice(0, 30));
      else if (cell.scrollWidth > cell.clientWidth + 1) problems.push('text cut: ' + cell.textContent.trim());
      if (cards && label !== header) problems.push('no label "' + header + '" (' + label + ')');
    }
    columns.push({field: field, header: header, cells: cells.length, problems: problems});
  }
}
const axes = [...document.querySelectorAll('svg.pgflow-rates')].map((svg) => {
  const labels = [...svg.querySelectorAll('text')].filter((t) => /m$|^now$/.test(t.textContent.trim()));
  return {flow: svg.dataset.flow, labels: labels.map((t) => [t.textContent.trim(), shown(t).whole])};
});
const panelCells = [...document.querySelectorAll('.pgflow-panel td')].filter((td) => !shown(td).whole)
  .map((td) => td.textContent.trim().slice(0, 40));
return {width: width, scrollWidth: doc.scrollWidth, small: small, columns: columns, listScroll: listScroll,
        axes: axes, panelCells: panelCells};
"""


def _handler(value: Any) -> Any:
    return value


def reconcile_flow() -> Flow:
    """Six steps, a map among them, with the long slugs real flows have."""
    flow = Flow(RECONCILE, max_attempts=1, timeout=30, concurrency=Concurrency(limit=10, key="statement"))
    flow.step(slug="fetch_bank_statements")(_handler)
    flow.step(slug="load_open_invoices")(_handler)
    flow.map(slug="match_invoice_to_payment", array="load_open_invoices")(_handler)
    flow.step(slug="flag_discrepancies", depends_on=["match_invoice_to_payment", "fetch_bank_statements"])(
        _handler
    )
    flow.step(slug="post_ledger_adjustments", depends_on=["flag_discrepancies"])(_handler)
    flow.step(slug="notify_accounting_team", depends_on=["post_ledger_adjustments", "fetch_bank_statements"])(
        _handler
    )
    return flow


def one_step_flow(slug: str) -> Flow:
    flow = Flow(slug, max_attempts=1, timeout=30)
    flow.step(slug="send")(_handler)
    return flow


def backdate(run_id: Any, minutes_ago: float, took: float) -> None:
    """Spread the runs over the dashboard's hour: started ``minutes_ago``, finished ``took`` s later."""
    support.execute_ok(
        "update pgflow.runs set started_at = now() - make_interval(mins => %s),"
        " completed_at = case when completed_at is null then null"
        " else now() - make_interval(mins => %s) + make_interval(secs => %s) end,"
        " failed_at = case when failed_at is null then null"
        " else now() - make_interval(mins => %s) + make_interval(secs => %s) end"
        " where run_id = %s",
        [minutes_ago, minutes_ago, took, minutes_ago, took, run_id],
    )


def run_step(slug: str, step: str, output: Any, worker: Any) -> None:
    records = support.claim(slug, worker, step_slug=step)
    assert records, f"no task of {step} to claim"
    for record in records:
        value = output(record["task_index"]) if callable(output) else output
        assert support.complete(record, value) == "completed"


@pytest.fixture
def runs() -> Iterator[Any]:
    """Runs of three flows over the last hour and one of yesterday, finished, failed and running, claimed
    by one worker per flow; returns a run of the six-step flow half done, for the run page."""
    compile_flow(reconcile_flow())
    for slug in (ONBOARDING, MAIL):
        compile_flow(one_step_flow(slug))
    workers = {slug: support.new_worker(slug) for slug in SLUGS}
    support.execute_ok(  # one of them runs every step of the three flows: a long "runs steps" cell
        "insert into pgflow.worker_support (worker_id, flow_slug, step_slug, queue_name)"
        " select %s, flow_slug, step_slug, flow_slug from pgflow.steps where flow_slug = any(%s)",
        [workers[RECONCILE], list(SLUGS)],
    )
    try:
        for index in range(14):
            slug = (ONBOARDING, MAIL)[index % 2]
            run_id = start_flow(slug, {"customer": index})
            [record] = support.claim(slug, workers[slug])
            if index % 5 == 3:
                assert (
                    support.fail(record, "SMTPServerDisconnected: Connection unexpectedly closed") == "failed"
                )
            elif index < 12:
                assert support.complete(record, {"sent": True}) == "completed"
            backdate(run_id, minutes_ago=58 - 4 * index, took=1.5 + index)
        start_flow(ONBOARDING, {"customer": 100}, delay=timedelta(hours=2))  # "Delayed until ..."
        yesterday = start_flow(MAIL, {"customer": 99})
        assert support.complete(support.claim(MAIL, workers[MAIL])[0], {"sent": True}) == "completed"
        backdate(yesterday, minutes_ago=26 * 60, took=3.0)
        worker = workers[RECONCILE]
        for index in range(3):
            finished = start_flow(RECONCILE, {"statement": f"2024-0{index + 1}"})
            run_step(RECONCILE, "fetch_bank_statements", {"lines": 120}, worker)
            run_step(RECONCILE, "load_open_invoices", [1, 2, 3], worker)
            run_step(RECONCILE, "match_invoice_to_payment", lambda i: {"matched": i}, worker)
            for step in ("flag_discrepancies", "post_ledger_adjustments", "notify_accounting_team"):
                run_step(RECONCILE, step, {"ok": True}, worker)
            backdate(finished, minutes_ago=50 - 20 * index, took=42.0)
        run_id = start_flow(RECONCILE, {"statement": "2024-04"})
        run_step(RECONCILE, "fetch_bank_statements", {"lines": 120}, worker)
        run_step(RECONCILE, "load_open_invoices", [1, 2, 3, 4, 5], worker)
        records = support.claim(RECONCILE, worker, step_slug="match_invoice_to_payment")
        assert len(records) == 5
        for record in records[:3]:
            assert support.complete(record, {"matched": True}) == "completed"
        yield run_id
    finally:
        for slug in SLUGS:
            support.execute_ok("select pgflow.delete_flow_and_data(%s)", [slug])
        support.execute_ok("delete from pgflow.workers where worker_id = any(%s)", [list(workers.values())])


@pytest.fixture
def admin_browser(browser: Any, live_server: Any, admin_user: Any) -> Any:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    browser.get(f"{live_server.url}/admin/login/?next=/admin/")
    browser.find_element(By.NAME, "username").send_keys("admin")
    browser.find_element(By.NAME, "password").send_keys("password")
    browser.find_element(By.CSS_SELECTOR, "input[type=submit]").click()
    WebDriverWait(browser, 20).until(lambda driver: "/admin/login/" not in driver.current_url)
    ARTIFACTS.mkdir(exist_ok=True)
    return browser


def measure(browser: Any, url: str, width: int, shot: str) -> dict[str, Any]:
    """Open ``url`` in a viewport ``width`` CSS px wide (a phone's below 768 px), measure it, and save
    its first screen and the whole page."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions
    from selenium.webdriver.support.ui import WebDriverWait

    viewport = {"width": width, "height": HEIGHT, "deviceScaleFactor": 1, "mobile": width < 768}
    browser.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", viewport)
    browser.get(url)
    WebDriverWait(browser, 20).until(expected_conditions.presence_of_element_located((By.ID, "content")))
    found: dict[str, Any] = browser.execute_script(MEASURE, SMALLEST_TEXT)
    assert width - 20 <= found["width"] <= width, f"a {width} px window (less its scrollbar): {found}"
    browser.save_screenshot(str(ARTIFACTS / f"admin-sizes-{shot}-{width}.png"))
    height = browser.execute_script("return document.documentElement.scrollHeight")
    browser.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", {**viewport, "height": min(height, 6000)})
    browser.save_screenshot(str(ARTIFACTS / f"admin-sizes-{shot}-{width}-page.png"))
    return found


def assert_readable(found: dict[str, Any], page: str) -> None:
    problems = []
    if found["scrollWidth"] > found["width"]:
        problems.append(f"scrolls sideways: {found['scrollWidth']} px wide in a {found['width']} px window")
    if found["small"]:
        problems.append(f"has text under {SMALLEST_TEXT:g} px: {found['small'][:6]}")
    assert problems == [], f"{page} " + "; ".join(problems)


@pytest.mark.parametrize("width", WIDTHS)
def test_runs_list_shows_every_column_whole(
    admin_browser: Any, live_server: Any, runs: Any, width: int
) -> None:
    found = measure(admin_browser, f"{live_server.url}/admin/pgflow/run/", width, "runs")
    assert_readable(found, "the runs list")
    columns = {column["field"]: column for column in found["columns"]}
    assert {"short_run", "flow_name", "status_shown", "started", "finished", "duration"} <= set(columns), (
        columns
    )
    assert all(column["cells"] == 20 for column in columns.values()), "every run is listed"
    cut = {column["field"]: column["problems"][:3] for column in found["columns"] if column["problems"]}
    assert cut == {}, "a column is cut or needs a scroll"
    assert found["listScroll"]["scrollWidth"] <= found["listScroll"]["clientWidth"], (
        f"the runs table scrolls inside its box: {found['listScroll']}"
    )


@pytest.mark.parametrize("width", WIDTHS)
def test_dashboard_charts_show_the_whole_hour(
    admin_browser: Any, live_server: Any, runs: Any, width: int
) -> None:
    found = measure(admin_browser, f"{live_server.url}/admin/pgflow/run/dashboard/", width, "dashboard")
    assert_readable(found, "the dashboard")
    assert {axis["flow"] for axis in found["axes"]} == set(SLUGS)
    for axis in found["axes"]:
        assert [label for label, _ in axis["labels"]] == ["-59m", "-29m", "now"], axis
        assert all(whole for _, whole in axis["labels"]), (
            f"a time label of {axis['flow']} is off-screen: {axis}"
        )
    assert found["panelCells"] == [], "cells of the dashboard's tables are cut or scroll out of sight"


@pytest.mark.parametrize("width", WIDTHS)
def test_run_page_keeps_its_pictures_readable(
    admin_browser: Any, live_server: Any, runs: Any, width: int
) -> None:
    found = measure(admin_browser, f"{live_server.url}/admin/pgflow/run/{runs}/change/", width, "run")
    dag, timeline = admin_browser.execute_script(
        "return ['svg.pgflow-dag', 'svg.pgflow-timeline'].map((svg) =>"
        " [...document.querySelectorAll(svg + ' text')].map((t) => t.textContent))"
    )
    assert (
        any(text.startswith("tasks 3/5") for text in dag) and "match_invoice_to_payment \u00d75" in timeline
    )
    assert_readable(found, "the run page")
