"""A late callback (a stale completion or failure) for a task that is already terminal archives that
task's message, if it is still in the queue, and only that message: the same id in another queue
belongs to a live task."""

import pytest

from tests.sql.support import (
    archived_ids,
    claim_all,
    complete,
    fail,
    live_ids,
    queue_snapshot,
    start_twins,
    step,
    task,
    unarchive,
)


@pytest.mark.parametrize("late", ["complete", "fail"])
def test_late_callback_archives_only_its_own_message(late: str) -> None:
    twins = start_twins(step("a"))
    assert twins.ids == [1]
    (rec_f,) = claim_all("f")
    claim_all("g")
    assert complete(rec_f, "done") == "completed"
    unarchive("f", 1)  # the completed task's message is back in the queue
    assert live_ids("f") == {1}
    before_g = queue_snapshot("g")

    outcome = complete(rec_f, "again") if late == "complete" else fail(rec_f, "late")
    assert outcome == "stale"
    assert live_ids("f") == set()
    assert archived_ids("f") == {1}
    assert task(twins.f, "a")["status"] == "completed"
    assert task(twins.f, "a")["output"] == "done"
    assert queue_snapshot("g") == before_g
    assert task(twins.g, "a")["status"] == "started"
