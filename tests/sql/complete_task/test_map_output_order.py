from tests.sql.support import claim, complete, make_flow, run, start, state, step


def test_map_output_ordered_by_task_index_when_completed_out_of_order() -> None:
    make_flow("f", step("m", step_type="map"))
    run_id = start("f", ["a", "b", "c", "d"])
    recs = {r["task_index"]: r for r in claim("f")}
    for index in (3, 0, 2, 1):
        assert complete(recs[index], f"out-{index}") == "completed"
    assert state(run_id, "m")["output"] == ["out-0", "out-1", "out-2", "out-3"]
    assert run(run_id)["output"] == {"m": ["out-0", "out-1", "out-2", "out-3"]}


def test_map_output_order_beyond_nine_tasks() -> None:
    make_flow("f", step("m", step_type="map"))
    run_id = start("f", list(range(12)))
    recs = sorted(claim("f"), key=lambda r: -r["task_index"])
    for rec in recs:
        assert complete(rec, rec["task_index"]) == "completed"
    assert state(run_id, "m")["output"] == list(range(12))
