"""Classification, outcome ``started``: the message's task is already running (a duplicate delivery).
Benign: no attempt consumed, the task untouched, and the message hidden until the task's
stalled-recovery deadline (started_at + effective timeout + 30 s, at least 2 s from now)."""

from tests.sql.support import (
    assert_visible_in,
    backdate_started,
    claim_at,
    make_flow,
    make_visible,
    new_worker,
    pause_row,
    start,
    step,
    task,
)


def _started_task(timeout: int = 40):
    make_flow("f", step("a", timeout=timeout), timeout=5)
    run_id = start("f")
    msg = task(run_id, "a")["message_id"]
    (first,) = claim_at("f", "f", [msg])
    assert first["outcome"] == "claimed"
    return run_id, msg


def test_started_consumes_no_attempt_and_changes_no_task() -> None:
    run_id, msg = _started_task()
    backdate_started(run_id, "a", 25)
    before = task(run_id, "a")
    make_visible("f")
    other = new_worker("f")
    (rec,) = claim_at("f", "f", [msg], other)
    assert rec == {
        "outcome": "started",
        "message_id": msg,
        "flow_slug": None,
        "run_id": None,
        "step_slug": None,
        "task_index": None,
        "attempt": None,
        "input": None,
    }
    assert task(run_id, "a") == before, "no attempt consumed, no new worker, same started_at"
    assert pause_row("f") is None


def test_started_defers_visibility_to_the_recovery_deadline() -> None:
    run_id, msg = _started_task(timeout=40)
    backdate_started(run_id, "a", 25)
    make_visible("f")
    (rec,) = claim_at("f", "f", [msg])
    assert rec["outcome"] == "started"
    # step timeout 40 (not the flow's 5) + 30 s after a start 25 s ago: 45 s from now
    assert_visible_in("f", msg, 45)


def test_started_past_its_deadline_is_hidden_for_at_least_2_seconds() -> None:
    run_id, msg = _started_task(timeout=10)
    backdate_started(run_id, "a", 100)
    make_visible("f")
    (rec,) = claim_at("f", "f", [msg])
    assert rec["outcome"] == "started"
    assert_visible_in("f", msg, 2)
    assert task(run_id, "a")["attempts_count"] == 1
