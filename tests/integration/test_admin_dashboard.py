"""The dashboard: one bounded statement per panel, live state only, every text escaped."""

from __future__ import annotations

import re
import uuid

from django.contrib.auth.models import User
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from pgflow_django import start_flow
from pgflow_django.flows.compiler import compile_flow
from tests.integration import commands_flows
from tests.integration.test_admin import page
from tests.sql import support

URL = "/admin/pgflow/run/dashboard/"


def test_dashboard_panels_show_rates_queues_workers_pauses_and_stalled_tasks(admin_client: Client) -> None:
    compile_flow(commands_flows.greet)
    compile_flow(commands_flows.boom)
    done = start_flow("cmd_greet", {"name": "ada"})
    support.run_step("cmd_greet", "hello", {"greeting": "hi"})
    support.run_step("cmd_greet", "shout", "HI")
    failed = start_flow("cmd_boom", {})
    assert support.fail(support.claim_one("cmd_boom"), "boom") == "failed"
    stuck = start_flow("cmd_greet", {"name": "bob"})
    support.claim_one("cmd_greet")
    support.backdate_started(stuck, "hello", 3600)
    live, stopped = uuid.uuid4(), uuid.uuid4()
    for worker_id in (live, stopped):
        support.execute_ok(
            "insert into pgflow.workers (worker_id, queue_name, function_name)"
            " values (%s, 'cmd_greet', 'cmd_greet')",
            [worker_id],
        )
    support.execute_ok("update pgflow.workers set stopped_at = now() where worker_id = %s", [stopped])
    support.execute_ok("select pgflow.pause_subscription('cmd_boom', '', 'operator', '<i>maintenance</i>')")

    with CaptureQueriesContext(connection) as captured:
        html = page(admin_client, URL)
    panel_statements = [
        q["sql"] for q in captured.captured_queries if "pgflow." in q["sql"] or "pgmq." in q["sql"]
    ]
    assert len(panel_statements) == 8, "one statement per panel, and one naming the task flows"
    assert '<meta http-equiv="refresh" content="15">' in html

    greet = re.search(r'<svg[^>]*class="pgflow-rates" data-flow="cmd_greet".*?</svg>', html, re.S)
    boom = re.search(r'<svg[^>]*class="pgflow-rates" data-flow="cmd_boom".*?</svg>', html, re.S)
    assert greet and boom
    assert "cmd_greet: 2 started, 1 completed, 0 failed" in greet[0]
    assert greet[0].count('class="pgflow-rate-completed"') == 1
    assert "cmd_boom: 1 started, 0 completed, 1 failed" in boom[0]
    assert boom[0].count('class="pgflow-rate-failed"') == 1

    queues = re.search(r'id="panel-queues".*?</section>', html, re.S)
    assert queues and '<td data-label="queue">cmd_greet</td>' in queues[0]
    assert '<td data-label="queue">cmd_boom</td>' in queues[0], "a cell names its column for a phone"
    workers = re.search(r'id="panel-workers".*?</section>', html, re.S)
    assert workers and str(live) in workers[0] and str(stopped) not in workers[0]
    pauses = re.search(r'id="panel-pauses".*?</section>', html, re.S)
    assert pauses and "&lt;i&gt;maintenance&lt;/i&gt;" in pauses[0] and "<i>maintenance" not in html
    stalled = re.search(r'id="panel-stalled".*?</section>', html, re.S)
    assert stalled and str(stuck) in stalled[0] and "hello[0]" in stalled[0]
    assert str(done) not in stalled[0] and str(failed) not in stalled[0]


def test_dashboard_when_nothing_runs(admin_client: Client) -> None:
    html = page(admin_client, URL)
    assert "No run started or finished in the last hour." in html
    assert "No stalled task." in html and "No paused subscription." in html


def test_dashboard_needs_the_view_run_permission(client: Client) -> None:
    user = User.objects.create_user("viewer", password="pw", is_staff=True)
    client.force_login(user)
    assert client.get(URL).status_code == 403


def test_the_runs_list_links_to_the_dashboard(admin_client: Client) -> None:
    page = admin_client.get("/admin/pgflow/run/")
    assert page.status_code == 200
    assert f'href="{URL}" class="pgflow-dashboard-link"' in page.content.decode()
