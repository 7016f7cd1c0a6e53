from tests.sql.support import active_tasks, live_ids, make_flow, run, start, state, step


def test_unmet_with_fail_fails_the_run() -> None:
    make_flow("f", step("a", required_input_pattern={"go": True}, when_unmet="fail"), step("b"))
    run_id = start("f", {"go": False})
    r = run(run_id)
    assert r["status"] == "failed"
    assert r["failed_at"] is not None
    assert state(run_id, "a")["status"] == "failed"
    assert active_tasks(run_id) == []
    assert live_ids("f") == set()


def test_met_with_fail_runs_normally() -> None:
    make_flow("f", step("a", required_input_pattern={"go": True}, when_unmet="fail"))
    run_id = start("f", {"go": True})
    assert run(run_id)["status"] == "started"
    assert state(run_id, "a")["status"] == "started"
