"""pgflow.retry_run: a failed or cancelled run continues from where it failed, in place. Completed
steps and tasks keep their outputs and are not run again; failed and cancelled tasks are queued again
with new messages, their attempt numbers continuing; dependents follow as usual."""

from __future__ import annotations

from tests.sql.support import (
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
    assert _retry(run_id) == 2
    after = {(t["step_slug"], t["task_index"]): t for t in tasks(run_id)}
    assert run(run_id)["status"] == "started" and run(run_id)["error_message"] is None
    assert after[("load", 0)]["status"] == "completed" and after[("load", 0)]["attempts_count"] == 1
    assert after[("pages", 0)] == before[("pages", 0)], "completed task untouched"
    for index in (1, 2):
        task = after[("pages", index)]
        assert (task["status"], task["attempts_count"], task["error_message"]) == ("queued", 1, None)
        assert task["message_id"] != before[("pages", index)]["message_id"]
        assert [e["attempt"] for e in task["attempt_errors"]] == [1], "every attempt has its outcome"
    assert after[("pages", 1)]["attempt_errors"] == before[("pages", 1)]["attempt_errors"]
    assert before[("pages", 2)]["attempt_errors"] == []
    assert "ocr crashed" in after[("pages", 2)]["attempt_errors"][0]["error"], (
        "the attempt the failure cut short"
    )
    assert [after[("pages", i)]["attempts_base"] for i in (0, 1, 2)] == [0, 1, 1]
    assert states(run_id)["pages"]["status"] == "started" and states(run_id)["pages"]["remaining_tasks"] == 2
    assert states(run_id)["summary"]["status"] == "created"
    assert live_ids("rt") == {after[("pages", 1)]["message_id"], after[("pages", 2)]["message_id"]}

    again = claim("rt", step_slug="pages")
    assert [(r["task_index"], r["attempt"], r["input"]) for r in again] == [(1, 2, 11), (2, 2, 12)]
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


def test_a_worker_still_running_a_cancelled_claim_can_never_complete_the_retry() -> None:
    """Attempt numbers continue, so the old claim's report is stale before and after the new claim."""
    make_flow("rt_c", step("a"), timeout=5)
    run_id = start("rt_c")
    (rec,) = claim("rt_c")
    assert val("select pgflow.cancel_run(%s) as value", [run_id]) == "cancelled"
    assert _retry(run_id) == 1
    assert complete(rec, "late") != "completed", "stale while queued again"
    (again,) = claim("rt_c")
    assert again["attempt"] == 2
    assert complete(rec, "late") != "completed", "stale while the retried attempt runs"
    assert complete(again, "fresh") == "completed"
    assert q("select output from pgflow.runs where run_id = %s", [run_id])[0]["output"] == {"a": "fresh"}


def test_a_retried_task_gets_its_full_attempt_budget_again() -> None:
    make_flow("rt_x", step("a"), max_attempts=2, base_delay=0)
    run_id = start("rt_x")
    for expected in ("retrying", "failed"):
        (rec,) = claim("rt_x")
        assert fail(rec, "down", retry_delay=0) == expected
    assert _retry(run_id) == 1
    for attempt, expected in ((3, "retrying"), (4, "failed")):
        (rec,) = claim("rt_x")
        assert rec["attempt"] == attempt, "numbering continues"
        assert fail(rec, "still down", retry_delay=0) == expected, "max_attempts counts from the retry"
    assert run(run_id)["status"] == "failed"
    assert [e["attempt"] for e in tasks(run_id)[0]["attempt_errors"]] == [1, 2, 3, 4]
    assert _retry(run_id) == 1 and tasks(run_id)[0]["attempts_base"] == 4


def test_a_run_failed_by_a_maps_type_violation_retries_without_the_output_that_broke_it() -> None:
    """The failed task keeps the non-array output that broke the map (as in pgflow); a retry queues it
    again without that output (a queued task has none: output_valid_only_for_completed), and a fixed
    handler's array completes the run."""
    make_flow("tv", step("producer"), step("consumer", "producer", step_type="map"))
    run_id = start("tv", {})
    (producer,) = claim("tv", step_slug="producer")
    assert complete(producer, {"not": "an array"}) == "failed"
    assert _retry(run_id) == 1
    (queued,) = tasks(run_id, "producer")
    assert (queued["status"], queued["output"], queued["error_message"]) == ("queued", None, None)
    (again,) = claim("tv", step_slug="producer")
    assert complete(again, [1, 2]) == "completed"
    assert states(run_id)["consumer"]["initial_tasks"] == 2
    for task in claim("tv", step_slug="consumer"):
        assert complete(task, task["task_index"]) == "completed"
    assert run(run_id)["status"] == "completed"
