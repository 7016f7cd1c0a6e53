"""Two sessions decide one concurrency key at once (limit 1). The claim locks the key's slot row and
counts its holds in a later statement, so a second claim of the key waits for the first one's commit
and then sees its hold: only one task of the key is ever started, the other is deferred with no
attempt spent. A completion that frees the slot locks the same row first: a claim racing it waits
for the completion and takes the slot, and a completion racing a claim waits for that claim and then
wakes the task it deferred, so the slot is never left unused while the waiter sits out a deferral."""

from __future__ import annotations

import json
import uuid

from tests.sql.interleavings.support import (
    Background,
    backend_pid,
    check_invariants,
    claim,
    live,
    sessions,
    start_run,
    wait_for_lock_wait,
)

FLOW = "ilv_limit_slots"


def _setup(observer, tenants: list[str]) -> list[tuple[uuid.UUID, int]]:
    observer.execute("select pgflow.create_flow(%s, timeout => 20)", [FLOW])
    observer.execute("select pgflow.add_step(%s, 'a')", [FLOW])
    limits = [{"kind": "concurrency", "key_source": "input", "key_field": "tenant", "amount": 1}]
    observer.execute("select pgflow.set_flow_limits(%s, %s::jsonb)", [FLOW, json.dumps(limits)])
    found = []
    for tenant in tenants:
        run_id = start_run(observer, FLOW, json.dumps({"tenant": tenant}))
        row = observer.execute(
            "select message_id from pgflow.step_tasks where run_id = %s", [run_id]
        ).fetchone()
        assert row is not None
        found.append((run_id, int(row[0])))
    return found


def _queue_table(observer) -> str:
    row = observer.execute("select pgmq.format_table_name(%s, 'q')", [FLOW.lower()]).fetchone()
    assert row is not None
    return str(row[0])


def _hold_back(observer, msg_ids: list[int]) -> None:
    """Hide deferred waiters 30 s (their deferrals last 0.5 to 1.5 s), so that only a wake-up shows them."""
    observer.execute(
        "update pgflow.limit_waits set visible_at = clock_timestamp() + interval '30 s'"
        " where message_id = any(%s)",
        [msg_ids],
    )
    observer.execute(
        f"update pgmq.\"{_queue_table(observer)}\" set vt = clock_timestamp() + interval '30 s'"
        " where msg_id = any(%s)",
        [msg_ids],
    )


def _woken(observer, msg_id: int) -> bool:
    row = observer.execute(
        "select woken_at is not null from pgflow.limit_waits where message_id = %s", [msg_id]
    ).fetchone()
    assert row is not None
    return bool(row[0])


def _started(observer) -> list[tuple[str, int]]:
    rows = observer.execute(
        "select r.input ->> 'tenant', t.attempts_count from pgflow.step_tasks as t"
        " join pgflow.runs as r using (run_id) where t.flow_slug = %s and t.status = 'started' order by 1",
        [FLOW],
    ).fetchall()
    return [(str(tenant), int(attempts)) for tenant, attempts in rows]


def test_two_claims_of_one_key_decide_one_after_the_other() -> None:
    with sessions(FLOW) as (first, second, observer):
        (_, msg_a), (run_b, msg_b), (_, msg_c) = _setup(observer, ["x", "x", "y"])
        with first.transaction():
            assert claim(first, FLOW, [msg_a], uuid.uuid4()) == [("claimed", msg_a, 1)]
            job = Background(lambda: claim(second, FLOW, [msg_b, msg_c], uuid.uuid4()))
            assert wait_for_lock_wait(observer, backend_pid(second), job) in {"transactionid", "tuple"}
        assert job.result() == [("deferred", msg_b, None), ("claimed", msg_c, 1)]
        assert _started(observer) == [("x", 1), ("y", 1)]
        attempts = observer.execute("select attempts_count from pgflow.step_tasks where run_id = %s", [run_b])
        assert attempts.fetchone() == (0,), "the deferred task spent no attempt"
        assert 0.4 < live(observer, FLOW)[msg_b] <= 1.5
        check_invariants(observer)


def test_a_claim_racing_the_completion_that_frees_the_slot_waits_for_it_and_takes_the_slot() -> None:
    with sessions(FLOW) as (first, second, observer):
        (run_a, msg_a), (_, msg_b) = _setup(observer, ["x", "x"])
        assert claim(observer, FLOW, [msg_a, msg_b], uuid.uuid4()) == [
            ("claimed", msg_a, 1),
            ("deferred", msg_b, None),
        ]
        with first.transaction():
            first.execute("select pgflow.complete_task(%s, 'a', 0, 1, '1'::jsonb)", [run_a])
            # the waiter's deferral runs out while the completion that frees its slot is not committed
            job = Background(lambda: claim(second, FLOW, [msg_b], uuid.uuid4()))
            assert wait_for_lock_wait(observer, backend_pid(second), job) in {"transactionid", "tuple"}
        assert job.result() == [("claimed", msg_b, 1)], "the claim counted the holds after the completion"
        assert _started(observer) == [("x", 1)]
        check_invariants(observer)


def test_a_completion_racing_a_claim_that_defers_the_only_waiter_wakes_it() -> None:
    with sessions(FLOW) as (first, second, observer):
        (run_a, msg_a), (_, msg_b) = _setup(observer, ["x", "x"])
        assert claim(observer, FLOW, [msg_a], uuid.uuid4()) == [("claimed", msg_a, 1)]
        with first.transaction():
            # the claim counts the slot run_a holds and defers the key's only waiter, not yet committed
            assert claim(first, FLOW, [msg_b], uuid.uuid4()) == [("deferred", msg_b, None)]
            job = Background(
                lambda: second.execute("select pgflow.complete_task(%s, 'a', 0, 1, '1'::jsonb)", [run_a])
            )
            assert wait_for_lock_wait(observer, backend_pid(second), job) in {"transactionid", "tuple"}
        job.result()
        assert live(observer, FLOW)[msg_b] <= 0, "woken by the completion once the claim had committed"
        assert claim(observer, FLOW, [msg_b], uuid.uuid4()) == [("claimed", msg_b, 1)]
        assert _started(observer) == [("x", 1)]
        check_invariants(observer)


MAP_FLOW = "ilv_limit_slots_map"


def test_a_run_failed_by_its_output_while_a_claim_defers_the_only_waiter_wakes_it() -> None:
    """The completion fails the run (its output cannot feed the map): that run's slot is freed by the
    completion's last statement, which waits for the claim, not by the run's failure before it."""
    with sessions(MAP_FLOW) as (first, second, observer):
        observer.execute("select pgflow.create_flow(%s, timeout => 20)", [MAP_FLOW])
        observer.execute("select pgflow.add_step(%s, 'a')", [MAP_FLOW])
        observer.execute("select pgflow.add_step(%s, 'm', array['a'], step_type => 'map')", [MAP_FLOW])
        limits = [{"kind": "concurrency", "key_source": "input", "key_field": "tenant", "amount": 1}]
        observer.execute("select pgflow.set_flow_limits(%s, %s::jsonb)", [MAP_FLOW, json.dumps(limits)])
        runs = [start_run(observer, MAP_FLOW, json.dumps({"tenant": "x"})) for _ in range(2)]
        msg_a, msg_b = (
            int(row[0])
            for row in observer.execute(
                "select message_id from pgflow.step_tasks where run_id = any(%s) order by run_id", [runs]
            ).fetchall()
        )
        assert claim(observer, MAP_FLOW, [msg_a], uuid.uuid4()) == [("claimed", msg_a, 1)]
        with first.transaction():
            assert claim(first, MAP_FLOW, [msg_b], uuid.uuid4()) == [("deferred", msg_b, None)]
            job = Background(
                lambda: second.execute(
                    "select pgflow.complete_task(%s, 'a', 0, 1, '1'::jsonb)", [runs[0]]
                ).fetchone()
            )
            assert wait_for_lock_wait(observer, backend_pid(second), job) in {"transactionid", "tuple"}
        assert job.result() == ("failed",)
        assert live(observer, MAP_FLOW)[msg_b] <= 0, "woken once the claim had committed"
        check_invariants(observer)


def test_a_failure_racing_a_claim_that_defers_the_only_waiter_leaves_it_to_the_recovery_sweep() -> None:
    """A failure releases without waiting for claims (it archives and updates messages afterwards, and a
    claim holds its messages while it waits for a key row), so the waiter the claim defers meanwhile is
    not woken by it. The slot stays free only until stalled recovery's next sweep, which wakes as many
    waiters as a key has slots unused; the limit still holds."""
    with sessions(FLOW) as (first, second, observer):
        (run_a, msg_a), (_, msg_b) = _setup(observer, ["x", "x"])
        assert claim(observer, FLOW, [msg_a], uuid.uuid4()) == [("claimed", msg_a, 1)]
        with first.transaction():
            assert claim(first, FLOW, [msg_b], uuid.uuid4()) == [("deferred", msg_b, None)]
            second.execute("select pgflow.fail_task(%s, 'a', 0, 1, 'boom', 60)", [run_a])
        assert live(observer, FLOW)[msg_b] > 0, "the failure could not see the deferral it raced"
        assert _started(observer) == []

        observer.execute("select * from pgflow.requeue_stalled_tasks()")

        assert live(observer, FLOW)[msg_b] <= 0, "the sweep woke the waiter of the unused slot"
        assert claim(observer, FLOW, [msg_b], uuid.uuid4()) == [("claimed", msg_b, 1)]
        assert _started(observer) == [("x", 1)]
        check_invariants(observer)


def test_the_recovery_sweep_wakes_waiters_only_after_its_exhaustions_wait_for_messages() -> None:
    """Stalled recovery exhausts a permanently stalled task (waiting for its message, which a claim
    holds) and then sweeps the limits. The sweep's wake-ups lock wait rows that the same claim updates
    next; taken before the exhaustion's wait, they closed a cycle (the claim waited for the sweep, the
    sweep for the claim's message). Now the claim goes first, and both finish."""
    with sessions(FLOW) as (first, second, observer):
        (run_a, msg_a), (_, msg_w), (run_s, msg_s) = _setup(observer, ["x", "x", "z"])
        assert claim(observer, FLOW, [msg_a], uuid.uuid4()) == [("claimed", msg_a, 1)]
        assert claim(observer, FLOW, [msg_w], uuid.uuid4()) == [("deferred", msg_w, None)]
        assert claim(observer, FLOW, [msg_s], uuid.uuid4()) == [("claimed", msg_s, 1)]
        observer.execute("select pgflow.complete_task(%s, 'a', 0, 1, '1'::jsonb)", [run_a])
        # x's slot is free and its only waiter deferred (a lost wake-up), z's task permanently stalled
        observer.execute(
            "update pgflow.limit_waits set woken_at = null, visible_at = clock_timestamp() + interval '30 s'"
        )
        observer.execute(
            "update pgflow.step_tasks set requeued_count = 3, started_at = now() - interval '100 s'"
            " where run_id = %s",
            [run_s],
        )
        table = observer.execute("select pgmq.format_table_name(%s, 'q')", [FLOW.lower()]).fetchone()
        assert table is not None
        with first.transaction():
            # a claim's read holds both messages
            first.execute(
                f'select msg_id from pgmq."{table[0]}" where msg_id = any(%s) order by msg_id for update',
                [[msg_s, msg_w]],
            )
            sweep = Background(
                lambda: second.execute("select * from pgflow.requeue_stalled_tasks()").fetchall()
            )
            assert wait_for_lock_wait(observer, backend_pid(second), sweep) in {"transactionid", "tuple"}
            claimed = claim(first, FLOW, [msg_s, msg_w], uuid.uuid4())
        assert claimed == [("claimed", msg_w, 1), ("started", msg_s, None)]
        assert dict(sweep.result()) == {"requeued": 0, "permanently_stalled": 1}
        assert _started(observer) == [("x", 1)]
        check_invariants(observer)


def test_a_waiter_whose_message_a_read_holds_is_passed_over_for_the_next_one() -> None:
    """A read locks the newest version of a message before it checks its visibility, and keeps the lock
    of one it then finds hidden until its claim commits. A completion freeing a slot meanwhile cannot
    make that waiter's message visible: it wakes the key's next waiter instead, and leaves the first
    one unwoken, so the key's next freed slot wakes it (marked woken with its message still hidden, it
    was passed over until its deferral ended)."""
    with sessions(FLOW) as (first, second, observer):
        (run_a, msg_a), (_, msg_w1), (_, msg_w2) = _setup(observer, ["x", "x", "x"])
        assert claim(observer, FLOW, [msg_a], uuid.uuid4()) == [("claimed", msg_a, 1)]
        assert claim(observer, FLOW, [msg_w1], uuid.uuid4()) == [("deferred", msg_w1, None)]
        assert claim(observer, FLOW, [msg_w2], uuid.uuid4()) == [("deferred", msg_w2, None)]
        _hold_back(observer, [msg_w2])
        table = _queue_table(observer)
        # the first waiter's deferral ends, and a claim reads it again and defers it again (its fifth
        # deferral: 8 s or more)
        observer.execute(f'update pgmq."{table}" set vt = clock_timestamp() where msg_id = %s', [msg_w1])
        observer.execute("update pgflow.limit_waits set deferrals = 4 where message_id = %s", [msg_w1])
        second.execute("begin")
        with first.transaction():
            assert claim(first, FLOW, [msg_w1], uuid.uuid4()) == [("deferred", msg_w1, None)]
            # a read that saw the message visible waits for that claim, then finds it hidden
            read = Background(
                lambda: second.execute(
                    f'select msg_id from pgmq."{table}" where msg_id = %s and vt <= clock_timestamp()'
                    " for update",
                    [msg_w1],
                ).fetchall()
            )
            assert wait_for_lock_wait(observer, backend_pid(second), read) in {"transactionid", "tuple"}
        assert read.result() == [], "the read found the message hidden, and keeps its lock"

        observer.execute("select pgflow.complete_task(%s, 'a', 0, 1, '1'::jsonb)", [run_a])

        visible = live(observer, FLOW)
        assert visible[msg_w2] <= 0 and _woken(observer, msg_w2), "the slot went to the key's next waiter"
        assert visible[msg_w1] > 0
        assert not _woken(observer, msg_w1), "the waiter whose message the read held stays unwoken"
        second.execute("commit")
        assert claim(observer, FLOW, [msg_w2], uuid.uuid4()) == [("claimed", msg_w2, 1)]
        run_w2 = observer.execute("select run_id from pgflow.step_tasks where message_id = %s", [msg_w2])
        row = run_w2.fetchone()
        assert row is not None
        observer.execute("select pgflow.complete_task(%s, 'a', 0, 1, '1'::jsonb)", [row[0]])
        assert live(observer, FLOW)[msg_w1] <= 0, "the key's next freed slot woke it"
        assert claim(observer, FLOW, [msg_w1], uuid.uuid4()) == [("claimed", msg_w1, 1)]
        check_invariants(observer)


def test_a_release_whose_only_waiter_a_read_holds_leaves_it_to_the_recovery_sweep() -> None:
    with sessions(FLOW) as (first, second, observer):
        (run_a, msg_a), (_, msg_w) = _setup(observer, ["x", "x"])
        assert claim(observer, FLOW, [msg_a], uuid.uuid4()) == [("claimed", msg_a, 1)]
        assert claim(observer, FLOW, [msg_w], uuid.uuid4()) == [("deferred", msg_w, None)]
        _hold_back(observer, [msg_w])
        with first.transaction():
            first.execute(
                f'select msg_id from pgmq."{_queue_table(observer)}" where msg_id = %s for update', [msg_w]
            )
            second.execute("select pgflow.complete_task(%s, 'a', 0, 1, '1'::jsonb)", [run_a])
        assert live(observer, FLOW)[msg_w] > 0
        assert not _woken(observer, msg_w), "not marked woken while its message stayed hidden"

        observer.execute("select * from pgflow.requeue_stalled_tasks()")

        assert live(observer, FLOW)[msg_w] <= 0 and _woken(observer, msg_w), "the sweep woke the waiter"
        assert claim(observer, FLOW, [msg_w], uuid.uuid4()) == [("claimed", msg_w, 1)]
        check_invariants(observer)


def test_two_releases_of_one_key_share_its_waiters_without_waiting_for_each_other() -> None:
    """A failure (which does not wait for claims) frees a slot and wakes the key's oldest waiter, not
    yet committed; a completion freeing the key's other slot meanwhile finds that waiter's message
    held, passes it over and wakes the next one, without waiting: each slot wakes one waiter."""
    limits = [{"kind": "concurrency", "key_source": "input", "key_field": "tenant", "amount": 2}]
    with sessions(FLOW) as (first, second, observer):
        (run_a, msg_a), (run_b, msg_b), (_, msg_w1), (_, msg_w2), (_, msg_w3) = _setup(observer, ["x"] * 5)
        observer.execute("select pgflow.set_flow_limits(%s, %s::jsonb)", [FLOW, json.dumps(limits)])
        assert claim(observer, FLOW, [msg_a, msg_b], uuid.uuid4()) == [
            ("claimed", msg_a, 1),
            ("claimed", msg_b, 1),
        ]
        for waiter in (msg_w1, msg_w2, msg_w3):
            assert claim(observer, FLOW, [waiter], uuid.uuid4()) == [("deferred", waiter, None)]
        _hold_back(observer, [msg_w1, msg_w2, msg_w3])
        with first.transaction():
            first.execute("select pgflow.fail_task(%s, 'a', 0, 1, 'boom', 60)", [run_a])
            second.execute("select pgflow.complete_task(%s, 'a', 0, 1, '1'::jsonb)", [run_b])
            visible = live(observer, FLOW)
            assert visible[msg_w2] <= 0 < visible[msg_w1], "the completion woke the next waiter at once"
            assert _woken(observer, msg_w2)
        visible = live(observer, FLOW)
        assert visible[msg_w1] <= 0 and visible[msg_w2] <= 0 < visible[msg_w3], "one waiter per freed slot"
        assert claim(observer, FLOW, [msg_w1, msg_w2], uuid.uuid4()) == [
            ("claimed", msg_w1, 1),
            ("claimed", msg_w2, 1),
        ]
        check_invariants(observer)
