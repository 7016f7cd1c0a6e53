"""A task stalled past its requeue limit is marked permanently stalled and exhausted: its message and,
as its run fails, its siblings' messages are archived from its own queue only."""

from tests.sql.support import (
    archived_ids,
    backdate_started,
    claim_all,
    claim_at,
    live_ids,
    queue_snapshot,
    read_ids,
    requeue_stalled,
    run,
    start_twins,
    step,
    task,
    tasks,
)


def test_permanent_stall_archives_only_its_own_queues_messages() -> None:
    twins = start_twins(step("a"), step("side"), timeout=10, max_attempts=10)
    assert twins.ids == [1, 2]
    a_msg = task(twins.f, "a")["message_id"]
    claim_all("f")
    claim_all("g")
    for _ in range(3):
        backdate_started(twins.f, "a", 41)
        assert requeue_stalled()["requeued"] == 1
        assert read_ids("f") == [a_msg]
        assert [r["outcome"] for r in claim_at("f", "f", [a_msg])] == ["claimed"]
    before_g = queue_snapshot("g")
    backdate_started(twins.f, "a", 41)
    assert requeue_stalled()["permanently_stalled"] == 1
    row = task(twins.f, "a")
    assert row["permanently_stalled_at"] is not None
    assert row["status"] == "failed"
    assert run(twins.f)["status"] == "failed"
    assert archived_ids("f") == {1, 2}
    assert live_ids("f") == set()
    assert queue_snapshot("g") == before_g
    assert {t["status"] for t in tasks(twins.g)} == {"started"}
    assert run(twins.g)["status"] == "started"
