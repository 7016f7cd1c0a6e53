from tests.sql.support import (
    active_tasks,
    archived_ids,
    claim,
    fail,
    live_ids,
    make_flow,
    run,
    start,
    state,
    step,
    tasks,
)


def test_exhausted_fail_fails_run_and_cancels_siblings() -> None:
    make_flow(
        "f",
        step("m", step_type="map"),
        step("other"),
        step("after", "m"),
        max_attempts=1,
    )
    run_id = start("f", [1, 2, 3])
    recs = claim("f", qty=2)  # two tasks started, the others stay queued
    assert len(recs) == 2
    failing = recs[0]
    all_msgs = {t["message_id"] for t in tasks(run_id)}
    assert fail(failing, "handler exploded") == "failed"
    r = run(run_id)
    assert r["status"] == "failed"
    assert r["failed_at"] is not None
    failed_step = state(run_id, failing["step_slug"])
    assert failed_step["status"] == "failed"
    assert failed_step["error_message"]
    assert active_tasks(run_id) == []
    by_key = {(t["step_slug"], t["task_index"]): t["status"] for t in tasks(run_id)}
    assert by_key.pop((failing["step_slug"], failing["task_index"])) == "failed"
    assert set(by_key.values()) == {"cancelled"}
    assert live_ids("f") == set()
    assert all_msgs <= archived_ids("f")
    assert state(run_id, "after")["status"] in ("created", "failed")


def test_other_runs_untouched() -> None:
    make_flow("f", step("a"), max_attempts=1)
    doomed = start("f")
    fine = start("f")
    recs = {r["run_id"]: r for r in claim("f")}
    assert fail(recs[doomed]) == "failed"
    assert run(fine)["status"] == "started"
    assert tasks(fine)[0]["status"] == "started"
    assert recs[fine]["message_id"] in live_ids("f")
