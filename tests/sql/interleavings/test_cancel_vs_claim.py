"""Cancelling a run while a worker claims its tasks (issue 15, item 5). Every writer locks run, then
task, then message; the claim holds its messages from the read on, so it must never wait for a task.

- The claim has read (and so locked) the messages; the cancel locks the run and the tasks, then waits
  for the messages. The claim then reaches the tasks: it skips them instead of waiting (waiting closed
  a cycle, and PostgreSQL killed one of the two with a deadlock error). The claim commits, the cancel
  finishes: every task cancelled without an attempt, every message archived.
- The claim has claimed and is still open; the cancel waits for the task rows, then cancels the
  started tasks. The claimer's late completion is stale: a cancelled run never completes afterwards.
"""

from __future__ import annotations

import uuid

from tests.sql.interleavings.support import (
    Background,
    Conn,
    backend_pid,
    check_invariants,
    claim,
    live,
    message_ids,
    sessions,
    start_run,
    tasks,
    wait_for_lock_wait,
)

FLOW = "ilv_cancel_claim"


def _flow_with_run(observer: Conn) -> tuple[uuid.UUID, list[int]]:
    observer.execute("select pgflow.create_flow(%s, timeout => 10)", [FLOW])
    observer.execute("select pgflow.add_step(%s, 'm', step_type => 'map')", [FLOW])
    run_id = start_run(observer, FLOW, "[1, 2, 3]")
    return run_id, message_ids(observer, run_id)


def _read(conn: Conn, count: int) -> list[int]:
    """The read half of a claim: PGMQ hides the messages and keeps them locked until commit."""
    return sorted(
        int(row[0])
        for row in conn.execute("select msg_id from pgmq.read(%s, 12, %s)", [FLOW, count]).fetchall()
    )


def _run(observer: Conn, run_id: uuid.UUID) -> tuple[str, str]:
    row = observer.execute(
        "select status, error_message from pgflow.runs where run_id = %s", [run_id]
    ).fetchone()
    assert row is not None
    return str(row[0]), str(row[1])


def _archived(observer: Conn) -> list[int]:
    return sorted(int(row[0]) for row in observer.execute(f"select msg_id from pgmq.a_{FLOW}").fetchall())


def test_a_cancel_waiting_for_read_messages_does_not_deadlock_with_the_claim() -> None:
    with sessions(FLOW) as (first, second, observer):
        run_id, ids = _flow_with_run(observer)

        with first.transaction():
            assert _read(first, len(ids)) == ids
            cancel = Background(lambda: second.execute("select pgflow.cancel_run(%s)", [run_id]).fetchone())
            assert wait_for_lock_wait(observer, backend_pid(second), cancel) == "transactionid"
            # the cancel holds the run and the tasks and waits for the messages: the claim must not
            # wait for the tasks in turn
            outcomes = Background(lambda: claim(first, FLOW, ids, uuid.uuid4())).result(timeout=10)
            if not cancel.running:
                cancel.result()  # raises what ended it (a deadlock, on a claim that waited for tasks)
            assert cancel.running, "the cancel still waits for the messages the claim holds"
        assert cancel.result() == ("cancelled",)

        assert outcomes == [("started", msg, None) for msg in ids], "nothing claimed, no attempt consumed"
        assert [row[2:4] for row in tasks(observer, run_id)] == [("cancelled", 0)] * 3
        assert _run(observer, run_id) == ("failed", "cancelled")
        assert live(observer, FLOW) == {}
        assert _archived(observer) == ids
        check_invariants(observer, require_terminal=True)


def test_a_cancel_after_a_claim_cancels_the_claimed_tasks_and_the_run_never_completes() -> None:
    with sessions(FLOW) as (first, second, observer):
        run_id, ids = _flow_with_run(observer)
        worker = uuid.uuid4()

        with first.transaction():
            read = _read(first, len(ids))
            assert claim(first, FLOW, read, worker) == [("claimed", msg, 1) for msg in ids]
            cancel = Background(
                lambda: second.execute("select pgflow.cancel_run(%s, 'operator stop')", [run_id]).fetchone()
            )
            wait_for_lock_wait(observer, backend_pid(second), cancel)
        assert cancel.result() == ("cancelled",)

        assert [row[2:4] for row in tasks(observer, run_id)] == [("cancelled", 1)] * 3
        late = [
            first.execute("select pgflow.complete_task(%s, 'm', %s, 1, '1'::jsonb)", [run_id, i]).fetchone()
            for i in range(3)
        ]
        assert late == [("stale",)] * 3
        assert _run(observer, run_id) == ("failed", "cancelled: operator stop")
        assert live(observer, FLOW) == {}
        check_invariants(observer, require_terminal=True)
