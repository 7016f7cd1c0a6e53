from tests.sql.support import (
    active_tasks,
    backdate_started,
    claim,
    make_flow,
    requeue_stalled,
    run,
    start,
    state,
    step,
    task,
)


def _stall_and_recover(run_id, times: int) -> None:
    for _ in range(times):
        assert len(claim("f")) == 1
        backdate_started(run_id, "a", 100)
        requeue_stalled()


def test_requeued_three_times_then_permanently_stalled_and_exhausted() -> None:
    make_flow("f", step("a"), step("b"), timeout=10, max_attempts=10)
    run_id = start("f")
    claim("f", step_slug="b")
    _stall_and_recover(run_id, 3)
    row = task(run_id, "a")
    assert row["status"] == "queued"
    assert row["requeued_count"] == 3
    assert row["permanently_stalled_at"] is None

    _stall_and_recover(run_id, 1)
    row = task(run_id, "a")
    assert row["permanently_stalled_at"] is not None
    assert row["status"] == "failed"
    assert row["requeued_count"] == 3
    # when_exhausted = fail (default): the run fails and its other tasks are cancelled
    assert run(run_id)["status"] == "failed"
    assert active_tasks(run_id) == []
    assert task(run_id, "b")["status"] == "cancelled"


def test_permanently_stalled_task_with_skip_skips_its_step() -> None:
    make_flow("f", step("a", when_exhausted="skip"), step("b", "a"), timeout=10, max_attempts=10)
    run_id = start("f")
    _stall_and_recover(run_id, 4)
    assert task(run_id, "a")["permanently_stalled_at"] is not None
    a = state(run_id, "a")
    assert a["status"] == "skipped"
    assert a["skip_reason"] == "handler_failed"
    assert state(run_id, "b")["status"] == "started"


def test_stalled_task_without_attempts_left_is_exhausted() -> None:
    make_flow("f", step("a"), timeout=10, max_attempts=1)
    run_id = start("f")
    _stall_and_recover(run_id, 1)
    row = task(run_id, "a")
    assert row["status"] not in ("queued", "started")
    assert run(run_id)["status"] == "failed"
