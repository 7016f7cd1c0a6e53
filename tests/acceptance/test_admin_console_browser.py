"""The admin as an operator sees it: Debian's Chromium at 1400 px with the sidebar open.

Every page is saved as a screenshot in test-artifacts/ (``admin-console-*.png``). The geometry is read
back from the SVG that Chromium rendered: the DAG's bounding box fits its container and the window,
no edge segment crosses a box that is not one of its ends, and the status of each step and each task
is inside the window without scrolling. A picture too wide for the window at 9 px text scrolls
inside its own box. A step's box links to that step's tasks."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from pgflow_django import Flow, start_flow
from pgflow_django.admin.diagrams import SMALLEST_TEXT
from pgflow_django.admin.diagrams.dag import SMALLEST_FONT
from pgflow_django.flows.compiler import compile_flow
from tests.acceptance.test_admin_browser import ARTIFACTS, CHROMEDRIVER, CHROMIUM
from tests.acceptance.test_admin_browser import browser as browser  # the Chromium fixture
from tests.diagram_geometry import Rect, edges_behind_boxes, layered_dag
from tests.integration.test_admin_timeline import timeline_flow
from tests.sql import support

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(
        CHROMIUM is None or CHROMEDRIVER is None,
        reason="Chromium is not installed: apt-get install chromium chromium-driver (.ci/install-test-tools)",
    ),
]

WIDTH = 1400
HEIGHT = 1000
DOCUMENT = "adm_document"
WIDE = "adm_wide"
TIMELINE = "adm_timeline"
SLUGS = (DOCUMENT, WIDE, TIMELINE)

GEOMETRY = """
const svg = document.querySelector(arguments[0]);
const container = svg.closest('.pgflow-diagram');
const box = (r) => ({left: r.left, top: r.top, right: r.right, bottom: r.bottom, width: r.width});
const steps = [...svg.querySelectorAll('g.pgflow-step')].map((g) => {
  const b = g.querySelector('rect').getBBox();
  return {slug: g.dataset.step, x: b.x, y: b.y, width: b.width, height: b.height,
          screen: box(g.getBoundingClientRect()),
          status: box(g.querySelectorAll('text')[1].getBoundingClientRect())};
});
const edges = [...svg.querySelectorAll('.pgflow-edge')].map((e) => ({
  from: e.dataset.from, to: e.dataset.to, points: [...e.points].map((p) => [p.x, p.y])}));
return {svg: box(svg.getBoundingClientRect()), container: box(container.getBoundingClientRect()),
        viewport: {width: document.documentElement.clientWidth, height: window.innerHeight},
        scrollWidth: document.documentElement.scrollWidth, steps: steps, edges: edges,
        boxScroll: container.scrollWidth - container.clientWidth,
        scale: svg.getBoundingClientRect().width / svg.viewBox.baseVal.width};
"""


def _handler(value: Any) -> Any:
    return value


def document_flow() -> Flow:
    """The issue's shape: ``load -> detect_language`` and ``load -> notify`` skip layers."""
    flow = Flow(DOCUMENT, max_attempts=2, timeout=30)
    flow.step(slug="load")(_handler)
    flow.step(slug="split_pages", depends_on=["load"])(_handler)
    flow.step(slug="ocr_page", depends_on=["split_pages"])(_handler)
    flow.step(slug="detect_language", depends_on=["load", "ocr_page"])(_handler)
    flow.step(slug="summarise", depends_on=["detect_language", "ocr_page"])(_handler)
    flow.step(slug="index", depends_on=["summarise"])(_handler)
    flow.step(slug="notify", depends_on=["index", "load"])(_handler)
    return flow


def wide_flow() -> Flow:
    """Fifty steps in ten columns, with long edges: the largest flow the admin promises to show."""
    flow = Flow(WIDE, timeout=30)
    for slug, deps in layered_dag(seed=3):
        flow.step(slug=slug, depends_on=list(deps))(_handler)
    return flow


@pytest.fixture
def flows() -> Iterator[None]:
    compile_flow(document_flow())
    compile_flow(wide_flow())
    compile_flow(timeline_flow())
    yield
    for slug in SLUGS:
        support.execute_ok("select pgflow.delete_flow_and_data(%s)", [slug])


@pytest.fixture
def console(browser: Any, live_server: Any, admin_user: Any) -> Any:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    browser.set_window_size(WIDTH, HEIGHT)
    browser.get(f"{live_server.url}/admin/login/?next=/admin/")
    browser.find_element(By.NAME, "username").send_keys("admin")
    browser.find_element(By.NAME, "password").send_keys("password")
    browser.find_element(By.CSS_SELECTOR, "input[type=submit]").click()
    WebDriverWait(browser, 20).until(lambda driver: "/admin/login/" not in driver.current_url)
    ARTIFACTS.mkdir(exist_ok=True)
    return browser


def visit(browser: Any, url: str, shot: str) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions
    from selenium.webdriver.support.ui import WebDriverWait

    browser.get(url)
    WebDriverWait(browser, 20).until(expected_conditions.presence_of_element_located((By.ID, "content")))
    # a viewport-sized screenshot is what the operator sees without scrolling
    browser.save_screenshot(str(ARTIFACTS / f"admin-console-{shot}.png"))


def check_dag(browser: Any, shot: str, selector: str = "svg.pgflow-dag", fits: bool = True) -> dict[str, Any]:
    """The geometric promises of the DAG, from what Chromium rendered; the picture is saved alone
    (the window grown to the page's height for that, so a tall DAG is captured whole). A picture
    that does not ``fit`` at the scale that keeps its text readable scrolls inside its own box."""
    from selenium.webdriver.common.by import By

    geometry: dict[str, Any] = browser.execute_script(GEOMETRY, selector)
    svg, container, viewport = geometry["svg"], geometry["container"], geometry["viewport"]
    assert container["right"] <= viewport["width"], "the DAG's box fits the window with the sidebar open"
    assert geometry["scrollWidth"] <= viewport["width"], "the page does not scroll sideways"
    assert geometry["scale"] >= SMALLEST_TEXT / SMALLEST_FONT - 0.001, "no text under 9 px"
    if fits:
        assert svg["left"] >= container["left"] - 0.5 and svg["right"] <= container["right"] + 0.5, geometry
        assert svg["right"] <= viewport["width"], "the DAG fits the window with the sidebar open"
    else:
        assert svg["right"] > container["right"] and geometry["boxScroll"] > 0, "it scrolls in its box"
    rects = [Rect(s["slug"], s["x"], s["y"], s["width"], s["height"]) for s in geometry["steps"]]
    edges = [(e["from"], e["to"], [tuple(p) for p in e["points"]]) for e in geometry["edges"]]
    assert edges_behind_boxes(rects, edges) == []
    for step in geometry["steps"]:
        assert not fits or step["screen"]["right"] <= viewport["width"], step
    page_height = browser.execute_script("return document.documentElement.scrollHeight")
    browser.set_window_size(WIDTH, max(HEIGHT, page_height + 140))
    browser.find_element(By.CSS_SELECTOR, selector).screenshot(str(ARTIFACTS / f"admin-console-{shot}.png"))
    browser.set_window_size(WIDTH, HEIGHT)
    return geometry


def test_run_page_dag_fits_shows_status_and_links_to_tasks(
    console: Any, live_server: Any, flows: None
) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    run_id = start_flow(DOCUMENT, {"url": "https://example.org/a.pdf"})
    support.run_step(DOCUMENT, "load", {"pages": 3})
    support.run_step(DOCUMENT, "split_pages", [1, 2, 3])
    support.execute_ok(
        "update pgflow.step_states set started_at = completed_at - interval '1.5 s'"
        " where run_id = %s and step_slug = 'split_pages'",
        [run_id],
    )
    visit(console, f"{live_server.url}/admin/pgflow/run/{run_id}/change/", "run-page")

    geometry = check_dag(console, "run-dag")
    assert len(geometry["steps"]) == 7 and len(geometry["edges"]) == 9
    assert geometry["scale"] == pytest.approx(1.0), "a seven-step flow is drawn at its natural size"
    for step in geometry["steps"]:
        assert step["status"]["top"] >= 0 and step["status"]["bottom"] <= geometry["viewport"]["height"], (
            f"status of {step['slug']} visible without scrolling"
        )
    texts = console.find_element(By.CSS_SELECTOR, "svg.pgflow-dag").get_attribute("textContent") or ""
    assert "tasks 1/1 \u00b7 1.50s" in texts, "a finished step shows its task counts and duration"
    assert "tasks 0/1" in texts and "started" in texts

    console.find_element(By.CSS_SELECTOR, 'svg.pgflow-dag g[data-step="split_pages"]').click()
    WebDriverWait(console, 20).until(lambda driver: "/run/tasks/" in driver.current_url)
    console.save_screenshot(str(ARTIFACTS / "admin-console-step-tasks.png"))
    steps = [td.text for td in console.find_elements(By.CSS_SELECTOR, "#result_list td.field-step_slug")]
    assert steps == ["split_pages"]


def test_fifty_steps_in_ten_columns_stay_readable_at_1400_px(
    console: Any, live_server: Any, flows: None
) -> None:
    """Fifty steps in ten columns shrink only down to 9 px text; the rest of the picture (its last
    tenth) scrolls inside its box, and the page does not scroll."""
    from selenium.webdriver.common.by import By

    visit(console, f"{live_server.url}/admin/pgflow/flow/{WIDE}/change/", "flow-fifty-steps")
    geometry = check_dag(console, "fifty-steps-dag", fits=False)
    assert len(geometry["steps"]) == 50
    assert geometry["boxScroll"] < 0.1 * geometry["container"]["width"], "most of it is in view"
    visit(console, f"{live_server.url}/admin/pgflow/flow/{DOCUMENT}/change/", "flow-page")
    assert check_dag(console, "flow-dag")["scale"] == pytest.approx(1.0)
    table = console.find_element(By.CSS_SELECTOR, "table.pgflow-steps")
    assert table.rect["x"] + table.rect["width"] <= WIDTH, "the steps table fits the window"


def test_lists_show_status_without_scrolling(console: Any, live_server: Any, flows: None) -> None:
    from selenium.webdriver.common.by import By

    run_id = start_flow(DOCUMENT, {"url": "https://example.org/b.pdf"})
    support.run_step(DOCUMENT, "load", {"pages": 3})
    support.execute_ok(
        "insert into pgflow.workers (worker_id, queue_name, function_name)"
        " values (gen_random_uuid(), %s, %s)",
        [DOCUMENT, DOCUMENT],
    )
    pages = {
        "index": "/admin/",
        "flow-list": "/admin/pgflow/flow/",
        "run-list": "/admin/pgflow/run/",
        "task-list": f"/admin/pgflow/run/tasks/?q={run_id}",
        "worker-list": "/admin/pgflow/worker/",
        "dashboard": "/admin/pgflow/run/dashboard/",
    }
    for shot, url in pages.items():
        visit(console, live_server.url + url, shot)
        width = console.execute_script("return document.documentElement.clientWidth")
        assert console.execute_script("return document.documentElement.scrollWidth") <= width, shot
        results = console.find_elements(By.CSS_SELECTOR, "#changelist .results")
        if results:
            visible = results[0].rect["x"] + results[0].rect["width"]
            for header in console.find_elements(By.CSS_SELECTOR, "#result_list thead th"):
                right = header.rect["x"] + header.rect["width"]
                assert right <= visible + 0.5, f"{shot}: {header.text} needs a sideways scroll"
    visit(console, live_server.url + pages["task-list"], "task-list")
    status = console.find_element(By.CSS_SELECTOR, "#result_list th.column-status")
    assert status.rect["x"] + status.rect["width"] <= WIDTH
    cells = console.find_elements(By.CSS_SELECTOR, "#result_list td.field-run_link")
    assert cells and all(len(cell.text) == 8 for cell in cells), "short run ids on one line"


def test_run_timeline_fits_and_shows_failed_attempts(console: Any, live_server: Any, flows: None) -> None:
    from selenium.webdriver.common.by import By

    run_id = start_flow(TIMELINE, list(range(12)))
    records = support.claim(TIMELINE, step_slug="square")
    for rec in records:
        if rec["task_index"] in (3, 7):
            assert support.fail(rec, "flaky upstream", retry_delay=0) == "retrying"
        else:
            assert support.complete(rec, rec["task_index"]) == "completed"
    support.run_step(TIMELINE, "square", 0)
    visit(console, f"{live_server.url}/admin/pgflow/run/{run_id}/change/", "run-timeline-page")
    chart = console.find_element(By.CSS_SELECTOR, "svg.pgflow-timeline")
    console.execute_script("arguments[0].scrollIntoView()", chart)
    box = console.execute_script("return arguments[0].getBoundingClientRect().toJSON()", chart)
    container = console.execute_script(
        "return arguments[0].closest('.pgflow-diagram').getBoundingClientRect().toJSON()", chart
    )
    assert box["right"] <= container["right"] + 0.5 and box["right"] <= WIDTH
    assert len(chart.find_elements(By.CSS_SELECTOR, ".pgflow-failure")) == 2
    assert len(chart.find_elements(By.CSS_SELECTOR, ".pgflow-timeline-row")) == 2
    chart.screenshot(str(ARTIFACTS / "admin-console-run-timeline.png"))
