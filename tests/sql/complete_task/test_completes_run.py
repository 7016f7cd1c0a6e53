from tests.sql.support import claim_one, complete, make_flow, run, start, step


def test_last_step_completes_run_with_leaf_outputs() -> None:
    make_flow("f", step("a"), step("b", "a"), step("c", "a"))
    run_id = start("f")
    assert complete(claim_one("f", "a"), "root") == "completed"
    assert complete(claim_one("f", "b"), {"b": 1}) == "completed"
    assert run(run_id)["status"] == "started"
    assert complete(claim_one("f", "c"), [3]) == "completed"
    r = run(run_id)
    assert r["status"] == "completed"
    assert r["remaining_steps"] == 0
    assert r["completed_at"] is not None
    assert r["output"] == {"b": {"b": 1}, "c": [3]}
