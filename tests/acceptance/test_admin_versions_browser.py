"""Chromium opens a flow with two versions: the flow list shows each version's number, the flow page's
versions table says which is drained and links the other version, at 1400 px and on a 390 px phone
(where the table scrolls inside its field). Screenshots are kept in test-artifacts/."""

from __future__ import annotations

from typing import Any

import pytest
from django.db import connection

from pgflow_django import compile_flow, start_flow
from tests.acceptance.test_admin_browser import ARTIFACTS, CHROMEDRIVER, CHROMIUM, browser
from tests.integration.versions.test_versions import release
from tests.sql import support

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(
        CHROMIUM is None or CHROMEDRIVER is None,
        reason="Chromium is not installed: apt-get install chromium chromium-driver (.ci/install-test-tools)",
    ),
]
__all__ = ["browser"]
SLUG = "adm_versions"


def test_admin_shows_a_flows_versions(browser: Any, live_server: Any, admin_user: Any) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions
    from selenium.webdriver.support.ui import WebDriverWait

    v1, v2 = release(1, SLUG), release(2, SLUG)
    compile_flow(v1)
    try:
        start_flow(v1, {})
        support.run_step(SLUG, "first", {"release": 1})
        support.run_step(SLUG, "second", {"release": 1})
        compile_flow(v2)
        start_flow(v2, {})

        browser.set_window_size(1400, 900)
        browser.get(f"{live_server.url}/admin/login/?next=/admin/")
        browser.find_element(By.NAME, "username").send_keys("admin")
        browser.find_element(By.NAME, "password").send_keys("password")
        browser.find_element(By.CSS_SELECTOR, "input[type=submit]").click()
        wait = WebDriverWait(browser, 20)
        wait.until(lambda driver: "/admin/login/" not in driver.current_url)
        ARTIFACTS.mkdir(exist_ok=True)

        browser.get(f"{live_server.url}/admin/pgflow/flow/?q={SLUG}")
        wait.until(
            expected_conditions.presence_of_element_located((By.CSS_SELECTOR, "td.field-version_shown"))
        )
        browser.save_screenshot(str(ARTIFACTS / "admin-flow-list-versions.png"))
        shown = [cell.text for cell in browser.find_elements(By.CSS_SELECTOR, "td.field-version_shown")]
        assert sorted(shown) == ["v1", "v2"]

        browser.get(f"{live_server.url}/admin/pgflow/flow/{SLUG}/change/")
        wait.until(
            expected_conditions.presence_of_element_located((By.CSS_SELECTOR, "table.pgflow-versions"))
        )
        table = browser.find_element(By.CSS_SELECTOR, "table.pgflow-versions")
        browser.execute_script("arguments[0].scrollIntoView()", table)
        browser.save_screenshot(str(ARTIFACTS / "admin-flow-versions.png"))
        rows = [row.text for row in table.find_elements(By.CSS_SELECTOR, "tbody tr")]
        assert rows[0].startswith(f"v1 {SLUG} drained 0 1 0") and rows[1].startswith(
            f"v2 {SLUG}___v2 newest 1 0 0"
        )
        table.find_element(By.LINK_TEXT, "v2").click()
        wait.until(lambda driver: f"{SLUG}___v2" in driver.current_url)
        assert "v2" in browser.find_element(By.CSS_SELECTOR, "div.field-version_shown").text

        browser.set_window_size(390, 900)
        browser.get(f"{live_server.url}/admin/pgflow/flow/{SLUG}/change/")
        wait.until(
            expected_conditions.presence_of_element_located((By.CSS_SELECTOR, "table.pgflow-versions"))
        )
        browser.execute_script("document.querySelector('table.pgflow-versions').scrollIntoView()")
        browser.save_screenshot(str(ARTIFACTS / "admin-flow-versions-390.png"))
        assert (
            browser.execute_script(
                "const table = document.querySelector('table.pgflow-versions');"
                " return getComputedStyle(table.parentElement).overflowX"
            )
            == "auto"
        )
    finally:
        with connection.cursor() as cursor:
            cursor.execute(
                "select pgflow.delete_flow_and_data(flow_slug) from pgflow.flows where version_of = %s"
                " order by version_number desc",
                [SLUG],
            )
