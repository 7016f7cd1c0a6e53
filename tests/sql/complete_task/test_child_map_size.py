from tests.sql.support import claim, claim_one, complete, make_flow, queue_messages, start, state, step, tasks


def test_child_map_learns_size_from_parent_array() -> None:
    make_flow("f", step("a"), step("m", "a", step_type="map"))
    run_id = start("f")
    assert state(run_id, "m")["initial_tasks"] is None
    assert complete(claim_one("f", "a"), [10, 20, 30]) == "completed"
    m = state(run_id, "m")
    assert m["initial_tasks"] == 3
    assert m["remaining_tasks"] == 3
    assert m["status"] == "started"
    rows = tasks(run_id, "m")
    assert [t["task_index"] for t in rows] == [0, 1, 2]
    assert all(t["message_id"] is not None for t in rows)
    bodies = sorted(
        m["message"]["task_index"] for m in queue_messages("f") if m["message"]["step_slug"] == "m"
    )
    assert bodies == [0, 1, 2]


def test_child_map_learns_size_from_parent_map_task_count() -> None:
    make_flow("f", step("m1", step_type="map"), step("m2", "m1", step_type="map"))
    run_id = start("f", ["a", "b"])
    for rec in claim("f"):
        assert complete(rec, [rec["input"]] * 5) == "completed"
    m2 = state(run_id, "m2")
    assert m2["initial_tasks"] == 2
    assert len(tasks(run_id, "m2")) == 2
