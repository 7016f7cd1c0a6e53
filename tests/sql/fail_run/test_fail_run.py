from tests.sql.support import (
    active_tasks,
    archived_ids,
    claim,
    live_ids,
    make_flow,
    q,
    run,
    start,
    step,
    tasks,
)


def test_fail_run_cancels_unfinished_tasks_and_archives_messages() -> None:
    make_flow("f", step("a"), step("m", step_type="map"))
    run_id = start("f", [1, 2, 3])
    claim("f", qty=2)
    msgs = {t["message_id"] for t in tasks(run_id)}
    q("select pgflow.fail_run(%s, 'operator stop')", [run_id])
    r = run(run_id)
    assert r["status"] == "failed"
    assert r["failed_at"] is not None
    assert r["error_message"] == "operator stop"
    assert active_tasks(run_id) == []
    assert {t["status"] for t in tasks(run_id)} == {"cancelled"}
    assert live_ids("f") == set()
    assert msgs <= archived_ids("f")


def test_completed_tasks_stay_completed() -> None:
    make_flow("f", step("a"), step("b"))
    run_id = start("f")
    from tests.sql.support import complete

    recs = {r["step_slug"]: r for r in claim("f")}
    assert complete(recs["a"], 1) == "completed"
    q("select pgflow.fail_run(%s, 'stop')", [run_id])
    statuses = {t["step_slug"]: t["status"] for t in tasks(run_id)}
    assert statuses == {"a": "completed", "b": "cancelled"}


def test_other_runs_untouched() -> None:
    make_flow("f", step("a"))
    doomed = start("f")
    fine = start("f")
    q("select pgflow.fail_run(%s, 'stop')", [doomed])
    assert run(fine)["status"] == "started"
    assert tasks(fine)[0]["status"] == "queued"
    assert tasks(fine)[0]["message_id"] in live_ids("f")
