from tests.sql.support import claim, complete, fail, make_flow, run, start, state, step, task


def test_requeued_task_completion_is_stale() -> None:
    make_flow("f", step("a", max_attempts=3))
    run_id = start("f")
    rec = claim("f")[0]
    assert fail(rec) == "retrying"
    assert complete(rec, {"x": 1}) == "stale"
    row = task(run_id, "a")
    assert row["status"] == "queued"
    assert row["output"] is None
    assert state(run_id, "a")["remaining_tasks"] == 1


def test_never_claimed_task_completion_is_stale() -> None:
    make_flow("f", step("a"))
    run_id = start("f")
    fake = {"run_id": run_id, "step_slug": "a", "task_index": 0, "attempt": 0}
    assert complete(fake, 1) == "stale"
    fake["attempt"] = 1
    assert complete(fake, 1) == "stale"
    assert task(run_id, "a")["status"] == "queued"
    assert run(run_id)["status"] == "started"


def test_unknown_task_is_stale() -> None:
    make_flow("f", step("a"))
    run_id = start("f")
    assert complete({"run_id": run_id, "step_slug": "a", "task_index": 5, "attempt": 1}, 1) == "stale"
    assert complete({"run_id": run_id, "step_slug": "zz", "task_index": 0, "attempt": 1}, 1) == "stale"
