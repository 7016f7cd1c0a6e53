"""Retrying a run while its workers report (issue 21, item 5). ``pgflow.retry_run`` locks the run, then
its tasks, then sends the new messages, the order of every writer.

- A worker's failure that fails the run is still open: the retry waits for the run's row, then sees
  the run failed and the attempt reported, and queues the task again.
- The retry is still open: a worker's late completion of the old, cancelled claim waits for the run,
  then finds the task queued again and is refused as stale (attempt numbers continue, so it stays
  stale); the retried attempt completes the run, once.
"""

from __future__ import annotations

import uuid

from tests.sql.interleavings.support import (
    Background,
    Conn,
    backend_pid,
    check_invariants,
    claim,
    message_ids,
    sessions,
    start_run,
    tasks,
    wait_for_lock_wait,
)

FLOW = "ilv_retry_worker"


def _flow_with_claimed_run(observer: Conn, worker: Conn) -> tuple[uuid.UUID, int]:
    observer.execute("select pgflow.create_flow(%s, max_attempts => 1, timeout => 5)", [FLOW])
    observer.execute("select pgflow.add_step(%s, 'a')", [FLOW])
    run_id = start_run(observer, FLOW)
    (msg,) = message_ids(observer, run_id)
    ((outcome, _, attempt),) = claim(worker, FLOW, [msg], uuid.uuid4())
    assert outcome == "claimed"
    return run_id, int(attempt)


def _status(conn: Conn, run_id: uuid.UUID) -> str:
    row = conn.execute("select status from pgflow.runs where run_id = %s", [run_id]).fetchone()
    assert row is not None
    return str(row[0])


def test_a_retry_waits_for_the_failure_that_fails_the_run() -> None:
    with sessions(FLOW) as (first, second, observer):
        run_id, attempt = _flow_with_claimed_run(observer, first)
        with first.transaction():
            row = first.execute(
                "select pgflow.fail_task(%s, 'a', 0, %s, 'boom')", [run_id, attempt]
            ).fetchone()
            assert row == ("failed",)
            retry = Background(lambda: second.execute("select pgflow.retry_run(%s)", [run_id]).fetchone())
            assert wait_for_lock_wait(observer, backend_pid(second), retry) in ("transactionid", "tuple")
        assert retry.result() == (1,)
        assert _status(observer, run_id) == "started"
        assert [row[2:4] for row in tasks(observer, run_id)] == [("queued", 1)]
        check_invariants(observer)


def test_a_late_completion_of_the_cancelled_claim_is_refused_after_the_retry() -> None:
    with sessions(FLOW) as (first, second, observer):
        run_id, attempt = _flow_with_claimed_run(observer, second)
        assert observer.execute("select pgflow.cancel_run(%s)", [run_id]).fetchone() == ("cancelled",)
        with first.transaction():
            assert first.execute("select pgflow.retry_run(%s)", [run_id]).fetchone() == (1,)
            late = Background(
                lambda: second.execute(
                    "select pgflow.complete_task(%s, 'a', 0, %s, '\"late\"'::jsonb)", [run_id, attempt]
                ).fetchone()
            )
            assert wait_for_lock_wait(observer, backend_pid(second), late) in ("transactionid", "tuple")
        assert late.result() != ("completed",)
        assert [row[2:4] for row in tasks(observer, run_id)] == [("queued", 1)], (
            "the stale report changed nothing"
        )

        (msg,) = message_ids(observer, run_id)
        ((outcome, _, fresh),) = claim(first, FLOW, [msg], uuid.uuid4())
        assert (outcome, fresh) == ("claimed", 2)
        row = first.execute(
            "select pgflow.complete_task(%s, 'a', 0, %s, '\"fresh\"'::jsonb)", [run_id, fresh]
        ).fetchone()
        assert row == ("completed",)
        output = observer.execute("select output from pgflow.runs where run_id = %s", [run_id]).fetchone()
        assert output == ({"a": "fresh"},)
        check_invariants(observer, require_terminal=True)
