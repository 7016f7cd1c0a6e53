"""A step that had started when its run failed reads 'cancelled' everywhere: get_run(), the admin's run
page and its DAG picture, and pgflow_runs (text and JSON)."""

from __future__ import annotations

import json
import uuid

import pytest
from django.test import Client
from django.urls import reverse

from pgflow_django import get_run, start_flow
from pgflow_django.flows.compiler import compile_flow
from pgflow_django.models import StepState, StepStatus
from tests.integration import commands_flows
from tests.integration.commands_support import call
from tests.sql import support


@pytest.fixture
def cancelled_run() -> uuid.UUID:
    """A greet run cancelled while hello was claimed: hello cancelled, shout never started."""
    compile_flow(commands_flows.greet)
    run_id = start_flow("cmd_greet", {"name": "ada"})
    support.claim_one("cmd_greet")
    assert support.val("select pgflow.cancel_run(%s) as outcome", [run_id]) == "cancelled"
    return run_id


def test_get_run_and_the_model_read_cancelled(cancelled_run: uuid.UUID) -> None:
    view = get_run(cancelled_run)
    assert view.status == "failed"
    statuses = {state.step_slug: state.status for state in view.steps}
    assert statuses == {"hello": "cancelled", "shout": "created"}
    state = StepState.objects.get(run_id=cancelled_run, step_slug="hello")
    assert state.status == StepStatus.CANCELLED
    assert state.get_status_display() == "Cancelled"


def test_admin_run_page_shows_the_cancelled_step(admin_client: Client, cancelled_run: uuid.UUID) -> None:
    response = admin_client.get(reverse("admin:pgflow_run_change", args=[cancelled_run]))
    assert response.status_code == 200
    html = response.content.decode()
    assert 'class="pgflow-step pgflow-status-cancelled" data-step="hello"' in html
    assert ">cancelled</text>" in html and ">tasks 0/1</text>" in html
    assert "#fed7aa" in html, "the cancelled fill colour"


def test_pgflow_runs_shows_the_cancelled_step(cancelled_run: uuid.UUID) -> None:
    out, _ = call("pgflow_runs", str(cancelled_run), "--format", "json")
    view = json.loads(out)
    assert {step["step_slug"]: step["status"] for step in view["steps"]} == {
        "hello": "cancelled",
        "shout": "created",
    }
    text, _ = call("pgflow_runs", str(cancelled_run))
    (hello_line,) = [line for line in text.splitlines() if line.split()[:1] == ["hello"]]
    assert "cancelled" in hello_line
