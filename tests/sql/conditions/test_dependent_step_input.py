from tests.sql.support import claim_one, complete, make_flow, start, state, step, tasks


def test_condition_matches_deps_outputs_by_slug() -> None:
    make_flow(
        "f",
        step("a"),
        step("b", "a", required_input_pattern={"a": {"ok": True}}),
    )
    met = start("f", {"ok": False})
    assert complete(claim_one("f", "a"), {"ok": True}) == "completed"
    assert state(met, "b")["status"] == "started"

    unmet = start("f", {"ok": True})
    assert complete(claim_one("f", "a"), {"ok": False}) == "completed"
    b = state(unmet, "b")
    assert b["status"] == "skipped"
    assert b["skip_reason"] == "condition_unmet"
    assert tasks(unmet, "b") == []


def test_flow_input_not_used_for_dependent_step() -> None:
    make_flow("f", step("a"), step("b", "a", required_input_pattern={"go": True}))
    run_id = start("f", {"go": True})
    assert complete(claim_one("f", "a"), {"something": "else"}) == "completed"
    assert state(run_id, "b")["status"] == "skipped"


def test_if_not_on_dependent_step() -> None:
    make_flow("f", step("a"), step("b", "a", forbidden_input_pattern={"a": {"error": True}}))
    run_id = start("f")
    assert complete(claim_one("f", "a"), {"error": True}) == "completed"
    assert state(run_id, "b")["status"] == "skipped"
