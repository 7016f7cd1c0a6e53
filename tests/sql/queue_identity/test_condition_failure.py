"""An unmet condition with when_unmet = fail fails the run: its unfinished tasks are cancelled and their
messages archived from that flow's queue only."""

from tests.sql.support import (
    archived_ids,
    claim_all,
    complete,
    live_ids,
    queue_snapshot,
    run,
    start_twins,
    state,
    step,
    task,
)


def test_condition_failure_archives_only_its_own_queues_messages() -> None:
    twins = start_twins(
        step("a"),
        step("b", "a", required_input_pattern={"a": {"ok": True}}, when_unmet="fail"),
        step("side"),
    )
    assert twins.ids == [1, 2]
    side_msg = task(twins.f, "side")["message_id"]
    assert task(twins.g, "side")["message_id"] == side_msg
    recs_f = {r["step_slug"]: r for r in claim_all("f")}
    before_g = queue_snapshot("g")

    assert complete(recs_f["a"], {"ok": False}) == "completed"
    assert state(twins.f, "b")["status"] == "failed"
    assert run(twins.f)["status"] == "failed"
    assert task(twins.f, "side")["status"] == "cancelled"
    assert archived_ids("f") == {1, 2}
    assert live_ids("f") == set()
    assert queue_snapshot("g") == before_g
    assert task(twins.g, "side")["status"] == "queued"
    assert run(twins.g)["status"] == "started"
