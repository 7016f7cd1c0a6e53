"""Classification, outcome ``claimed``: a queued task of this flow, in a started run and step, matched by
(queue_name, message_id). It is started with one more attempt and its visibility is the effective
timeout + 2 s; the row carries the task and its input."""

from tests.sql.support import (
    assert_visible_in,
    claim_at,
    make_flow,
    new_worker,
    pause_row,
    start,
    step,
    task,
)


def test_claimed_row_carries_the_task_and_its_input() -> None:
    make_flow("f", step("a", timeout=25))
    run_id = start("f", {"x": 1})
    msg = task(run_id, "a")["message_id"]
    worker = new_worker("f")
    (rec,) = claim_at("f", "f", [msg], worker)
    assert rec == {
        "outcome": "claimed",
        "message_id": msg,
        "flow_slug": "f",
        "run_id": run_id,
        "step_slug": "a",
        "task_index": 0,
        "attempt": 1,
        "input": {"x": 1},
    }
    row = task(run_id, "a")
    assert (row["status"], row["attempts_count"], row["last_worker_id"]) == ("started", 1, worker)
    assert_visible_in("f", msg, 27)
    assert pause_row("f") is None


def test_one_row_per_distinct_message_id() -> None:
    make_flow("f", step("a"))
    run_id = start("f")
    msg = task(run_id, "a")["message_id"]
    records = claim_at("f", "f", [msg, msg, msg])
    assert [(r["outcome"], r["message_id"]) for r in records] == [("claimed", msg)]
    assert task(run_id, "a")["attempts_count"] == 1


def test_empty_batch_returns_nothing() -> None:
    make_flow("f", step("a"))
    start("f")
    assert claim_at("f", "f", []) == []
