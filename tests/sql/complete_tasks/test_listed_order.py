"""A batch is applied in the order it is listed, as the same complete_task calls one by one would be.

A run's items listed before its map-breaking item complete; the breaking item fails task, step and run;
the run's items listed after it are stale (the run has failed); other runs are not affected.
"""

from tests.sql.support import claim, complete_many, make_flow, run, start, state, step, task


def _flow() -> None:
    make_flow("f", step("a"), step("m", "a", step_type="map"), step("b"))


def test_items_listed_before_the_breaking_item_complete() -> None:
    _flow()
    run_id = start("f")
    recs = {r["step_slug"]: r for r in claim("f")}
    result = complete_many([(recs["b"], "done"), (recs["a"], {"not": "array"})])
    assert {r["step_slug"]: r["outcome"] for r in result} == {"a": "failed", "b": "completed"}
    assert task(run_id, "b")["status"] == "completed"
    assert task(run_id, "b")["output"] == "done"
    assert state(run_id, "b")["status"] == "completed"
    assert state(run_id, "b")["output"] == "done"
    assert task(run_id, "a")["status"] == "failed"
    assert run(run_id)["status"] == "failed"


def test_items_listed_after_the_breaking_item_are_stale() -> None:
    _flow()
    run_id = start("f")
    recs = {r["step_slug"]: r for r in claim("f")}
    result = complete_many([(recs["a"], {"not": "array"}), (recs["b"], "done")])
    assert {r["step_slug"]: r["outcome"] for r in result} == {"a": "failed", "b": "stale"}
    assert task(run_id, "b")["status"] == "cancelled"
    assert task(run_id, "b")["output"] is None
    assert run(run_id)["status"] == "failed"


def test_other_runs_complete_wherever_they_are_listed() -> None:
    _flow()
    bad = start("f")
    good = start("f")
    recs = {(r["run_id"], r["step_slug"]): r for r in claim("f")}
    result = complete_many(
        [
            (recs[(bad, "a")], "oops"),
            (recs[(good, "b")], 1),
            (recs[(bad, "b")], 2),
            (recs[(good, "a")], [7]),
        ]
    )
    outcomes = {(r["run_id"], r["step_slug"]): r["outcome"] for r in result}
    assert outcomes == {
        (bad, "a"): "failed",
        (bad, "b"): "stale",
        (good, "a"): "completed",
        (good, "b"): "completed",
    }
    assert run(good)["status"] == "started"
    assert state(good, "m")["initial_tasks"] == 1


def test_breaking_item_is_stale_when_an_earlier_item_already_failed_the_run() -> None:
    """b completes first and its dependent's condition fails the run, so a's item finds a failed run."""
    make_flow(
        "f",
        step("a"),
        step("m", "a", step_type="map"),
        step("b"),
        step("c", "b", required_input_pattern={"b": {"ok": True}}, when_unmet="fail"),
    )
    run_id = start("f")
    recs = {r["step_slug"]: r for r in claim("f")}
    result = complete_many([(recs["b"], {"ok": False}), (recs["a"], "oops")])
    assert {r["step_slug"]: r["outcome"] for r in result} == {"a": "stale", "b": "completed"}
    assert run(run_id)["status"] == "failed"
    assert state(run_id, "c")["status"] == "failed"
    assert task(run_id, "a")["status"] == "cancelled"
    assert task(run_id, "a")["output"] is None
    assert state(run_id, "a")["status"] == "cancelled"
