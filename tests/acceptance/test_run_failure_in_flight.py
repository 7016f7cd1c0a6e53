"""A run failing while its siblings are in flight: one map element fails permanently (max_attempts 1)
while others sleep in their handlers and more wait queued. The run fails; nothing of it is left queued
or started, no live message of it remains; the sleeping siblings' late completions are stale and roll
back their effects.

Counts (issue 8, item 2): ELEMENTS map elements, SLOTS of them in flight (CI 8 / 4; ``make chaos`` 40 / 8).
"""

from __future__ import annotations

import pytest

from tests import ledger
from tests.acceptance.faults import FAST, Rig, alive, scale, wait_log
from tests.workers import wait_until

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

ELEMENTS, SLOTS = scale(8, 40), scale(4, 8)


def test_a_failing_element_fails_the_run_and_its_siblings_complete_stale(rig: Rig) -> None:
    flow, db = ledger.FAIL_FLOW, rig.db
    worker = rig.spawn(flow, "--concurrency", str(SLOTS), "--batch-size", str(SLOTS), *FAST)
    elements = [{"sleep": 3}] * (SLOTS - 1) + [{"fail": True}] + [{"sleep": 3}] * (ELEMENTS - SLOTS)
    (run,) = db.start(flow, [elements])
    wait_until(lambda: db.run_statuses([run])[run] == "failed", 20, "the run to fail")

    assert db.task_count([run], "queued") == db.task_count([run], "started") == 0
    live = db.val(
        f"select count(*) from pgmq.q_{flow} as m join pgflow.step_tasks as t "
        "on t.queue_name = %s and t.message_id = m.msg_id where t.run_id = %s",
        [flow, run],
    )
    assert live == 0, "no live message of the failed run"

    wait_log(worker, "late completion ignored", SLOTS - 1, timeout=20)
    # the failure is recorded by the completer, so a slot it freed may claim a sibling first
    ran = db.executions([run])
    assert SLOTS <= ran < ELEMENTS, "queued siblings were not run after the failure"
    wait_log(worker, "late completion ignored", ran - 1, timeout=20)
    assert db.effects([run]) == [], "the failed and the stale attempts rolled back their effects"
    assert (
        db.val("select count(*) from pgflow.step_tasks where run_id = %s and status = 'completed'", [run])
        == 0
    )
    alive(worker)
    db.check(flow)
