from tests.sql.support import claim, complete, make_flow, make_visible, q, start, start_tasks, step, task


def test_started_task_not_claimed_again() -> None:
    make_flow("f", step("a"))
    run_id = start("f")
    first = claim("f")[0]
    make_visible("f")
    assert start_tasks("f", [first["message_id"]]) == []
    row = task(run_id, "a")
    assert row["attempts_count"] == 1
    assert row["status"] == "started"


def test_terminal_task_not_claimed() -> None:
    make_flow("f", step("a"), step("b"))
    run_id = start("f")
    a = claim("f")
    rec = next(r for r in a if r["step_slug"] == "a")
    assert complete(rec, {"ok": 1}) == "completed"
    assert start_tasks("f", [rec["message_id"]]) == []
    assert task(run_id, "a")["status"] == "completed"
    assert task(run_id, "a")["attempts_count"] == 1


def test_task_of_failed_run_not_claimed() -> None:
    make_flow("f", step("a"))
    run_id = start("f")
    msg = task(run_id, "a")["message_id"]
    # the guard itself: a run that is terminal while its task row still says queued
    q("update pgflow.runs set status = 'failed', failed_at = now() where run_id = %s", [run_id])
    assert start_tasks("f", [msg]) == []
    assert task(run_id, "a")["status"] == "queued"
    assert task(run_id, "a")["attempts_count"] == 0


def test_task_of_step_not_started_not_claimed() -> None:
    make_flow("f", step("a"))
    run_id = start("f")
    msg = task(run_id, "a")["message_id"]
    q(
        "update pgflow.step_states set status = 'failed', failed_at = now() where run_id = %s",
        [run_id],
    )
    assert start_tasks("f", [msg]) == []
    assert task(run_id, "a")["attempts_count"] == 0


def test_cancelled_task_not_claimed() -> None:
    make_flow("f", step("a"), step("b"))
    run_id = start("f")
    msgs = {
        t["step_slug"]: t["message_id"]
        for t in q("select * from pgflow.step_tasks where run_id = %s", [run_id])
    }
    q("select pgflow.fail_run(%s, 'stop')", [run_id])
    assert start_tasks("f", list(msgs.values())) == []
    assert {t["status"] for t in q("select status from pgflow.step_tasks where run_id = %s", [run_id])} == {
        "cancelled"
    }
