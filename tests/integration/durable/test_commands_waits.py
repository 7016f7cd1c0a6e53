"""What the commands show and do with waits: ``pgflow_runs RUN`` names what each step waits for and
the run's parent and children (at 80 columns too); ``pgflow_send_event`` sends, counts and refuses
bad arguments in one line; the dashboard counts the waiting and sleeping runs."""

from __future__ import annotations

import json
import re

import pytest
from django.core.management import CommandError
from django.test import Client

from pgflow_django import compile_flow, get_run, start_flow
from pgflow_django.testing import drain
from pgflow_django.testing import send_event as send_and_drain
from tests.integration.commands_support import call
from tests.integration.durable.docs_flows import approval, orders, reminder
from tests.sql import support


def test_pgflow_runs_shows_what_a_step_waits_for(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    compile_flow(approval)
    run_id = start_flow(approval, {"order_id": 1042, "total": 3})
    drain(flows=[approval])
    out, _ = call("pgflow_runs", str(run_id))
    assert "event" in out and "waits for order.approved (key 1042)" in " ".join(out.split())
    assert max(len(line) for line in out.splitlines()) <= 80, out

    data = json.loads(call("pgflow_runs", str(run_id), "--format", "json")[0])
    [step] = [s for s in data["steps"] if s["step_slug"] == "approved"]
    assert step["kind"] == "event" and step["waiting"]["key"] == "1042"


def test_pgflow_runs_names_parent_and_children() -> None:
    compile_flow(orders)
    run_id = start_flow(orders, {"parcels": [{"id": 1}]})
    support.run_step("durable_orders", "pack", [{"id": 1}])
    [child] = get_run(run_id).child_run_ids
    parent_out, _ = call("pgflow_runs", str(run_id))
    assert f"child runs: {child}" in parent_out and "waits for child run" in " ".join(parent_out.split())
    child_out, _ = call("pgflow_runs", str(child))
    assert f"parent run {run_id}" in child_out


def test_pgflow_send_event_sends_and_counts() -> None:
    compile_flow(approval)
    run_id = start_flow(approval, {"order_id": 9, "total": 3})
    drain(flows=[approval])
    out, _ = call("pgflow_send_event", "order.approved", "--key", "9", "--payload", '{"by": "cli"}')
    assert out.strip() == "event order.approved sent to key 9: delivered to 1 waiting step(s)"
    drain(flows=[approval])  # the wait pass a worker runs
    assert get_run(run_id).step("approved").output == {"by": "cli"}
    out, _ = call("pgflow_send_event", "order.approved", "--run", str(run_id), "--event-id", "x")
    assert out.strip().endswith(": delivered to 0 waiting step(s)")


def test_pgflow_send_event_refuses_a_payload_that_is_not_json() -> None:
    with pytest.raises(CommandError, match=r"--payload is not valid JSON"):
        call("pgflow_send_event", "order.approved", "--key", "9", "--payload", "{nope")


def test_the_dashboard_counts_waiting_and_sleeping_runs(admin_client: Client) -> None:
    compile_flow(approval)
    compile_flow(reminder)
    for order in (1, 2):
        start_flow(approval, {"order_id": order, "total": 1})
    start_flow(reminder, {"email": "a@example.com", "trial_ends": "2031-01-01T00:00:00Z"})
    drain(flows=[approval, reminder])
    html = admin_client.get("/admin/pgflow/run/dashboard/").content.decode()
    assert "Waiting and sleeping runs" in html
    cells = " ".join(re.findall(r"<td[^>]*>([^<]*)</td>", html))
    assert "durable_approval wait for an event 2 2" in cells
    assert "durable_reminder sleep 1 2" in cells
    assert "No stalled task." in html  # a waiting task is no stalled claim


def test_a_schedule_starts_a_flow_that_waits_and_sleeps() -> None:
    from pgflow_django.schedules import create_schedule, trigger_now

    compile_flow(approval)
    create_schedule(approval, cron="0 9 * * *", name="durable-daily", input={"order_id": 31, "total": 2})
    run_id = trigger_now("durable-daily")
    drain(flows=[approval])
    assert get_run(run_id).step("approved").waiting is not None
    assert send_and_drain("order.approved", {"by": "cron"}, key=31, flows=[approval]) == 1
    assert get_run(run_id).outputs["ship"] == {"shipped": True, "approved_by": "cron"}
