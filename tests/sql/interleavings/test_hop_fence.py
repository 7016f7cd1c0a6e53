"""The fast path of a completion (pgflow.complete_hop) against other writers on two connections. The
fast path decides on rows it reads after it holds the run's lock, so a writer that changed the task
first (the same completion sent twice, stalled recovery and a second claim, a cancel) is seen: the
late completion writes nothing on the fast path and the general path reports it stale. Nothing is
completed twice, no dependent task is created twice, and no message is left live or archived twice."""

from __future__ import annotations

import json
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
    requeue_stalled,
    sessions,
    start_run,
    tasks,
    wait_for_lock_wait,
)

FLOW = "ilv_hop_fence"


def make_chain(conn: Conn) -> None:
    conn.execute("select pgflow.create_flow(%s, timeout => 20)", [FLOW])
    conn.execute("select pgflow.add_step(%s, 'a')", [FLOW])
    conn.execute("select pgflow.add_step(%s, 'b', deps_slugs => array['a'])", [FLOW])


def message_of(conn: Conn, run_id: uuid.UUID, step_slug: str) -> int:
    row = conn.execute(
        "select message_id from pgflow.step_tasks where run_id = %s and step_slug = %s", [run_id, step_slug]
    ).fetchone()
    assert row is not None
    return int(row[0])


def complete(conn: Conn, run_id: uuid.UUID, attempt: int, worker: uuid.UUID) -> list[tuple[Any, ...]]:
    """complete_and_hand_off of step a's task for ``worker``: (outcome, step) rows."""
    items = json.dumps(
        [{"run_id": str(run_id), "step_slug": "a", "task_index": 0, "attempt": attempt, "output": 1}]
    )
    return [
        tuple(row)
        for row in conn.execute(
            "select c.outcome, c.step_slug from pgflow.complete_and_hand_off(%s::jsonb, %s, %s, %s::text[],"
            " array['a', 'b'], (select array[f.generation, f.generation] from pgflow.flows as f"
            " where f.flow_slug = %s), 4) as c",
            [items, FLOW, worker, [FLOW, FLOW], FLOW],
        ).fetchall()
    ]


def fast_path_takes(conn: Conn, run_id: uuid.UUID, attempt: int) -> bool:
    """Whether complete_hop would take this completion now (asked in a transaction rolled back)."""
    items = json.dumps(
        [{"run_id": str(run_id), "step_slug": "a", "task_index": 0, "attempt": attempt, "output": 1}]
    )
    with conn.transaction(force_rollback=True):
        return bool(
            conn.execute(
                "select 1 from pgflow.complete_hop(%s::jsonb, null, null, null, null, null, 0)", [items]
            ).fetchall()
        )


def archived(conn: Conn) -> list[int]:
    return [
        int(row[0]) for row in conn.execute(f"select msg_id from pgmq.a_{FLOW} order by msg_id").fetchall()
    ]


def test_the_same_completion_twice_completes_once() -> None:
    with sessions(FLOW) as (first, second, observer):
        make_chain(observer)
        run_id = start_run(observer, FLOW)
        a_msg = message_of(observer, run_id, "a")
        worker = uuid.uuid4()
        assert claim(first, FLOW, [a_msg], worker) == [("claimed", a_msg, 1)]
        assert fast_path_takes(observer, run_id, 1)

        with first.transaction():
            first_rows = complete(first, run_id, 1, worker)
            job = Background(lambda: complete(second, run_id, 1, worker))
            wait_for_lock_wait(observer, backend_pid(second), job)
        second_rows = job.result()

        assert first_rows == [("completed", "a"), ("claimed", "b")]
        assert second_rows == [("stale", "a")], "the second saw the first's commit after the run's lock"
        assert [t[:4] for t in tasks(observer, run_id)] == [("a", 0, "completed", 1), ("b", 0, "started", 1)]
        assert archived(observer) == [a_msg]
        assert list(live(observer, FLOW)) == [message_of(observer, run_id, "b")]
        check_invariants(observer)


def test_a_claim_recovery_took_away_is_fenced_on_the_fast_path() -> None:
    with sessions(FLOW) as (first, second, observer):
        make_chain(observer)
        run_id = start_run(observer, FLOW)
        a_msg = message_of(observer, run_id, "a")
        lost, taker = uuid.uuid4(), uuid.uuid4()
        assert claim(first, FLOW, [a_msg], lost) == [("claimed", a_msg, 1)]
        backdate(observer, run_id, 60)
        assert requeue_stalled(observer)["requeued"] == 1
        observer.execute(f"update pgmq.q_{FLOW} set vt = clock_timestamp() - interval '1 second'")
        assert claim(second, FLOW, [a_msg], taker) == [("claimed", a_msg, 2)]
        assert not fast_path_takes(observer, run_id, 1), "attempt 1 is no longer the claim"
        assert fast_path_takes(observer, run_id, 2)

        with second.transaction():
            taker_rows = complete(second, run_id, 2, taker)
            job = Background(lambda: complete(first, run_id, 1, lost))
            wait_for_lock_wait(observer, backend_pid(first), job)
        lost_rows = job.result()

        assert taker_rows == [("completed", "a"), ("claimed", "b")]
        assert lost_rows == [("stale", "a")]
        assert [t[:4] for t in tasks(observer, run_id)] == [("a", 0, "completed", 2), ("b", 0, "started", 1)]
        assert archived(observer) == [a_msg]
        check_invariants(observer)


def test_a_cancel_that_locks_the_run_first_leaves_nothing_to_complete() -> None:
    with sessions(FLOW) as (first, second, observer):
        make_chain(observer)
        run_id = start_run(observer, FLOW)
        a_msg = message_of(observer, run_id, "a")
        worker = uuid.uuid4()
        assert claim(first, FLOW, [a_msg], worker) == [("claimed", a_msg, 1)]

        with second.transaction():
            second.execute("select pgflow.cancel_run(%s)", [run_id])
            job = Background(lambda: complete(first, run_id, 1, worker))
            wait_for_lock_wait(observer, backend_pid(first), job)
        rows = job.result()

        assert rows == [("stale", "a")]
        assert [t[:3] for t in tasks(observer, run_id)] == [("a", 0, "cancelled")], "b was never created"
        assert live(observer, FLOW) == {}
        check_invariants(observer, require_terminal=True)
