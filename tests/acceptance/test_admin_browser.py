"""A real browser (Debian's Chromium, driven by Selenium and ChromeDriver) logs into the admin, opens a
run and sees its DAG with each step's status. The screenshot is kept in test-artifacts/."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.sql.support import q

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMEDRIVER = shutil.which("chromedriver")
ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(
        CHROMIUM is None or CHROMEDRIVER is None,
        reason="Chromium is not installed: apt-get install chromium chromium-driver (.ci/install-test-tools)",
    ),
]


@pytest.fixture
def browser() -> Iterator[Any]:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for flag in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--no-first-run",
        "--window-size=1400,1000",
    ):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(executable_path=str(CHROMEDRIVER)), options=options)
    driver.set_page_load_timeout(30)
    try:
        yield driver
    finally:
        driver.quit()


def test_admin_run_page_shows_each_steps_status(browser: Any, live_server: Any, admin_user: Any) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions
    from selenium.webdriver.support.ui import WebDriverWait

    q(
        "select pgflow.ensure_flow_compiled('browser_flow', %s::jsonb)",
        [
            '{"steps": [{"slug": "fetch", "step_type": "single", "deps": []},'
            ' {"slug": "render", "step_type": "single", "deps": ["fetch"]}]}'
        ],
    )
    run_id = q("select run_id from pgflow.start_flow('browser_flow', '{}'::jsonb)")[0]["run_id"]
    msg = q("select msg_id from pgmq.read('browser_flow', 30, 1)")[0]["msg_id"]
    claimed = q(
        "select * from pgflow.start_tasks('browser_flow', 'browser_flow', %s, gen_random_uuid())", [[msg]]
    )
    q("select pgflow.complete_task(%s, 'fetch', 0, %s, '\"page\"'::jsonb)", [run_id, claimed[0]["attempt"]])

    browser.get(f"{live_server.url}/admin/login/?next=/admin/")
    browser.find_element(By.NAME, "username").send_keys("admin")
    browser.find_element(By.NAME, "password").send_keys("password")
    browser.find_element(By.CSS_SELECTOR, "input[type=submit]").click()
    wait = WebDriverWait(browser, 20)
    wait.until(lambda driver: "/admin/login/" not in driver.current_url)
    browser.get(f"{live_server.url}/admin/pgflow/run/{run_id}/change/")
    wait.until(expected_conditions.presence_of_element_located((By.CSS_SELECTOR, "svg.pgflow-dag")))

    try:
        ARTIFACTS.mkdir(exist_ok=True)
        browser.save_screenshot(str(ARTIFACTS / "admin-run-dag.png"))
        fetch = browser.find_element(By.CSS_SELECTOR, "svg.pgflow-dag [data-step=fetch]")
        render = browser.find_element(By.CSS_SELECTOR, "svg.pgflow-dag [data-step=render]")
        assert "pgflow-status-completed" in (fetch.get_attribute("class") or "")
        assert "pgflow-status-started" in (render.get_attribute("class") or "")
        labels = browser.find_element(By.CSS_SELECTOR, "svg.pgflow-dag").get_attribute("textContent") or ""
        assert "completed" in labels and "started" in labels
    finally:
        q("select pgflow.delete_flow_and_data('browser_flow')")


def test_admin_schedule_page_pauses_from_its_button(browser: Any, live_server: Any, admin_user: Any) -> None:
    """The schedule page at 1400 px: next fire times, the ticks linked to their runs, and its Pause
    button (a CSRF-protected POST) pausing it with the reason typed in."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    from pgflow_django.schedules import create_schedule, get_schedule
    from tests.sql.schedules.support import every_minute, fire, minute

    q("select pgflow.create_flow('browser_sched')")
    q("select pgflow.add_step('browser_sched', 'only')")
    try:
        every_minute("browser-minutely", "browser_sched", input={"report": "daily"})
        fire(minute(1))
        fire(minute(2))
        q("select pgflow.trigger_schedule('browser-minutely')")
        create_schedule("browser_sched", cron="30 2 * * *", name="browser-paris", timezone="Europe/Paris")

        browser.get(f"{live_server.url}/admin/login/?next=/admin/")
        browser.find_element(By.NAME, "username").send_keys("admin")
        browser.find_element(By.NAME, "password").send_keys("password")
        browser.find_element(By.CSS_SELECTOR, "input[type=submit]").click()
        wait = WebDriverWait(browser, 20)
        wait.until(lambda driver: "/admin/login/" not in driver.current_url)
        ARTIFACTS.mkdir(exist_ok=True)
        browser.get(f"{live_server.url}/admin/pgflow/schedule/")
        browser.save_screenshot(str(ARTIFACTS / "admin-schedules.png"))
        browser.set_window_size(1400, 1900)
        browser.get(f"{live_server.url}/admin/pgflow/schedule/browser-minutely/change/")
        ticks = browser.find_elements(By.CSS_SELECTOR, "table.pgflow-schedule-ticks tbody tr")
        assert len(ticks) == 3
        assert all(row.find_elements(By.TAG_NAME, "a") for row in ticks), "each tick links to its run"
        assert browser.find_elements(By.CSS_SELECTOR, "ol.pgflow-next-fires li")
        browser.save_screenshot(str(ARTIFACTS / "admin-schedule.png"))
        browser.find_element(By.NAME, "reason").send_keys("vendor maintenance")
        browser.find_element(By.XPATH, "//button[text()='Pause']").click()
        wait.until(lambda driver: "Paused schedule browser-minutely" in driver.page_source)
        view = get_schedule("browser-minutely")
        assert (view.paused_reason, view.paused_detail) == ("operator", "vendor maintenance")
        assert browser.find_elements(By.XPATH, "//button[text()='Resume']")
        browser.save_screenshot(str(ARTIFACTS / "admin-schedule-paused.png"))
    finally:
        q("delete from pgflow.schedules where schedule_name like 'browser-%%'")
        q("select pgflow.delete_flow_and_data('browser_sched')")
