"""pgflow.run_now: the waiting work of a started run (a delayed start, a step's start delay, a retry's
back-off) becomes visible now on each task's own queue, and its later steps are not delayed either.
A task a worker holds, a task a limit deferred and a sleep stay as they are; a finished run is
refused with SQLSTATE 55000, an unknown one with P0002, changing nothing."""

from __future__ import annotations

import uuid
from collections.abc import Callable

import pytest
from django.db import DatabaseError, transaction

from tests.sql.limit_claim.support import concurrency, outcomes, set_limits
from tests.sql.step_queues.support import compile_steps
from tests.sql.support import (
    claim,
    claim_one,
    compile_flow,
    complete,
    fail,
    make_flow,
    other_connection,
    q,
    q1,
    run,
    shape,
    shape_step,
    start,
    step,
    task,
    tasks,
    val,
    vt_in,
)
from tests.sql.waits.test_waits import sleep_step, waits


def run_now(run_id: object) -> int:
    return int(val("select pgflow.run_now(%s) as value", [run_id]))


def refusal(run_id: object) -> tuple[str | None, str | None]:
    """(SQLSTATE, message) of a refused call; the test's transaction survives (savepoint)."""
    with pytest.raises(DatabaseError) as info, transaction.atomic():
        run_now(run_id)
    cause = info.value.__cause__
    return getattr(cause, "sqlstate", None), getattr(getattr(cause, "diag", None), "message_primary", None)


def start_delayed(flow_slug: str, seconds: int = 3600) -> uuid.UUID:
    row = q1("select run_id from pgflow.start_flow(%s, '{}'::jsonb, start_delay => %s)", [flow_slug, seconds])
    return uuid.UUID(str(row["run_id"]))


def test_a_delayed_run_is_visible_now_and_its_later_steps_are_not_delayed() -> None:
    make_flow("rn", step("a"), step("b", "a"))
    run_id = start_delayed("rn")
    (message,) = [t["message_id"] for t in tasks(run_id)]
    assert vt_in("rn", message) > 3500 and run(run_id)["not_before"] is not None
    assert claim("rn") == []

    assert run_now(run_id) == 1
    assert vt_in("rn", message) <= 0
    assert run(run_id)["not_before"] is None
    assert complete(claim_one("rn"), 1) == "completed"
    assert vt_in("rn", task(run_id, "b")["message_id"]) <= 0, "the next step is not delayed either"
    assert run_now(run_id) == 0, "nothing waits any more"


def test_a_retry_back_off_is_made_visible_and_the_attempt_counts_on() -> None:
    make_flow("rn_retry", step("a"), max_attempts=3, base_delay=600)
    run_id = start("rn_retry")
    assert fail(claim_one("rn_retry"), "flaky") == "retrying"
    message = task(run_id, "a")["message_id"]
    assert vt_in("rn_retry", message) > 500

    assert run_now(run_id) == 1
    again = claim_one("rn_retry")
    assert (again["attempt"], task(run_id, "a")["attempts_count"]) == (2, 2)


def test_a_task_a_worker_holds_is_untouched() -> None:
    make_flow("rn_held", step("a"), step("b", start_delay=900))
    run_id = start("rn_held")
    held = claim_one("rn_held")
    assert held["step_slug"] == "a"
    held_message = task(run_id, "a")["message_id"]
    held_vt = vt_in("rn_held", held_message)
    assert held_vt > 0

    assert run_now(run_id) == 1, "only b's delayed message"
    assert vt_in("rn_held", task(run_id, "b")["message_id"]) <= 0
    assert vt_in("rn_held", held_message) == pytest.approx(held_vt, abs=1)
    assert task(run_id, "a")["status"] == "started"
    assert complete(held, "done") == "completed", "the worker's claim is still its own"


def test_each_task_is_made_visible_on_its_own_queue() -> None:
    compile_steps("rn_steps", shape_step("a", start_delay=600), shape_step("b", start_delay=600))
    run_id = start("rn_steps")
    queues = {t["step_slug"]: (t["queue_name"], t["message_id"]) for t in tasks(run_id)}
    assert len({name for name, _ in queues.values()}) == 2
    assert run_now(run_id) == 2
    for name, message in queues.values():
        assert vt_in(name, message) <= 0


def test_the_queue_s_workers_are_told_when_the_call_commits(transactional_db: None) -> None:
    make_flow("rn_wake", step("a"))
    run_id = start_delayed("rn_wake")
    table = val("select pgmq.format_table_name('rn_wake', 'q') as t")
    try:
        with other_connection() as listener:
            listener.execute(f'listen "pgmq.{table}.INSERT"')
            assert run_now(run_id) == 1
            heard = [n.channel for n in listener.notifies(timeout=2, stop_after=1)]
            assert heard == [f"pgmq.{table}.INSERT"]
    finally:
        q("select pgflow.delete_flow_and_data('rn_wake')")


def test_a_task_a_concurrency_limit_deferred_keeps_waiting_for_its_slot() -> None:
    make_flow("rn_limit", step("a"))
    set_limits("rn_limit", concurrency(1))
    first, second = start("rn_limit"), start("rn_limit")
    got = outcomes("rn_limit")
    assert got["deferred"] == [task(second, "a")["message_id"]]
    assert run_now(second) == 0, "the limit decides when it runs"
    assert vt_in("rn_limit", task(second, "a")["message_id"]) > 0
    assert task(first, "a")["status"] == "started"


def test_a_sleep_is_left_to_its_time() -> None:
    compile_flow("rn_sleep", shape(sleep_step("nap", seconds=3600), shape_step("b", "nap")))
    run_id = start("rn_sleep")
    (before,) = waits(run_id)
    assert run_now(run_id) == 0
    (after,) = waits(run_id)
    assert after["due_at"] == before["due_at"]
    assert task(run_id, "nap")["status"] == "started"


def test_a_run_with_visible_work_only_changes_nothing(unchanged: Callable[[], Callable[[], None]]) -> None:
    make_flow("rn_ready", step("a"))
    run_id = start("rn_ready")
    check = unchanged()
    assert run_now(run_id) == 0
    check()


@pytest.mark.parametrize(
    ("finish", "message"),
    [
        ("cancel", "is failed: nothing of it waits to run; retry it to run its failed tasks again"),
        (
            "complete",
            "is completed: nothing of it waits to run; start its flow again (start_flow, manage.py "
            "pgflow_start, or the admin's Re-run action)",
        ),
    ],
)
def test_a_finished_run_is_refused_and_nothing_changes(
    finish: str, message: str, unchanged: Callable[[], Callable[[], None]]
) -> None:
    make_flow("rn_done", step("a"))
    run_id = start("rn_done")
    if finish == "cancel":
        q("select pgflow.cancel_run(%s)", [run_id])
    else:
        assert complete(claim_one("rn_done"), 1) == "completed"
    check = unchanged()
    assert refusal(run_id) == ("55000", f"run {run_id} {message}")
    check()


def test_an_unknown_run_is_p0002() -> None:
    missing = uuid.uuid4()
    assert refusal(missing) == ("P0002", f"run {missing} does not exist")
