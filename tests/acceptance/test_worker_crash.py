"""kill -9 in the middle of an atomic handler: the task is recovered once its claim is older than the
effective timeout + 30 s (time simulated by back-dating ``started_at``) and its effect happens once.

Counts (issue 8, item 2): ``example_ledger`` with one task; the ledger scenario kills KILLS workers,
each in the middle of CONCURRENCY handlers (CI 1 x 4 tasks; ``make chaos`` 3 x 8).
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
from django.db import connection

from pgflow_django import start_flow, wait_for_run
from tests import ledger
from tests.acceptance.faults import FAST, RECOVERY_AGE, Rig, alive, scale
from tests.sql.support import q, q1
from tests.workers import WorkerProcess, wait_recovery_passes, wait_until

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

    rescuer = spawn_worker("example_ledger", "--stalled-check-seconds", "0.2", "--log-level", "debug")
    claim_age(run_id, TIMEOUT + 25)
    wait_recovery_passes(rescuer)
    assert task(run_id) == {"status": "started", "attempts_count": 1}, "not stalled yet: left alone"

    claim_age(run_id, TIMEOUT + 31)
    run = wait_for_run(run_id, timeout=15)
    assert run.status == "completed"
    assert run.output == {"record": [{"attempt": 2}]}
    entries = q("select attempt from example_ledgerentry where key = %s", [f"{run_id}:0"])
    assert entries == [{"attempt": 2}], "the killed attempt's write died with its transaction"
    assert q1("select requeued_count from pgflow.step_tasks where run_id = %s", [run_id]) == {
        "requeued_count": 1
    }
    with connection.cursor() as cursor:
        ledger.assert_invariants(cursor)


KILLS, CONCURRENCY = scale(1, 3), scale(4, 8)


def test_workers_killed_mid_handler_have_every_task_recovered_with_one_effect(rig: Rig) -> None:
    """Each killed worker held CONCURRENCY atomic handlers mid-sleep (effect written, not committed)."""
    flow, db = ledger.LEDGER_FLOW, rig.db
    runs: list[str] = []
    for _ in range(KILLS):
        doomed = rig.spawn(flow, "--concurrency", str(CONCURRENCY), *FAST)
        batch = db.start(flow, [[{"sleep": 120}] * CONCURRENCY])
        wait_until(lambda b=batch: db.executions(b) == CONCURRENCY, 20, "every handler to be mid-sleep")
        doomed.kill()
        runs += batch
    tasks = KILLS * CONCURRENCY
    assert db.task_count(runs, "started") == tasks and db.effects(runs) == []

    rescuer = rig.spawn(flow, "--concurrency", str(CONCURRENCY), *FAST, "--log-level", "debug")
    db.backdate(runs, RECOVERY_AGE - 6)
    wait_recovery_passes(rescuer)
    assert db.task_count(runs, "started") == tasks, "not past the recovery deadline: left alone"

    db.backdate(runs, RECOVERY_AGE)
    db.wait_finished([flow], 30)
    assert set(db.run_statuses(runs).values()) == {"completed"}
    assert db.effects(runs) == [(2, rescuer.pid)] * tasks, "one effect each, by the recovering attempt"
    assert db.executions(runs, attempt=1) == db.executions(runs, attempt=2) == tasks
    alive(rescuer)
    db.check(flow)
