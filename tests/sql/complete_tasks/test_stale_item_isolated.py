from tests.sql.support import claim, complete_many, make_flow, start, state, step, task


def test_stale_item_does_not_undo_the_others() -> None:
    make_flow("f", step("m", step_type="map"))
    run_id = start("f", ["a", "b", "c"])
    recs = claim("f")
    result = complete_many([(rec, rec["input"]) for rec in recs], attempts={1: 99})
    outcomes = {r["task_index"]: r["outcome"] for r in result}
    assert outcomes == {0: "completed", 1: "stale", 2: "completed"}
    assert task(run_id, "m", 0)["status"] == "completed"
    assert task(run_id, "m", 2)["status"] == "completed"
    stale = task(run_id, "m", 1)
    assert stale["status"] == "started"
    assert stale["output"] is None
    assert state(run_id, "m")["remaining_tasks"] == 1


def test_duplicate_item_completes_once() -> None:
    make_flow("f", step("m", step_type="map"))
    run_id = start("f", ["a", "b"])
    recs = claim("f")
    result = complete_many([(recs[0], "first"), (recs[0], "second"), (recs[1], "b")])
    outcomes = sorted(r["outcome"] for r in result)
    assert outcomes.count("completed") == 2
    assert task(run_id, "m", 0)["output"] in ("first", "second")
    assert state(run_id, "m")["status"] == "completed"
    assert state(run_id, "m")["remaining_tasks"] == 0


def test_failing_item_does_not_undo_the_others() -> None:
    """A non-array output feeding a map fails its own run; another run's completion in the call stays."""
    make_flow("f", step("a"), step("m", "a", step_type="map"))
    run_bad = start("f")
    run_good = start("f")
    recs = {r["run_id"]: r for r in claim("f")}
    result = complete_many([(recs[run_bad], {"not": "array"}), (recs[run_good], [1, 2])])
    outcomes = {r["run_id"]: r["outcome"] for r in result}
    assert outcomes == {run_bad: "failed", run_good: "completed"}
    from tests.sql.support import run

    assert run(run_bad)["status"] == "failed"
    assert run(run_good)["status"] == "started"
    assert state(run_good, "m")["initial_tasks"] == 2
