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


def test_late_completion_of_task_whose_step_was_skipped() -> None:
    from tests.sql.support import archived_ids, live_ids
    from tests.sql.support import make_flow as mk

    mk("g", step("m", step_type="map", when_exhausted="skip", max_attempts=1), step("after", "m"))
    run_id = start("g", [1, 2])
    from tests.sql.support import claim as claim_g

    recs = claim_g("g")
    assert fail(recs[0]) == "skipped"
    assert complete(recs[1], "late") == "stale"
    late = task(run_id, "m", recs[1]["task_index"])
    assert late["status"] == "skipped"
    assert late["output"] is None
    assert state(run_id, "m")["status"] == "skipped"
    assert state(run_id, "m")["output"] is None
    assert recs[1]["message_id"] in archived_ids("g")
    assert recs[1]["message_id"] not in live_ids("g")
