"""Skipping a map step (exhausted with when_exhausted = skip or skip-cascade) terminalizes its sibling
tasks and archives their messages from that flow's queue only."""

import pytest

from tests.sql.support import (
    archived_ids,
    claim_at,
    fail,
    live_ids,
    queue_snapshot,
    start_twins,
    state,
    step,
    tasks,
)


@pytest.mark.parametrize("when_exhausted", ["skip", "skip-cascade"])
def test_skip_archives_sibling_messages_of_its_own_queue_only(when_exhausted: str) -> None:
    twins = start_twins(
        step("m", step_type="map", when_exhausted=when_exhausted, max_attempts=1),
        step("after", "m"),
        step("later", "after"),
        input=[1, 2, 3],
    )
    assert twins.ids == [1, 2, 3]
    before_g = queue_snapshot("g")
    (rec,) = claim_at("f", "f", [1])
    assert rec["outcome"] == "claimed"
    assert fail(rec) == "skipped"
    assert state(twins.f, "m")["status"] == "skipped"
    if when_exhausted == "skip-cascade":
        assert state(twins.f, "after")["status"] == "skipped"
        assert state(twins.f, "later")["status"] == "skipped"
    statuses = {t["message_id"]: t["status"] for t in tasks(twins.f, "m")}
    assert statuses == {1: "failed", 2: "skipped", 3: "skipped"}
    assert archived_ids("f") == {1, 2, 3}
    assert live_ids("f") == (set() if when_exhausted == "skip-cascade" else {4})
    assert queue_snapshot("g") == before_g
    assert {t["status"] for t in tasks(twins.g, "m")} == {"queued"}
