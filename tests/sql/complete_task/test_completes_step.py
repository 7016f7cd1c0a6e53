from tests.sql.support import (
    archived_ids,
    claim,
    claim_one,
    complete,
    live_ids,
    make_flow,
    run,
    start,
    state,
    step,
    task,
)


def test_single_step_completion_moves_everything_forward() -> None:
    make_flow("f", step("a"), step("b", "a"), step("c", "a"))
    run_id = start("f")
    rec = claim_one("f", "a")
    assert complete(rec, {"v": 1}) == "completed"
    row = task(run_id, "a")
    assert row["status"] == "completed"
    assert row["output"] == {"v": 1}
    assert row["completed_at"] is not None
    a = state(run_id, "a")
    assert a["status"] == "completed"
    assert a["remaining_tasks"] == 0
    assert a["output"] == {"v": 1}
    assert a["completed_at"] is not None
    for child in ("b", "c"):
        s = state(run_id, child)
        assert s["remaining_deps"] == 0
        assert s["status"] == "started"
    assert run(run_id)["remaining_steps"] == 2
    assert rec["message_id"] in archived_ids("f")
    assert rec["message_id"] not in live_ids("f")


def test_child_with_two_deps_waits_for_both() -> None:
    make_flow("f", step("a"), step("b"), step("c", "a", "b"))
    run_id = start("f")
    recs = {r["step_slug"]: r for r in claim("f")}
    assert complete(recs["a"], 1) == "completed"
    c = state(run_id, "c")
    assert (c["remaining_deps"], c["status"]) == (1, "created")
    assert complete(recs["b"], 2) == "completed"
    c = state(run_id, "c")
    assert (c["remaining_deps"], c["status"]) == (0, "started")


def test_map_step_completes_after_its_last_task() -> None:
    make_flow("f", step("m", step_type="map"))
    run_id = start("f", [1, 2, 3])
    recs = claim("f")
    assert complete(recs[0], "x") == "completed"
    m = state(run_id, "m")
    assert (m["status"], m["remaining_tasks"], m["output"]) == ("started", 2, None)
    assert complete(recs[1], "y") == "completed"
    assert complete(recs[2], "z") == "completed"
    m = state(run_id, "m")
    assert (m["status"], m["remaining_tasks"]) == ("completed", 0)
    assert run(run_id)["status"] == "completed"
