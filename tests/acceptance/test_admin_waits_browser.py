"""Chromium opens the run page of an order whose parcels ship in child runs (docs/durable.md): the
DAG marks the waiting subflow step, the waits table links each child run, and following that link
shows the child with its parent linked back. Screenshots are kept in test-artifacts/."""

from __future__ import annotations

from typing import Any

import pytest
from django.db import connection

from pgflow_django import compile_flow, start_flow
from tests.acceptance.test_admin_browser import ARTIFACTS, CHROMEDRIVER, CHROMIUM, browser
from tests.integration.durable.docs_flows import approval, orders, shipping
from tests.sql import support

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(
        CHROMIUM is None or CHROMEDRIVER is None,
        reason="Chromium is not installed: apt-get install chromium chromium-driver (.ci/install-test-tools)",
    ),
]
__all__ = ["browser"]


def test_admin_shows_waits_and_links_parent_and_child_runs(
    browser: Any, live_server: Any, admin_user: Any
) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions
    from selenium.webdriver.support.ui import WebDriverWait

    compile_flow(orders)
    compile_flow(approval)
    try:
        order = start_flow(orders, {"parcels": [{"id": 1}, {"id": 2}]})
        support.run_step("durable_orders", "pack", [{"id": 1}, {"id": 2}])
        waiting = start_flow(approval, {"order_id": 1042, "total": 10})
        support.run_step("durable_approval", "request_approval", {"order_id": 1042, "total": 10})

        browser.get(f"{live_server.url}/admin/login/?next=/admin/")
        browser.find_element(By.NAME, "username").send_keys("admin")
        browser.find_element(By.NAME, "password").send_keys("password")
        browser.find_element(By.CSS_SELECTOR, "input[type=submit]").click()
        wait = WebDriverWait(browser, 20)
        wait.until(lambda driver: "/admin/login/" not in driver.current_url)
        ARTIFACTS.mkdir(exist_ok=True)

        browser.get(f"{live_server.url}/admin/pgflow/run/{waiting}/change/")
        wait.until(expected_conditions.presence_of_element_located((By.CSS_SELECTOR, "table.pgflow-waits")))
        browser.save_screenshot(str(ARTIFACTS / "admin-run-waiting-event.png"))
        assert (
            "event order.approved with key 1042"
            in browser.find_element(By.CSS_SELECTOR, "table.pgflow-waits").text
        )

        browser.get(f"{live_server.url}/admin/pgflow/run/{order}/change/")
        wait.until(
            expected_conditions.presence_of_element_located((By.CSS_SELECTOR, "table.pgflow-children"))
        )
        browser.save_screenshot(str(ARTIFACTS / "admin-run-children.png"))
        ship = browser.find_element(By.CSS_SELECTOR, "svg.pgflow-dag [data-step=ship]")
        assert "waiting" in (ship.get_attribute("textContent") or "")
        browser.find_element(By.CSS_SELECTOR, "table.pgflow-waits a").click()
        wait.until(lambda driver: str(order) not in driver.current_url)
        wait.until(
            expected_conditions.presence_of_element_located((By.CSS_SELECTOR, "div.field-parent_link a"))
        )
        browser.save_screenshot(str(ARTIFACTS / "admin-run-child.png"))
        parent = browser.find_element(By.CSS_SELECTOR, "div.field-parent_link a")
        assert parent.text == str(order)

        # a phone: the waits table and the dashboard's panel still say what waits
        browser.set_window_size(390, 900)
        browser.get(f"{live_server.url}/admin/pgflow/run/{waiting}/change/")
        wait.until(expected_conditions.presence_of_element_located((By.CSS_SELECTOR, "table.pgflow-waits")))
        browser.execute_script(
            "const t = document.querySelector('table.pgflow-waits'); t.scrollIntoView();"
            " t.parentElement.scrollLeft = t.scrollWidth"
        )
        browser.save_screenshot(str(ARTIFACTS / "admin-run-waiting-event-390.png"))
        assert "order.approved" in browser.find_element(By.CSS_SELECTOR, "table.pgflow-waits").text
        # wider than the phone, the table scrolls inside its field (as the step tables do), not clipped
        assert (
            browser.execute_script(
                "const table = document.querySelector('table.pgflow-waits');"
                " return getComputedStyle(table.parentElement).overflowX"
            )
            == "auto"
        )
        browser.get(f"{live_server.url}/admin/pgflow/run/dashboard/")
        wait.until(expected_conditions.presence_of_element_located((By.ID, "panel-waits")))
        browser.execute_script("document.getElementById('panel-waits').scrollIntoView()")
        browser.save_screenshot(str(ARTIFACTS / "admin-dashboard-waits-390.png"))
        assert "durable_approval" in browser.find_element(By.ID, "panel-waits").text
    finally:
        with connection.cursor() as cursor:
            for flow in (orders, shipping, approval):
                cursor.execute("select pgflow.delete_flow_and_data(%s)", [flow.slug])
