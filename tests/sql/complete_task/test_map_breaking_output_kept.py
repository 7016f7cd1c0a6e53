"""The output that breaks a map stays on the failed task, as in pgflow, so the user can see what was wrong."""

from tests.sql.support import claim_one, complete, make_flow, run, start, state, step, task


def test_non_array_output_feeding_a_map_is_kept_on_the_failed_task() -> None:
    make_flow("f", step("a"), step("m", "a", step_type="map"))
    run_id = start("f")
    assert complete(claim_one("f"), {"items": [1, 2]}) == "failed"
    failed = task(run_id, "a")
    assert failed["status"] == "failed"
    assert failed["output"] == {"items": [1, 2]}
    assert failed["error_message"] == "[TYPE_VIOLATION] Produced object instead of array"
    assert state(run_id, "a")["status"] == "failed"
    assert state(run_id, "a")["output"] is None
    assert run(run_id)["status"] == "failed"


def test_falsy_breaking_output_is_kept_as_itself() -> None:
    make_flow("f", step("a"), step("m", "a", step_type="map"))
    run_id = start("f")
    assert complete(claim_one("f"), 0) == "failed"
    assert task(run_id, "a")["output"] == 0
