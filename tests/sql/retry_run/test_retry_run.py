"""pgflow.retry_run: a failed or cancelled run continues from where it failed, in place. Completed
steps and tasks keep their outputs and are not run again; failed and cancelled tasks are queued again
with a fresh attempt budget and new messages; dependents follow as usual."""

from __future__ import annotations

from tests.sql.support import (
    backdate_started,
    claim,
    complete,
    db_error,
    fail,
    live_ids,
    make_flow,
    q,
    run,
    start,
    states,
    step,
    tasks,
    val,
)


def _retry(run_id: object) -> int:
    return int(val("select pgflow.retry_run(%s) as value", [run_id]))


def _failed_map_run() -> object:
    """load -> pages (map of 3) -> summary; page 1 fails for good, so the run fails."""
    make_flow(
        "rt", step("load"), step("pages", "load", step_type="map"), step("summary", "pages"), max_attempts=1
    )
    run_id = start("rt", {})
    (load,) = claim("rt", step_slug="load")
    assert complete(load, [10, 11, 12]) == "completed"
    pages = claim("rt", step_slug="pages")
    assert complete(pages[0], "p0") == "completed"
    assert fail(pages[1], "ocr crashed") == "failed"
    return run_id


def test_retry_keeps_completed_work_and_queues_the_failed_and_cancelled_tasks() -> None:
    run_id = _failed_map_run()
    assert run(run_id)["status"] == "failed"
    before = {(t["step_slug"], t["task_index"]): t for t in tasks(run_id)}
    assert before[("pages", 2)]["status"] == "cancelled"
    backdate_started(run_id, "pages", 3600, task_index=2)  # the cancelled claim is long dead

    assert _retry(run_id) == 2
    after = {(t["step_slug"], t["task_index"]): t for t in tasks(run_id)}
    assert run(run_id)["status"] == "started" and run(run_id)["error_message"] is None
    assert after[("load", 0)]["status"] == "completed" and after[("load", 0)]["attempts_count"] == 1
    assert after[("pages", 0)] == before[("pages", 0)], "completed task untouched"
    for index in (1, 2):
        task = after[("pages", index)]
        assert (task["status"], task["attempts_count"], task["error_message"]) == ("queued", 0, None)
        assert task["message_id"] != before[("pages", index)]["message_id"]
    assert len(before[("pages", 1)]["attempt_errors"]) == 1
    assert after[("pages", 1)]["attempt_errors"] == [], "a new attempt history"
    assert states(run_id)["pages"]["status"] == "started" and states(run_id)["pages"]["remaining_tasks"] == 2
    assert states(run_id)["summary"]["status"] == "created"
    assert live_ids("rt") == {after[("pages", 1)]["message_id"], after[("pages", 2)]["message_id"]}

    again = claim("rt", step_slug="pages")
    assert [(r["task_index"], r["attempt"], r["input"]) for r in again] == [(1, 1, 11), (2, 1, 12)]
    for rec in again:
        assert complete(rec, f"p{rec['task_index']}") == "completed"
    (summary,) = claim("rt", step_slug="summary")
    assert summary["input"] == {"pages": ["p0", "p1", "p2"]}, "the kept output and the retried ones, in order"
    assert complete(summary, "done") == "completed"
    assert run(run_id)["status"] == "completed"


def test_retry_of_a_run_that_is_not_failed_is_refused() -> None:
    make_flow("rt_ok", step("a"))
    run_id = start("rt_ok")
    assert "only a failed or cancelled run can be retried" in db_error(
        "select pgflow.retry_run(%s)", [run_id]
    )
    assert "does not exist" in db_error("select pgflow.retry_run(gen_random_uuid())")


def test_retry_waits_for_a_cancelled_claim_to_be_dead() -> None:
    """A task cancelled while claimed may still run in its worker until timeout + 30 s: refused."""
    make_flow("rt_c", step("a"), timeout=5)
    run_id = start("rt_c")
    (rec,) = claim("rt_c")
    assert val("select pgflow.cancel_run(%s) as value", [run_id]) == "cancelled"
    assert "a worker may still be running" in db_error("select pgflow.retry_run(%s)", [run_id])
    assert run(run_id)["status"] == "failed", "nothing changed"
    backdate_started(run_id, "a", 36)
    assert _retry(run_id) == 1
    # the old claim reports late: attempt 1 of a task that is queued again is stale
    assert complete(rec, "late") != "completed"
    (again,) = claim("rt_c")
    assert again["attempt"] == 1
    assert complete(again, "fresh") == "completed"
    assert q("select output from pgflow.runs where run_id = %s", [run_id])[0]["output"] == {"a": "fresh"}
