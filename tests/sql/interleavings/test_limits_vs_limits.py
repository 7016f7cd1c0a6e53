"""Two compilers replacing one flow's limits at once (workers starting together): the second waits on
the per-flow transaction lock of ``set_flow_limits`` and then replaces the rows the first committed,
instead of failing on the primary key of its own insert."""

from __future__ import annotations

import json
from typing import Any

from tests.sql.interleavings.support import (
    Background,
    backend_pid,
    check_invariants,
    sessions,
    wait_for_lock_wait,
)

FLOW = "ilv_limits_limits"


def limits(amount: int) -> str:
    return json.dumps([{"kind": "concurrency", "key_source": "input", "key_field": "k", "amount": amount}])


def test_second_replacement_waits_then_replaces_the_first() -> None:
    with sessions(FLOW) as (first, second, observer):
        observer.execute("select pgflow.create_flow(%s)", [FLOW])
        observer.execute("select pgflow.add_step(%s, 'a')", [FLOW])

        def replace_second() -> Any:
            row = second.execute("select pgflow.set_flow_limits(%s, %s::jsonb)", [FLOW, limits(7)]).fetchone()
            assert row is not None
            return row[0]

        with first.transaction():
            row = first.execute("select pgflow.set_flow_limits(%s, %s::jsonb)", [FLOW, limits(3)]).fetchone()
            assert row == (1,)
            job = Background(replace_second)
            assert wait_for_lock_wait(observer, backend_pid(second), job) == "advisory"
        assert job.result() == 1

        rows = observer.execute(
            "select step_slug, kind, amount from pgflow.flow_limits where flow_slug = %s", [FLOW]
        ).fetchall()
        assert rows == [("", "concurrency", 7)], "the later replacement stands, alone"
        check_invariants(observer, require_terminal=True)
