"""Step workers on two connections. Workers of different steps of the same run claim from their own
queues at the same time without waiting for each other; two workers of the same step claiming the same
messages never claim a task twice (the second skips the task rows the first holds, gets ``started``
and consumes no attempt); a deletion
waits for a step claim in progress (runtime rows before queues). The order is driven by lock waits
seen in ``pg_stat_activity``, never by sleeping."""

from __future__ import annotations

import uuid
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
from tests.sql.step_queues.support import step_shape
from tests.sql.support import jb, shape_step

FLOW = "ilv_step_queues"
QA, QB = f"{FLOW}__a", f"{FLOW}__b"


def compile_on(conn: Conn) -> None:
    """``a`` a map step and ``b`` a single root step, each on its private queue."""
    definition = step_shape(shape_step("a", step_type="map"), shape_step("b"), timeout=20)
    row = conn.execute("select pgflow.ensure_flow_compiled(%s, %s::jsonb)", [FLOW, jb(definition)]).fetchone()
    assert row is not None and row[0]["status"] == "compiled", row


def ids_of(conn: Conn, run_id: uuid.UUID, step_slug: str) -> list[int]:
    return [
        int(r[0])
        for r in conn.execute(
            "select message_id from pgflow.step_tasks where run_id = %s and step_slug = %s "
            "order by task_index",
            [run_id, step_slug],
        ).fetchall()
    ]


def claim(conn: Conn, queue: str, step_slug: str, ids: list[int], worker: uuid.UUID) -> list[tuple[Any, ...]]:
    """(outcome, message_id, step_slug, attempt) per message, by message id."""
    return [
        tuple(r)
        for r in conn.execute(
            "select outcome, message_id, step_slug, attempt "
            "from pgflow.start_tasks(%s, %s, %s::bigint[], %s, %s) order by message_id",
            [queue, FLOW, ids, worker, step_slug],
        ).fetchall()
    ]


def statuses(conn: Conn, run_id: uuid.UUID) -> list[tuple[Any, ...]]:
    return [
        tuple(r)
        for r in conn.execute(
            "select step_slug, task_index, status, attempts_count, last_worker_id from pgflow.step_tasks "
            "where run_id = %s order by step_slug, task_index",
            [run_id],
        ).fetchall()
    ]


def test_workers_of_two_steps_claim_the_same_run_at_once() -> None:
    with sessions(FLOW) as (first, second, observer):
        compile_on(observer)
        run_id = start_run(observer, FLOW, "[1, 2]")
        a_ids, b_ids = ids_of(observer, run_id, "a"), ids_of(observer, run_id, "b")
        worker_a, worker_b = uuid.uuid4(), uuid.uuid4()

        with first.transaction():
            won_a = claim(first, QA, "a", a_ids, worker_a)
            # the other step's claim runs while the first transaction is open: it must not wait
            won_b = Background(lambda: claim(second, QB, "b", b_ids, worker_b)).result(timeout=10)

        assert won_a == [("claimed", msg, "a", 1) for msg in a_ids]
        assert won_b == [("claimed", msg, "b", 1) for msg in b_ids]
        assert statuses(observer, run_id) == [
            ("a", 0, "started", 1, worker_a),
            ("a", 1, "started", 1, worker_a),
            ("b", 0, "started", 1, worker_b),
        ]
        check_invariants(observer)


def test_two_workers_of_one_step_never_claim_its_tasks_twice() -> None:
    with sessions(FLOW) as (first, second, observer):
        compile_on(observer)
        run_id = start_run(observer, FLOW, "[1, 2, 3]")
        ids = ids_of(observer, run_id, "a")
        winner, loser = uuid.uuid4(), uuid.uuid4()

        with first.transaction():
            won = claim(first, QA, "a", ids, winner)
            # the second claim skips the task rows the first holds rather than waiting for them
            lost = Background(lambda: claim(second, QA, "a", ids, loser)).result(timeout=10)

        assert won == [("claimed", msg, "a", 1) for msg in ids]
        assert lost == [("started", msg, None, None) for msg in ids]
        assert [row[2:] for row in statuses(observer, run_id) if row[0] == "a"] == [
            ("started", 1, winner)
        ] * 3
        live = observer.execute(f"select count(*) from pgmq.q_{QA}").fetchone()
        assert live == (3,), "every message stays in its queue"
        assert observer.execute(
            "select count(*) from pgflow.worker_pauses where flow_slug = %s", [FLOW]
        ).fetchone() == (0,)
        check_invariants(observer)


def test_deletion_waits_for_a_step_claim_in_progress() -> None:
    with sessions(FLOW) as (first, second, observer):
        compile_on(observer)
        run_id = start_run(observer, FLOW, "[1]")
        ids = ids_of(observer, run_id, "b")

        with first.transaction():
            assert claim(first, QB, "b", ids, uuid.uuid4()) == [("claimed", ids[0], "b", 1)]
            job = Background(lambda: second.execute("select pgflow.delete_flow_and_data(%s)", [FLOW]))
            wait_for_lock_wait(observer, backend_pid(second), job)
        job.result()

        gone = observer.execute(
            "select (select count(*) from pgflow.flows where flow_slug = %s), "
            "(select count(*) from pgflow.step_tasks where run_id = %s), "
            "(select count(*) from pgmq.meta where queue_name like %s), "
            "to_regclass(%s) is null and to_regclass(%s) is null",
            [FLOW, run_id, f"{FLOW}%", f"pgmq.q_{QA}", f"pgmq.a_{QB}"],
        ).fetchone()
        assert gone == (0, 0, 0, True)
        check_invariants(observer, require_terminal=True)


def test_a_second_compilation_waits_then_verifies_and_reuses_the_queues() -> None:
    """Two workers of different steps start together: one creates the private queues, the other waits
    on the per-flow lock and then verifies them (no second provisioning, no 'already exists')."""
    definition = jb(step_shape(shape_step("a", step_type="map"), shape_step("b"), timeout=20))
    with sessions(FLOW) as (first, second, observer):
        with first.transaction():
            row = first.execute(
                "select pgflow.ensure_flow_compiled(%s, %s::jsonb)", [FLOW, definition]
            ).fetchone()
            assert row is not None and row[0]["status"] == "compiled"
            job = Background(
                lambda: second.execute(
                    "select pgflow.ensure_flow_compiled(%s, %s::jsonb)", [FLOW, definition]
                ).fetchone()
            )
            assert wait_for_lock_wait(observer, backend_pid(second), job) == "advisory"
        (answer,) = job.result()
        assert answer["status"] == "verified"
        queues = observer.execute(
            "select array_agg(queue_name::text order by queue_name) from pgmq.meta where queue_name like %s",
            [f"{FLOW}%"],
        ).fetchone()
        assert queues == ([QA, QB],)
