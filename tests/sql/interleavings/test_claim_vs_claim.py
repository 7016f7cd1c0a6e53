"""Two workers claim the same messages at once (a message read twice after its visibility expired):
the first claim wins every task; the second never waits for the first one's task locks (a claim holds
its messages, so waiting for a task would break the lock order run, task, message): it answers
``started`` for each message at once and consumes no attempt. Nothing is claimed twice and no message
is lost."""

from __future__ import annotations

import uuid

from tests.sql.interleavings.support import (
    check_invariants,
    claim,
    live,
    message_ids,
    sessions,
    start_run,
    tasks,
)

FLOW = "ilv_claim_claim"


def test_second_claim_skips_the_locked_tasks_and_gets_started_without_an_attempt() -> None:
    with sessions(FLOW) as (first, second, observer):
        observer.execute("select pgflow.create_flow(%s, timeout => 20)", [FLOW])
        observer.execute("select pgflow.add_step(%s, 'm', step_type => 'map')", [FLOW])
        run_id = start_run(observer, FLOW, "[1, 2, 3]")
        ids = message_ids(observer, run_id)
        winner, loser = uuid.uuid4(), uuid.uuid4()

        with first.transaction():
            won = claim(first, FLOW, ids, winner)
            lost = claim(second, FLOW, ids, loser)

        assert won == [("claimed", msg, 1) for msg in ids]
        assert lost == [("started", msg, None) for msg in ids]
        assert tasks(observer, run_id) == [("m", i, "started", 1, 0, winner) for i in range(3)]
        visible_in = live(observer, FLOW)
        assert sorted(visible_in) == ids, "every message stays in the queue"
        assert all(18 <= seconds <= 22.5 for seconds in visible_in.values()), (
            f"the winner's visibility (timeout + 2 s) holds: {visible_in}"
        )
        check_invariants(observer)

        outcomes = [
            row[0]
            for row in observer.execute(
                "select pgflow.complete_task(%s, 'm', %s, 1, to_jsonb(%s))", [run_id, 0, 0]
            ).fetchall()
        ]
        assert outcomes == ["completed"]
        for index in (1, 2):
            observer.execute(
                "select pgflow.complete_task(%s, 'm', %s, 1, to_jsonb(%s))", [run_id, index, index]
            )
        status = observer.execute("select status from pgflow.runs where run_id = %s", [run_id]).fetchone()
        assert status == ("completed",)
        check_invariants(observer, require_terminal=True)
