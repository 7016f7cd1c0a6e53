from tests.sql.support import make_flow, run, start, state, step, tasks


def test_required_pattern_met_starts_step() -> None:
    make_flow("f", step("a", required_input_pattern={"go": True}))
    run_id = start("f", {"go": True, "other": 1})
    assert state(run_id, "a")["status"] == "started"
    assert len(tasks(run_id, "a")) == 1


def test_required_pattern_unmet_skips_step() -> None:
    make_flow("f", step("a", required_input_pattern={"go": True}), step("b"))
    run_id = start("f", {"go": False})
    a = state(run_id, "a")
    assert a["status"] == "skipped"
    assert a["skip_reason"] == "condition_unmet"
    assert tasks(run_id, "a") == []
    assert state(run_id, "b")["status"] == "started"
    assert run(run_id)["remaining_steps"] == 1


def test_nested_containment() -> None:
    make_flow("f", step("a", required_input_pattern={"user": {"plan": "pro"}}))
    met = start("f", {"user": {"plan": "pro", "id": 3}})
    unmet = start("f", {"user": {"plan": "free"}})
    assert state(met, "a")["status"] == "started"
    assert state(unmet, "a")["status"] == "skipped"
