"""Stalled-task recovery makes a requeued task's message visible in the task's own queue; one pass over
stalled tasks of two queues makes each message visible in its own queue (grouped by queue).
Time is simulated by back-dating started_at."""

from tests.sql.support import (
    assert_visible_in,
    backdate_started,
    claim_all,
    queue_snapshot,
    requeue_stalled,
    start_twins,
    step,
    task,
    vt_in,
)


def test_requeue_makes_only_the_stalled_tasks_message_visible() -> None:
    twins = start_twins(step("a"), timeout=10)
    assert twins.ids == [1]
    claim_all("f")
    claim_all("g")
    backdate_started(twins.f, "a", 41)
    before_g = queue_snapshot("g")
    assert requeue_stalled()["requeued"] == 1
    row = task(twins.f, "a")
    assert (row["status"], row["requeued_count"]) == ("queued", 1)
    assert vt_in("f", 1) <= 0, "the requeued message is visible now"
    assert queue_snapshot("g") == before_g
    assert_visible_in("g", 1, 12)
    assert task(twins.g, "a")["status"] == "started"


def test_one_pass_over_two_queues_groups_by_queue() -> None:
    twins = start_twins(step("m", step_type="map"), input=["x", "y"], timeout=10)
    assert twins.ids == [1, 2]
    claim_all("f")
    claim_all("g")
    backdate_started(twins.f, "m", 41, task_index=0)
    backdate_started(twins.g, "m", 41, task_index=1)
    f0 = task(twins.f, "m", 0)["message_id"]
    g1 = task(twins.g, "m", 1)["message_id"]
    assert f0 != g1
    assert requeue_stalled()["requeued"] == 2
    assert vt_in("f", f0) <= 0
    assert vt_in("g", g1) <= 0
    assert vt_in("f", g1) > 5, "f's other message keeps its claim visibility"
    assert vt_in("g", f0) > 5, "g's other message keeps its claim visibility"
    assert task(twins.f, "m", 1)["status"] == "started"
    assert task(twins.g, "m", 0)["status"] == "started"
