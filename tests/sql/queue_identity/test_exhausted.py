"""An exhausted task (fail path) archives its message and, as its run fails, its siblings' messages,
all from the failing flow's queue only."""

from tests.sql.support import (
    archived_ids,
    claim_all,
    fail,
    live_ids,
    queue_snapshot,
    run,
    start_twins,
    step,
    task,
    tasks,
)


def test_exhausted_task_archives_only_its_own_queues_messages() -> None:
    twins = start_twins(step("a", max_attempts=1), step("side"))
    assert twins.ids == [1, 2]
    recs_f = {r["step_slug"]: r for r in claim_all("f")}
    claim_all("g")
    before_g = queue_snapshot("g")
    assert fail(recs_f["a"], "boom") == "failed"
    assert run(twins.f)["status"] == "failed"
    assert {t["step_slug"]: t["status"] for t in tasks(twins.f)} == {"a": "failed", "side": "cancelled"}
    assert archived_ids("f") == {1, 2}
    assert live_ids("f") == set()
    assert queue_snapshot("g") == before_g
    assert run(twins.g)["status"] == "started"
    assert {t["status"] for t in tasks(twins.g)} == {"started"}
    assert task(twins.g, "a")["attempts_count"] == 1
