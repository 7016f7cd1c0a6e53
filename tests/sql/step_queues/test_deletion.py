"""``pgflow.delete_flow_and_data`` of a step-queued flow validates its complete private route, then
drops every private queue with its archive in the same call; a malformed private queue fails the call
with nothing dropped or deleted; a queue named like the flow's default queue is never touched (a
step-queued flow does not own it)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from tests.sql.step_queues.support import (
    chain,
    claim_step,
    flow_row,
    message_count,
    meta,
    route,
    step_shape,
    tables,
)
from tests.sql.support import (
    compile_flow,
    complete,
    db_error,
    make_flow,
    q,
    read_ids,
    send_raw,
    shape_step,
    start,
    step,
    val,
)

Unchanged = Callable[[], Callable[[], None]]


def busy_chain() -> None:
    """``f`` with a finished step, a started one and a queued one, plus a second fresh run."""
    chain()
    start("f")
    (rec,) = claim_step("f__a", "f", "a", read_ids("f__a"))
    assert complete(rec, 1) == "completed"
    claim_step("f__b", "f", "b", read_ids("f__b"))
    start("f")


def test_deletes_every_private_queue_and_archive_in_one_call() -> None:
    busy_chain()
    make_flow("g", step("a"))
    start("g")
    queues = list(route("f").values())
    assert queues == ["f__a", "f__b", "f__c"]

    q("select pgflow.delete_flow_and_data('f')")

    assert flow_row("f") is None
    for table in ("steps", "deps", "runs", "worker_pauses"):
        assert val(f"select count(*) as n from pgflow.{table} where flow_slug = 'f'") == 0, table
    assert val("select count(*) as n from pgflow.step_tasks where flow_slug = 'f'") == 0
    assert meta("f") == []
    for queue in queues:
        assert tables(queue) == {"q": False, "a": False}, queue
        assert val("select to_regclass(%s) is null as gone", [f"pgmq.q_{queue}_msg_id_seq"])
    assert meta("g") == ["g"] and message_count("g") == 1, "another flow is untouched"


@pytest.mark.parametrize(
    ("damage", "problem"),
    [
        ("drop table pgmq.a_f__b", "archive table pgmq.a_f__b is missing"),
        ("drop table pgmq.q_f__c", "queue table pgmq.q_f__c is missing"),
        ("select pgmq.drop_queue('f__c')", "does not exist"),
        ("select pgmq.create('F__A')", "ambiguous"),
    ],
)
def test_a_damaged_private_queue_fails_the_call_and_nothing_is_dropped(
    damage: str, problem: str, unchanged: Unchanged
) -> None:
    busy_chain()
    q(damage)
    check = unchanged()
    message = db_error("select pgflow.delete_flow_and_data('f')")
    assert problem in message and "nothing was deleted" in message
    check()
    assert flow_row("f") is not None
    assert val("select count(*) as n from pgflow.runs where flow_slug = 'f'") == 2
    assert tables("f__a") == {"q": True, "a": True}


def test_never_touches_an_unrelated_queue_named_like_the_default_queue() -> None:
    """create_flow refuses a new flow whose default name exists, so the queue appears after compiling."""
    busy_chain()
    q("select pgmq.create('f')")
    msg = send_raw("f", {"app": "data"})
    q("select pgmq.archive('f', %s)", [send_raw("f", {"app": "old"})])

    q("select pgflow.delete_flow_and_data('f')")

    assert flow_row("f") is None
    assert meta("f") == ["f"]
    assert tables("f") == {"q": True, "a": True}
    assert [r["msg_id"] for r in q("select msg_id from pgmq.q_f")] == [msg]
    assert message_count("f", "a") == 1


def test_compiling_again_after_deletion_creates_fresh_queues() -> None:
    busy_chain()
    q("select pgflow.delete_flow_and_data('f')")
    chain()
    assert meta("f") == ["f__a", "f__b", "f__c"]
    assert message_count("f__a") == 0 and message_count("f__a", "a") == 0


def test_a_step_queued_flow_without_steps_is_deleted() -> None:
    """create_flow(queue_mode => 'step') alone provisions nothing, like a plain flow's create_flow."""
    q("select pgflow.create_flow('bare', queue_mode => 'step')")
    q("select pgflow.delete_flow_and_data('bare')")
    assert flow_row("bare") is None


def test_a_step_queued_flow_without_steps_can_be_recompiled() -> None:
    q("select pgflow.create_flow('bare', queue_mode => 'step')")
    answer = compile_flow("bare", step_shape(shape_step("a")), allow_recompile=True)
    assert answer["status"] == "recompiled"
    assert route("bare") == {"a": "bare__a"}
