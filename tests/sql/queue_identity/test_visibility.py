"""Visibility changes (the claim's timeout + 2 s, the deferral of a duplicate delivery) act on the
claiming queue's message only."""

from tests.sql.support import (
    assert_visible_in,
    backdate_started,
    claim_at,
    make_visible,
    queue_snapshot,
    start_twins,
    step,
    task,
)


def test_claim_visibility_is_set_on_the_claimed_queue_only() -> None:
    twins = start_twins(step("a", timeout=40))
    assert twins.ids == [1]
    before_g = queue_snapshot("g")
    (rec,) = claim_at("f", "f", [1])
    assert rec["outcome"] == "claimed"
    assert_visible_in("f", 1, 42)
    assert queue_snapshot("g") == before_g


def test_a_duplicate_delivery_defers_only_its_own_queue() -> None:
    twins = start_twins(step("a", timeout=40))
    assert twins.ids == [1]
    claim_at("f", "f", [1])
    claim_at("g", "g", [1])
    backdate_started(twins.f, "a", 10)
    make_visible("f")
    before_g = queue_snapshot("g")
    (rec,) = claim_at("f", "f", [1])
    assert rec["outcome"] == "started"
    # deferred to the recovery deadline: started_at + timeout + 30 s = 60 s from now
    assert_visible_in("f", 1, 60)
    assert queue_snapshot("g") == before_g
    assert task(twins.f, "a")["attempts_count"] == 1
    assert task(twins.g, "a")["attempts_count"] == 1
