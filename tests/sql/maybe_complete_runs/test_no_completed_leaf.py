"""A run that completes with no completed leaf step has no output (NULL), as in pgflow, not ``{}``."""

from tests.sql.support import claim_one, complete, fail, make_flow, run, start, step


def test_flow_without_steps_completes_without_output() -> None:
    make_flow("f")
    run_id = start("f")
    r = run(run_id)
    assert r["status"] == "completed"
    assert r["output"] is None


def test_lone_step_skipped_by_its_condition_leaves_no_output() -> None:
    make_flow("f", step("a", required_input_pattern={"go": True}, when_unmet="skip"))
    run_id = start("f", {"go": False})
    r = run(run_id)
    assert r["status"] == "completed"
    assert r["output"] is None


def test_leaf_skipped_on_exhaustion_leaves_no_output() -> None:
    make_flow("f", step("a"), step("b", "a", when_exhausted="skip", max_attempts=1))
    run_id = start("f")
    assert complete(claim_one("f"), 1) == "completed"
    assert fail(claim_one("f")) == "skipped"
    r = run(run_id)
    assert r["status"] == "completed"
    assert r["output"] is None


def test_a_completed_leaf_still_gives_an_object() -> None:
    make_flow("f", step("a"), step("b", required_input_pattern={"go": True}))
    run_id = start("f", {"go": False})
    assert complete(claim_one("f"), 0) == "completed"
    assert run(run_id)["output"] == {"a": 0}
