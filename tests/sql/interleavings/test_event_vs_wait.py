"""An event sent while its wait starts, times out or is cancelled (docs/durable.md): each pair runs on
two connections, one holding its transaction open while the other runs, and the wait ends exactly
once.

- keyed or by run: the start takes the event's lock (shared) after writing the wait, the send
  (exclusive) before keeping its event, so whichever commits second sees the other; the event is
  delivered either way, even to a run whose start has not committed;
- against a timeout or a cancel: the send skips the wait the other transaction is ending (it waits
  for no wait row), keeps its event, and delivers it to no wait.
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
keyed.wait_for_event("approved", event="ilv.approved", key="$.order_id", timeout=60, when_timeout="fail")


def _compile(conn: Conn) -> None:
    conn.execute(
        "select pgflow.ensure_flow_compiled(%s, %s::jsonb, 'refuse')", [FLOW, json.dumps(keyed.shape())]
    )


def _send(conn: Conn, **target: object) -> int:
    row = conn.execute(
        "select pgflow.send_event('ilv.approved', %s::jsonb, run_id => %s, key => %s)",
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


def test_a_keyed_send_waits_for_the_start_and_then_delivers_to_the_wait() -> None:
    with sessions(FLOW) as (starter, sender, observer):
        _compile(observer)
        with starter.transaction():
            run_id = start_run(starter, FLOW, '{"order_id": 1042}')
            job = Background(lambda: _send(sender, key="1042"))
            assert wait_for_lock_wait(observer, backend_pid(sender), job) == "advisory"
        assert job.result() == 1
        assert _wake(observer) == {"completed": 1, "failed": 0}
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


def test_a_send_to_a_run_whose_start_has_not_committed_waits_for_it() -> None:
    """The run's row is not visible to the sender yet: the event's lock orders them, not the row."""
    with sessions(FLOW) as (starter, sender, observer):
        _compile(observer)
        run_id = uuid.uuid4()
        with starter.transaction():
            starter.execute("select pgflow.start_flow(%s, %s::jsonb, %s)", [FLOW, '{"order_id": 5}', run_id])
            job = Background(lambda: _send(sender, run_id=run_id))
            assert wait_for_lock_wait(observer, backend_pid(sender), job) == "advisory"
        assert job.result() == 1
        assert _wake(observer) == {"completed": 1, "failed": 0}
        assert _step(observer, run_id) == ("completed", {"by": "ada"}, 1)


def test_a_send_racing_the_timeout_is_delivered_to_no_wait() -> None:
    """The pass holds the wait it is ending: the send skips it (it waits for no wait row) and keeps
    its event; the step ends as the timeout decided."""
    with sessions(FLOW) as (waker, sender, observer):
        _compile(observer)
        run_id = start_run(observer, FLOW, '{"order_id": 7}')
        observer.execute(
            "update pgflow.step_waits set due_at = now() - interval '1 second' where run_id = %s", [run_id]
        )
        with waker.transaction():
            assert _wake(waker) == {"completed": 0, "failed": 1}
            assert _send(sender, run_id=run_id) == 0
        status, _, attempts = _step(observer, run_id)
        assert (status, attempts) == ("failed", 1)
        run = observer.execute(
            "select status, error_message from pgflow.runs where run_id = %s", [run_id]
        ).fetchone()
        assert run == ("failed", "step approved failed: timed out waiting for event ilv.approved")
        check_invariants(observer, require_terminal=True)


def test_an_event_delivered_before_the_timeout_pass_wins_over_the_timeout() -> None:
    with sessions(FLOW) as (waker, sender, observer):
        _compile(observer)
        run_id = start_run(observer, FLOW, '{"order_id": 8}')
        observer.execute(
            "update pgflow.step_waits set due_at = now() - interval '1 second' where run_id = %s", [run_id]
        )
        with sender.transaction():
            assert _send(sender, run_id=run_id) == 1
            job = Background(lambda: _wake(waker))  # the pass waits for the delivery to commit
            wait_for_lock_wait(observer, backend_pid(waker), job)
        assert job.result() == {"completed": 1, "failed": 0}
        assert _step(observer, run_id) == ("completed", {"by": "ada"}, 1)
        check_invariants(observer, require_terminal=True)


def test_a_send_racing_a_cancel_is_delivered_to_no_wait() -> None:
    with sessions(FLOW) as (canceller, sender, observer):
        _compile(observer)
        run_id = start_run(observer, FLOW, '{"order_id": 9}')
        with canceller.transaction():
            canceller.execute("select pgflow.cancel_run(%s, 'changed mind')", [run_id])
            assert _send(sender, key="9") == 0  # the cancel holds the wait: skipped, not waited for
        assert _step(observer, run_id)[0] == "cancelled"
        assert observer.execute("select count(*) from pgflow.step_waits").fetchone() == (0,)
        check_invariants(observer, require_terminal=True)


def test_a_send_waits_for_the_pass_that_starts_its_waits_and_then_reaches_them() -> None:
    """Two runs wait for a, then b (keyed on k). The pass delivering a starts the waits for b and
    holds b's lock (shared) until it commits; a send of b meanwhile waits for it, then reaches both
    new waits. A send holds its lock only while it keeps its event and marks the waits: it waits for
    no run and no wait row, so a pass never waits for a send that waits for it."""
    crossed = Flow(FLOW)
    crossed.wait_for_event("first", event="ilv.a", key="$.k")
    crossed.wait_for_event("second", event="ilv.b", key="$.k", depends_on=["first"])
    with sessions(FLOW) as (waker, sender, observer):
        observer.execute(
            "select pgflow.ensure_flow_compiled(%s, %s::jsonb, 'refuse')", [FLOW, json.dumps(crossed.shape())]
        )
        runs = [start_run(observer, FLOW, '{"k": "k"}') for _ in range(2)]
        assert observer.execute("select pgflow.send_event('ilv.a', '1'::jsonb, key => 'k')").fetchone() == (
            2,
        )
        with waker.transaction():
            assert _wake(waker) == {"completed": 2, "failed": 0}
            job = Background(
                lambda: sender.execute("select pgflow.send_event('ilv.b', '2'::jsonb, key => 'k')").fetchone()
            )
            assert wait_for_lock_wait(observer, backend_pid(sender), job) == "advisory"
        assert job.result() == (2,)
        assert _wake(observer) == {"completed": 2, "failed": 0}
        statuses = observer.execute(
            "select array_agg(status) from pgflow.runs where run_id = any(%s)", [runs]
        ).fetchone()
        assert statuses == (["completed", "completed"],)
        check_invariants(observer, require_terminal=True)


def test_a_cancel_leaves_a_child_another_writer_holds_to_the_wait_pass() -> None:
    """The parent's cancel locks its children without waiting (the writer that holds a child may hold
    runs locked after the parent): a busy child keeps its wait, due, and the pass fails it once free."""
    child = "ilv_event_wait_child"
    child_flow = Flow(child)

    @child_flow.step()
    def work(item: object) -> object: ...

    parent = Flow(FLOW)
    parent.subflow("sub", flow=child_flow)
    with sessions(FLOW) as (canceller, holder, observer):
        observer.execute(
            "select pgflow.delete_flow_and_data(%s) from pgflow.flows where flow_slug = %s", [child, child]
        )
        for flow in (child_flow, parent):
            observer.execute(
                "select pgflow.ensure_flow_compiled(%s, %s::jsonb, 'refuse')",
                [flow.slug, json.dumps(flow.shape())],
            )
        try:
            run_id = start_run(observer, FLOW)
            child_id = observer.execute(
                "select run_id from pgflow.runs where parent_run_id = %s", [run_id]
            ).fetchone()[0]
            with holder.transaction():
                holder.execute("select 1 from pgflow.runs where run_id = %s for update", [child_id])
                canceller.execute("select pgflow.cancel_run(%s)", [run_id])  # returns at once
                assert observer.execute(
                    "select status from pgflow.runs where run_id = %s", [child_id]
                ).fetchone() == ("started",)
                assert _wake(observer) == {"completed": 0, "failed": 0}  # still held: left for the next pass
            assert _wake(observer) == {"completed": 0, "failed": 0}
            assert observer.execute(
                "select status, error_message from pgflow.runs where run_id = %s", [child_id]
            ).fetchone() == ("failed", f"parent run {run_id} failed")
            assert observer.execute("select count(*) from pgflow.step_waits").fetchone() == (0,)
        finally:
            observer.execute("select pgflow.delete_flow_and_data(%s)", [FLOW])
            observer.execute("select pgflow.delete_flow_and_data(%s)", [child])
