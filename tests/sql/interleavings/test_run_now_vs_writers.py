"""Running a run's waiting work now while its workers, a cancel or a retry write (issue 41, item 4).
``pgflow.run_now`` locks the run, then only the tasks whose messages are hidden, then their messages
(skipped when locked), the order of every writer; a claim never waits for it.

- A worker's completion that starts a delayed step is still open: run_now waits for the run's row,
  then finds the new step's hidden message and makes it visible; one claim takes it.
- run_now is still open: a claim reads nothing of it (its message is still hidden for others) and
  does not wait; a worker's completion of another task waits for the run, then completes; the task
  made visible is claimed once.
- A failure that schedules a retry's back-off is still open: run_now waits, then makes the back-off
  visible; the next claim is the second attempt, once.
- A cancel is still open: run_now waits, then is refused (SQLSTATE 55000) and nothing is visible.
- A retry is still open: run_now waits, then finds nothing hidden (the retry's messages are visible).
"""

from __future__ import annotations

import uuid

import psycopg
import pytest

from tests.sql.interleavings.support import (
    Background,
    Conn,
    backend_pid,
    check_invariants,
    claim,
    live,
    sessions,
    start_run,
    tasks,
    wait_for_lock_wait,
)

FLOW = "ilv_run_now"


def _flow(observer: Conn, *, delayed_root: bool = False, base_delay: int = 0, max_attempts: int = 1) -> None:
    """``a`` then ``b`` (600 s start delay); with ``delayed_root``, ``b`` is a second root."""
    observer.execute(
        "select pgflow.create_flow(%s, max_attempts => %s, base_delay => %s, timeout => 5)",
        [FLOW, max_attempts, base_delay],
    )
    observer.execute("select pgflow.add_step(%s, 'a')", [FLOW])
    deps = [] if delayed_root else ["a"]
    observer.execute("select pgflow.add_step(%s, 'b', %s::text[], start_delay => 600)", [FLOW, deps])


def _message(conn: Conn, run_id: uuid.UUID, step_slug: str) -> int:
    row = conn.execute(
        "select message_id from pgflow.step_tasks where run_id = %s and step_slug = %s", [run_id, step_slug]
    ).fetchone()
    assert row is not None and row[0] is not None
    return int(row[0])


def _claim_a(worker: Conn, run_id: uuid.UUID) -> int:
    ((outcome, _, attempt),) = claim(worker, FLOW, [_message(worker, run_id, "a")], uuid.uuid4())
    assert outcome == "claimed"
    return int(attempt)


def _read(conn: Conn) -> list[int]:
    """What a worker reads of the queue now (and hides for 30 s)."""
    return [
        int(row[0]) for row in conn.execute("select msg_id from pgmq.read(%s, 30, 10)", [FLOW]).fetchall()
    ]


def _run_now(conn: Conn, run_id: uuid.UUID) -> int:
    row = conn.execute("select pgflow.run_now(%s)", [run_id]).fetchone()
    assert row is not None
    return int(row[0])


def test_run_now_waits_for_a_completion_then_makes_the_new_step_visible() -> None:
    with sessions(FLOW) as (first, second, observer):
        _flow(observer)
        run_id = start_run(observer, FLOW)
        attempt = _claim_a(observer, run_id)
        with first.transaction():
            row = first.execute("select pgflow.complete_task(%s, 'a', 0, %s, '1'::jsonb)", [run_id, attempt])
            assert row.fetchone() == ("completed",)
            now = Background(lambda: _run_now(second, run_id))
            assert wait_for_lock_wait(observer, backend_pid(second), now) in ("transactionid", "tuple")
        assert now.result() == 1
        b = _message(observer, run_id, "b")
        assert live(observer, FLOW)[b] <= 0
        assert [row[0] for row in claim(observer, FLOW, _read(observer), uuid.uuid4())] == ["claimed"]
        assert _read(observer) == [], "taken once"
        check_invariants(observer)


def test_a_claim_does_not_wait_for_run_now_and_a_completion_waits_for_the_run() -> None:
    with sessions(FLOW) as (first, second, observer):
        _flow(observer, delayed_root=True)
        run_id = start_run(observer, FLOW)
        attempt = _claim_a(observer, run_id)
        b = _message(observer, run_id, "b")
        with first.transaction():
            assert _run_now(first, run_id) == 1
            assert _read(observer) == [], "still hidden for others, and the read did not wait"
            done = Background(
                lambda: second.execute(
                    "select pgflow.complete_task(%s, 'a', 0, %s, '1'::jsonb)", [run_id, attempt]
                ).fetchone()
            )
            assert wait_for_lock_wait(observer, backend_pid(second), done) in ("transactionid", "tuple")
        assert done.result() == ("completed",)
        assert [row[2] for row in tasks(observer, run_id)] == ["completed", "queued"]
        read = _read(observer)
        assert read == [b]
        ((outcome, _, fresh),) = claim(observer, FLOW, read, uuid.uuid4())
        assert (outcome, fresh) == ("claimed", 1)
        row = observer.execute("select pgflow.complete_task(%s, 'b', 0, 1, '2'::jsonb)", [run_id]).fetchone()
        assert row == ("completed",)
        check_invariants(observer, require_terminal=True)


def test_run_now_waits_for_a_failure_then_makes_its_back_off_visible() -> None:
    with sessions(FLOW) as (first, second, observer):
        _flow(observer, base_delay=600, max_attempts=3)
        run_id = start_run(observer, FLOW)
        attempt = _claim_a(observer, run_id)
        with first.transaction():
            row = first.execute("select pgflow.fail_task(%s, 'a', 0, %s, 'flaky')", [run_id, attempt])
            assert row.fetchone() == ("retrying",)
            now = Background(lambda: _run_now(second, run_id))
            assert wait_for_lock_wait(observer, backend_pid(second), now) in ("transactionid", "tuple")
        assert now.result() == 1
        a = _message(observer, run_id, "a")
        ((outcome, _, again),) = claim(observer, FLOW, _read(observer), uuid.uuid4())
        assert (outcome, again) == ("claimed", 2)
        assert _read(observer) == [], "taken once"
        assert live(observer, FLOW)[a] > 0
        check_invariants(observer)


def test_run_now_waits_for_a_cancel_then_is_refused() -> None:
    with sessions(FLOW) as (first, second, observer):
        _flow(observer, delayed_root=True)
        run_id = start_run(observer, FLOW)
        with first.transaction():
            assert first.execute("select pgflow.cancel_run(%s)", [run_id]).fetchone() == ("cancelled",)
            now = Background(lambda: _run_now(second, run_id))
            assert wait_for_lock_wait(observer, backend_pid(second), now) in ("transactionid", "tuple")
        with pytest.raises(
            psycopg.errors.ObjectNotInPrerequisiteState, match="is failed: nothing of it waits"
        ):
            now.result()
        assert live(observer, FLOW) == {}, "the cancel archived every message; none came back"
        check_invariants(observer, require_terminal=True)


def test_run_now_waits_for_a_retry_then_finds_nothing_hidden() -> None:
    with sessions(FLOW) as (first, second, observer):
        _flow(observer)
        run_id = start_run(observer, FLOW)
        attempt = _claim_a(observer, run_id)
        row = observer.execute("select pgflow.fail_task(%s, 'a', 0, %s, 'down')", [run_id, attempt])
        assert row.fetchone() == ("failed",)
        with first.transaction():
            assert first.execute("select pgflow.retry_run(%s)", [run_id]).fetchone() == (1,)
            now = Background(lambda: _run_now(second, run_id))
            assert wait_for_lock_wait(observer, backend_pid(second), now) in ("transactionid", "tuple")
        assert now.result() == 0
        ((outcome, _, again),) = claim(observer, FLOW, _read(observer), uuid.uuid4())
        assert (outcome, again) == ("claimed", 2)
        assert _read(observer) == []
        check_invariants(observer)
