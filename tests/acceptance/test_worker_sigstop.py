"""SIGSTOP a worker in the middle of its handlers, past their recovery deadline (back-dated), let another
worker recover and complete the tasks, then SIGCONT: each late completion is stale and rolls back, so
the effect ledger has one row per task (the recovering attempt's) and the execution ledger two.

Counts (issue 8, item 2): TASKS handlers frozen at once (CI 2; ``make chaos`` 8).
"""

from __future__ import annotations

import signal

import pytest

from tests import ledger
from tests.acceptance.faults import FAST, RECOVERY_AGE, Rig, alive, scale, wait_log
from tests.workers import wait_until

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

TASKS = scale(2, 8)


def test_a_frozen_workers_late_completions_are_stale_no_ops(rig: Rig) -> None:
    flow, db = ledger.LATE_FLOW, rig.db
    frozen = rig.spawn(flow, "--concurrency", str(TASKS), *FAST)
    runs = db.start(flow, [[{"sleep": 3}] * TASKS])
    wait_until(lambda: db.executions(runs) == TASKS, 20, "every handler of the first worker to run")
    frozen.signal(signal.SIGSTOP)
    try:
        rescuer = rig.spawn(flow, "--concurrency", str(TASKS), *FAST)
        assert db.backdate(runs, RECOVERY_AGE) == TASKS
        db.wait_finished([flow], 30)
        assert set(db.run_statuses(runs).values()) == {"completed"}
        assert db.effects(runs) == [(2, rescuer.pid)] * TASKS
    finally:
        frozen.signal(signal.SIGCONT)

    wait_log(frozen, "late completion ignored", TASKS, timeout=30)
    assert db.effects(runs) == [(2, rescuer.pid)] * TASKS, "the late attempts' writes rolled back"
    assert db.executions(runs, attempt=1) == db.executions(runs, attempt=2) == TASKS
    assert db.val(
        "select array_agg(distinct attempts_count) from pgflow.step_tasks where run_id = any(%s::uuid[])",
        [runs],
    ) == [2]
    alive(frozen, rescuer)
    db.check(flow)
