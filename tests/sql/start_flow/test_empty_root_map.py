from tests.sql.support import make_flow, run, start, state, step, tasks


def test_empty_array_completes_map_with_empty_output_and_cascades() -> None:
    make_flow("f", step("m", step_type="map"), step("after", "m"))
    run_id = start("f", [])
    m = state(run_id, "m")
    assert m["status"] == "completed"
    assert m["output"] == []
    assert m["initial_tasks"] == 0
    assert tasks(run_id, "m") == []
    after = state(run_id, "after")
    assert after["status"] == "started"
    assert run(run_id)["remaining_steps"] == 1


def test_only_empty_map_completes_the_run() -> None:
    make_flow("f", step("m", step_type="map"))
    run_id = start("f", [])
    row = run(run_id)
    assert row["status"] == "completed"
    assert row["output"] == {"m": []}
    assert row["completed_at"] is not None
