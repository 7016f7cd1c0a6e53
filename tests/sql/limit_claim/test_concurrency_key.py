"""A concurrency key caps the started tasks of each key: the claim starts the tasks within the limit and
defers the others (queued, no attempt spent, hidden a second); a finished task frees its slot and makes
the oldest waiter of its key visible at once."""

from __future__ import annotations

from tests.sql.limit_claim.support import concurrency, holds, outcomes, set_limits, waits
from tests.sql.support import (
    backdate_started,
    complete,
    fail,
    make_flow,
    q,
    q1,
    requeue_stalled,
    start,
    step,
    task,
    vt_in,
)


def _runs(tenants: list[str]) -> list:
    return [start("f", {"tenant": tenant}) for tenant in tenants]


def _message(run_id) -> int:
    return int(task(run_id, "a")["message_id"])


def test_over_limit_tasks_are_deferred_without_an_attempt() -> None:
    make_flow("f", step("a"))
    set_limits("f", concurrency(2, "tenant"))
    runs = _runs(["x", "x", "x", "y", "x", "y", "y"])
    got = outcomes("f")
    assert got["claimed"] == [_message(r) for r in (runs[0], runs[1], runs[3], runs[5])]
    assert got["deferred"] == [_message(r) for r in (runs[2], runs[4], runs[6])]
    for run_id in (runs[2], runs[4], runs[6]):
        row = task(run_id, "a")
        assert (row["status"], row["attempts_count"]) == ("queued", 0)
        assert 0 < vt_in("f", _message(run_id)) <= 1.5
    assert [(w["key"], w["kind"], w["deferrals"]) for w in waits("f")] == [
        ("x", "concurrency", 1),
        ("x", "concurrency", 1),
        ("y", "concurrency", 1),
    ]
    assert sorted(h["key"] for h in holds("f")) == ["x", "x", "y", "y"]
    assert outcomes("f") == {}, "deferred messages stay hidden"


def test_a_finished_task_wakes_the_oldest_waiter_of_its_key() -> None:
    make_flow("f", step("a"))
    set_limits("f", concurrency(1, "tenant"))
    runs = _runs(["x", "x", "x", "y"])
    outcomes("f")
    first = q1("select * from pgflow.step_tasks where run_id = %s", [runs[0]])
    assert complete({**first, "attempt": first["attempts_count"]}, 1) == "completed"
    assert vt_in("f", _message(runs[1])) <= 0, "the oldest waiter of x is visible now"
    assert vt_in("f", _message(runs[2])) > 0, "one waiter per freed slot"
    assert outcomes("f") == {"claimed": [_message(runs[1])]}
    assert [w["run_id"] for w in waits("f")] == [runs[2]]


def test_the_recovery_sweep_wakes_as_many_waiters_as_a_key_has_unused_slots() -> None:
    """A slot freed by a path that does not wait for claims (a failure, a cancel) while a claim defers
    the key's only waiter wakes nobody. Stalled recovery's sweep counts each key's unused slots (its
    limit, less its holds and its waiters already woken) and wakes that many of its oldest waiters."""
    make_flow("f", step("a"))
    set_limits("f", concurrency(2, "tenant"))
    runs = _runs(["x", "x", "x", "x", "y", "y", "y"])
    outcomes("f")
    first = q1("select * from pgflow.step_tasks where run_id = %s", [runs[0]])
    assert complete({**first, "attempt": first["attempts_count"]}, 1) == "completed"
    # the lost wake-up's end state: the slot is free, and the waiter it woke is deferred again
    q(
        "update pgflow.limit_waits set woken_at = null, visible_at = clock_timestamp() + interval '30 s'"
        " where flow_slug = 'f'"
    )
    for run_id in (runs[2], runs[3], runs[6]):
        q("select pgmq.set_vt('f', %s, 30)", [_message(run_id)])

    requeue_stalled()

    assert vt_in("f", _message(runs[2])) <= 0, "x has one unused slot: its oldest waiter is visible"
    assert vt_in("f", _message(runs[3])) > 20, "one waiter per unused slot"
    assert vt_in("f", _message(runs[6])) > 20, "y's slots are both held"
    requeue_stalled()
    assert vt_in("f", _message(runs[3])) > 20, "the woken waiter counts as using x's free slot"
    assert outcomes("f") == {"claimed": [_message(runs[2])]}


def test_a_retry_frees_the_slot_and_the_retried_task_waits_its_turn() -> None:
    make_flow("f", step("a"), max_attempts=3, base_delay=0)
    set_limits("f", concurrency(1, "tenant"))
    runs = _runs(["x", "x"])
    outcomes("f")
    first = q1("select * from pgflow.step_tasks where run_id = %s", [runs[0]])
    assert fail({**first, "attempt": 1}) == "retrying"
    assert holds("f") == []
    got = outcomes("f")
    assert got["claimed"] == [_message(runs[0])] or got["claimed"] == [_message(runs[1])]
    assert len(got.get("deferred", [])) == 1


def test_a_deferral_doubles_each_time_with_jitter_up_to_30_seconds() -> None:
    make_flow("f", step("a"))
    set_limits("f", concurrency(1))
    runs = _runs(["x", "x"])
    outcomes("f")
    second = _message(runs[1])
    for seconds in (2, 4, 8, 16, 32, 64):
        q("update pgmq.q_f set vt = clock_timestamp() where msg_id = %s", [second])
        assert outcomes("f") == {"deferred": [second]}
        assert min(30, seconds * 0.5) - 1 < vt_in("f", second) <= min(30, seconds * 1.5)
    assert task(runs[1], "a")["attempts_count"] == 0


def test_a_cancelled_run_frees_its_slots() -> None:
    make_flow("f", step("a"))
    set_limits("f", concurrency(1, "tenant"))
    runs = _runs(["x", "x"])
    outcomes("f")
    assert q1("select pgflow.cancel_run(%s) as s", [runs[0]])["s"] == "cancelled"
    assert holds("f") == []
    assert outcomes("f") == {"claimed": [_message(runs[1])]}


def test_a_flow_without_limits_is_not_touched() -> None:
    make_flow("f", step("a"))
    make_flow("g", step("a"))
    set_limits("g", concurrency(1))
    for _ in range(3):
        start("f", {})
    assert len(outcomes("f")["claimed"]) == 3
    assert q("select * from pgflow.limit_slots where flow_slug = 'f'") == []


def test_stalled_recovery_gives_a_crashed_workers_slot_back() -> None:
    make_flow("f", step("a"), timeout=5)
    set_limits("f", concurrency(1, "tenant"))
    runs = _runs(["x", "x"])
    outcomes("f")
    assert [h["run_id"] for h in holds("f")] == [runs[0]]
    backdate_started(runs[0], "a", 5 + 31)
    assert requeue_stalled()["requeued"] == 1
    assert holds("f") == [], "the vanished worker's slot is free"
    assert vt_in("f", _message(runs[1])) <= 0, "and its key's oldest waiter is visible now"
    got = outcomes("f")
    assert len(got["claimed"]) == 1 and len(got["deferred"]) == 1


def test_an_exhausted_task_that_skips_its_map_frees_the_slots_of_its_started_siblings() -> None:
    make_flow("f", step("a", step_type="map", max_attempts=1, when_exhausted="skip"))
    set_limits("f", concurrency(2))
    first, second, third = start("f", [1, 2]), start("f", [3]), start("f", [4])
    got = outcomes("f")
    tasks = q("select * from pgflow.step_tasks where run_id = %s order by task_index", [first])
    assert got["claimed"] == [int(t["message_id"]) for t in tasks]
    assert len(got["deferred"]) == 2
    assert fail({**tasks[0], "attempt": 1}) == "skipped"
    statuses = q("select status from pgflow.step_tasks where run_id = %s order by task_index", [first])
    assert [t["status"] for t in statuses] == [
        "failed",
        "skipped",
    ]
    assert holds("f") == [], "the skipped sibling's slot came free with the failed task's"
    for run_id in (second, third):
        assert vt_in("f", _message(run_id)) <= 0, "a waiter woken for each freed slot"
