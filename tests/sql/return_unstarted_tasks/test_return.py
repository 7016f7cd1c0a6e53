"""pgflow.return_unstarted_tasks: a worker gives back claims no handler thread took in time. The attempt
is returned (no handler ran under it), the message is visible at once, even on the last attempt; a
claim that is no longer current changes nothing. Interleaved with a cancel on two connections, the
return waits for the run and then finds nothing to give back."""

from __future__ import annotations

import json
import uuid
from typing import Any

from tests.sql.interleavings.support import (
    Background,
    backend_pid,
    check_invariants,
    message_ids,
    sessions,
    start_run,
    tasks,
    wait_for_lock_wait,
)
from tests.sql.interleavings.support import (
    claim as claim_on,
)
from tests.sql.support import claim, claim_items, make_flow, q, start, step, task, val


def _return(records: list[dict[str, Any]]) -> list[str]:
    return [
        o["outcome"]
        for o in q("select * from pgflow.return_unstarted_tasks(%s::jsonb)", [claim_items(records)])
    ]


def test_a_returned_claim_is_queued_visible_now_and_its_attempt_is_not_spent() -> None:
    make_flow("f", step("a", timeout=60))
    run_id = start("f")
    records = claim("f")
    assert _return(records) == ["returned"]
    row = task(run_id, "a")
    assert (row["status"], row["attempts_count"], row["started_at"]) == ("queued", 0, None)
    assert val(
        "select vt <= clock_timestamp() as visible from pgmq.q_f where msg_id = %s", [row["message_id"]]
    )
    again = claim("f")
    assert [r["attempt"] for r in again] == [1]
    assert val("select pgflow.complete_task(%s, 'a', 0, 1, '7'::jsonb)", [run_id]) == "completed"


def test_a_claim_on_its_last_attempt_is_returned_too() -> None:
    make_flow("f", step("a", max_attempts=1))
    run_id = start("f")
    assert _return(claim("f")) == ["returned"]
    assert task(run_id, "a")["status"] == "queued"
    assert [r["attempt"] for r in claim("f")] == [1], "the one attempt is still there"


def test_a_claim_that_is_no_longer_current_changes_nothing() -> None:
    make_flow("f", step("a"), step("b"))
    run_id = start("f")
    first = claim("f")
    by_step = {r["step_slug"]: r for r in first}
    q("select pgflow.complete_task(%s, 'a', 0, %s, '1'::jsonb)", [run_id, by_step["a"]["attempt"]])
    q("select * from pgflow.release_tasks(%s::jsonb)", [claim_items([by_step["b"]])])
    taken_over = claim("f")
    assert _return(first) == ["stale", "stale"], "one completed, one claimed again since"
    assert task(run_id, "a")["status"] == "completed"
    row = task(run_id, "b")
    assert (row["status"], row["attempts_count"]) == ("started", taken_over[0]["attempt"])


FLOW = "ilv_return_cancel"


def test_a_return_waiting_for_a_cancel_of_its_run_gives_nothing_back() -> None:
    with sessions(FLOW) as (first, second, observer):
        observer.execute("select pgflow.create_flow(%s, timeout => 10)", [FLOW])
        observer.execute("select pgflow.add_step(%s, 'm', step_type => 'map')", [FLOW])
        run_id = start_run(observer, FLOW, "[1, 2]")
        ids = message_ids(observer, run_id)
        worker = uuid.uuid4()
        with first.transaction():
            read = [int(r[0]) for r in first.execute("select msg_id from pgmq.read(%s, 12, 2)", [FLOW])]
            assert claim_on(first, FLOW, sorted(read), worker) == [("claimed", msg, 1) for msg in ids]
        items = json.dumps(
            [{"run_id": str(run_id), "step_slug": "m", "task_index": i, "attempt": 1} for i in (0, 1)]
        )
        with second.transaction():
            assert second.execute("select pgflow.cancel_run(%s)", [run_id]).fetchone() == ("cancelled",)
            returning = Background(
                lambda: first.execute(
                    "select outcome from pgflow.return_unstarted_tasks(%s::jsonb)", [items]
                ).fetchall()
            )
            wait_for_lock_wait(observer, backend_pid(first), returning)
        assert returning.result() == [("stale",), ("stale",)]
        assert [row[2:4] for row in tasks(observer, run_id)] == [("cancelled", 1)] * 2
        check_invariants(observer, require_terminal=True)
