"""``pgflow.start_shared_tasks(queue, msg_ids, worker, support_flows, support_steps)`` (issue 6, items 5
and 8): one call classifies a mixed batch by persisted (queue_name, message_id) identity and the exact
support set, following the seed's table. Only the eligible supported task is claimed; started work
consumes no attempt; terminal supported work is archived; unmatched and unsupported messages, and
ineligible tasks, are left exactly as they were. Nothing pauses anything."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from django.db import connection

from tests.ledger import assert_invariants
from tests.sql.shared_queues.support import (
    BULK,
    FAST,
    claim_shared,
    compile_routed,
    message_ids,
    outcomes,
    read,
)
from tests.sql.support import (
    archived_ids,
    assert_visible_in,
    complete,
    db_error,
    live_ids,
    message_row,
    q,
    send_raw,
    shape_step,
    start,
    task,
    unarchive,
    val,
    vt_in,
)

A, B = "sq_support", "sq_other"
A_STEPS = (
    shape_step("classify", timeout=7),
    shape_step("enrich", "classify"),
    shape_step("deliver", "enrich"),
)
SUPPORT_A_FAST = [(A, "classify"), (A, "enrich")]


def two_flows() -> None:
    """A: classify and enrich on FAST, deliver on BULK (timeout 20, classify 7). B: fetch on FAST."""
    compile_routed(A, None, *A_STEPS, timeout=20)
    compile_routed(B, {"fetch": FAST}, shape_step("fetch"))


def observable(run_id: uuid.UUID, step_slug: str) -> dict[str, Any]:
    """Every column a claim could change on a task row."""
    row = task(run_id, step_slug)
    return {k: row[k] for k in ("status", "attempts_count", "started_at", "last_worker_id", "message_id")}


def message_state(msg_id: int) -> tuple[Any, ...] | None:
    row = message_row(FAST, msg_id)
    return None if row is None else (row["vt"], row["read_ct"], row["message"])


def test_a_mixed_batch_in_one_call() -> None:
    two_flows()
    eligible, started, terminal, ineligible = (start(A, {"n": n}) for n in range(4))
    other = start(B, {"n": 9})
    (eligible_msg,) = message_ids(eligible, "classify")
    (started_msg,) = message_ids(started, "classify")
    (terminal_msg,) = message_ids(terminal, "classify")
    (ineligible_msg,) = message_ids(ineligible, "classify")
    (unsupported_msg,) = message_ids(other, "fetch")

    # started elsewhere: claimed by another worker of the same queue
    (rec,) = claim_shared(FAST, [started_msg], SUPPORT_A_FAST)
    assert rec["outcome"] == "claimed"
    # terminal: completed, and its message put back as if an earlier archive had been lost
    (done,) = claim_shared(FAST, [terminal_msg], SUPPORT_A_FAST)
    assert complete(done, ["x"]) == "completed"
    assert terminal_msg in archived_ids(FAST)
    unarchive(FAST, terminal_msg)
    # ineligible: the run is failed while its task row still says queued (the guard itself)
    q("update pgflow.runs set status = 'failed', failed_at = now() where run_id = %s", [ineligible])
    # unmatched: an application's message that no task has
    unmatched_msg = send_raw(FAST, {"flow_slug": A, "run_id": str(uuid.uuid4()), "step_slug": "classify"})
    q(f"update pgmq.q_{FAST} set vt = clock_timestamp() - interval '1 second'")

    mine = [eligible_msg, started_msg, terminal_msg, ineligible_msg, unsupported_msg, unmatched_msg]
    (next_step,) = message_ids(terminal, "enrich")  # the completed classify's dependent, also on FAST
    assert sorted(read(FAST, vt=5)) == sorted([*mine, next_step]), "one read of everything visible"
    before = {
        "started": observable(started, "classify"),
        "ineligible": observable(ineligible, "classify"),
        "unsupported": observable(other, "fetch"),
        "messages": {m: message_state(m) for m in (ineligible_msg, unsupported_msg, unmatched_msg)},
        "tasks": val("select count(*) as n from pgflow.step_tasks"),
    }
    worker = uuid.uuid4()
    q(
        "insert into pgflow.workers (worker_id, queue_name, function_name) values (%s, %s, 'tests')",
        [worker, FAST],
    )

    records = claim_shared(FAST, [*mine, unmatched_msg], SUPPORT_A_FAST, worker)

    assert outcomes(records) == {
        eligible_msg: "claimed",
        started_msg: "started",
        terminal_msg: "terminal",
        ineligible_msg: "ineligible",
        unsupported_msg: "unsupported",
        unmatched_msg: "unmatched",
    }, "one row per distinct message id"
    (claimed,) = [r for r in records if r["outcome"] == "claimed"]
    assert (claimed["flow_slug"], claimed["run_id"], claimed["step_slug"], claimed["task_index"]) == (
        A,
        eligible,
        "classify",
        0,
    )
    assert claimed["attempt"] == 1 and claimed["input"] == {"n": 0}
    assert all(r["run_id"] is None and r["attempt"] is None for r in records if r is not claimed)

    # claimed: started once by this worker, visible again after the effective timeout (7) + 2 s
    row = task(eligible, "classify")
    assert (row["status"], row["attempts_count"], row["last_worker_id"]) == ("started", 1, worker)
    assert_visible_in(FAST, eligible_msg, 9)
    # started elsewhere: no attempt consumed, deferred to its recovery deadline (7 + 30 s)
    assert observable(started, "classify") == before["started"]
    assert before["started"]["attempts_count"] == 1
    assert 35 <= vt_in(FAST, started_msg) <= 37
    # terminal: archived
    assert terminal_msg in archived_ids(FAST) and terminal_msg not in live_ids(FAST)
    # ineligible, unsupported, unmatched: rows and messages exactly as they were
    assert observable(ineligible, "classify") == before["ineligible"]
    assert observable(other, "fetch") == before["unsupported"]
    assert before["unsupported"]["status"] == "queued"
    assert {m: message_state(m) for m in (ineligible_msg, unsupported_msg, unmatched_msg)} == before[
        "messages"
    ]
    assert not archived_ids(FAST) & {ineligible_msg, unsupported_msg, unmatched_msg}
    assert val("select count(*) as n from pgflow.step_tasks") == before["tasks"]
    assert q("select * from pgflow.worker_pauses") == [], "nothing on a shared queue pauses a worker"


def test_a_claimed_task_completes_and_its_dependents_follow_their_routes() -> None:
    """Grouped steps end to end in SQL: classify and enrich on FAST, deliver on BULK."""
    two_flows()
    run_id = start(A, {"n": 1})
    for step_slug, queue in (("classify", FAST), ("enrich", FAST), ("deliver", BULK)):
        (msg,) = message_ids(run_id, step_slug)
        assert task(run_id, step_slug)["queue_name"] == queue
        assert msg in read(queue)
        (rec,) = claim_shared(queue, [msg], [(A, step_slug)])
        assert rec["outcome"] == "claimed", rec
        assert complete(rec, {"done": step_slug}) == "completed"
        assert msg in archived_ids(queue) and msg not in live_ids(queue)
    assert val("select status from pgflow.runs where run_id = %s", [run_id]) == "completed"
    with connection.cursor() as cursor:
        assert_invariants(cursor, require_terminal=True)


def test_a_step_of_the_same_flow_on_another_queue_is_not_in_a_flow_wide_support() -> None:
    """The support set is exact (flow, step) pairs: supporting A's FAST steps does not cover A.deliver."""
    two_flows()
    run_id = start(A, {"n": 1})
    (msg,) = message_ids(run_id, "classify")
    (rec,) = claim_shared(FAST, [msg], [(A, "enrich"), (B, "fetch")])
    assert rec["outcome"] == "unsupported"
    assert task(run_id, "classify")["status"] == "queued"
    (rec,) = claim_shared(FAST, [msg], [(A, "classify")])
    assert rec["outcome"] == "claimed"


def test_an_empty_support_set_claims_nothing() -> None:
    two_flows()
    run_id = start(A, {})
    (msg,) = message_ids(run_id, "classify")
    assert outcomes(claim_shared(FAST, [msg], [])) == {msg: "unsupported"}
    assert claim_shared(FAST, [], SUPPORT_A_FAST) == []


def test_a_failed_runs_cancelled_task_is_terminal_and_archived() -> None:
    two_flows()
    run_id = start(A, {})
    (msg,) = message_ids(run_id, "classify")
    q("select pgflow.fail_run(%s, 'operator')", [run_id])
    if msg not in live_ids(FAST):
        unarchive(FAST, msg)
    assert outcomes(claim_shared(FAST, [msg], SUPPORT_A_FAST)) == {msg: "terminal"}
    assert task(run_id, "classify")["status"] == "cancelled"
    assert msg in archived_ids(FAST) and msg not in live_ids(FAST)


@pytest.mark.parametrize("queue", ["sq_nowhere", "sq_plain", "sq_support"])
def test_a_queue_that_is_not_declared_shared_is_refused(queue: str) -> None:
    two_flows()
    q("select pgflow.create_flow('sq_plain')")
    message = db_error(
        "select * from pgflow.start_shared_tasks(%s, array[1]::bigint[], %s, array[%s], array['classify'])",
        [queue, uuid.uuid4(), A],
    )
    assert f"queue '{queue}' is not a shared queue declared by pgflow" in message


@pytest.mark.parametrize(("flows", "steps"), [([A, A], ["classify"]), ([A], []), ([], ["classify"])])
def test_support_arrays_of_different_lengths_are_refused(flows: list[str], steps: list[str]) -> None:
    two_flows()
    run_id = start(A, {})
    (msg,) = message_ids(run_id, "classify")
    message = db_error(
        "select * from pgflow.start_shared_tasks(%s, %s::bigint[], %s, %s::text[], %s::text[])",
        [FAST, [msg], uuid.uuid4(), flows, steps],
    )
    assert "must be parallel arrays of the same length" in message
    assert task(run_id, "classify")["status"] == "queued"


def test_the_private_claim_refuses_a_routed_flow() -> None:
    two_flows()
    run_id = start(A, {})
    (msg,) = message_ids(run_id, "classify")
    message = db_error(
        "select * from pgflow.start_tasks(%s, %s, %s::bigint[], %s)", [FAST, A, [msg], uuid.uuid4()]
    )
    assert "flow 'sq_support' is routed to shared queues: claim with pgflow.start_shared_tasks" in message
    assert task(run_id, "classify")["status"] == "queued"
