"""Two sessions decide one concurrency key at once (limit 1). The claim locks the key's slot row and
counts its holds in a later statement, so a second claim of the key waits for the first one's commit
and then sees its hold: only one task of the key is ever started, the other is deferred with no
attempt spent. A completion frees the slot in its own transaction: a claim racing it defers the
waiter, and the woken wait makes that waiter come back 0.25 s later, not after a doubled deferral."""

from __future__ import annotations

import json
import time
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


def test_a_claim_racing_the_completion_that_frees_the_slot_tries_again_soon() -> None:
    with sessions(FLOW) as (first, second, observer):
        (run_a, msg_a), (_, msg_b) = _setup(observer, ["x", "x"])
        assert claim(observer, FLOW, [msg_a, msg_b], uuid.uuid4()) == [
            ("claimed", msg_a, 1),
            ("deferred", msg_b, None),
        ]
        with first.transaction():
            first.execute("select pgflow.complete_task(%s, 'a', 0, 1, '1'::jsonb)", [run_a])
            # the waiter's deferral runs out while the completion that woke it is not committed
            job = Background(lambda: claim(second, FLOW, [msg_b], uuid.uuid4()))
            assert wait_for_lock_wait(observer, backend_pid(second), job) in {"transactionid", "tuple"}
        assert job.result() == [("deferred", msg_b, None)], "the completion was not committed"
        due = live(observer, FLOW)[msg_b]
        assert due <= 0.25, "woken: tried again 0.25 s after the claim decided, not after a doubled deferral"
        time.sleep(max(due, 0) + 0.05)
        assert claim(second, FLOW, [msg_b], uuid.uuid4()) == [("claimed", msg_b, 1)]
        assert _started(observer) == [("x", 1)]
        check_invariants(observer)
