"""The read-only admin: flows, runs, step tasks and workers, the DAG pictures, and the run actions."""

from __future__ import annotations

import html as html_text
import re
import uuid
from typing import Any

import pytest
from django.contrib.admin.models import LogEntry
from django.db import connection
from django.test import Client
from django.urls import reverse

from pgflow_django import start_flow
from pgflow_django.db.query import fetch_value
from pgflow_django.flows.compiler import compile_flow
from pgflow_django.models import Run
from pgflow_django.worker import queries as worker_queries
from tests.integration import commands_flows
from tests.sql import support

TASKS_URL = "/admin/pgflow/run/tasks/"


@pytest.fixture
def runs() -> dict[str, uuid.UUID]:
    """A completed greet run, a started one (hello done), a failed boom run: all via the SQL API."""
    compile_flow(commands_flows.greet)
    compile_flow(commands_flows.boom)
    done = start_flow("cmd_greet", {"name": "ada"})
    support.run_step("cmd_greet", "hello", {"greeting": "hello ada"})
    support.run_step("cmd_greet", "shout", "HELLO ADA")
    going = start_flow("cmd_greet", {"name": "bob"})
    support.run_step("cmd_greet", "hello", {"greeting": "hello bob"})
    failed = start_flow("cmd_boom", {})
    assert support.fail(support.claim_one("cmd_boom"), "boom on purpose") == "failed"
    return {"completed": done, "started": going, "failed": failed}


def said(html: str, *, visible: bool = False) -> list[str]:
    """The messages of an admin page as text: a run id whole, as copying it gives it, or ``visible``:
    as the page shows it (its last characters; the rest collapsed by admin.css)."""
    found = re.search(r'<ul class="messagelist">(.*?)</ul>', html, re.DOTALL)
    if found is None:
        return []
    items = re.findall(r"<li[^>]*>(.*?)</li>", found[1], re.DOTALL)
    if visible:
        items = [re.sub(r'<span class="pgflow-id-rest">[^<]*</span>', "", item) for item in items]
    return [html_text.unescape(re.sub(r"<[^>]+>", "", item)).strip() for item in items]


def page(client: Client, url: str, **params: Any) -> str:
    response = client.get(url, params)
    assert response.status_code == 200, response.content[:2000]
    return response.content.decode()


def test_index_lists_the_pgflow_models(admin_client: Client) -> None:
    html = page(admin_client, "/admin/")
    for url in ("pgflow/flow/", "pgflow/run/", "pgflow/worker/"):
        assert f"/admin/{url}" in html
    assert "/admin/pgflow/flow/add/" not in html


def test_flow_page_shows_steps_queues_and_dag(admin_client: Client, runs: dict[str, uuid.UUID]) -> None:
    assert "cmd_greet" in page(admin_client, "/admin/pgflow/flow/")
    html = page(admin_client, reverse("admin:pgflow_flow_change", args=["cmd_greet"]))
    assert '<svg xmlns="http://www.w3.org/2000/svg" class="pgflow-dag"' in html
    assert 'data-step="hello"' in html and 'data-step="shout"' in html
    assert 'data-from="hello" data-to="shout"' in html
    assert "pgflow-queue-cmd_greet" in html
    assert "plain" in html
    assert 'class="pgflow-steps"' in html and "<td>cmd_greet</td>" in html
    assert 'name="_save"' not in html, "read-only: no save button"


def test_run_page_dag_shows_each_step_status_and_task_counts(
    admin_client: Client, runs: dict[str, uuid.UUID]
) -> None:
    html = page(admin_client, reverse("admin:pgflow_run_change", args=[runs["started"]]))
    assert 'class="pgflow-dag"' in html
    assert 'class="pgflow-step pgflow-status-completed" data-step="hello"' in html
    assert 'class="pgflow-step pgflow-status-started" data-step="shout"' in html
    assert ">completed</text>" in html and "tasks 1/1 \u00b7 " in html
    assert ">started</text>" in html and "tasks 0/1 \u00b7 " in html
    assert 'class="pgflow-step-states"' in html
    assert "bob" in html, "the run's input"

    failed = page(admin_client, reverse("admin:pgflow_run_change", args=[runs["failed"]]))
    assert 'class="pgflow-step pgflow-status-failed" data-step="explode"' in failed
    assert "boom on purpose" in failed


def test_run_list_filters_and_search(admin_client: Client, runs: dict[str, uuid.UUID]) -> None:
    html = page(admin_client, "/admin/pgflow/run/", status="started", flow__flow_slug__exact="cmd_greet")
    assert str(runs["started"]) in html and str(runs["completed"]) not in html
    html = page(admin_client, "/admin/pgflow/run/", q=str(runs["failed"]))
    assert str(runs["failed"]) in html and str(runs["started"]) not in html
    assert str(runs["started"]) not in page(admin_client, "/admin/pgflow/run/", q="not-a-uuid")


def test_step_tasks_list_shows_message_ids_as_text(admin_client: Client, runs: dict[str, uuid.UUID]) -> None:
    html = page(admin_client, TASKS_URL, q=str(runs["started"]))
    task = support.task(runs["started"], "shout")
    assert f'<td class="field-message_id_text">{task["message_id"]}</td>' in html
    assert "cmd_greet" in html
    by_message = page(admin_client, TASKS_URL, q=str(task["message_id"]))
    assert str(runs["started"]) in by_message
    by_status = page(admin_client, TASKS_URL, status__exact="failed")
    assert str(runs["failed"]) in by_status and str(runs["started"]) not in by_status
    by_queue = page(admin_client, TASKS_URL, queue_name="cmd_boom")
    assert str(runs["failed"]) in by_queue and str(runs["started"]) not in by_queue
    by_step = page(admin_client, TASKS_URL, step_slug="shout")
    assert str(runs["started"]) in by_step and str(runs["failed"]) not in by_step


def test_message_id_above_2_53_is_shown_exactly(admin_client: Client, runs: dict[str, uuid.UUID]) -> None:
    big = 2**53 + 1
    with connection.cursor() as cursor:
        cursor.execute(
            "update pgflow.step_tasks set message_id = %s where run_id = %s and step_slug = 'shout'",
            [big, runs["completed"]],
        )
    html = page(admin_client, TASKS_URL, q=str(big))
    assert f'<td class="field-message_id_text">{big}</td>' in html


def test_workers_list_shows_heartbeat_age_and_pause(admin_client: Client, runs: dict[str, uuid.UUID]) -> None:
    worker_id = uuid.uuid4()
    support.execute_ok(
        "insert into pgflow.workers (worker_id, queue_name, function_name)"
        " values (%s, 'cmd_greet', 'cmd_greet')",
        [worker_id],
    )
    support.execute_ok("select pgflow.pause_subscription('cmd_greet', '', 'operator', 'by test')")
    html = page(admin_client, "/admin/pgflow/worker/")
    assert str(worker_id) in html
    assert "(flow): operator" in html
    page(admin_client, reverse("admin:pgflow_worker_change", args=[worker_id]))


def _register(worker_id: uuid.UUID, queue: str, function_name: str, support: list[tuple[str, str]]) -> None:
    """A worker row and its support set, written by the worker's own heartbeat statement."""
    with connection.cursor() as cursor:
        fetch_value(
            cursor,
            worker_queries.HEARTBEAT,
            {
                "id": worker_id,
                "queue": queue,
                "name": function_name,
                "flows": [flow for flow, _ in support],
                "steps": [step for _, step in support],
                "queues": [queue] * len(support),
            },
        )


def test_workers_pause_column_shows_pauses_of_step_and_shared_queue_workers(
    admin_client: Client, runs: dict[str, uuid.UUID]
) -> None:
    """The column follows each worker's support set, not its function name: a step worker
    (``flow.step``) and a shared-queue worker (``queue:flows``) show the pauses that hold them."""
    step_worker, shared_worker, other_step = uuid.uuid4(), uuid.uuid4(), uuid.uuid4()
    _register(step_worker, "cmd_greet_shout", "cmd_greet.shout", [("cmd_greet", "shout")])
    _register(other_step, "cmd_greet_hello", "cmd_greet.hello", [("cmd_greet", "hello")])
    _register(shared_worker, "jobs", "jobs:cmd_boom", [("cmd_boom", "explode")])
    support.execute_ok("select pgflow.pause_subscription('cmd_greet', 'shout', 'operator', 'by test')")
    support.execute_ok("select pgflow.pause_subscription('cmd_boom', '', 'operator', 'by test')")

    def paused(worker_id: uuid.UUID) -> str:
        return page(admin_client, reverse("admin:pgflow_worker_change", args=[worker_id]))

    assert "cmd_greet shout: operator" in paused(step_worker)
    assert "cmd_greet shout: operator" not in paused(other_step)
    assert "cmd_boom (flow): operator" in paused(shared_worker)
    listing = page(admin_client, "/admin/pgflow/worker/")
    assert listing.count("cmd_greet shout: operator") == 1
    assert listing.count("cmd_boom (flow): operator") == 1


def test_no_add_change_or_delete(admin_client: Client, runs: dict[str, uuid.UUID]) -> None:
    assert admin_client.get("/admin/pgflow/run/add/").status_code == 403
    url = reverse("admin:pgflow_run_delete", args=[runs["completed"]])
    assert admin_client.post(url, {"post": "yes"}).status_code == 403
    assert Run.objects.filter(run_id=runs["completed"]).exists()


def act(client: Client, action: str, *run_ids: uuid.UUID) -> str:
    response = client.post(
        "/admin/pgflow/run/",
        {"action": action, "_selected_action": [str(r) for r in run_ids]},
        follow=True,
    )
    assert response.status_code == 200
    return response.content.decode()


def test_cancel_action_goes_through_cancel_run_and_is_logged(
    admin_client: Client, runs: dict[str, uuid.UUID]
) -> None:
    html = act(admin_client, "cancel_runs", runs["started"], runs["completed"])
    assert said(html) == [  # oldest first
        f"Run {runs['completed']} was not cancelled: it is completed.",
        f"Cancelled run {runs['started']}.",
    ]
    started, completed = str(runs["started"])[-8:], str(runs["completed"])[-8:]
    assert said(html, visible=True) == [
        f"Run {completed} was not cancelled: it is completed.",
        f"Cancelled run {started}.",
    ], "each run as the list shows it"
    assert (
        f'<a href="{reverse("admin:pgflow_run_change", args=[runs["started"]])}"><span class="pgflow-id"'
        in html
    )
    cancelled = support.run(runs["started"])
    assert (cancelled["status"], cancelled["error_message"]) == ("failed", "cancelled")
    assert support.run(runs["completed"])["status"] == "completed"
    entries = LogEntry.objects.filter(object_id=str(runs["started"]))
    assert [e.get_change_message() for e in entries] == [f"Cancelled run {runs['started']}."]
    assert not LogEntry.objects.filter(object_id=str(runs["completed"])).exists()


def test_rerun_action_starts_a_linked_run_and_is_logged(
    admin_client: Client, runs: dict[str, uuid.UUID]
) -> None:
    html = act(admin_client, "rerun_runs", runs["completed"], runs["started"])
    new = Run.objects.get(rerun_of_id=runs["completed"])
    assert said(html) == [
        f"Run {runs['started']} was not re-run: it is still started.",
        f"Re-ran run {runs['completed']} as new run {new.run_id}.",
    ]
    assert new.status == "started" and new.input == {"name": "ada"}
    assert not Run.objects.filter(rerun_of_id=runs["started"]).exists()
    entry = LogEntry.objects.get(object_id=str(runs["completed"]))
    assert str(new.run_id) in entry.get_change_message()


def test_a_worker_serving_several_queues_shows_them(admin_client: Client, runs: dict[str, uuid.UUID]) -> None:
    """A project worker registers queue ``*``: the lists say how many queues, its page which steps
    it runs on each, and the dashboard names at most 8 steps per worker."""
    worker_id = uuid.uuid4()
    steps = [(f"flow_{index}", "step", f"queue_{index % 3}") for index in range(10)]
    with connection.cursor() as cursor:
        fetch_value(
            cursor,
            worker_queries.HEARTBEAT,
            {
                "id": worker_id,
                "queue": "*",
                "name": "10 flows on 3 queues",
                "flows": [flow for flow, _, _ in steps],
                "steps": [step for _, step, _ in steps],
                "queues": [queue for _, _, queue in steps],
            },
        )
    listing = page(admin_client, "/admin/pgflow/worker/")
    assert ">3 queues<" in listing
    detail = page(admin_client, reverse("admin:pgflow_worker_change", args=[worker_id]))
    assert "<strong>queue_0</strong>: flow_0.step, flow_3.step, flow_6.step, flow_9.step" in detail
    dashboard = page(admin_client, "/admin/pgflow/run/dashboard/")
    assert "3 queues" in dashboard and "and 2 more" in dashboard
