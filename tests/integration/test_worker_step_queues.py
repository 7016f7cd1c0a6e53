"""Step workers as real subprocesses (issue 5, item 3): ``pgflow_worker --flow F --step S`` polls only
its step's private queue (``--flow F`` alone polls every step's queue). --step is refused for a plain
flow and an unknown step, each with one line listing the valid choices; a missing step worker leaves
that step's tasks queued durably on its own queue until one starts; startup logs and worker_support
rows name exactly the worker's (flow, step) and queue.

The step-queued flow ``example_steps`` (classify -> enrich map -> deliver) lives in
``testproject/example/step_flows.py``; workers load it through ``tests/step_settings.py``.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.db import connection

from pgflow_django import start_flow, wait_for_run
from testproject.example.step_flows import STEP_FLOW, example_steps
from tests.sql.support import q, val
from tests.workers import Spawner, WorkerProcess, run_manage, wait_until

pytestmark = pytest.mark.django_db(transaction=True)

SETTINGS = "tests.step_settings"
STEPS = ("classify", "enrich", "deliver")
QUEUES = {step: f"{STEP_FLOW}__{step}" for step in STEPS}


class StepSpawner(Spawner):
    """Workers with ``tests/step_settings.py``, so ``example_steps`` is registered."""

    def __call__(self, flow: str, *args: str, ready: bool = True) -> WorkerProcess:
        with pytest.MonkeyPatch.context() as patch:
            patch.setenv("DJANGO_SETTINGS_MODULE", SETTINGS)
            return super().__call__(flow, *args, ready=ready)

    def step(self, step_slug: str) -> WorkerProcess:
        return self(STEP_FLOW, "--step", step_slug, "--concurrency", "2")


def _clean() -> None:
    """Workers commit (other processes must see their data): drop the flow, its queues and workers."""
    with connection.cursor() as cursor:
        cursor.execute(
            "select pgflow.delete_flow_and_data(flow_slug) from pgflow.flows where flow_slug = %s",
            [STEP_FLOW],
        )
        cursor.execute(
            "delete from pgflow.workers where queue_name like %s or queue_name = '*'", [f"{STEP_FLOW}%"]
        )


@pytest.fixture
def step_workers(database_url: str, tmp_path: Path) -> Iterator[StepSpawner]:
    _clean()
    spawner = StepSpawner(database_url, tmp_path)
    yield spawner
    spawner.stop_all()
    _clean()


def refusal(database_url: str, *args: str) -> str:
    """Run a worker that must refuse to start: exit 1 and one line on stderr, which is returned."""
    result = run_manage(database_url, "pgflow_worker", *args, env={"DJANGO_SETTINGS_MODULE": SETTINGS})
    assert result.returncode == 1, result
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, f"expected one line on stderr, got:\n{result.stderr}"
    return lines[0]


def _workers_now() -> int:
    return int(val("select count(*) as n from pgflow.workers"))


# -- refusals ----------------------------------------------------------------------------------------


def test_step_queued_flow_without_step_serves_every_step_queue(step_workers: StepSpawner) -> None:
    worker = step_workers(STEP_FLOW, "--concurrency", "2")
    assert " started queue=* " in worker.log()
    run = wait_for_run(start_flow(STEP_FLOW, _run_input()), timeout=30)
    assert run.status == "completed"
    support = q(
        "select step_slug, queue_name from pgflow.worker_support where worker_id = %s order by step_slug",
        [worker.worker_id],
    )
    assert support == [{"step_slug": step, "queue_name": QUEUES[step]} for step in sorted(STEPS)]


def test_unknown_step_is_refused_listing_the_valid_choices(database_url: str) -> None:
    line = refusal(database_url, "--flow", STEP_FLOW, "--step", "triage")
    assert "'triage'" in line
    assert "classify, enrich, deliver" in line


def test_step_on_a_plain_flow_is_refused(database_url: str) -> None:
    line = refusal(database_url, "--flow", "example_chain", "--step", "first")
    assert "plain flow" in line and "drop --step" in line
    assert "first, second, third" in line


# -- running -------------------------------------------------------------------------------------------


def _run_input() -> dict[str, Any]:
    return {"text": "Where is my Parcel"}


EXPECTED_OUTPUT = {"deliver": {"words": 4, "letters": 15}}


def test_one_worker_per_step_completes_runs(step_workers: StepSpawner) -> None:
    for step_slug in STEPS:
        step_workers.step(step_slug)
    runs = [start_flow(STEP_FLOW, _run_input()) for _ in range(3)]
    for run_id in runs:
        run = wait_for_run(run_id, timeout=30)
        assert run.status == "completed", run
        assert run.output == EXPECTED_OUTPUT
    for step_slug, queue in QUEUES.items():
        queues = {
            r["queue_name"]
            for r in q(
                "select distinct queue_name from pgflow.step_tasks where flow_slug = %s and step_slug = %s",
                [STEP_FLOW, step_slug],
            )
        }
        assert queues == {queue}, f"{step_slug}'s tasks went through its own queue"
        assert val(f"select count(*) as n from pgmq.q_{queue}") == 0


def test_a_missing_step_worker_leaves_its_tasks_queued_durably(step_workers: StepSpawner) -> None:
    step_workers.step("classify")
    run_id = start_flow(STEP_FLOW, _run_input())

    def enrich_queued() -> list[dict[str, Any]]:
        found = q(
            "select status, queue_name, message_id from pgflow.step_tasks "
            "where run_id = %s and step_slug = 'enrich' order by task_index",
            [run_id],
        )
        return found if len(found) == 4 else []

    tasks = wait_until(enrich_queued, 30, "classify to finish and enrich's tasks to be queued")
    assert {(t["status"], t["queue_name"]) for t in tasks} == {("queued", QUEUES["enrich"])}
    live = {r["msg_id"] for r in q(f"select msg_id from pgmq.q_{QUEUES['enrich']}")}
    assert live == {t["message_id"] for t in tasks}, "enrich's messages wait on enrich's queue"
    assert val("select status from pgflow.runs where run_id = %s", [run_id]) == "started"
    assert (
        val(
            "select count(*) as n from pgflow.step_tasks where run_id = %s and step_slug = 'deliver'",
            [run_id],
        )
        == 0
    )

    step_workers.step("enrich")
    step_workers.step("deliver")
    run = wait_for_run(run_id, timeout=30)
    assert run.status == "completed", run
    assert run.output == EXPECTED_OUTPUT


def test_startup_log_and_support_rows_name_exactly_the_workers_step(step_workers: StepSpawner) -> None:
    workers = {step_slug: step_workers.step(step_slug) for step_slug in ("classify", "deliver")}
    for step_slug, worker in workers.items():
        log = worker.log()
        started = next(line for line in log.splitlines() if " started queue=" in line)
        expected = (
            f"worker {worker.worker_id} started queue={QUEUES[step_slug]} flow={STEP_FLOW} step={step_slug} "
        )
        assert expected in started, started
        others = [name for name in STEPS if name != step_slug]
        for other in others:
            assert QUEUES[other] not in log, f"the {step_slug} worker's log names {QUEUES[other]}"

        row = q(
            "select queue_name, function_name from pgflow.workers where worker_id = %s", [worker.worker_id]
        )
        assert row == [{"queue_name": QUEUES[step_slug], "function_name": f"{STEP_FLOW}.{step_slug}"}]
        support = q(
            "select flow_slug, step_slug from pgflow.worker_support where worker_id = %s", [worker.worker_id]
        )
        assert support == [{"flow_slug": STEP_FLOW, "step_slug": step_slug}]

    assert example_steps.route() == {step: QUEUES[step] for step in STEPS}
    route = q(
        "select step_slug, queue_name from pgflow.steps where flow_slug = %s order by step_index", [STEP_FLOW]
    )
    assert [(r["step_slug"], r["queue_name"]) for r in route] == list(QUEUES.items())
