"""A failed run keeps its counters current and reads its started steps as cancelled.

remaining_steps counts the steps that neither completed nor were skipped (pgflow decrements it on
every completion and skip, never on a failure). A step that had started when its run failed had its
tasks cancelled, so it reads 'cancelled' rather than 'started'; steps that never started stay created.
"""

from tests.sql.support import claim, claim_one, complete, make_flow, q, run, start, state, states, step


def test_run_failed_by_an_unmet_condition_does_not_count_the_completed_step() -> None:
    make_flow(
        "f",
        step("a"),
        step("b", "a", required_input_pattern={"a": {"ok": True}}, when_unmet="fail"),
        step("c", "b"),
    )
    run_id = start("f")
    assert complete(claim_one("f"), {"ok": False}) == "completed"
    r = run(run_id)
    assert r["status"] == "failed"
    assert r["remaining_steps"] == 2


def test_started_steps_of_a_failed_run_read_cancelled() -> None:
    make_flow("f", step("a"), step("m", step_type="map"), step("after", "a"), step("done"))
    run_id = start("f", [1, 2])
    recs = claim("f")
    done = next(r for r in recs if r["step_slug"] == "done")
    assert complete(done, "ok") == "completed"
    q("select pgflow.fail_run(%s, 'operator stop')", [run_id])
    assert {slug: s["status"] for slug, s in states(run_id).items()} == {
        "a": "cancelled",
        "m": "cancelled",
        "after": "created",
        "done": "completed",
    }
    assert state(run_id, "m")["remaining_tasks"] == 2
    r = run(run_id)
    assert r["remaining_steps"] == 3


def test_the_failing_step_reads_failed_and_the_others_cancelled() -> None:
    from tests.sql.support import fail

    make_flow("f", step("a", max_attempts=1), step("b"))
    run_id = start("f")
    recs = {r["step_slug"]: r for r in claim("f")}
    assert fail(recs["a"]) == "failed"
    assert state(run_id, "a")["status"] == "failed"
    assert state(run_id, "b")["status"] == "cancelled"
    assert run(run_id)["remaining_steps"] == 2
