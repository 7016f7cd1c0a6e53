"""remaining_deps of a step already skipped by skip-cascade stays current, as in pgflow.

A dependency that completes, or is skipped on its own (skip), frees the skipped step's count; the one
whose skip reached it (skip-cascade) does not.
"""

from tests.sql.support import claim, complete, fail, make_flow, run, start, state, step


def test_completed_dependency_of_a_cascade_skipped_step_is_counted() -> None:
    make_flow("f", step("a", when_exhausted="skip-cascade", max_attempts=1), step("b"), step("c", "a", "b"))
    run_id = start("f")
    recs = {r["step_slug"]: r for r in claim("f")}
    assert fail(recs["a"]) == "skipped"
    assert state(run_id, "c")["status"] == "skipped"
    assert state(run_id, "c")["remaining_deps"] == 2
    assert complete(recs["b"], 1) == "completed"
    assert state(run_id, "c")["remaining_deps"] == 1
    assert run(run_id)["status"] == "completed"


def test_plain_skip_of_a_dependency_of_a_cascade_skipped_step_is_counted() -> None:
    make_flow(
        "f",
        step("x", when_exhausted="skip-cascade", max_attempts=1),
        step("y", when_exhausted="skip", max_attempts=1),
        step("c", "x", "y"),
    )
    run_id = start("f")
    recs = {r["step_slug"]: r for r in claim("f")}
    assert fail(recs["x"]) == "skipped"
    assert fail(recs["y"]) == "skipped"
    assert state(run_id, "c")["status"] == "skipped"
    assert state(run_id, "c")["remaining_deps"] == 1
    assert run(run_id)["status"] == "completed"
