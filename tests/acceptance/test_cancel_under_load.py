"""Cancels racing real workers (issue 15, item 5). Worker subprocesses claim and complete the tasks of
many runs while threads cancel those runs through ``pgflow_django.cancel_run``, each on its own
connection. Before every writer used one lock order, a claim holding a batch's messages waited for a
task the cancel held while the cancel waited for the message: PostgreSQL broke the cycle with a
deadlock error, the cancel failed and its run completed anyway.

Checked: no cancel raises, no worker logs a deadlock; a cancel that reports ``cancelled`` leaves its
run failed with the cancellation as its error and nothing of it queued or started, and it never
completes afterwards; one that reports "already finished" leaves the run as it finished; the ledgers
show no attempt ran twice and an effect for exactly the completed tasks.

Counts: RUNS runs of ELEMENTS map tasks, WORKERS workers (CI 24 x 30, 2; ``make chaos`` 60 x 40, 3).
"""

from __future__ import annotations

import random
import threading
import time
from typing import Any

import pytest
from django.db import connection

from pgflow_django import CancelResult, cancel_run
from tests import ledger
from tests.acceptance.faults import FAST, Rig, alive, scale

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

RUNS, ELEMENTS, WORKERS, CANCELLERS = scale(24, 60), scale(30, 40), scale(2, 3), 4
REASON = "load test"


def test_cancels_racing_workers_never_deadlock_and_a_cancelled_run_stays_cancelled(rig: Rig) -> None:
    flow, db = ledger.LEDGER_FLOW, rig.db
    workers = rig.spawn.many(WORKERS, flow, "--concurrency", "4", "--batch-size", "8", *FAST)
    runs = db.start(flow, [[{}] * ELEMENTS for _ in range(RUNS)])
    pending = list(reversed(runs))
    """Taken in start order, the order workers reach them in: each cancel lands while claims of its
    run are in flight."""
    results: dict[str, CancelResult] = {}
    errors: list[tuple[str, BaseException]] = []
    lock = threading.Lock()

    def canceller() -> None:
        try:
            while True:
                with lock:
                    if not pending:
                        return
                    run_id = pending.pop()
                _wait_until_claimed(run_id)
                time.sleep(random.uniform(0, 0.02))
                try:
                    result = cancel_run(run_id, reason=REASON)
                except Exception as exc:
                    with lock:
                        errors.append((run_id, exc))
                else:
                    with lock:
                        results[run_id] = result
        finally:
            connection.close()

    threads = [threading.Thread(target=canceller) for _ in range(CANCELLERS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert not any(thread.is_alive() for thread in threads), "a cancel never returned"

    first_lines = [(run, str(exc).splitlines()[0]) for run, exc in errors[:3]]
    assert errors == [], f"{len(errors)} of {RUNS} cancels failed: {first_lines}"
    db.wait_finished([flow], 60)
    time.sleep(1)  # a completion in flight when its run was cancelled has landed by now

    cancelled = [run for run, result in results.items() if result.cancelled]
    finished = [run for run, result in results.items() if not result.cancelled]
    assert len(results) == RUNS
    assert cancelled, "at least one run was cancelled while workers ran it"
    statuses = db.run_statuses(runs)
    assert {statuses[run] for run in cancelled} == {"failed"}, "a cancelled run never completes"
    errors_of = dict(
        db.rows("select run_id::text, error_message from pgflow.runs where run_id = any(%s::uuid[])", [runs])
    )
    assert {errors_of[run] for run in cancelled} == {f"cancelled: {REASON}"}
    for run in finished:
        assert statuses[run] == results[run].status, "an already finished run is left as it finished"
    assert db.task_count(cancelled, "queued") == db.task_count(cancelled, "started") == 0

    logs = "".join(worker.log() for worker in workers)
    assert "deadlock" not in logs.lower(), _lines_with(logs, "deadlock")
    alive(*workers)
    db.check(flow)
    _report(db, runs, cancelled)


def _wait_until_claimed(run_id: str, timeout: float = 20) -> None:
    """Until a worker has claimed a task of the run (on this thread's Django connection)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with connection.cursor() as cursor:
            cursor.execute(
                "select exists (select 1 from pgflow.step_tasks where run_id = %s and attempts_count > 0)",
                [run_id],
            )
            if cursor.fetchone()[0]:
                return
        time.sleep(0.005)


def _lines_with(text: str, word: str) -> str:
    return "\n".join(line for line in text.splitlines() if word in line.lower())[:2000]


def _report(db: Any, runs: list[str], cancelled: list[str]) -> None:
    """The figures of the scenario, printed for the log of a ``-s`` run."""
    completed = db.task_count(cancelled, "completed")
    print(
        f"cancel under load: {len(runs)} runs x {ELEMENTS} tasks, {len(cancelled)} cancelled "
        f"({completed} of their tasks had completed first), {db.executions(runs)} handler calls"
    )
