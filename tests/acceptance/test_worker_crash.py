"""kill -9 in the middle of an atomic handler: the task is recovered once its claim is older than the
effective timeout + 30 s (time simulated by back-dating ``started_at``) and its effect happens once."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from pgflow_django import start_flow, wait_for_run
from tests.sql.support import q, q1
from tests.workers import WorkerProcess, wait_until

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

TIMEOUT = 10
"""``example_ledger``'s timeout: recovery takes claims older than TIMEOUT + 30 s."""


def task(run_id: object) -> dict[str, object]:
    return q1("select status, attempts_count from pgflow.step_tasks where run_id = %s", [run_id])


def claim_age(run_id: object, seconds: int) -> None:
    q(
        "update pgflow.step_tasks set started_at = now() - make_interval(secs => %s) where run_id = %s",
        [seconds, run_id],
    )


def test_killed_worker_task_is_recovered_after_timeout_plus_30s_and_runs_once(
    spawn_worker: Callable[..., WorkerProcess],
) -> None:
    doomed = spawn_worker("example_ledger", "--concurrency", "1")
    run_id = start_flow("example_ledger", [{"sleep": 120, "on_attempt": 1}])
    wait_until(lambda: task(run_id) == {"status": "started", "attempts_count": 1}, 15, "attempt 1")
    doomed.kill()

    spawn_worker("example_ledger", "--stalled-check-seconds", "0.2")
    claim_age(run_id, TIMEOUT + 25)
    time.sleep(1.5)  # several recovery passes of the new worker go by
    assert task(run_id) == {"status": "started", "attempts_count": 1}, "not stalled yet: left alone"

    claim_age(run_id, TIMEOUT + 31)
    run = wait_for_run(run_id, timeout=15)
    assert run.status == "completed"
    assert run.output == {"record": [{"attempt": 2}]}
    ledger = q("select attempt from example_ledgerentry where key = %s", [f"{run_id}:0"])
    assert ledger == [{"attempt": 2}], "the killed attempt's write died with its transaction"
    assert q1("select requeued_count from pgflow.step_tasks where run_id = %s", [run_id]) == {
        "requeued_count": 1
    }
