from tests.sql.support import (
    archived_ids,
    claim,
    complete_many,
    live_ids,
    make_flow,
    run,
    start,
    state,
    step,
    tasks,
)


def test_completes_all_tasks_of_a_map_in_one_call() -> None:
    make_flow("f", step("m", step_type="map"), step("after", "m"))
    run_id = start("f", [1, 2, 3])
    recs = claim("f")
    result = complete_many([(rec, rec["input"] * 2) for rec in reversed(recs)])
    assert sorted((r["task_index"], r["outcome"]) for r in result) == [
        (0, "completed"),
        (1, "completed"),
        (2, "completed"),
    ]
    assert {r["run_id"] for r in result} == {run_id}
    assert {r["step_slug"] for r in result} == {"m"}
    m = state(run_id, "m")
    assert m["status"] == "completed"
    assert m["output"] == [2, 4, 6]
    assert state(run_id, "after")["status"] == "started"
    assert run(run_id)["remaining_steps"] == 1
    assert {rec["message_id"] for rec in recs} <= archived_ids("f")
    assert {rec["message_id"] for rec in recs}.isdisjoint(live_ids("f"))
    assert all(t["status"] == "completed" for t in tasks(run_id, "m"))


def test_falsy_outputs_kept() -> None:
    make_flow("f", step("m", step_type="map"))
    run_id = start("f", [1, 2, 3, 4, 5])
    recs = claim("f")
    values = [0, "", False, [], {}]
    complete_many([(rec, values[rec["task_index"]]) for rec in recs])
    assert state(run_id, "m")["output"] == values


def test_empty_items() -> None:
    assert complete_many([]) == []
