from tests.sql.support import backdate_started, claim, make_flow, q, requeue_stalled, start, step, task


def test_started_task_of_failed_run_not_requeued() -> None:
    make_flow("f", step("a"), timeout=10, max_attempts=5)
    run_id = start("f")
    claim("f")
    backdate_started(run_id, "a", 100)
    q("update pgflow.runs set status = 'failed', failed_at = now() where run_id = %s", [run_id])
    requeue_stalled()
    row = task(run_id, "a")
    assert row["status"] == "started"
    assert row["requeued_count"] == 0
    assert row["permanently_stalled_at"] is None


def test_started_task_of_completed_run_not_requeued() -> None:
    make_flow("f", step("a"), timeout=10, max_attempts=5)
    run_id = start("f")
    claim("f")
    backdate_started(run_id, "a", 100)
    q(
        "update pgflow.runs set status = 'completed', completed_at = now() where run_id = %s",
        [run_id],
    )
    requeue_stalled()
    assert task(run_id, "a")["status"] == "started"


def test_started_task_of_terminal_step_not_requeued() -> None:
    make_flow("f", step("a"), timeout=10, max_attempts=5)
    run_id = start("f")
    claim("f")
    backdate_started(run_id, "a", 100)
    q(
        "update pgflow.step_states set status = 'skipped', skipped_at = now(), "
        "skip_reason = 'handler_failed', remaining_tasks = null where run_id = %s",
        [run_id],
    )
    requeue_stalled()
    row = task(run_id, "a")
    assert row["status"] == "started"
    assert row["requeued_count"] == 0
