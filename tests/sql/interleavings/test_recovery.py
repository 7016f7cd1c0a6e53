"""Stalled recovery racing the claim and the completion of the task it recovers.

- claim vs recovery: a duplicate claim of a stalled task waits for recovery's message lock, then answers
  ``started`` (no attempt consumed); the requeued task stays queued with its message, claimable again.
- completion vs recovery, recovery first: the late completion waits for the run lock, then is ``stale``;
  the requeued task runs again as attempt 2 and completes the run once.
- completion vs recovery, completion first: recovery skips the locked run; the task completes once and
  recovery afterwards finds nothing.
"""

from __future__ import annotations

import uuid
from typing import Any

from tests.sql.interleavings.support import (
    Background,
    Conn,
    backdate,
    backend_pid,
    check_invariants,
    claim,
    live,
    message_ids,
    requeue_stalled,
    sessions,
    start_run,
    tasks,
    wait_for_lock_wait,
)

FLOW = "ilv_recovery"


def _stalled(observer: Conn) -> tuple[uuid.UUID, int, uuid.UUID]:
    """A one-step run whose only task was claimed by a worker that then vanished (started 100 s ago,
    past timeout 5 + 30 s)."""
    observer.execute("select pgflow.create_flow(%s, timeout => 5, max_attempts => 3)", [FLOW])
    observer.execute("select pgflow.add_step(%s, 'a')", [FLOW])
    run_id = start_run(observer, FLOW)
    (msg,) = message_ids(observer, run_id)
    vanished = uuid.uuid4()
    assert claim(observer, FLOW, [msg], vanished) == [("claimed", msg, 1)]
    backdate(observer, run_id, 100)
    return run_id, msg, vanished


def _complete(conn: Conn, run_id: uuid.UUID, attempt: int) -> str:
    row = conn.execute(
        "select pgflow.complete_task(%s, 'a', 0, %s, '{\"done\": true}'::jsonb)", [run_id, attempt]
    ).fetchone()
    assert row is not None
    return str(row[0])


def _run_status(conn: Conn, run_id: uuid.UUID) -> Any:
    row = conn.execute("select status from pgflow.runs where run_id = %s", [run_id]).fetchone()
    return None if row is None else row[0]


def test_claim_during_recovery_gets_started_and_the_task_stays_claimable() -> None:
    with sessions(FLOW) as (first, second, observer):
        run_id, msg, vanished = _stalled(observer)
        duplicate = uuid.uuid4()

        with first.transaction():
            assert requeue_stalled(first) == {"requeued": 1, "permanently_stalled": 0}
            job = Background(lambda: claim(second, FLOW, [msg], duplicate))
            wait_for_lock_wait(observer, backend_pid(second), job)
        assert job.result() == [("started", msg, None)]

        assert tasks(observer, run_id) == [("a", 0, "queued", 1, 1, vanished)]
        assert list(live(observer, FLOW)) == [msg], "the requeued task keeps its message"
        check_invariants(observer)

        observer.execute(f"update pgmq.q_{FLOW} set vt = clock_timestamp()")
        again = uuid.uuid4()
        assert claim(observer, FLOW, [msg], again) == [("claimed", msg, 2)]
        assert _complete(observer, run_id, 2) == "completed"
        assert _run_status(observer, run_id) == "completed"
        assert tasks(observer, run_id) == [("a", 0, "completed", 2, 1, again)]
        check_invariants(observer, require_terminal=True)


def test_late_completion_after_recovery_is_stale_and_the_task_runs_once_more() -> None:
    with sessions(FLOW) as (first, second, observer):
        run_id, msg, vanished = _stalled(observer)

        with first.transaction():
            assert requeue_stalled(first) == {"requeued": 1, "permanently_stalled": 0}
            job = Background(lambda: _complete(second, run_id, 1))
            wait_for_lock_wait(observer, backend_pid(second), job)
        assert job.result() == "stale"

        assert tasks(observer, run_id) == [("a", 0, "queued", 1, 1, vanished)]
        assert list(live(observer, FLOW)) == [msg], "a stale completion archives nothing"
        assert _run_status(observer, run_id) == "started"
        check_invariants(observer)

        again = uuid.uuid4()
        assert claim(observer, FLOW, [msg], again) == [("claimed", msg, 2)]
        assert _complete(observer, run_id, 2) == "completed"
        assert _complete(observer, run_id, 1) == "stale", "the vanished worker's result stays ignored"
        out = observer.execute(
            "select status, output::text from pgflow.runs where run_id = %s", [run_id]
        ).fetchone()
        assert out == ("completed", '{"a": {"done": true}}')
        assert live(observer, FLOW) == {}
        check_invariants(observer, require_terminal=True)


def test_recovery_during_completion_skips_the_run_and_the_task_completes_once() -> None:
    with sessions(FLOW) as (first, second, observer):
        run_id, _msg, vanished = _stalled(observer)

        with first.transaction():
            assert _complete(first, run_id, 1) == "completed"
            # SKIP LOCKED: recovery does not wait for the completing transaction, it leaves the run
            assert requeue_stalled(second) == {"requeued": 0, "permanently_stalled": 0}
        assert requeue_stalled(second) == {"requeued": 0, "permanently_stalled": 0}

        assert tasks(observer, run_id) == [("a", 0, "completed", 1, 0, vanished)]
        assert _run_status(observer, run_id) == "completed"
        assert live(observer, FLOW) == {}
        check_invariants(observer, require_terminal=True)
