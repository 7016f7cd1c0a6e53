"""Two sessions spend one rate key's tokens. A claim of two keys locks their bucket rows in key order;
while it waits for the first key's row, a claim of the second key alone spends that key's token and
commits. The waiting claim must then refill the second bucket from the time it decides, not from the
time it started waiting: it read its clock before the wait, and writing that earlier time back as the
bucket's refill time moved the bucket back and counted the same interval twice, so the key got tokens
faster than its rate (a flaky 22 starts in 2 s at 10/s with burst 1, across four workers)."""

from __future__ import annotations

import json
import uuid
from datetime import datetime

from tests.sql.interleavings.support import (
    Background,
    backend_pid,
    check_invariants,
    claim,
    sessions,
    start_run,
    wait_for_lock_wait,
)

FLOW = "ilv_rate_buckets"
PERIOD = 60.0
"""One token a minute per tenant, burst 1: a task deferred by the bucket is due exactly one period
after the token before it was spent."""


def _setup(observer, tenants: list[str]) -> list[int]:
    observer.execute("select pgflow.create_flow(%s, timeout => 20)", [FLOW])
    observer.execute("select pgflow.add_step(%s, 'a')", [FLOW])
    limits = [
        {
            "kind": "rate",
            "key_source": "input",
            "key_field": "tenant",
            "amount": 1,
            "period": PERIOD,
            "burst": 1,
        }
    ]
    observer.execute("select pgflow.set_flow_limits(%s, %s::jsonb)", [FLOW, json.dumps(limits)])
    found = []
    for tenant in tenants:
        run_id = start_run(observer, FLOW, json.dumps({"tenant": tenant}))
        row = observer.execute(
            "select message_id from pgflow.step_tasks where run_id = %s", [run_id]
        ).fetchone()
        assert row is not None
        found.append(int(row[0]))
    return found


def _refilled_at(observer, key: str) -> datetime:
    row = observer.execute(
        "select refilled_at from pgflow.limit_slots where flow_slug = %s and kind = 'rate' and key = %s",
        [FLOW, key],
    ).fetchone()
    assert row is not None
    return row[0]  # type: ignore[no-any-return]


def test_a_claim_that_waited_for_a_bucket_refills_it_from_when_it_decides() -> None:
    with sessions(FLOW) as (first, second, observer):
        x0, x1, y0, y1, y2 = _setup(observer, ["x", "x", "y", "y", "y"])
        # y's bucket exists and is full again (its row is not created under the race below)
        assert claim(observer, FLOW, [y0], uuid.uuid4()) == [("claimed", y0, 1)]
        observer.execute(
            "update pgflow.limit_slots set refilled_at = refilled_at - interval '1 hour'"
            " where flow_slug = %s",
            [FLOW],
        )
        with first.transaction():
            assert claim(first, FLOW, [x0], uuid.uuid4()) == [("claimed", x0, 1)]
            # locks x's row (held by first), then y's
            job = Background(lambda: claim(second, FLOW, [x1, y1], uuid.uuid4()))
            assert wait_for_lock_wait(observer, backend_pid(second), job) in {"transactionid", "tuple"}
            # meanwhile a claim of y alone spends y's one token
            assert claim(observer, FLOW, [y2], uuid.uuid4()) == [("claimed", y2, 1)]
            spent = _refilled_at(observer, "y")
        assert job.result() == [("deferred", x1, None), ("deferred", y1, None)]
        assert _refilled_at(observer, "y") >= spent, "the bucket's refill time never moves back"
        row = observer.execute(
            "select extract(epoch from visible_at - %s)::float8 from pgflow.limit_waits"
            " where message_id = %s",
            [spent, y1],
        ).fetchone()
        assert row is not None
        assert abs(row[0] - PERIOD) < 0.001, "y's next token is due one period after the one spent"
        check_invariants(observer)
