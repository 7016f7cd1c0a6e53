from tests.sql.support import claim, complete, fail, live_ids, make_flow, q, run, start, step, task, vt_in


def test_wrong_attempt_is_stale_and_changes_nothing() -> None:
    make_flow("f", step("a"), max_attempts=1)
    run_id = start("f")
    rec = claim("f")[0]
    before = task(run_id, "a")
    vt_before = vt_in("f", rec["message_id"])
    assert fail(rec, attempt=rec["attempt"] + 1) == "stale"
    assert fail(rec, attempt=0) == "stale"
    assert task(run_id, "a") == before
    assert run(run_id)["status"] == "started"
    assert abs(vt_in("f", rec["message_id"]) - vt_before) < 1.0


def test_fail_after_complete_is_stale() -> None:
    make_flow("f", step("a"), step("b"))
    run_id = start("f")
    rec = next(r for r in claim("f") if r["step_slug"] == "a")
    assert complete(rec, 1) == "completed"
    assert fail(rec) == "stale"
    assert task(run_id, "a")["status"] == "completed"
    assert run(run_id)["status"] == "started"


def test_fail_of_queued_task_is_stale() -> None:
    make_flow("f", step("a"), max_attempts=3)
    run_id = start("f")
    rec = claim("f")[0]
    assert fail(rec) == "retrying"
    assert fail(rec) == "stale"
    assert task(run_id, "a")["attempts_count"] == 1
    assert task(run_id, "a")["status"] == "queued"


def test_fail_on_failed_run_is_stale() -> None:
    make_flow("f", step("a"), step("b"))
    run_id = start("f")
    recs = {r["step_slug"]: r for r in claim("f")}
    q("select pgflow.fail_run(%s, 'stop')", [run_id])
    assert fail(recs["a"]) == "stale"
    assert task(run_id, "a")["status"] == "cancelled"
    assert recs["a"]["message_id"] not in live_ids("f")
