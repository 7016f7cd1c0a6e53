"""Retrying a cancelled run while a real worker still runs its handlers (issue 21, item 5).

The worker runs both tasks of a map run (atomic handlers that sleep on their first attempt); the run
is cancelled under them and retried at once, while the handlers still sleep. Their completions are
stale (the retried tasks' next attempt is 2) and rolled back; the worker runs attempt 2 of each task,
and the run completes with each effect committed exactly once, by attempt 2."""

from __future__ import annotations

import pytest

from tests import ledger
from tests.acceptance.faults import FAST, Rig, alive
from tests.workers import wait_until

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


def test_a_cancelled_run_retried_under_a_running_worker_completes_once(rig: Rig) -> None:
    flow, db = ledger.LATE_FLOW, rig.db
    worker = rig.spawn(flow, "--concurrency", "2", *FAST)
    (run_id,) = db.start(flow, [[{"sleep": 2}, {"sleep": 2}]])
    wait_until(lambda: db.executions([run_id]) == 2, 20, "both handlers to start")
    assert db.val("select pgflow.cancel_run(%s)", [run_id]) == "cancelled"

    assert db.val("select pgflow.retry_run(%s)", [run_id]) == 2

    db.wait_finished([flow], 30)
    assert db.run_statuses([run_id]) == {run_id: "completed"}
    assert db.executions([run_id]) == 4, "the two cancelled executions and the two retried ones"
    assert db.effects([run_id]) == [(2, worker.pid)] * 2, "one committed effect per task"
    assert db.val("select output from pgflow.runs where run_id = %s", [run_id]) == {
        "late_effect": [{"attempt": 2}, {"attempt": 2}]
    }
    alive(worker)
    db.check(flow)
