"""Each example flow runs to completion. What only needs the flow's semantics runs in-process, in the
test's transaction (``pgflow_django.testing.run_flow``: the worker's claim, handlers and completions;
``tests/integration/testing/test_same_as_worker.py`` proves the rows equal a worker subprocess's); what
needs the worker process itself (timed reads, its log, concurrent handlers) runs on a real one."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from pgflow_django import start_flow, wait_for_run
from pgflow_django.testing import run_flow
from tests.sql.support import q, val
from tests.workers import WorkerProcess

worker_test = pytest.mark.django_db(transaction=True)


@pytest.mark.django_db
def test_chain_with_async_step_and_flow_input() -> None:
    run = run_flow("example_chain", {"n": 5})
    assert run.status == "completed"
    assert run.output == {"third": {"n": 9, "flow_n": 5}}
    assert run.step("second").output == {"n": 12, "flow_n": 5}


@pytest.mark.django_db
def test_map_flow_including_an_empty_map() -> None:
    ten, empty = run_flow("example_map", {"count": 10}), run_flow("example_map", {"count": 0})
    assert ten.output == {"total": sum(i * i for i in range(10))}
    assert empty.output == {"total": 0}


@pytest.mark.django_db
def test_condition_takes_one_branch() -> None:
    big_run, small_run = run_flow("example_condition", {"n": 50}), run_flow("example_condition", {"n": 1})
    assert big_run.output == {"big": "big"}
    assert small_run.output == {"small": "small"}
    assert small_run.step("big").status == "skipped"
    assert big_run.step("small").status == "skipped"


@worker_test
def test_failure_then_success_and_handler_chosen_retry(spawn_worker: Callable[..., WorkerProcess]) -> None:
    """The retries' messages are delayed (2 s, then 1 s): a timed read picks them up, not the 60 s poll."""
    worker = spawn_worker("example_flaky", "--poll-interval", "60", "--max-poll-seconds", "60")
    run_id = start_flow("example_flaky", {})
    run = wait_for_run(run_id, timeout=20)
    assert run.status == "completed", run
    assert run.output == {"patient": {"attempt": 2, "calls": 2}}
    calls = q(
        "select attempt from example_ledgerentry where flow = 'example_flaky' and key = %s order by id",
        [str(run_id)],
    )
    assert [row["attempt"] for row in calls] == [1, 2]
    errors = q(
        "select step_slug, error_message from pgflow.step_tasks where run_id = %s order by step_slug",
        [run_id],
    )
    assert errors == [
        {"step_slug": "patient", "error_message": "retry requested in 1s"},
        {"step_slug": "wobble", "error_message": "RuntimeError: the first call fails on purpose"},
    ]
    assert "the first call fails on purpose" in worker.log()


@worker_test
def test_atomic_handler_writes_once_per_task(spawn_worker: Callable[..., WorkerProcess]) -> None:
    spawn_worker("example_ledger", "--concurrency", "4")
    run_id = start_flow("example_ledger", list(range(25)))
    run = wait_for_run(run_id, timeout=30)
    assert run.status == "completed"
    assert run.output == {"record": [{"attempt": 1}] * 25}
    assert val("select count(distinct key) from example_ledgerentry where flow = 'example_ledger'") == 25
    assert val("select count(*) from example_ledgerentry where flow = 'example_ledger'") == 25


@worker_test
def test_logs_name_message_ids_but_never_inputs(spawn_worker: Callable[..., WorkerProcess]) -> None:
    worker = spawn_worker("example_chain")
    secret = 918273645546372819
    run_id = start_flow("example_chain", {"n": secret})
    assert wait_for_run(run_id, timeout=30).status == "completed"
    worker.terminate()
    worker.wait(15)
    log = worker.log()
    assert "queue=example_chain" in log
    assert str(secret) not in log
    assert str(secret + 1) not in log


@pytest.mark.django_db
def test_atomic_handler_records_when_its_transitions_happened() -> None:
    """An atomic handler completes inside the transaction it opened before running: the completion
    time is when the completion happened, not when that transaction began."""
    run_id = run_flow("example_ledger", [{"sleep": 1.5}]).run_id
    row = q(
        """
        select extract(epoch from t.completed_at - t.started_at) as task_seconds,
               extract(epoch from s.completed_at - t.completed_at) as step_after_task,
               extract(epoch from r.completed_at - t.completed_at) as run_after_task,
               extract(epoch from r.completed_at - r.started_at) as run_seconds
          from pgflow.step_tasks as t
          join pgflow.step_states as s using (run_id, step_slug)
          join pgflow.runs as r using (run_id)
         where t.run_id = %s
        """,
        [run_id],
    )[0]
    assert row["task_seconds"] >= 1.5, row
    assert row["step_after_task"] >= 0, row
    assert row["run_after_task"] >= 0, row
    assert row["run_seconds"] >= 1.5, row
