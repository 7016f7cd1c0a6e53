"""A worker whose claim was taken over (recovered as stalled, run again) finishes late: nothing changes.

The claim is made to look stalled by back-dating ``started_at`` past timeout + 30 s; the worker's own
periodic recovery requeues it and runs attempt 2 on its second thread while attempt 1 still sleeps.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from pgflow_django import start_flow, wait_for_run
from tests.sql.support import q, q1
from tests.workers import WorkerProcess, wait_until

pytestmark = pytest.mark.django_db(transaction=True)

WORKER_ARGS = ("--concurrency", "2", "--stalled-check-seconds", "0.3")


def task(run_id: object) -> dict[str, object]:
    return q1("select status, attempts_count, output from pgflow.step_tasks where run_id = %s", [run_id])


def take_over_claim(run_id: object) -> None:
    wait_until(lambda: task(run_id)["status"] == "started", 15, "attempt 1 to start")
    q(
        "update pgflow.step_tasks set started_at = now() - interval '1 hour' where run_id = %s "
        "and status = 'started'",
        [run_id],
    )


def test_late_atomic_completion_rolls_back_its_writes(spawn_worker: Callable[..., WorkerProcess]) -> None:
    worker = spawn_worker("example_ledger", *WORKER_ARGS)
    run_id = start_flow("example_ledger", [{"sleep": 3, "on_attempt": 1}])
    take_over_claim(run_id)
    run = wait_for_run(run_id, timeout=15)
    assert run.output == {"record": [{"attempt": 2}]}
    wait_until(lambda: "late completion ignored" in worker.log(), 15, "attempt 1 to finish late")
    assert task(run_id) == {"status": "completed", "attempts_count": 2, "output": {"attempt": 2}}
    ledger = q("select attempt from example_ledgerentry where key = %s", [f"{run_id}:0"])
    assert ledger == [{"attempt": 2}], "attempt 1's write must be rolled back with its stale completion"


def test_late_plain_completion_changes_nothing(spawn_worker: Callable[..., WorkerProcess]) -> None:
    worker = spawn_worker("example_sleepy", *WORKER_ARGS)
    run_id = start_flow("example_sleepy", [{"sleep": 3, "on_attempt": 1}])
    take_over_claim(run_id)
    run = wait_for_run(run_id, timeout=15)
    assert run.output == {"nap": [{"attempt": 2}]}
    wait_until(lambda: "late completion ignored" in worker.log(), 15, "attempt 1 to finish late")
    assert task(run_id) == {"status": "completed", "attempts_count": 2, "output": {"attempt": 2}}
    assert q1("select status, output from pgflow.runs where run_id = %s", [run_id]) == {
        "status": "completed",
        "output": {"nap": [{"attempt": 2}]},
    }
