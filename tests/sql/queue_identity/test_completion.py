"""Completion archives the completed task's message from its own queue; a batch of completions over
several queues archives each message in its own queue."""

from tests.sql.support import (
    archived_ids,
    claim_all,
    complete,
    complete_many,
    live_ids,
    queue_snapshot,
    start_twins,
    step,
    task,
)


def test_completion_archives_only_its_own_queues_message() -> None:
    twins = start_twins(step("a"))
    assert twins.ids == [1]
    (rec_f,) = claim_all("f")
    claim_all("g")
    before_g = queue_snapshot("g")
    assert complete(rec_f, "done") == "completed"
    assert archived_ids("f") == {1}
    assert live_ids("f") == set()
    assert queue_snapshot("g") == before_g
    assert task(twins.g, "a")["status"] == "started"


def test_a_batch_over_two_queues_archives_each_message_in_its_own_queue() -> None:
    twins = start_twins(step("m", step_type="map"), input=["x", "y"])
    assert twins.ids == [1, 2]
    recs_f = {r["task_index"]: r for r in claim_all("f")}
    recs_g = {r["task_index"]: r for r in claim_all("g")}
    msg_f0 = task(twins.f, "m", 0)["message_id"]
    msg_g1 = task(twins.g, "m", 1)["message_id"]
    assert msg_f0 != msg_g1
    rows = complete_many([(recs_f[0], "f0"), (recs_g[1], "g1")])
    assert sorted(r["outcome"] for r in rows) == ["completed", "completed"]
    assert archived_ids("f") == {msg_f0}
    assert archived_ids("g") == {msg_g1}
    assert live_ids("f") == {1, 2} - {msg_f0}
    assert live_ids("g") == {1, 2} - {msg_g1}
    assert task(twins.f, "m", 1)["status"] == "started"
    assert task(twins.g, "m", 0)["status"] == "started"
