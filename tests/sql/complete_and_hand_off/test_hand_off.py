"""pgflow.complete_and_hand_off: the completion claims the tasks it made ready for the finishing
worker, through the claim's own function (attempt, started_at, last_worker_id, visibility), when that
worker serves their queue, supports their step and has a free slot; otherwise they stay queued for
any worker's read."""

from __future__ import annotations

import uuid
from typing import Any

from tests.sql.limit_claim.support import concurrency, holds, set_limits
from tests.sql.shared_queues.support import compile_routed
from tests.sql.support import (
    claim,
    jb,
    make_flow,
    new_worker,
    q,
    queue_messages,
    read_ids,
    requeue_stalled,
    run,
    start,
    state,
    step,
    task,
    val,
)


def steps_of(flow_slug: str) -> list[str]:
    return [r["step_slug"] for r in q("select step_slug from pgflow.steps where flow_slug = %s", [flow_slug])]


def hand_off(
    rec: dict[str, Any],
    output: Any,
    worker: uuid.UUID,
    *,
    queue: str = "f",
    support: list[tuple[str, str]] | None = None,
    free: int = 10,
    generation: int | None = None,
    attempt: int | None = None,
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Complete ``rec`` as worker ``worker``; returns (completion rows, handed-off rows)."""
    pairs = support if support is not None else [(rec["flow_slug"], s) for s in steps_of(rec["flow_slug"])]
    gens = {r["flow_slug"]: r["generation"] for r in q("select flow_slug, generation from pgflow.flows")}
    items = [
        {
            "run_id": str(rec["run_id"]),
            "step_slug": rec["step_slug"],
            "task_index": rec["task_index"],
            "attempt": rec["attempt"] if attempt is None else attempt,
            "output": output,
        }
    ]
    rows = q(
        "select * from pgflow.complete_and_hand_off(%s::jsonb, %s, %s::uuid, %s::text[], %s::text[], "
        "%s::bigint[], %s)",
        [
            jb(items),
            queue,
            worker,
            [f for f, _ in pairs],
            [s for _, s in pairs],
            [generation if generation is not None else gens[f] for f, _ in pairs],
            free,
        ],
    )
    return [r for r in rows if r["outcome"] != "claimed"], [r for r in rows if r["outcome"] == "claimed"]


def message(flow_slug: str, msg_id: int) -> dict[str, Any]:
    return next(m for m in queue_messages(flow_slug) if m["msg_id"] == msg_id)


def test_the_next_step_is_claimed_for_the_finishing_worker_without_a_read() -> None:
    make_flow("f", step("a"), step("b", "a", timeout=7), step("c", "b"))
    run_id = start("f", {"x": 1})
    worker = new_worker("f")
    a = claim("f", worker)[0]

    done, handed = hand_off(a, {"a": 1}, worker)

    assert [(r["step_slug"], r["outcome"]) for r in done] == [("a", "completed")]
    assert len(handed) == 1
    b = handed[0]
    assert (b["run_id"], b["step_slug"], b["task_index"], b["attempt"]) == (run_id, "b", 0, 1)
    assert b["input"] == {"a": {"a": 1}}
    row = task(run_id, "b")
    assert (row["status"], row["attempts_count"], row["last_worker_id"]) == ("started", 1, worker)
    assert row["started_at"] is not None and row["message_id"] == b["message_id"]
    msg = message("f", b["message_id"])
    assert msg["read_ct"] == 0, "the message was never read"
    assert 8 <= msg["vt_in"] <= 9.1, f"hidden for the step's timeout + 2 s: {msg['vt_in']}"

    done, handed = hand_off(b, {"b": 2}, worker)
    assert [r["step_slug"] for r in handed] == ["c"]
    done, handed = hand_off(handed[0], {"c": 3}, worker)
    assert handed == []
    assert run(run_id)["status"] == "completed"
    assert queue_messages("f") == [], "every message archived"


def test_no_free_slot_leaves_the_task_queued_for_a_read() -> None:
    make_flow("f", step("a"), step("b", "a"))
    run_id = start("f")
    worker = new_worker("f")
    a = claim("f", worker)[0]

    done, handed = hand_off(a, 1, worker, free=0)

    assert [r["outcome"] for r in done] == ["completed"] and handed == []
    row = task(run_id, "b")
    assert (row["status"], row["attempts_count"], row["last_worker_id"]) == ("queued", 0, None)
    assert message("f", row["message_id"])["vt_in"] <= 0, "visible to any worker"
    assert [r["step_slug"] for r in claim("f")] == ["b"]


def test_a_flow_with_flow_control_is_not_handed_off() -> None:
    """Its claim locks key rows, which the completion's release of slots already holds in key order:
    the next task is left to a read (pgflow.hand_off_tasks)."""
    make_flow("f", step("a"), step("b", "a"))
    set_limits("f", concurrency(5, step_slug="b"))
    run_id = start("f")
    worker = new_worker("f")
    a = claim("f", worker)[0]

    done, handed = hand_off(a, 1, worker)

    assert [r["outcome"] for r in done] == ["completed"] and handed == []
    row = task(run_id, "b")
    assert (row["status"], row["attempts_count"]) == ("queued", 0)
    assert message("f", row["message_id"])["vt_in"] <= 0, "visible to any worker"
    assert [r["step_slug"] for r in claim("f")] == ["b"]


def test_limits_set_after_the_hand_off_checked_take_no_key_row_in_its_claim() -> None:
    """A flow that gets its first limits between hand_off_tasks' check and its claim: the claim runs
    with pgflow.hand_off = 'on', and limit_claim then leaves the task queued, its message visible and
    unread, with no slot row or hold of its key (taking key rows there could deadlock against a claim,
    since the completion already holds the ones its release locked). A read claims it under the limit."""
    make_flow("f", step("a"), step("b", "a"))
    run_id = start("f")
    worker = new_worker("f")
    a = claim("f", worker)[0]
    hand_off(a, 1, worker, free=0)
    set_limits("f", concurrency(5, step_slug="b"))
    b = task(run_id, "b")

    val("select set_config('pgflow.hand_off', 'on', true) as v")
    rows = q(
        "select outcome, message_id from pgflow.claim_classified('f', %s, array[%s]::bigint[],"
        " array[%s]::uuid[], array['b'], array[0], array['claimed'], '{}'::text[])",
        [worker, b["message_id"], run_id],
    )
    val("select set_config('pgflow.hand_off', 'off', true) as v")

    assert [(r["outcome"], r["message_id"]) for r in rows] == [("left", b["message_id"])]
    row = task(run_id, "b")
    assert (row["status"], row["attempts_count"], row["last_worker_id"]) == ("queued", 0, None)
    msg = message("f", b["message_id"])
    assert (msg["read_ct"], msg["vt_in"] <= 0) == (0, True), f"unread and visible: {msg}"
    assert q("select * from pgflow.limit_slots where flow_slug = 'f'") == []
    assert holds("f") == []
    assert [r["step_slug"] for r in claim("f")] == ["b"]
    assert [(h["step_slug"], h["task_step_slug"]) for h in holds("f")] == [("b", "b")]


def test_the_general_hand_off_claims_in_hand_off_mode_and_ends_it() -> None:
    make_flow("f", step("a"), step("b", "a"))
    start("f")
    worker = new_worker("f")
    assert val("select current_setting('pgflow.hand_off', true) as v") in (None, "")
    a = claim("f", worker)[0]
    val("select set_config('pgflow.fast_hop', 'off', true) as v")

    _, handed = hand_off(a, 1, worker)

    assert [r["step_slug"] for r in handed] == ["b"]
    assert val("select current_setting('pgflow.hand_off', true) as v") == "off"


def test_an_unsupported_step_is_not_handed_off() -> None:
    make_flow("f", step("a"), step("b", "a"))
    run_id = start("f")
    worker = new_worker("f")
    a = claim("f", worker)[0]

    _, handed = hand_off(a, 1, worker, support=[("f", "a")])

    assert handed == []
    assert task(run_id, "b")["status"] == "queued"


def test_another_queue_is_not_handed_off() -> None:
    make_flow("f", step("a"), step("b", "a"))
    run_id = start("f")
    worker = new_worker("f")
    a = claim("f", worker)[0]

    _, handed = hand_off(a, 1, worker, queue="other")

    assert handed == []
    assert task(run_id, "b")["status"] == "queued"


def test_a_flow_compiled_again_since_is_not_handed_off() -> None:
    make_flow("f", step("a"), step("b", "a"))
    run_id = start("f")
    worker = new_worker("f")
    a = claim("f", worker)[0]
    current = int(val("select generation as value from pgflow.flows where flow_slug = 'f'"))

    _, handed = hand_off(a, 1, worker, generation=current - 1)

    assert handed == []
    assert task(run_id, "b")["status"] == "queued"


def test_a_delayed_step_is_not_handed_off() -> None:
    make_flow("f", step("a"), step("b", "a", start_delay=30))
    run_id = start("f")
    worker = new_worker("f")
    a = claim("f", worker)[0]

    _, handed = hand_off(a, 1, worker)

    assert handed == []
    row = task(run_id, "b")
    assert row["status"] == "queued"
    assert message("f", row["message_id"])["vt_in"] > 25, "its start delay holds"


def test_at_most_the_free_slots_of_a_map_in_task_order() -> None:
    make_flow("f", step("a"), step("m", "a", step_type="map"))
    run_id = start("f")
    worker = new_worker("f")
    a = claim("f", worker)[0]

    _, handed = hand_off(a, [10, 20, 30], worker, free=2)

    assert [(r["task_index"], r["input"]) for r in handed] == [(0, 10), (1, 20)]
    assert [
        t["status"]
        for t in q(
            "select status from pgflow.step_tasks where run_id = %s and step_slug = 'm' order by task_index",
            [run_id],
        )
    ] == ["started", "started", "queued"]
    assert [r["task_index"] for r in claim("f")] == [2]


def test_a_stale_completion_hands_nothing_off() -> None:
    make_flow("f", step("a"), step("b", "a"))
    run_id = start("f")
    worker = new_worker("f")
    a = claim("f", worker)[0]

    done, handed = hand_off(a, 1, worker, attempt=a["attempt"] + 1)

    assert [r["outcome"] for r in done] == ["stale"] and handed == []
    assert state(run_id, "b")["status"] == "created"


def test_tasks_started_by_an_earlier_statement_are_left_to_the_read() -> None:
    make_flow("f", step("a"), step("b"), step("c", "a"))
    run_id = start("f")
    worker = new_worker("f")
    a = next(r for r in claim("f", worker, qty=1) if r["step_slug"] == "a")

    _, handed = hand_off(a, 1, worker)

    assert [r["step_slug"] for r in handed] == ["c"], "b was queued before this completion"
    assert task(run_id, "b")["status"] == "queued"


def test_a_handed_off_task_whose_worker_dies_is_recovered_as_stalled() -> None:
    make_flow("f", step("a"), step("b", "a", timeout=1))
    run_id = start("f")
    worker = new_worker("f")
    a = claim("f", worker)[0]
    _, handed = hand_off(a, 1, worker)
    assert len(handed) == 1
    q(
        "update pgflow.step_tasks set started_at = now() - interval '1 hour' "
        "where run_id = %s and step_slug = 'b'",
        [run_id],
    )

    assert requeue_stalled().get("requeued") == 1

    row = task(run_id, "b")
    assert (row["status"], row["requeued_count"]) == ("queued", 1)
    again = claim("f")
    assert [(r["step_slug"], r["attempt"]) for r in again] == [("b", 2)]


def test_a_shared_queue_worker_is_handed_only_its_pairs_on_its_queue() -> None:
    compile_routed("sq_ho")
    run_id = start("sq_ho", {"text": "x"})
    worker = new_worker("sq_fast")
    pairs = [("sq_ho", "classify"), ("sq_ho", "enrich")]
    (classify,) = q(
        "select * from pgflow.start_shared_tasks('sq_fast', %s::bigint[], %s, %s::text[], %s::text[])"
        " where outcome = 'claimed'",
        [read_ids("sq_fast"), worker, [f for f, _ in pairs], [s for _, s in pairs]],
    )

    _, handed = hand_off(classify, {"c": 1}, worker, queue="sq_fast", support=pairs)
    assert [(r["step_slug"], r["attempt"]) for r in handed] == [("enrich", 1)]

    _, handed = hand_off(handed[0], {"e": 2}, worker, queue="sq_fast", support=pairs)
    assert handed == [], "deliver is routed to sq_bulk, which this worker does not serve"
    assert task(run_id, "deliver")["status"] == "queued"


def start_with_priority(flow_slug: str, priority: int) -> uuid.UUID:
    return val("select run_id from pgflow.start_flow(%s, '{}'::jsonb, null, null, %s)", [flow_slug, priority])


def test_a_waiting_task_of_higher_priority_is_not_passed_by_the_hand_off() -> None:
    """The claim takes higher priority first; a hand-off of a lower-priority task would pass it."""
    make_flow("f", step("a"), step("b", "a"))
    low = start("f")
    worker = new_worker("f")
    a_low = claim("f", worker, qty=1)[0]
    assert a_low["run_id"] == low
    high = start_with_priority("f", 5)

    done, handed = hand_off(a_low, 1, worker)

    assert [r["outcome"] for r in done] == ["completed"] and handed == []
    assert task(low, "b")["status"] == "queued", "left to a read, behind the higher priority"
    order = val(
        "select array_agg(run_id order by pgflow.message_priority(headers) desc, msg_id)"
        "  from (select (message->>'run_id')::uuid as run_id, headers, msg_id from pgmq.q_f) as m"
    )
    assert order == [high, low], "the claim's read takes the waiting higher priority first"


def test_a_waiting_task_of_lower_or_equal_priority_does_not_stop_the_hand_off() -> None:
    make_flow("f", step("a"), step("b", "a"))
    high = start_with_priority("f", 5)
    worker = new_worker("f")
    a_high = claim("f", worker, qty=1)[0]
    assert a_high["run_id"] == high
    start_with_priority("f", 5)
    start("f")

    _, handed = hand_off(a_high, 1, worker)

    assert [(r["run_id"], r["step_slug"]) for r in handed] == [(high, "b")]
    assert task(high, "b")["status"] == "started"


def test_a_higher_priority_task_in_flight_or_delayed_does_not_stop_the_hand_off() -> None:
    """Only visible messages are ordered: one claimed by another worker, or not due yet, waits for
    nothing the hand-off could pass."""
    make_flow("f", step("a"), step("b", "a"))
    low = start("f")
    worker = new_worker("f")
    a_low = claim("f", worker, qty=1)[0]
    claimed_high = start_with_priority("f", 9)
    assert claim("f", new_worker("f"), qty=1)[0]["run_id"] == claimed_high
    val("select run_id from pgflow.start_flow('f', '{}'::jsonb, null, 60, 9)")

    _, handed = hand_off(a_low, 1, worker)

    assert [(r["run_id"], r["step_slug"]) for r in handed] == [(low, "b")]
