"""Shared-queue workers on two connections (issue 6, items 5 and 8). Two workers claiming the same
messages never claim a task twice: one claims, the other skips the task rows it holds (a claim never
waits for a task lock), gets ``started`` and consumes no attempt.
Workers of two versions on one queue claim their own messages at once, without waiting for each other.
Two flows compiled at once that declare the same new shared queue serialise on its advisory lock; the
second reuses the queue. The order is driven by lock waits seen in ``pg_stat_activity``, never by
sleeping; everything is committed, so flows, queues and declarations are removed afterwards."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from tests.sql.interleavings.support import (
    Background,
    Conn,
    backend_pid,
    check_invariants,
    sessions,
    start_run,
    wait_for_lock_wait,
)
from tests.sql.shared_queues.support import routed_shape
from tests.sql.support import jb, shape_step

V1, V2 = "sq_ilv_v1", "sq_ilv_v2"
QUEUE = "sq_ilv_shared"


def definition() -> str:
    return jb(routed_shape(shape_step("a", step_type="map"), route={"a": QUEUE}, timeout=20))


@contextmanager
def shared_sessions() -> Iterator[tuple[Conn, Conn, Conn]]:
    """``sessions`` for two flows on one shared queue; the queue and its declaration go afterwards."""
    with sessions(V1) as (first, second, observer):
        try:
            purge(observer)
            yield first, second, observer
        finally:
            purge(observer)


def purge(conn: Conn) -> None:
    conn.execute(
        "select pgflow.delete_flow_and_data(flow_slug) from pgflow.flows where flow_slug = any(%s)",
        [[V1, V2]],
    )
    conn.execute("select pgmq.drop_queue(queue_name) from pgmq.list_queues() where queue_name = %s", [QUEUE])
    conn.execute("delete from pgflow.shared_queues where queue_name = %s", [QUEUE])


def compile_on(conn: Conn, flow_slug: str) -> str:
    row = conn.execute(
        "select pgflow.ensure_flow_compiled(%s, %s::jsonb)", [flow_slug, definition()]
    ).fetchone()
    assert row is not None
    return str(row[0]["status"])


def ids_of(conn: Conn, run_id: uuid.UUID) -> list[int]:
    rows = conn.execute(
        "select message_id from pgflow.step_tasks where run_id = %s order by task_index", [run_id]
    ).fetchall()
    return [int(r[0]) for r in rows]


def claim(conn: Conn, ids: list[int], worker: uuid.UUID, flows: list[str]) -> list[tuple[Any, ...]]:
    """(outcome, message_id, flow_slug, attempt) per message, by message id."""
    return [
        tuple(r)
        for r in conn.execute(
            "select outcome, message_id, flow_slug, attempt from pgflow.start_shared_tasks("
            "%s, %s::bigint[], %s, %s::text[], %s::text[]) order by message_id",
            [QUEUE, ids, worker, flows, ["a"] * len(flows)],
        ).fetchall()
    ]


def tasks(conn: Conn, run_id: uuid.UUID) -> list[tuple[Any, ...]]:
    return [
        tuple(r)
        for r in conn.execute(
            "select task_index, status, attempts_count, last_worker_id from pgflow.step_tasks "
            "where run_id = %s order by task_index",
            [run_id],
        ).fetchall()
    ]


def test_two_workers_of_one_queue_never_claim_the_same_messages_twice() -> None:
    with shared_sessions() as (first, second, observer):
        assert compile_on(observer, V1) == "compiled"
        run_id = start_run(observer, V1, "[1, 2, 3]")
        ids = ids_of(observer, run_id)
        winner, loser = uuid.uuid4(), uuid.uuid4()

        with first.transaction():
            won = claim(first, ids, winner, [V1])
            # the second claim skips the task rows the first holds rather than waiting for them
            lost = Background(lambda: claim(second, ids, loser, [V1])).result(timeout=10)

        assert won == [("claimed", msg, V1, 1) for msg in ids]
        assert lost == [("started", msg, None, None) for msg in ids]
        assert tasks(observer, run_id) == [(i, "started", 1, winner) for i in range(3)], "no attempt consumed"
        live = observer.execute(f"select count(*) from pgmq.q_{QUEUE}").fetchone()
        assert live == (3,), "every message stays in the queue"
        assert observer.execute(
            "select count(*) from pgflow.worker_pauses where flow_slug = %s", [V1]
        ).fetchone() == (0,)
        check_invariants(observer)


def test_workers_of_two_versions_claim_their_own_messages_at_once() -> None:
    with shared_sessions() as (first, second, observer):
        assert compile_on(observer, V1) == "compiled"
        assert compile_on(observer, V2) == "compiled"
        run_1, run_2 = start_run(observer, V1, "[1, 2]"), start_run(observer, V2, "[3]")
        ids = sorted(ids_of(observer, run_1) + ids_of(observer, run_2))
        worker_1, worker_2 = uuid.uuid4(), uuid.uuid4()

        with first.transaction():
            got_1 = claim(first, ids, worker_1, [V1])
            # the same batch, read by a worker of the other version: it must not wait for the first
            got_2 = Background(lambda: claim(second, ids, worker_2, [V2])).result(timeout=10)

        mine_1, mine_2 = ids_of(observer, run_1), ids_of(observer, run_2)
        assert [r for r in got_1 if r[0] == "claimed"] == [("claimed", m, V1, 1) for m in mine_1]
        assert [r for r in got_1 if r[0] != "claimed"] == [("unsupported", m, None, None) for m in mine_2]
        assert [r for r in got_2 if r[0] == "claimed"] == [("claimed", m, V2, 1) for m in mine_2]
        assert [r for r in got_2 if r[0] != "claimed"] == [("unsupported", m, None, None) for m in mine_1]
        assert tasks(observer, run_1) == [(0, "started", 1, worker_1), (1, "started", 1, worker_1)]
        assert tasks(observer, run_2) == [(0, "started", 1, worker_2)]
        check_invariants(observer)


def test_two_flows_declaring_one_new_queue_at_once_serialise_and_reuse_it() -> None:
    with shared_sessions() as (first, second, observer):
        with first.transaction():
            assert compile_on(first, V1) == "compiled"
            job = Background(lambda: compile_on(second, V2))
            assert wait_for_lock_wait(observer, backend_pid(second), job) == "advisory"
        assert job.result() == "compiled"
        declared = observer.execute(
            "select count(*) from pgflow.shared_queues where queue_name = %s", [QUEUE]
        ).fetchone()
        listed = observer.execute("select count(*) from pgmq.meta where queue_name = %s", [QUEUE]).fetchone()
        assert (declared, listed) == ((1,), (1,))
        routes = observer.execute(
            "select flow_slug, queue_name from pgflow.steps where flow_slug = any(%s) order by 1", [[V1, V2]]
        ).fetchall()
        assert routes == [(V1, QUEUE), (V2, QUEUE)]


def test_verifying_flows_of_one_declared_queue_in_opposite_orders_does_not_deadlock() -> None:
    """Two transactions each verify one flow, then the other's: verifying a declared, present shared
    queue takes no lock, so the second only waits for the first's compile lock and both commit."""
    with shared_sessions() as (first, second, observer):
        assert compile_on(observer, V1) == "compiled"
        assert compile_on(observer, V2) == "compiled"
        first.execute("begin")
        second.execute("begin")
        second.execute("set local lock_timeout = '5s'")
        assert compile_on(first, V1) == "verified"
        assert compile_on(second, V2) == "verified", "verifying the declared queue waited for the other"
        job = Background(lambda: compile_on(first, V2))
        wait_for_lock_wait(observer, backend_pid(first), job)
        second.execute("commit")
        assert job.result() == "verified"
        first.execute("commit")
