from tests.sql.support import (
    archived_ids,
    claim,
    complete,
    fail,
    live_ids,
    make_flow,
    make_visible,
    start,
    state,
    step,
    task,
)


def test_wrong_attempt_is_stale_and_changes_nothing() -> None:
    make_flow("f", step("a"), step("b", "a"))
    run_id = start("f")
    rec = claim("f")[0]
    before = task(run_id, "a")
    assert complete(rec, {"late": True}, attempt=rec["attempt"] + 1) == "stale"
    assert complete(rec, {"late": True}, attempt=0) == "stale"
    after = task(run_id, "a")
    assert after == before
    assert state(run_id, "a")["status"] == "started"
    assert state(run_id, "b")["status"] == "created"
    assert rec["message_id"] in live_ids("f")


def test_previous_attempt_is_stale_after_reclaim() -> None:
    make_flow("f", step("a", max_attempts=3))
    run_id = start("f")
    first = claim("f")[0]
    assert fail(first) == "retrying"
    make_visible("f")
    second = claim("f")[0]
    assert complete(first, "from the first worker") == "stale"
    assert task(run_id, "a")["status"] == "started"
    assert task(run_id, "a")["output"] is None
    assert complete(second, "from the second worker") == "completed"
    assert state(run_id, "a")["output"] == "from the second worker"


def test_completed_task_completion_again_is_stale() -> None:
    make_flow("f", step("a"), step("b"))
    run_id = start("f")
    rec = next(r for r in claim("f") if r["step_slug"] == "a")
    assert complete(rec, 1) == "completed"
    assert complete(rec, 2) == "stale"
    assert task(run_id, "a")["output"] == 1
    assert state(run_id, "a")["output"] == 1
    assert rec["message_id"] in archived_ids("f")
