from tests.sql.support import backdate_started, claim, make_flow, requeue_stalled, requeued_total, start, step


def test_counts_each_requeued_task() -> None:
    make_flow("f", step("m", step_type="map"), timeout=10, max_attempts=5)
    run_id = start("f", [1, 2, 3])
    claim("f")
    for index in (0, 2):
        backdate_started(run_id, "m", 100, task_index=index)
    assert requeued_total(requeue_stalled()) == 2
    assert requeued_total(requeue_stalled()) == 0
