"""Direct hand-off against other writers on two connections. A handed-off task's message is created
and claimed by one transaction, so a concurrent read never sees it visible: not before the commit
(uncommitted), nor after it (hidden for the claim's timeout); read once its visibility expires, the
claim finds the task started and consumes no attempt. Two completions that each make a join step
ready only together serialize on the run's row lock, and exactly one of them is handed the step."""

from __future__ import annotations

import json
import uuid
from typing import Any

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

FLOW = "ilv_hand_off"


def task_of(conn: Conn, run_id: uuid.UUID, step_slug: str) -> tuple[int, int]:
    """(message_id, attempt) of the run's task of ``step_slug``."""
    row = conn.execute(
        "select message_id, attempts_count from pgflow.step_tasks where run_id = %s and step_slug = %s",
        [run_id, step_slug],
    ).fetchone()
    assert row is not None
    return int(row[0]), int(row[1])


def complete_handing_off(
    conn: Conn, run_id: uuid.UUID, step_slug: str, attempt: int, worker: uuid.UUID, steps: list[str]
) -> list[tuple[Any, ...]]:
    """complete_and_hand_off of one task for ``worker`` (supporting ``steps``): (outcome, step) rows."""
    items = json.dumps(
        [{"run_id": str(run_id), "step_slug": step_slug, "task_index": 0, "attempt": attempt, "output": 1}]
    )
    return [
        tuple(row)
        for row in conn.execute(
            "select c.outcome, c.step_slug from pgflow.complete_and_hand_off(%s::jsonb, %s, %s, %s::text[], "
            "%s::text[], (select array_agg(f.generation) from unnest(%s::text[]) as s "
            "join pgflow.flows as f on f.flow_slug = %s), 8) as c",
            [items, FLOW, worker, [FLOW] * len(steps), steps, steps, FLOW],
        ).fetchall()
    ]


def read(conn: Conn) -> list[int]:
    return [int(row[0]) for row in conn.execute("select msg_id from pgmq.read(%s, 5, 10)", [FLOW]).fetchall()]


def test_a_concurrent_read_never_sees_a_handed_off_task_visible() -> None:
    with sessions(FLOW) as (first, second, observer):
        observer.execute("select pgflow.create_flow(%s, timeout => 20)", [FLOW])
        observer.execute("select pgflow.add_step(%s, 'a')", [FLOW])
        observer.execute("select pgflow.add_step(%s, 'b', deps_slugs => array['a'])", [FLOW])
        run_id = start_run(observer, FLOW)
        a_msg, _ = task_of(observer, run_id, "a")
        finisher, reader = uuid.uuid4(), uuid.uuid4()
        assert claim(first, FLOW, [a_msg], finisher) == [("claimed", a_msg, 1)]

        with first.transaction():
            handed = complete_handing_off(first, run_id, "a", 1, finisher, ["a", "b"])
            assert handed == [("completed", "a"), ("claimed", "b")]
            assert read(second) == [], "the uncommitted message is invisible to another session"

        assert read(second) == [], "committed, it is hidden for the hand-off claim's timeout"
        b_msg, attempt = task_of(observer, run_id, "b")
        assert attempt == 1
        assert 18 <= live(observer, FLOW)[b_msg] <= 22.5
        observer.execute(f"update pgmq.q_{FLOW} set vt = clock_timestamp() - interval '1 second'")
        assert read(second) == [b_msg]
        assert claim(second, FLOW, [b_msg], reader) == [("started", b_msg, None)], "not claimed twice"
        assert [(*t[:4], t[5]) for t in tasks(observer, run_id)] == [
            ("a", 0, "completed", 1, finisher),
            ("b", 0, "started", 1, finisher),
        ]
        check_invariants(observer)

        assert complete_handing_off(first, run_id, "b", 1, finisher, ["a", "b"]) == [("completed", "b")]
        check_invariants(observer, require_terminal=True)


def test_two_completions_making_a_join_ready_hand_it_to_exactly_one_worker() -> None:
    with sessions(FLOW) as (first, second, observer):
        observer.execute("select pgflow.create_flow(%s, timeout => 20)", [FLOW])
        observer.execute("select pgflow.add_step(%s, 'a')", [FLOW])
        observer.execute("select pgflow.add_step(%s, 'b')", [FLOW])
        observer.execute("select pgflow.add_step(%s, 'c', deps_slugs => array['a', 'b'])", [FLOW])
        run_id = start_run(observer, FLOW)
        one, two = uuid.uuid4(), uuid.uuid4()
        assert claim(first, FLOW, [task_of(observer, run_id, "a")[0]], one)[0][0] == "claimed"
        assert claim(second, FLOW, [task_of(observer, run_id, "b")[0]], two)[0][0] == "claimed"

        with first.transaction():
            first_rows = complete_handing_off(first, run_id, "a", 1, one, ["a", "b", "c"])
            job = Background(lambda: complete_handing_off(second, run_id, "b", 1, two, ["a", "b", "c"]))
            wait_for_lock_wait(observer, backend_pid(second), job)
        second_rows = job.result()

        assert first_rows == [("completed", "a")], "c was not ready yet when a completed"
        assert second_rows == [("completed", "b"), ("claimed", "c")]
        assert [(*t[:4], t[5]) for t in tasks(observer, run_id)] == [
            ("a", 0, "completed", 1, one),
            ("b", 0, "completed", 1, two),
            ("c", 0, "started", 1, two),
        ]
        assert read(first) == [], "c's message is hidden for its claim"
        check_invariants(observer)


def test_the_wake_up_goes_only_to_a_queue_left_with_new_messages() -> None:
    with sessions(FLOW) as (first, listener, observer):
        observer.execute("select pgflow.create_flow(%s, timeout => 20)", [FLOW])
        observer.execute("select pgflow.add_step(%s, 'a')", [FLOW])
        observer.execute("select pgflow.add_step(%s, 'b', deps_slugs => array['a'])", [FLOW])
        listener.execute(f'listen "pgmq.q_{FLOW}.INSERT"')
        worker = uuid.uuid4()

        def finish_a(steps: list[str]) -> tuple[list[tuple[Any, ...]], int]:
            run_id = start_run(observer, FLOW)
            list(listener.notifies(timeout=0.2))
            claim(first, FLOW, [task_of(observer, run_id, "a")[0]], worker)
            rows = complete_handing_off(first, run_id, "a", 1, worker, steps)
            return rows, len(list(listener.notifies(timeout=0.5)))

        assert finish_a(["a", "b"]) == ([("completed", "a"), ("claimed", "b")], 0), (
            "b was handed off: nobody is woken to read it"
        )
        assert finish_a(["a"]) == ([("completed", "a")], 1), "b is left on the queue: its workers are woken"
