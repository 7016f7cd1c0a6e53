import pytest

from tests.sql.support import (
    active_tasks,
    archived_ids,
    claim,
    complete,
    live_ids,
    make_flow,
    run,
    start,
    state,
    step,
    task,
)


@pytest.mark.parametrize("output", [{"not": "array"}, "text", 3, None, True])
def test_non_array_output_fails_task_step_and_run_without_retry(output: object) -> None:
    make_flow(
        "f",
        step("a", max_attempts=5),
        step("other"),
        step("m", "a", step_type="map"),
        max_attempts=5,
    )
    run_id = start("f")
    recs = {r["step_slug"]: r for r in claim("f")}
    assert complete(recs["a"], output) == "failed"
    a = task(run_id, "a")
    assert a["status"] == "failed"
    assert a["attempts_count"] == 1
    assert a["error_message"]
    assert state(run_id, "a")["status"] == "failed"
    r = run(run_id)
    assert r["status"] == "failed"
    assert r["failed_at"] is not None
    assert active_tasks(run_id) == []
    assert task(run_id, "other")["status"] == "cancelled"
    assert live_ids("f") == set()
    assert {recs["a"]["message_id"], recs["other"]["message_id"]} <= archived_ids("f")
    assert state(run_id, "m")["status"] != "started"


def test_non_array_map_task_output_feeding_a_map_is_fine_as_elements() -> None:
    """A parent map's outputs are aggregated into an array, so any element type is acceptable."""
    make_flow("f", step("m1", step_type="map"), step("m2", "m1", step_type="map"))
    run_id = start("f", [1, 2])
    for rec in claim("f"):
        assert complete(rec, {"obj": rec["task_index"]}) == "completed"
    assert state(run_id, "m2")["initial_tasks"] == 2
    assert run(run_id)["status"] == "started"
