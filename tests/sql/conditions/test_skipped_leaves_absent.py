from tests.sql.support import claim_one, complete, make_flow, run, start, step


def test_skipped_leaf_absent_from_run_output() -> None:
    make_flow(
        "f",
        step("a"),
        step("kept", "a"),
        step("dropped", "a", required_input_pattern={"a": {"flag": True}}),
    )
    run_id = start("f")
    assert complete(claim_one("f", "a"), {"flag": False}) == "completed"
    assert complete(claim_one("f", "kept"), 0) == "completed"
    r = run(run_id)
    assert r["status"] == "completed"
    assert r["output"] == {"kept": 0}
