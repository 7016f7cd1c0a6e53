"""Visibility expiring while a handler still runs (``pgmq.set_vt`` back to now while it is held): another
worker reading the message gets outcome 'started', consumes no attempt and defers the message to the
task's recovery deadline, so the handler runs once. The handlers wait for a file the test removes once
the other worker deferred every message: a fixed sleep ended before a second worker started on a busy
machine.

Counts (issue 8, item 2): TASKS sleeping handlers whose messages are exposed (CI 2; ``make chaos`` 8).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests import ledger
from tests.acceptance.faults import FAST, Rig, alive, scale
from tests.workers import wait_until

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

TASKS = scale(2, 8)


def test_an_exposed_message_of_a_running_task_is_not_run_again(rig: Rig, tmp_path: Path) -> None:
    gate = tmp_path / "hold"
    gate.touch()
    try:
        check_exposed_messages(rig, str(gate))
    finally:
        gate.unlink(missing_ok=True)


def check_exposed_messages(rig: Rig, gate: str) -> None:
    flow, db = ledger.LEDGER_FLOW, rig.db
    busy = rig.spawn(flow, "--concurrency", str(TASKS), *FAST)  # every slot taken: it reads nothing
    runs = db.start(flow, [[{"hold": gate}] * TASKS])
    wait_until(lambda: db.executions(runs) == TASKS, 60, "every handler to run")
    reader = rig.spawn(flow, "--concurrency", "2", *FAST)

    messages = [
        int(row[0])
        for row in db.rows("select message_id from pgflow.step_tasks where run_id = any(%s::uuid[])", [runs])
    ]
    exposed = db.rows(f"select msg_id from pgmq.set_vt('{flow}', %s::bigint[], 0)", [messages])
    assert len(exposed) == TASKS

    def read_and_deferred() -> bool:
        rows = db.rows(
            f"select read_ct, vt > clock_timestamp() + interval '20 seconds' from pgmq.q_{flow} "
            "where msg_id = any(%s)",
            [messages],
        )
        return len(rows) == TASKS and all(count >= 2 and deferred for count, deferred in rows)

    wait_until(read_and_deferred, 30, "the other worker to read each exposed message and defer it")
    assert db.val(
        "select array_agg(distinct attempts_count) from pgflow.step_tasks where run_id = any(%s::uuid[])",
        [runs],
    ) == [1], "reading a started task's message consumes no attempt"

    Path(gate).unlink()
    db.wait_finished([flow], 60)
    assert set(db.run_statuses(runs).values()) == {"completed"}
    assert db.executions(runs) == TASKS, "no second execution"
    assert db.effects(runs) == [(1, busy.pid)] * TASKS
    alive(busy, reader)
    db.check(flow)
