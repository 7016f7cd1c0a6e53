from tests.sql.support import (
    backdate_started,
    claim,
    make_flow,
    requeue_stalled,
    requeued_total,
    start,
    step,
    task,
    vt_in,
)


def test_task_started_longer_than_timeout_plus_30s_is_requeued_and_visible_now() -> None:
    make_flow("f", step("a"), timeout=20, max_attempts=5)
    run_id = start("f")
    rec = claim("f")[0]
    backdate_started(run_id, "a", 51)  # 20 + 30 = 50 s
    result = requeue_stalled()
    assert requeued_total(result) == 1
    row = task(run_id, "a")
    assert row["status"] == "queued"
    assert row["requeued_count"] == 1
    assert row["last_requeued_at"] is not None
    assert row["permanently_stalled_at"] is None
    assert row["attempts_count"] == 1
    assert vt_in("f", rec["message_id"]) <= 0.5
    again = claim("f")
    assert [r["attempt"] for r in again] == [2]


def test_task_within_timeout_plus_30s_is_left_alone() -> None:
    make_flow("f", step("a"), timeout=20, max_attempts=5)
    run_id = start("f")
    claim("f")
    backdate_started(run_id, "a", 45)
    assert requeued_total(requeue_stalled()) == 0
    row = task(run_id, "a")
    assert row["status"] == "started"
    assert row["requeued_count"] == 0


def test_queued_and_completed_tasks_are_left_alone() -> None:
    make_flow("f", step("a"), step("b"), timeout=1, max_attempts=5)
    run_id = start("f")
    q_rec = {r["step_slug"]: r for r in claim("f")}
    from tests.sql.support import complete, q

    assert complete(q_rec["a"], 1) == "completed"
    q(
        "update pgflow.step_tasks set started_at = now() - interval '1 hour', "
        "queued_at = now() - interval '1 hour' where run_id = %s and step_slug = 'a'",
        [run_id],
    )
    requeue_stalled()
    assert task(run_id, "a")["status"] == "completed"
