"""Classification, outcome ``fatal``: a message that matches no task but is pgflow-shaped, or whose task
belongs to another flow on the claiming queue. Then nothing of the batch is claimed or archived, every
message of the batch is made visible now, the subscription (flow_slug, '') is paused with reason
'fatal' and a detail naming the queue and message ids, and the rows are returned (no SQL error)."""

import uuid

from tests.sql.support import (
    archived_ids,
    claim_at,
    live_ids,
    make_flow,
    make_visible,
    pause_row,
    q,
    send_raw,
    start,
    step,
    task,
    vt_in,
)


def _shaped(flow: str = "f", step_slug: str = "a") -> dict[str, object]:
    return {"flow_slug": flow, "run_id": str(uuid.uuid4()), "step_slug": step_slug, "task_index": 0}


def test_pgflow_shaped_message_without_task_is_fatal_for_the_whole_batch() -> None:
    make_flow("f", step("a", timeout=30), step("b", timeout=30))
    run_id = start("f")
    claimable = task(run_id, "a")["message_id"]
    started = task(run_id, "b")["message_id"]
    (first,) = claim_at("f", "f", [started])
    assert first["outcome"] == "claimed"
    foreign = send_raw("f", {"hello": "world"})
    fatal = send_raw("f", _shaped())
    missing = 999_999
    # the worker read them all: hidden for a while
    q("update pgmq.q_f set vt = clock_timestamp() + interval '30 seconds'")
    before_b = task(run_id, "b")

    records = claim_at("f", "f", [claimable, started, foreign, fatal, missing])

    assert [(r["outcome"], r["message_id"]) for r in records] == sorted(
        [
            ("released", claimable),
            ("released", started),
            ("released", foreign),
            ("fatal", fatal),
            ("missing", missing),
        ],
        key=lambda pair: pair[1],
    )
    assert all(r["run_id"] is None and r["input"] is None for r in records)
    row = task(run_id, "a")
    assert (row["status"], row["attempts_count"], row["last_worker_id"]) == ("queued", 0, None)
    assert task(run_id, "b") == before_b
    assert archived_ids("f") == set(), "nothing archived, not even the foreign message"
    assert live_ids("f") == {claimable, started, foreign, fatal}
    for msg in (claimable, started, foreign, fatal):
        assert vt_in("f", msg) <= 0, f"message {msg} of the batch is visible again"
    pause = pause_row("f")
    assert pause is not None
    assert (pause["reason"], pause["queue_name"], pause["step_slug"]) == ("fatal", "f", "")
    assert "queue f" in pause["detail"]
    assert str(fatal) in pause["detail"]


def test_fatal_detail_names_every_fatal_message_id() -> None:
    make_flow("f", step("a"))
    start("f")
    ids = [send_raw("f", _shaped()) for _ in range(3)]
    records = claim_at("f", "f", ids)
    assert [r["outcome"] for r in records] == ["fatal"] * 3
    detail = pause_row("f")["detail"]
    assert "queue f" in detail
    for msg in ids:
        assert str(msg) in detail


def test_forged_body_naming_a_real_task_is_fatal_and_claims_nothing() -> None:
    """The body never authorises work: a second message naming an existing task matches no task."""
    make_flow("f", step("a"))
    run_id = start("f")
    real = task(run_id, "a")["message_id"]
    forged = send_raw("f", {"flow_slug": "f", "run_id": str(run_id), "step_slug": "a", "task_index": 0})
    records = claim_at("f", "f", [real, forged])
    assert {r["message_id"]: r["outcome"] for r in records} == {real: "released", forged: "fatal"}
    assert task(run_id, "a")["attempts_count"] == 0
    assert pause_row("f")["reason"] == "fatal"


def test_task_of_another_flow_on_the_claiming_queue_is_fatal() -> None:
    """A worker of flow g reading queue f: the message matches f's task, which is not g's work."""
    make_flow("f", step("a"))
    make_flow("g", step("a"))
    run_f = start("f")
    msg = task(run_f, "a")["message_id"]
    q("update pgmq.q_f set vt = clock_timestamp() + interval '30 seconds'")
    (rec,) = claim_at("f", "g", [msg])
    assert (rec["outcome"], rec["message_id"]) == ("fatal", msg)
    row = task(run_f, "a")
    assert (row["status"], row["attempts_count"]) == ("queued", 0)
    assert live_ids("f") == {msg}
    assert vt_in("f", msg) <= 0
    assert archived_ids("f") == set()
    pause = pause_row("g")
    assert pause is not None
    assert (pause["reason"], pause["queue_name"]) == ("fatal", "f")
    assert "queue f" in pause["detail"] and str(msg) in pause["detail"]
    assert pause_row("f") is None, "flow f's own workers are not paused"


def test_a_fatal_batch_can_be_claimed_normally_once_the_culprit_is_gone() -> None:
    make_flow("f", step("a"))
    run_id = start("f")
    real = task(run_id, "a")["message_id"]
    fatal = send_raw("f", _shaped())
    claim_at("f", "f", [real, fatal])
    q("select pgmq.archive('f', %s::bigint)", [fatal])
    assert q("select pgflow.resume_subscription('f') as r") == [{"r": True}]
    make_visible("f")
    (rec,) = claim_at("f", "f", [real])
    assert (rec["outcome"], rec["attempt"]) == ("claimed", 1)
