from tests.sql.support import backdate_started, claim, make_flow, requeue_stalled, start, step, task


def test_short_step_timeout_wins_over_long_flow_timeout() -> None:
    make_flow("f", step("a", timeout=10), timeout=300, max_attempts=5)
    run_id = start("f")
    claim("f")
    backdate_started(run_id, "a", 45)  # past 10 + 30, far below 300 + 30
    requeue_stalled()
    assert task(run_id, "a")["status"] == "queued"


def test_long_step_timeout_wins_over_short_flow_timeout() -> None:
    make_flow("f", step("a", timeout=300), timeout=10, max_attempts=5)
    run_id = start("f")
    claim("f")
    backdate_started(run_id, "a", 45)  # past flow 10 + 30, below step 300 + 30
    requeue_stalled()
    assert task(run_id, "a")["status"] == "started"
    backdate_started(run_id, "a", 331)
    requeue_stalled()
    assert task(run_id, "a")["status"] == "queued"
