"""Step workers and shared-queue workers under the same faults as plain workers: kill -9 of a step
worker mid-handler (a new worker of that step recovers the tasks, one effect each), kill -9 of a
shared-queue worker mid-handler (another worker of the same shared queue recovers them), and a
SIGTERM drain of a shared-queue worker serving two routed flows (in-flight tasks finish, the rest
stay queued for the next worker).

Counts (issue 8, item 2): TASKS handlers killed per scenario (CI 2; ``make chaos`` 8); the drain
leaves DRAIN_RUNS runs of 3 tasks per flow to the next worker (CI 2; chaos 6).
"""

from __future__ import annotations

import signal

import pytest

from tests import ledger
from tests.acceptance.faults import FAST, RECOVERY_AGE, Rig, alive, scale
from tests.workers import WorkerProcess, wait_recovery_passes, wait_until

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

TASKS, DRAIN_RUNS = scale(2, 8), scale(2, 6)
ROUTED, ROUTED_B = ledger.ROUTED_FLOWS
SHARED = ("--queue", ledger.SHARED_QUEUE, "--flow", ROUTED_B)
"""A shared-queue worker of both routed flows (the spawner adds ``--flow rel_routed``)."""


def _work_effects(rig: Rig, runs: list[str]) -> list[tuple[int, int]]:
    return [
        (int(attempt), int(pid))
        for attempt, pid in rig.db.rows(
            "select attempt, worker_pid from public.ledger_effect where run_id = any(%s::uuid[]) "
            "and step_slug = 'work' order by task_index",
            [runs],
        )
    ]


def _recover(rig: Rig, flow: str, runs: list[str], rescuer: WorkerProcess) -> None:
    """Back-date the dead worker's claims short of their deadline (the rescuer, at debug level, leaves
    them alone for two passes), then past it; the rescuer recovers and finishes them."""
    db = rig.db
    assert db.backdate(runs, RECOVERY_AGE - 6) == TASKS
    wait_recovery_passes(rescuer)
    assert db.task_count(runs, "started") == TASKS, "not past the recovery deadline: left alone"
    db.backdate(runs, RECOVERY_AGE)
    db.wait_finished([flow], 30)
    assert set(db.run_statuses(runs).values()) == {"completed"}
    assert _work_effects(rig, runs) == [(2, rescuer.pid)] * TASKS
    assert db.executions(runs, attempt=1) == TASKS + 1, "each killed attempt ran once, then the total"
    assert (
        db.val(
            "select count(*) from pgflow.step_tasks where run_id = any(%s::uuid[]) and step_slug = 'work' "
            "and requeued_count = 1 and last_worker_id = %s::uuid",
            [runs, rescuer.worker_id],
        )
        == TASKS
    )


def test_a_killed_step_worker_s_tasks_are_recovered_by_another_worker_of_its_step(rig: Rig) -> None:
    flow, db = ledger.STEP_FLOW, rig.db
    doomed = rig.spawn(flow, "--step", "work", "--concurrency", str(TASKS), *FAST)
    totals = rig.spawn(flow, "--step", "total", *FAST)
    runs = db.start(flow, [[{"sleep": 120}] * TASKS])
    wait_until(lambda: db.executions(runs) == TASKS, 20, "every work handler to be mid-sleep")
    doomed.kill()

    rescuer = rig.spawn(flow, "--step", "work", "--concurrency", str(TASKS), *FAST, "--log-level", "debug")
    _recover(rig, flow, runs, rescuer)
    alive(totals, rescuer)
    db.check(flow)


def test_a_killed_shared_queue_worker_s_tasks_are_recovered_by_another_on_that_queue(rig: Rig) -> None:
    db = rig.db
    doomed = rig.spawn(ROUTED, *SHARED, "--concurrency", str(TASKS), *FAST)
    runs = db.start(ROUTED, [[{"sleep": 120}] * TASKS])
    wait_until(lambda: db.executions(runs) == TASKS, 20, "every work handler to be mid-sleep")
    doomed.kill()

    rescuer = rig.spawn(ROUTED, *SHARED, "--concurrency", str(TASKS), *FAST, "--log-level", "debug")
    _recover(rig, ROUTED, runs, rescuer)
    alive(rescuer)
    db.check(ROUTED, ROUTED_B)


def test_sigterm_drains_a_shared_queue_worker_and_the_next_one_takes_the_rest(rig: Rig) -> None:
    db = rig.db
    worker = rig.spawn(ROUTED, *SHARED, "--concurrency", "2", "--shutdown-timeout", "20", *FAST)
    first = db.start(ROUTED, [[{"sleep": 1.5}] * 2])
    wait_until(lambda: db.task_count(first, "started") == 2, 15, "both slots to be busy")
    rest = db.start(ROUTED, [[1, 2, 3]] * DRAIN_RUNS) + db.start(ROUTED_B, [[1, 2, 3]] * DRAIN_RUNS)
    worker.signal(signal.SIGTERM)
    assert worker.wait(20) == 0, worker.log()
    assert "SIGTERM" in worker.log()
    assert db.effects(first) == [(1, worker.pid)] * 2, "in-flight tasks finished and were recorded"
    assert db.task_count(rest, "queued") == 3 * len(rest) and db.executions(rest) == 0
    assert db.val(
        "select stopped_at is not null from pgflow.workers where worker_id = %s::uuid", [worker.worker_id]
    )

    successor = rig.spawn(ROUTED, *SHARED, "--concurrency", "4", *FAST)
    db.wait_finished([ROUTED, ROUTED_B], 30)
    assert set(db.run_statuses(first + rest).values()) == {"completed"}
    assert len(db.effects(rest)) == 4 * len(rest), "three work tasks and the total of each run"
    alive(successor)
    db.check(ROUTED, ROUTED_B)
