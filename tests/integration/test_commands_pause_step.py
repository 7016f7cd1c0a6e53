"""``pgflow_pause --step`` / ``pgflow_resume --step``: one step worker's subscription of a step-queued
flow is fenced alone, while a pause of the whole flow holds every step worker."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from django.core.management.base import CommandError
from django.db import connection

from pgflow_django.flows.compiler import compile_flow
from testproject.example.support import support_thread_steps
from tests.integration.commands_support import call
from tests.sql.support import q, val
from tests.workers import Spawner, run_manage

pytestmark = pytest.mark.django_db(transaction=True)

FLOW = "support_thread_steps"


def _drop() -> None:
    with connection.cursor() as cursor:
        cursor.execute(
            "select pgflow.delete_flow_and_data(%s) from pgflow.flows where flow_slug = %s", [FLOW, FLOW]
        )


@pytest.fixture
def stepped() -> Iterator[None]:
    _drop()
    compile_flow(support_thread_steps)
    yield
    _drop()


def _paused(step: str) -> str | None:
    return val("select reason from pgflow.subscription_pause(%s, %s)", [FLOW, step])


@pytest.mark.usefixtures("stepped")
class TestPauseStep:
    def test_a_step_pause_holds_only_that_step(self) -> None:
        out, _ = call("pgflow_pause", FLOW, "--step", "classify", "--detail", "model upgrade")
        assert out.strip().startswith(f"paused {FLOW} --step classify (queue support_thread_steps__classify)")
        assert _paused("classify") == "operator"
        assert _paused("acknowledge") is None
        listing, _ = call("pgflow_pause")
        assert f"{FLOW} step=classify queue=support_thread_steps__classify operator: model upgrade" in listing

        out, _ = call("pgflow_resume", FLOW, "--step", "classify")
        assert out.strip() == f"resumed {FLOW} (was paused: operator, model upgrade)"
        assert _paused("classify") is None

    def test_a_flow_pause_holds_every_step(self) -> None:
        call("pgflow_pause", FLOW)
        assert {step: _paused(step) for step in support_thread_steps.steps} == dict.fromkeys(
            support_thread_steps.steps, "operator"
        )
        out, _ = call("pgflow_resume", FLOW, "--step", "route")
        assert out.strip() == f"{FLOW} --step route was not paused"
        call("pgflow_resume", FLOW)
        assert q("select * from pgflow.worker_pauses where flow_slug = %s", [FLOW]) == []

    def test_unknown_step_is_refused(self) -> None:
        with pytest.raises(CommandError, match="flow 'support_thread_steps' has no step 'nope'"):
            call("pgflow_pause", FLOW, "--step", "nope")


def test_a_paused_step_worker_refuses_to_start_and_others_run(
    database_url: str, stepped: None, spawn_worker: Spawner
) -> None:
    call("pgflow_pause", FLOW, "--step", "acknowledge")
    refused = run_manage(database_url, "pgflow_worker", "--flow", FLOW, "--step", "acknowledge")
    assert refused.returncode == 1
    lines = [line for line in refused.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, refused.stderr
    assert f"flow={FLOW} step=acknowledge is paused (operator)" in lines[0]
    assert f"pgflow_resume {FLOW} --step acknowledge" in lines[0]
    worker = spawn_worker(FLOW, "--step", "messages")
    assert f"queue=support_thread_steps__messages flow={FLOW} step=messages" in worker.log()
