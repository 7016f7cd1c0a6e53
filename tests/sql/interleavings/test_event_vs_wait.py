"""An event sent while its wait starts, times out or is cancelled (docs/durable.md): each pair runs on
two connections, one holding its transaction open while the other blocks on its lock, and the wait
ends exactly once.

- keyed: the start takes the key's lock after writing the wait, the send before keeping its event,
  so whichever commits second sees the other; the event is delivered either way;
- by run: the send locks the run first, as every writer of a run does;
- against a timeout or a cancel: the send waits for the run, then finds no wait and completes none.
"""

from __future__ import annotations

import json
import uuid

from pgflow_django import Flow
from tests.sql.interleavings.support import (
    Background,
    Conn,
    backend_pid,
    check_invariants,
    sessions,
    start_run,
    wait_for_lock_wait,
)

FLOW = "ilv_event_wait"

keyed = Flow(FLOW)
keyed.wait_for_event("approved", event="order.approved", key="$.order_id", timeout=60, when_timeout="fail")


def _compile(conn: Conn) -> None:
    conn.execute(
        "select pgflow.ensure_flow_compiled(%s, %s::jsonb, 'refuse')", [FLOW, json.dumps(keyed.shape())]
    )


def _send(conn: Conn, **target: object) -> int:
    row = conn.execute(
        "select pgflow.send_event('order.approved', %s::jsonb, run_id => %s, key => %s)",
        [json.dumps({"by": "ada"}), target.get("run_id"), target.get("key")],
    ).fetchone()
    assert row is not None
    return int(row[0])


def _wake(conn: Conn) -> dict[str, int]:
    return {str(o): int(n) for o, n in conn.execute("select * from pgflow.wake_waits()").fetchall()}


def _step(observer: Conn, run_id: uuid.UUID) -> tuple[str, object, int]:
    row = observer.execute(
        "select ss.status, ss.output, t.attempts_count from pgflow.step_states as ss"
        " join pgflow.step_tasks as t using (run_id, step_slug)"
        " where ss.run_id = %s and ss.step_slug = 'approved'",
        [run_id],
    ).fetchone()
    assert row is not None
    return str(row[0]), row[1], int(row[2])


def test_a_keyed_send_waits_for_the_start_and_then_completes_the_wait() -> None:
    with sessions(FLOW) as (starter, sender, observer):
        _compile(observer)
        with starter.transaction():
            run_id = start_run(starter, FLOW, '{"order_id": 1042}')
            job = Background(lambda: _send(sender, key="1042"))
            assert wait_for_lock_wait(observer, backend_pid(sender), job) == "advisory"
        assert job.result() == 1
        assert _step(observer, run_id) == ("completed", {"by": "ada"}, 1)
        assert observer.execute("select count(*) from pgflow.step_waits").fetchone() == (0,)
        check_invariants(observer, require_terminal=True)


def test_a_start_waits_for_a_keyed_send_and_takes_the_kept_event() -> None:
    with sessions(FLOW) as (starter, sender, observer):
        _compile(observer)
        with sender.transaction():
            assert _send(sender, key="1042") == 0
            job = Background(lambda: start_run(starter, FLOW, '{"order_id": 1042}'))
            assert wait_for_lock_wait(observer, backend_pid(starter), job) == "advisory"
        run_id = job.result()
        assert _step(observer, run_id)[0] == "started"
        assert _wake(observer) == {"completed": 1, "failed": 0}
        assert _step(observer, run_id) == ("completed", {"by": "ada"}, 1)
        assert _wake(observer) == {"completed": 0, "failed": 0}
        check_invariants(observer, require_terminal=True)


def test_a_send_racing_the_timeout_completes_nothing_after_it() -> None:
    with sessions(FLOW) as (waker, sender, observer):
        _compile(observer)
        run_id = start_run(observer, FLOW, '{"order_id": 7}')
        observer.execute(
            "update pgflow.step_waits set due_at = now() - interval '1 second' where run_id = %s", [run_id]
        )
        with waker.transaction():
            assert _wake(waker) == {"completed": 0, "failed": 1}
            job = Background(lambda: _send(sender, run_id=run_id))
            wait_for_lock_wait(observer, backend_pid(sender), job)
        assert job.result() == 0
        status, _, attempts = _step(observer, run_id)
        assert (status, attempts) == ("failed", 1)
        run = observer.execute(
            "select status, error_message from pgflow.runs where run_id = %s", [run_id]
        ).fetchone()
        assert run == ("failed", "step approved failed: timed out waiting for event order.approved")
        check_invariants(observer, require_terminal=True)


def test_a_send_after_the_timeout_wins_the_lock_completes_the_wait_and_the_timeout_finds_none() -> None:
    with sessions(FLOW) as (waker, sender, observer):
        _compile(observer)
        run_id = start_run(observer, FLOW, '{"order_id": 8}')
        observer.execute(
            "update pgflow.step_waits set due_at = now() - interval '1 second' where run_id = %s", [run_id]
        )
        with sender.transaction():
            assert _send(sender, run_id=run_id) == 1
            assert _wake(waker) == {"completed": 0, "failed": 0}  # the run is held: skipped, not waited for
        assert _wake(waker) == {"completed": 0, "failed": 0}
        assert _step(observer, run_id) == ("completed", {"by": "ada"}, 1)
        check_invariants(observer, require_terminal=True)


def test_a_send_racing_a_cancel_completes_nothing() -> None:
    with sessions(FLOW) as (canceller, sender, observer):
        _compile(observer)
        run_id = start_run(observer, FLOW, '{"order_id": 9}')
        with canceller.transaction():
            canceller.execute("select pgflow.cancel_run(%s, 'changed mind')", [run_id])
            job = Background(lambda: _send(sender, key="9"))
            wait_for_lock_wait(observer, backend_pid(sender), job)
        assert job.result() == 0
        assert _step(observer, run_id)[0] == "cancelled"
        assert observer.execute("select count(*) from pgflow.step_waits").fetchone() == (0,)
        check_invariants(observer, require_terminal=True)
