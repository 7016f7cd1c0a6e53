"""``pgflow.start_tasks(queue, flow, ids, worker, step_slug)`` with the exact step selector of a step
worker: it claims only its step's tasks from its step's private queue; work of another step found on
that queue is fatal (nothing claimed, the batch made visible, the subscription (flow, step) paused);
a step-queued flow requires the selector and the selected step must be routed to the queue. Plain
flows claim as before with a NULL selector."""

from __future__ import annotations

import uuid

from tests.sql.step_queues.support import chain, claim_step, pgflow_body, route
from tests.sql.support import (
    archived_ids,
    complete,
    db_error,
    live_ids,
    make_flow,
    make_visible,
    new_worker,
    pause_row,
    q,
    read_ids,
    send_raw,
    start,
    step,
    task,
    vt_in,
)


def test_claims_only_its_steps_tasks_from_its_queue() -> None:
    chain()
    runs = [start("f", {"n": n}) for n in range(3)]
    worker = new_worker("f__a")
    ids = read_ids("f__a")
    assert len(ids) == 3

    records = claim_step("f__a", "f", "a", ids, worker)

    assert [r["outcome"] for r in records] == ["claimed"] * 3
    assert {r["step_slug"] for r in records} == {"a"}
    assert {r["run_id"] for r in records} == set(runs)
    assert [r["input"] for r in sorted(records, key=lambda r: r["input"]["n"])] == [
        {"n": n} for n in range(3)
    ]
    for run_id in runs:
        assert task(run_id, "a")["status"] == "started"
        assert task(run_id, "a")["last_worker_id"] == worker
        assert task(run_id, "b")["status"] == "queued"
    assert len(live_ids("f__b")) == 3
    assert all(vt_in("f__b", msg) <= 0 for msg in live_ids("f__b")), "step b's queue is not touched"


def test_a_run_completes_through_its_step_workers() -> None:
    routes = chain()
    run_id = start("f", {"n": 1})
    for step_slug in ("a", "b", "c"):
        (rec,) = claim_step(routes[step_slug], "f", step_slug, read_ids(routes[step_slug]))
        assert rec["outcome"] == "claimed"
        assert complete(rec, {step_slug: True}) == "completed"
        assert archived_ids(routes[step_slug]) == {rec["message_id"]}
    assert q("select status from pgflow.runs where run_id = %s", [run_id]) == [{"status": "completed"}]


def test_started_and_terminal_tasks_on_a_step_queue() -> None:
    chain()
    start("f")
    ids = read_ids("f__a")
    (rec,) = claim_step("f__a", "f", "a", ids)
    make_visible("f__a")
    assert [r["outcome"] for r in claim_step("f__a", "f", "a", ids)] == ["started"]
    assert task(rec["run_id"], "a")["attempts_count"] == 1
    assert complete(rec, 1) == "completed"
    assert archived_ids("f__a") == set(ids)


def test_task_of_another_step_routed_onto_this_queue_is_fatal() -> None:
    """Simulated corruption: step b's task snapshot points at a message on step a's queue."""
    chain()
    run_id = start("f")
    a_msg = task(run_id, "a")["message_id"]
    b_msg_on_a = send_raw(
        "f__a", {"flow_slug": "f", "run_id": str(run_id), "step_slug": "b", "task_index": 0}
    )
    q(
        "update pgflow.step_tasks set queue_name = 'f__a', message_id = %s "
        "where run_id = %s and step_slug = 'b'",
        [b_msg_on_a, run_id],
    )
    q("update pgmq.q_f__a set vt = clock_timestamp() + interval '30 seconds'")  # the worker read them
    worker = new_worker("f__a")

    records = claim_step("f__a", "f", "a", [a_msg, b_msg_on_a], worker)

    assert [(r["outcome"], r["message_id"]) for r in records] == [("released", a_msg), ("fatal", b_msg_on_a)]
    assert all(r["run_id"] is None for r in records)
    row = task(run_id, "a")
    assert (row["status"], row["attempts_count"], row["last_worker_id"]) == ("queued", 0, None)
    assert task(run_id, "b")["status"] == "queued"
    assert archived_ids("f__a") == set()
    assert live_ids("f__a") == {a_msg, b_msg_on_a}
    assert vt_in("f__a", a_msg) <= 0 and vt_in("f__a", b_msg_on_a) <= 0, "the batch is visible again"
    pause = pause_row("f", "a")
    assert pause is not None
    assert (pause["reason"], pause["queue_name"], pause["step_slug"]) == ("fatal", "f__a", "a")
    assert str(b_msg_on_a) in pause["detail"] and "f__a" in pause["detail"]
    assert pause_row("f", "b") is None and pause_row("f") is None, "only this step's subscription"


def test_genuine_looking_message_of_another_step_without_a_task_is_fatal() -> None:
    chain()
    run_id = start("f")
    a_msg = task(run_id, "a")["message_id"]
    stray = int(q("select pgmq.send('f__a', %s::jsonb) as id", [pgflow_body("f", "b", run_id)])[0]["id"])
    foreign = send_raw("f__a", {"hello": "world"})

    records = claim_step("f__a", "f", "a", [a_msg, stray, foreign])

    assert [(r["outcome"], r["message_id"]) for r in records] == [
        ("released", a_msg),
        ("fatal", stray),
        ("released", foreign),
    ]
    assert task(run_id, "a")["status"] == "queued"
    assert live_ids("f__a") == {a_msg, stray, foreign}
    assert pause_row("f", "a") is not None


def test_missing_selector_for_a_step_queued_flow_raises() -> None:
    chain()
    start("f")
    ids = read_ids("f__a")
    for batch in (ids, []):
        message = db_error(
            "select * from pgflow.start_tasks('f__a', 'f', %s::bigint[], %s)", [batch, uuid.uuid4()]
        )
        assert "step-queued" in message and "step_slug" in message
    assert task(q("select run_id from pgflow.runs")[0]["run_id"], "a")["status"] == "queued"
    assert pause_row("f", "") is None


def test_selector_not_routed_to_the_queue_raises() -> None:
    chain()
    start("f")
    ids = read_ids("f__a")
    for queue, step_slug in (("f__a", "b"), ("f__a", "nope"), ("f", "a"), ("f__b", "a")):
        message = db_error(
            "select * from pgflow.start_tasks(%s, 'f', %s::bigint[], %s, %s)",
            [queue, ids, uuid.uuid4(), step_slug],
        )
        assert f"step '{step_slug}' of flow 'f' is not routed to queue '{queue}'" in message
    assert pause_row("f", "a") is None and pause_row("f", "b") is None


def test_nonexistent_flow_raises() -> None:
    chain()
    message = db_error(
        "select * from pgflow.start_tasks('f__a', 'nope', array[1]::bigint[], %s, 'a')", [uuid.uuid4()]
    )
    assert "flow 'nope' does not exist" in message


def test_plain_flow_claims_every_step_with_a_null_selector() -> None:
    make_flow("g", step("a"), step("b"))
    run_id = start("g")
    records = claim_step("g", "g", None, read_ids("g"))
    assert sorted((r["outcome"], r["step_slug"]) for r in records) == [("claimed", "a"), ("claimed", "b")]
    assert route("g") == {"a": "g", "b": "g"}
    assert {task(run_id, s)["status"] for s in ("a", "b")} == {"started"}


def test_selector_on_a_plain_flow_is_refused_before_anything_is_read() -> None:
    """A plain flow's one queue serves every step: a selector would make the other steps' messages
    fatal, so SQL refuses it as the worker's preflight does."""
    make_flow("g", step("a"), step("b"))
    run_id = start("g")
    ids = [m["msg_id"] for m in q("select msg_id from pgmq.read('g', 0, 10)")]
    message = db_error(
        "select * from pgflow.start_tasks('g', 'g', %s::bigint[], %s, 'a')", [ids, uuid.uuid4()]
    )
    assert "flow 'g' is a plain flow" in message and "without a step selector" in message
    assert {task(run_id, s)["status"] for s in ("a", "b")} == {"queued"}
    assert q("select * from pgflow.worker_pauses") == []
