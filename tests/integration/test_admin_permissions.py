"""Operator actions need their own permission (``Meta.permissions``, checked with ``has_perm``), not
superuser status: cancel and re-run runs, pause and resume a flow's workers."""

from __future__ import annotations

import uuid

from django.contrib.admin.models import LogEntry
from django.contrib.auth.models import Permission, User
from django.test import Client

from pgflow_django import start_flow
from pgflow_django.flows.compiler import compile_flow
from pgflow_django.models import Run
from tests.integration import commands_flows
from tests.integration.test_admin import said
from tests.sql import support


def operator(*codenames: str) -> Client:
    """A logged-in staff user (not a superuser) who may view runs and flows, plus ``codenames``."""
    user = User.objects.create_user(f"op_{uuid.uuid4().hex[:8]}", password="pw", is_staff=True)
    names = ("view_run", "view_flow", *codenames)
    user.user_permissions.set(Permission.objects.filter(content_type__app_label="pgflow", codename__in=names))
    client = Client()
    client.force_login(user)
    return client


def act(client: Client, url: str, action: str, *ids: object) -> str:
    response = client.post(url, {"action": action, "_selected_action": [str(i) for i in ids]}, follow=True)
    assert response.status_code == 200
    return response.content.decode()


def test_cancel_needs_the_cancel_permission() -> None:
    compile_flow(commands_flows.greet)
    run_id = start_flow("cmd_greet", {"name": "ada"})
    viewer = operator()
    listing = viewer.get("/admin/pgflow/run/").content.decode()
    assert 'value="cancel_runs"' not in listing and 'value="rerun_runs"' not in listing
    act(viewer, "/admin/pgflow/run/", "cancel_runs", run_id)
    assert support.run(run_id)["status"] == "started", "refused without the permission"

    canceller = operator("cancel_run")
    listing = canceller.get("/admin/pgflow/run/").content.decode()
    assert 'value="cancel_runs"' in listing and 'value="rerun_runs"' not in listing
    assert said(act(canceller, "/admin/pgflow/run/", "cancel_runs", run_id)) == [f"Cancelled run {run_id}."]
    assert support.run(run_id)["status"] == "failed"
    act(canceller, "/admin/pgflow/run/", "rerun_runs", run_id)
    assert not Run.objects.filter(rerun_of_id=run_id).exists(), "re-run needs its own permission"


def test_rerun_needs_the_rerun_permission() -> None:
    compile_flow(commands_flows.boom)
    run_id = start_flow("cmd_boom", {})
    assert support.fail(support.claim_one("cmd_boom"), "boom") == "failed"
    html = act(operator("rerun_run"), "/admin/pgflow/run/", "rerun_runs", run_id)
    new = Run.objects.get(rerun_of_id=run_id)
    assert said(html) == [f"Re-ran run {run_id} as new run {new.run_id}."]


def test_pause_and_resume_a_flow_need_the_pause_permission() -> None:
    compile_flow(commands_flows.greet)
    act(operator(), "/admin/pgflow/flow/", "pause_flows", "cmd_greet")
    assert support.q("select * from pgflow.worker_pauses where flow_slug = 'cmd_greet'") == []

    client = operator("pause_flow")
    html = act(client, "/admin/pgflow/flow/", "pause_flows", "cmd_greet")
    assert "Paused flow cmd_greet (operator)" in html
    (pause,) = support.q("select * from pgflow.worker_pauses where flow_slug = 'cmd_greet'")
    assert (pause["step_slug"], pause["reason"]) == ("", "operator")
    assert pause["detail"].startswith("paused in the admin by op_")
    html = act(client, "/admin/pgflow/flow/", "resume_flows", "cmd_greet")
    assert "Resumed flow cmd_greet (cleared its operator pause)." in html
    assert support.q("select * from pgflow.worker_pauses where flow_slug = 'cmd_greet'") == []
    assert "Flow cmd_greet was not paused." in act(client, "/admin/pgflow/flow/", "resume_flows", "cmd_greet")
    logged = [e.get_change_message() for e in LogEntry.objects.filter(object_id="cmd_greet").order_by("id")]
    assert logged == [
        "Paused flow cmd_greet (operator): its workers stop at their next heartbeat.",
        "Resumed flow cmd_greet (cleared its operator pause).",
    ]


def test_retry_needs_the_retry_permission_and_says_why_it_refuses() -> None:
    compile_flow(commands_flows.boom)
    run_id = start_flow("cmd_boom", {})
    assert support.fail(support.claim_one("cmd_boom"), "boom") == "failed"
    act(operator("rerun_run"), "/admin/pgflow/run/", "retry_runs", run_id)
    assert support.run(run_id)["status"] == "failed", "refused without the permission"

    client = operator("retry_run")
    html = act(client, "/admin/pgflow/run/", "retry_runs", run_id)
    (message,) = said(html)
    assert message.startswith(f"Retried run {run_id}: 1 task queued again; it had failed with: "), message
    (entry,) = LogEntry.objects.filter(object_id=str(run_id))
    assert "boom" in entry.get_change_message(), "the error the retry clears is kept in the admin log"
    assert support.run(run_id)["status"] == "started"
    html = act(client, "/admin/pgflow/run/", "retry_runs", run_id)
    assert said(html) == [f"Run {run_id} is started: only a failed or cancelled run can be retried"]
