"""docs/durable.md's approval, reminder and parcel flows under a real ``pgflow_worker`` process: an
event sent from another process completes the wait, the worker's wait pass ends sleeps and timeouts
with no task held meanwhile, child runs end their parent's step, and what follows runs on the worker.
Nothing is run twice."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest
from django.db import connection

from pgflow_django import compile_flow, get_run, send_event, start_flow
from tests.integration.durable.docs_flows import approval, orders, reminder, shipping
from tests.sql.support import q, val
from tests.workers import spawn_worker_process, wait_until

pytestmark = pytest.mark.django_db(transaction=True)

FLOWS = (approval, reminder, orders, shipping)


@pytest.fixture
def worker(database_url: str) -> Iterator[subprocess.Popen[str]]:
    for flow in FLOWS:
        compile_flow(flow)
    process = spawn_worker_process(
        database_url,
        "--poll-interval",
        "0.2",
        "--heartbeat-seconds",
        "0.5",
        settings="tests.durable_settings",
    )
    yield process
    process.terminate()
    process.communicate(timeout=30)
    with connection.cursor() as cursor:
        for flow in FLOWS:
            cursor.execute("select pgflow.delete_flow_and_data(%s)", [flow.slug])
        cursor.execute("delete from pgflow.events where event_name = 'order.approved'")  # kept a day


def finished(run_id: object) -> object:
    run = get_run(run_id)
    return run if run.status != "started" else None


def each_parcel_ships_in_a_child_run() -> None:
    started = time.monotonic()
    order = start_flow(orders, {"parcels": [{"id": 1}, {"id": 2}, {"id": 3}]})
    run = wait_until(lambda: finished(order), 30, "the order to finish")
    elapsed = time.monotonic() - started
    assert run.status == "completed"
    assert run.outputs["confirm"] == {"tracking": ["TRK-1", "TRK-2", "TRK-3"]}
    assert len(run.child_run_ids) == 3
    assert {get_run(child).parent_run_id for child in run.child_run_ids} == {order}
    # the children's ends notify the worker (pgflow_waits): no wait for the next one-second pass
    assert elapsed < 5, elapsed
    assert val("select count(*) from pgflow.runs where flow_slug = 'durable_shipping'") == 3


def due_now(run_id: object, step: str) -> None:
    q("update pgflow.step_waits set due_at = now() where run_id = %s and step_slug = %s", [run_id, step])


def test_approval_reminder_and_parcels_run_on_a_real_worker(worker: subprocess.Popen[str]) -> None:
    """One worker for the three examples: its start-up is the slow part."""
    approved = start_flow(approval, {"order_id": 501, "total": 10})
    ignored = start_flow(approval, {"order_id": 502, "total": 10})
    trial_ends = (datetime.now(UTC) + timedelta(seconds=2)).isoformat()
    reminded = start_flow(reminder, {"email": "ada@example.com", "trial_ends": trial_ends})

    wait_until(lambda: val("select count(*) from pgflow.step_waits") == 4, 60, "the four waits to start")
    assert (
        val("select count(*) from pgflow.step_tasks where status = 'started' and last_worker_id is not null")
        == 0
    )

    assert send_event("order.approved", {"by": "ada"}, key=501) == 1
    due_now(ignored, "approved")  # three days pass for the order nobody approves
    due_now(reminded, "a_day_later")  # and a day for the reminder; its trial ends in 2 s

    started = time.monotonic()
    runs = [
        wait_until(lambda r=r: finished(r), 30, f"run {r} to finish") for r in (approved, ignored, reminded)
    ]
    assert [run.status for run in runs] == ["completed", "completed", "completed"]
    assert runs[0].outputs["ship"] == {"shipped": True, "approved_by": "ada"}
    assert runs[1].step("approved").status == "skipped" and runs[1].step("ship").status == "skipped"
    assert runs[2].outputs["remind"] == {"sent_to": "ada@example.com"}
    assert time.monotonic() - started < 30
    assert val("select count(*) from pgflow.step_waits") == 0
    assert (
        q(
            "select step_slug, attempts_count from pgflow.step_tasks"
            " where run_id = any(%s) and attempts_count <> 1",
            [[approved, ignored, reminded]],
        )
        == []
    )

    each_parcel_ships_in_a_child_run()
