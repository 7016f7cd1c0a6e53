"""Lists that fit: short ids with the full id kept, times to the second with durations, a run's tasks
in step then index order, effective step options, one queue mode row, Django task flows and stopped
workers behind their own filters."""

from __future__ import annotations

import re
import uuid
from datetime import timedelta
from typing import Any

from django.test import Client
from django.urls import reverse
from django.utils import timezone

from pgflow_django import Flow, route_flow, start_flow
from pgflow_django.flows.compiler import compile_flow
from pgflow_django.tasks import task_flow_slug
from tests.integration import commands_flows
from tests.integration.test_admin import TASKS_URL, page
from tests.sql import support

SECONDS = re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d")


def _handler(flow_input: Any) -> Any:
    return flow_input


def test_a_runs_tasks_list_in_step_then_index_order_with_seconds_and_durations(admin_client: Client) -> None:
    compile_flow(commands_flows.squares)
    run_id = start_flow("cmd_squares", [10, 11, 12, 13, 14])
    # queued in the order 4, 1, 3, 0, 2: the list must not follow it
    for index, seconds in ((4, 5), (1, 4), (3, 3), (0, 2), (2, 1)):
        support.execute_ok(
            "update pgflow.step_tasks set queued_at = now() - make_interval(secs => %s)"
            " where run_id = %s and task_index = %s",
            [seconds, run_id, index],
        )
    records = support.claim("cmd_squares")
    # started 2.5 s before the completion's own clock (the test's transaction began earlier than that)
    support.execute_ok(
        "update pgflow.step_tasks set started_at = clock_timestamp() - make_interval(secs => 2.5)"
        " where run_id = %s and step_slug = 'square' and task_index = 2",
        [run_id],
    )
    assert support.complete(records[2], 144) == "completed"
    html = page(admin_client, TASKS_URL, q=str(run_id))
    indexes = [int(i) for i in re.findall(r'<td class="field-task_index">(\d+)</td>', html)]
    assert indexes == [0, 1, 2, 3, 4]
    queued = re.findall(r'<td class="field-queued[^"]*"><time datetime="[^"]+" title="([^"]+)">', html)
    assert len(queued) == 5 and all(SECONDS.fullmatch(text) for text in queued), queued
    durations = re.findall(r'<td class="field-duration">([^<]*)</td>', html)
    assert re.fullmatch(r"2\.\d\ds", durations[2]), durations
    assert all(d.endswith("s so far") for i, d in enumerate(durations) if i != 2), durations
    head, tail = str(run_id)[:-8], str(run_id)[-8:]
    assert f'title="{run_id}"><span class="pgflow-id-rest">{head}</span>{tail}</span>' in html
    assert html.index("field-status") < html.index("field-queued"), "status comes before the times"


def test_run_list_shows_short_ids_seconds_and_durations(admin_client: Client) -> None:
    compile_flow(commands_flows.greet)
    run_id = start_flow("cmd_greet", {"name": "ada"})
    support.run_step("cmd_greet", "hello", {"greeting": "hi"})
    support.run_step("cmd_greet", "shout", "HI")
    html = page(admin_client, "/admin/pgflow/run/")
    assert (
        f'title="{run_id}"><span class="pgflow-id-rest">{str(run_id)[:-8]}</span>{str(run_id)[-8:]}<' in html
    )
    started = re.search(r'<td class="field-started"><time datetime="[^"]+" title="([^"]+)"><span>', html)
    assert started and SECONDS.fullmatch(started[1]), "today's start shows its time, the date on hover"
    duration = re.search(r'<td class="field-duration">([^<]*)</td>', html)
    assert duration and re.fullmatch(r"\d+\.\d+s", duration[1]), duration


def test_a_delayed_run_says_until_when_it_waits(admin_client: Client) -> None:
    """``start_flow(delay=...)``: started, yet nothing of it runs before its time; the list, the run's
    page and the status filter say so."""
    compile_flow(commands_flows.greet)
    delayed = start_flow("cmd_greet", {"name": "later"}, delay=timedelta(hours=1))
    running = start_flow("cmd_greet", {"name": "now"})
    due = support.run(delayed)["not_before"]
    rows = {
        run_id: row
        for row in re.findall(r"<tr>(.*?)</tr>", page(admin_client, "/admin/pgflow/run/"), re.DOTALL)
        for run_id in (delayed, running)
        if f'title="{run_id}"' in row
    }
    status = re.search(r'<td class="field-status_shown">(.*?)</td>', rows[delayed], re.DOTALL)
    assert status and status[1].startswith(
        '<span class="pgflow-delayed" title="Started: its delayed start is'
    )
    local = timezone.localtime(due)
    day = "" if local.date() == timezone.localdate() else f"{local:%Y-%m-%d} "  # as clock() shows it
    assert re.sub(r"<[^>]+>", "", status[1]) == f"Delayed until {day}{local:%H:%M:%S}"
    assert f'<time datetime="{timezone.localtime(due).isoformat()}"' in status[1]
    assert '<td class="field-duration">-</td>' in rows[delayed], "not begun: no time so far"
    assert '<td class="field-status_shown">Started</td>' in rows[running]
    assert re.search(r'<td class="field-duration">[^<]*s so far</td>', rows[running])
    started = page(admin_client, "/admin/pgflow/run/", status__exact="started")
    assert str(delayed)[-8:] in started and str(running)[-8:] in started, "the filter counts it as started"

    detail = page(admin_client, reverse("admin:pgflow_run_change", args=[delayed]))
    zone = timezone.localtime(due).strftime("%Y-%m-%d %H:%M:%S %Z")
    assert f'Started <span class="pgflow-delayed">· delayed until {zone}</span>' in detail
    assert "\u201cRun selected delayed runs now\u201d starts it at once" in detail
    assert detail.count("<label>Status:</label>") == 1, "one status row"
    assert detail.index("field-run_status") < detail.index("field-dag_picture"), "the status first"
    plain = page(admin_client, reverse("admin:pgflow_run_change", args=[running]))
    assert '<div class="readonly">Started</div>' in plain and "delayed until" not in plain

    support.execute_ok(
        "update pgflow.runs set not_before = now() - interval '1 minute' where run_id = %s", [delayed]
    )
    assert "Delayed until" not in page(admin_client, "/admin/pgflow/run/"), "its time has come"


def test_flow_page_shows_effective_options_and_one_queue_mode_row(admin_client: Client) -> None:
    flow = Flow("adm_options", max_attempts=4, base_delay=2, timeout=30)
    flow.step(slug="own", max_attempts=1, timeout=5)(_handler)
    flow.step(slug="inherits", depends_on=["own"])(_handler)
    compile_flow(flow)
    html = page(admin_client, reverse("admin:pgflow_flow_change", args=["adm_options"]))
    assert "max_attempts=1 base_delay=2 (flow) timeout=5 start_delay=0 (flow)" in html
    assert "max_attempts=4 (flow) base_delay=2 (flow) timeout=30 (flow)" in html
    assert "None" not in html
    assert html.count("Queue mode") + html.count("queue mode") == 1, "one queue mode row"


def test_django_task_flows_have_their_own_filter(admin_client: Client) -> None:
    compile_flow(commands_flows.greet)
    slug = task_flow_slug("app.tasks.send_mail", "adm_jobs")
    task_flow = Flow(slug, timeout=30)
    task_flow.step(slug="call")(_handler)
    compile_flow(route_flow(task_flow, queues={"call": "adm_jobs"}))
    assert slug not in page(admin_client, "/admin/pgflow/flow/")
    assert "cmd_greet" in page(admin_client, "/admin/pgflow/flow/")
    tasks = page(admin_client, "/admin/pgflow/flow/", kind="tasks")
    assert slug in tasks and ">cmd_greet<" not in tasks
    everything = page(admin_client, "/admin/pgflow/flow/", kind="all")
    assert slug in everything and "cmd_greet" in everything
    support.execute_ok("select pgflow.delete_flow_and_data(%s)", [slug])


def test_stopped_workers_are_hidden_until_asked_for(admin_client: Client) -> None:
    live, stopped = uuid.uuid4(), uuid.uuid4()
    for worker_id in (live, stopped):
        support.execute_ok(
            "insert into pgflow.workers (worker_id, queue_name, function_name) values (%s, 'q', 'f')",
            [worker_id],
        )
    support.execute_ok("update pgflow.workers set stopped_at = now() where worker_id = %s", [stopped])
    default = page(admin_client, "/admin/pgflow/worker/")
    assert str(live) in default and str(stopped) not in default
    shown = page(admin_client, "/admin/pgflow/worker/", state="stopped")
    assert str(stopped) in shown and str(live) not in shown
    both = page(admin_client, "/admin/pgflow/worker/", state="all")
    assert str(live) in both and str(stopped) in both


def test_change_pages_show_times_to_the_second_once(admin_client: Client) -> None:
    compile_flow(commands_flows.greet)
    run_id = start_flow("cmd_greet", {"name": "ada"})
    html = page(admin_client, reverse("admin:pgflow_run_change", args=[run_id]))
    started = re.search(
        r'<div class="form-row field-started_at">.*?<div class="readonly">([^<]*)</div>', html, re.S
    )
    assert started and SECONDS.fullmatch(started[1].strip()), started
    assert html.count("field-started_at") == 1 and html.count("field-completed_at") == 1
    flow = page(admin_client, reverse("admin:pgflow_flow_change", args=["cmd_greet"]))
    assert flow.count("field-created_at") == 1


def test_run_and_task_lists_show_priorities(admin_client: Client) -> None:
    flow = Flow("adm_priority", priority=-3)
    flow.step(slug="first")(_handler)
    flow.step(slug="urgent", priority=40)(_handler)
    compile_flow(flow)
    chosen = start_flow("adm_priority", {}, priority=12)
    defaults = start_flow("adm_priority", {})
    runs_html = page(admin_client, "/admin/pgflow/run/")
    shown = dict(
        re.findall(r'title="([0-9a-f-]{36})">.*?<td class="field-priority_shown">([^<]*)</td>', runs_html)
    )
    assert shown[str(chosen)] == "12"
    assert shown[str(defaults)] == "default"
    by_run = {}
    for run_id in (chosen, defaults):
        html = page(admin_client, TASKS_URL, q=str(run_id))
        by_run[run_id] = re.findall(r'<td class="field-priority">(-?\d+)</td>', html)
    assert by_run[chosen] == ["12", "12"], "an explicit priority is every step's"
    assert by_run[defaults] == ["-3", "40"], "the flow's default, and the step's own"
    flow_html = page(admin_client, reverse("admin:pgflow_flow_change", args=["adm_priority"]))
    assert re.search(r'field-opt_priority.*?<div class="readonly">-3</div>', flow_html, re.S)
