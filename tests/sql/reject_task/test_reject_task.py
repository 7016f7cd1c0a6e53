"""``pgflow.reject_task``: a failed attempt no retry can fix fails the task at once, fenced like
``fail_task``, and follows when_exhausted."""

from typing import Any

from tests.sql.support import (
    archived_ids,
    claim,
    complete,
    fail,
    live_ids,
    make_flow,
    run,
    start,
    state,
    step,
    task,
    val,
)


def reject(rec: dict[str, Any], error: str = "input not decodable: x", attempt: int | None = None) -> str:
    return str(
        val(
            "select pgflow.reject_task(%s, %s, %s, %s, %s)",
            [
                rec["run_id"],
                rec["step_slug"],
                rec["task_index"],
                rec["attempt"] if attempt is None else attempt,
                error,
            ],
        )
    )


def test_fails_at_once_whatever_attempts_remain() -> None:
    make_flow("f", step("a"), max_attempts=5)
    run_id = start("f")
    rec = claim("f")[0]
    assert reject(rec, "output not encodable: nested deeper than 500 levels") == "failed"
    found = task(run_id, "a")
    assert found["status"] == "failed" and found["attempts_count"] == 1
    assert found["error_message"] == "output not encodable: nested deeper than 500 levels"
    errors = val("select attempt_errors from pgflow.step_tasks where run_id = %s", [run_id])
    assert [(e["attempt"], e["error"]) for e in errors] == [(1, found["error_message"])]
    assert state(run_id, "a")["status"] == "failed"
    assert run(run_id)["status"] == "failed"
    assert rec["message_id"] in archived_ids("f") and rec["message_id"] not in live_ids("f")


def test_a_later_attempt_keeps_the_earlier_errors() -> None:
    make_flow("f", step("a"), max_attempts=5, base_delay=0)
    run_id = start("f")
    assert fail(claim("f")[0], "first") == "retrying"
    rec = claim("f")[0]
    assert reject(rec) == "failed"
    errors = val("select attempt_errors from pgflow.step_tasks where run_id = %s", [run_id])
    assert [e["attempt"] for e in errors] == [1, 2]


def test_when_exhausted_skip_lets_dependents_go_on() -> None:
    make_flow("f", step("a", when_exhausted="skip"), step("b"), step("c", "a", "b"), max_attempts=3)
    run_id = start("f")
    recs = {r["step_slug"]: r for r in claim("f")}
    assert reject(recs["a"]) == "skipped"
    assert state(run_id, "a")["status"] == "skipped"
    assert complete(recs["b"], 1) == "completed"
    assert run(run_id)["status"] == "started"
    assert state(run_id, "c")["remaining_deps"] == 0


def test_a_claim_that_is_not_current_is_stale() -> None:
    make_flow("f", step("a"), max_attempts=3)
    run_id = start("f")
    rec = claim("f")[0]
    before = task(run_id, "a")
    assert reject(rec, attempt=rec["attempt"] + 1) == "stale"
    assert task(run_id, "a") == before
    assert complete(rec, 1) == "completed"
    assert reject(rec) == "stale"
    assert task(run_id, "a")["status"] == "completed"
