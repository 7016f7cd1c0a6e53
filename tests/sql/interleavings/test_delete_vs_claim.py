"""Deleting a flow while a worker claims its tasks: a deletion waits for a claim in progress, a claim
during a deletion skips the tasks it holds; then nothing of the flow remains and nothing is claimed
from deleted rows; the claimer's late completion and failure change nothing and raise nothing."""

from __future__ import annotations

import uuid

from tests.sql.interleavings.support import (
    Background,
    Conn,
    backend_pid,
    check_invariants,
    claim,
    message_ids,
    sessions,
    start_run,
    wait_for_lock_wait,
)

FLOW = "ilv_delete_claim"


def _flow_with_run(observer: Conn) -> tuple[uuid.UUID, list[int]]:
    observer.execute("select pgflow.create_flow(%s, timeout => 10)", [FLOW])
    observer.execute("select pgflow.add_step(%s, 'm', step_type => 'map')", [FLOW])
    run_id = start_run(observer, FLOW, "[1, 2]")
    return run_id, message_ids(observer, run_id)


def _gone(observer: Conn, run_id: uuid.UUID) -> None:
    counts = observer.execute(
        "select (select count(*) from pgflow.flows where flow_slug = %s), "
        "(select count(*) from pgflow.runs where run_id = %s), "
        "(select count(*) from pgflow.step_tasks where run_id = %s), "
        "(select count(*) from pgmq.meta where queue_name = %s), "
        "to_regclass(%s) is null",
        [FLOW, run_id, run_id, FLOW, f"pgmq.q_{FLOW}"],
    ).fetchone()
    assert counts == (0, 0, 0, 0, True)


def _late_callbacks(conn: Conn, run_id: uuid.UUID) -> list[str]:
    done = conn.execute("select pgflow.complete_task(%s, 'm', 0, 1, '1'::jsonb)", [run_id]).fetchone()
    failed = conn.execute("select pgflow.fail_task(%s, 'm', 1, 1, 'late')", [run_id]).fetchone()
    assert done is not None and failed is not None
    return [str(done[0]), str(failed[0])]


def test_deletion_waits_for_a_claim_in_progress() -> None:
    with sessions(FLOW) as (first, second, observer):
        run_id, ids = _flow_with_run(observer)

        with first.transaction():
            assert claim(first, FLOW, ids, uuid.uuid4()) == [("claimed", msg, 1) for msg in ids]
            job = Background(lambda: second.execute("select pgflow.delete_flow_and_data(%s)", [FLOW]))
            wait_for_lock_wait(observer, backend_pid(second), job)
        job.result()

        _gone(observer, run_id)
        assert _late_callbacks(first, run_id) == ["stale", "stale"]
        _gone(observer, run_id)
        check_invariants(observer, require_terminal=True)


def test_claim_during_a_deletion_in_progress_skips_its_tasks_and_claims_nothing() -> None:
    """The claim holds its messages, so it never waits for the tasks the deletion holds (the deletion
    then waits for the queue): it answers at once and claims nothing."""
    with sessions(FLOW) as (first, second, observer):
        run_id, ids = _flow_with_run(observer)

        with first.transaction():
            first.execute("select pgflow.delete_flow_and_data(%s)", [FLOW])
            outcomes = claim(second, FLOW, ids, uuid.uuid4())

        assert [row[1] for row in outcomes] == ids
        assert all(outcome != "claimed" and attempt is None for outcome, _, attempt in outcomes), outcomes
        _gone(observer, run_id)
        check_invariants(observer, require_terminal=True)
