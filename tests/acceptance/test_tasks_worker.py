"""Django tasks run by real ``pgflow_worker --tasks`` processes: statuses, return values, errors per
failed attempt, retries through ``@task`` keywords, context, async tasks, the task_started and
task_finished signals (recorded in the worker process by ``tests/tasks_worker.py``), queue selection
and start-up refusals."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pgflow_django.tasks import PgflowTaskBackend
from testproject.example.models import LedgerEntry
from testproject.example.tasks import add, always_fails, async_double, send_welcome, which_attempt
from tests.sql.support import val
from tests.tasks_support import SETTINGS_MODULE, TaskWorkerSpawner, clean_task_flows, status
from tests.tasks_worker import GATE_LEDGER, SIGNAL_LEDGER, gated
from tests.workers import run_manage, wait_until

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


@pytest.fixture
def task_worker(database_url: str, tmp_path: Path) -> Iterator[TaskWorkerSpawner]:
    clean_task_flows()
    spawner = TaskWorkerSpawner(database_url, tmp_path)
    yield spawner
    spawner.stop_all()
    clean_task_flows()


def _finished(task: Any, result_id: str, timeout: float = 30) -> Any:
    def done() -> Any:
        result = task.get_result(result_id)
        return result if result.is_finished else None

    return wait_until(done, timeout, f"task result {result_id} to finish")


def _signals(result_id: str) -> list[tuple[str, str, int]]:
    """(signal, status, attempts) of every task_started/task_finished the worker sent for the result."""
    found = []
    for entry in LedgerEntry.objects.filter(flow=SIGNAL_LEDGER, key__contains=result_id).order_by("id"):
        name, _, result_status, sender, _task = entry.key.split(" ")
        assert sender == PgflowTaskBackend.__name__
        found.append((name, result_status, entry.attempt))
    return found


def test_ready_running_successful_with_signals(task_worker: TaskWorkerSpawner) -> None:
    result = gated.enqueue("k1")
    assert result.status == status.READY
    worker = task_worker()  # --tasks: QUEUES are default and mail, so it polls 'default'
    assert " started queue=default " in worker.log() or " started queue=default\n" in worker.log()

    running = wait_until(
        lambda: (r := gated.get_result(result.id)).status == status.RUNNING and r,
        30,
        "the gated task to run",
    )
    assert running.started_at is not None and running.last_attempted_at == running.started_at
    assert running.finished_at is None
    assert running.worker_ids == [worker.worker_id] and running.attempts == 1
    with pytest.raises(ValueError, match="not finished"):
        _ = running.return_value

    LedgerEntry.objects.create(flow=GATE_LEDGER, key="k1")
    done = _finished(gated, result.id)
    assert done.status == status.SUCCESSFUL
    assert done.return_value == "k1"
    assert done.errors == [] and done.worker_ids == [worker.worker_id] and done.attempts == 1
    assert done.enqueued_at <= done.started_at <= done.finished_at
    result.refresh()
    assert result.status == status.SUCCESSFUL and result.return_value == "k1"
    wait_until(lambda: len(_signals(result.id)) == 2, 10, "task_finished to be recorded")
    assert _signals(result.id) == [("task_started", "RUNNING", 1), ("task_finished", "SUCCESSFUL", 1)]

    total = add.enqueue(2, b=3)
    doubled = async_double.enqueue(21)
    context = which_attempt.enqueue("ctx")
    assert _finished(add, total.id).return_value == 5
    assert _finished(async_double, doubled.id).return_value == 42
    assert _finished(which_attempt, context.id).return_value == {
        "label": "ctx",
        "attempt": 1,
        "result_id": context.id,
    }


def test_a_failing_task_is_failed_with_one_error(task_worker: TaskWorkerSpawner) -> None:
    worker = task_worker("--queue", "default")
    result = always_fails.enqueue("no luck at all")
    failed = _finished(always_fails, result.id)
    assert failed.status == status.FAILED
    assert failed.finished_at is not None
    assert len(failed.errors) == 1
    error = failed.errors[0]
    assert error.exception_class_path == "builtins.ValueError"
    assert error.exception_class is ValueError
    assert "ValueError: no luck at all" in error.traceback
    assert "Traceback (most recent call last)" in error.traceback
    assert "in always_fails" in error.traceback
    assert failed.worker_ids == [worker.worker_id] and failed.attempts == 1
    with pytest.raises(ValueError, match="Task failed"):
        _ = failed.return_value
    wait_until(lambda: len(_signals(result.id)) == 2, 10, "task_finished to be recorded")
    assert _signals(result.id) == [("task_started", "RUNNING", 1), ("task_finished", "FAILED", 1)]


def test_retries_from_task_keywords_record_one_error_per_failed_attempt(
    task_worker: TaskWorkerSpawner,
) -> None:
    """send_welcome: queue 'mail', max_attempts=3 and base_delay=0 through ``@task`` keywords."""
    worker = task_worker("--queue", "mail")
    result = send_welcome.enqueue("ada@example.com", fail_times=2)
    done = _finished(send_welcome, result.id)
    assert done.status == status.SUCCESSFUL
    assert done.return_value == {"sent_to": "ada@example.com", "calls": 3}
    assert [error.exception_class_path for error in done.errors] == ["builtins.ConnectionError"] * 2
    assert "mail server unavailable (call 1)" in done.errors[0].traceback
    assert "mail server unavailable (call 2)" in done.errors[1].traceback
    assert done.attempts == 3
    assert done.worker_ids == [worker.worker_id] * 3
    wait_until(lambda: len(_signals(result.id)) == 6, 10, "every signal to be recorded")
    assert _signals(result.id) == [
        ("task_started", "RUNNING", 1),
        ("task_finished", "FAILED", 1),
        ("task_started", "RUNNING", 2),
        ("task_finished", "FAILED", 2),
        ("task_started", "RUNNING", 3),
        ("task_finished", "SUCCESSFUL", 3),
    ]


def test_a_queue_worker_runs_only_its_queue(task_worker: TaskWorkerSpawner) -> None:
    task_worker("--queue", "mail")
    stays = add.enqueue(1, 1)
    context = which_attempt.using(queue_name="mail").enqueue("on mail")
    sent = send_welcome.enqueue("bob@example.com")
    assert _finished(send_welcome, sent.id).return_value == {"sent_to": "bob@example.com", "calls": 1}
    assert _finished(which_attempt, context.id).return_value == {
        "label": "on mail",
        "attempt": 1,
        "result_id": context.id,
    }
    result = add.get_result(stays.id)
    assert result.status == status.READY and result.worker_ids == []
    assert val("select status from pgflow.step_tasks where run_id = %s", [uuid.UUID(stays.id)]) == "queued"


def test_worker_refusals_fit_one_line(database_url: str) -> None:
    env = {"DJANGO_SETTINGS_MODULE": SETTINGS_MODULE}
    nope = run_manage(database_url, "pgflow_worker", "--tasks", "--queue", "nope", env=env, timeout=60)
    assert nope.returncode != 0
    assert nope.stderr.strip().splitlines() == [
        "CommandError: queue 'nope' is not in the QUEUES of any TASKS backend (default, mail)"
    ]
    both = run_manage(database_url, "pgflow_worker", "--tasks", "--flow", "example_chain", env=env)
    assert both.returncode != 0
    assert both.stderr.strip().splitlines() == [
        "CommandError: pass --flow F (some flows) or --tasks (Django tasks), not both; with neither, "
        "the worker serves every flow and task"
    ]
