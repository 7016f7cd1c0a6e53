from tests.sql.support import claim_one, complete, make_flow, run, start, state, step


def test_skip_lets_dependents_run_without_the_skipped_input() -> None:
    make_flow(
        "f",
        step("a", required_input_pattern={"go": True}, when_unmet="skip"),
        step("b"),
        step("c", "a", "b"),
    )
    run_id = start("f", {"go": False})
    assert state(run_id, "a")["status"] == "skipped"
    assert complete(claim_one("f", "b"), "b-out") == "completed"
    c = claim_one("f", "c")
    assert c["input"] == {"b": "b-out"}
    assert complete(c, "c-out") == "completed"
    assert run(run_id)["status"] == "completed"


def test_skipped_step_gives_dependent_map_size_zero() -> None:
    make_flow(
        "f",
        step("a", required_input_pattern={"go": True}),
        step("m", "a", step_type="map"),
    )
    run_id = start("f", {"go": False})
    m = state(run_id, "m")
    assert m["status"] == "completed"
    assert m["output"] == []
    assert run(run_id)["status"] == "completed"
