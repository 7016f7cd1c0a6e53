"""The task's queue snapshot, not its flow slug, names the queue every operation acts on. Here a task's
snapshot is re-pointed at another queue ('side') holding a copy of its message under the same id, while
the flow's own queue keeps the original message 1 as a decoy: each operation must act on 'side' and
leave the decoy exactly as it was. The send path reads steps.queue_name the same way."""

import json
import uuid
from typing import Any

import pytest

from tests.sql.support import (
    archived_ids,
    assert_visible_in,
    backdate_started,
    claim_at,
    complete,
    fail,
    live_ids,
    make_flow,
    message_row,
    q,
    queue_snapshot,
    requeue_stalled,
    start,
    step,
    task,
    vt_in,
)


def _repoint(run_id: uuid.UUID, step_slug: str) -> int:
    """Copy the task's message into queue 'side' under the same id and point the snapshot there."""
    msg_id = int(task(run_id, step_slug)["message_id"])
    q("select pgmq.create('side')")
    q(
        "insert into pgmq.q_side (msg_id, read_ct, enqueued_at, vt, message) overriding system value "
        "select msg_id, read_ct, enqueued_at, vt, message from pgmq.q_f where msg_id = %s",
        [msg_id],
    )
    q(
        "update pgflow.step_tasks set queue_name = 'side' where run_id = %s and step_slug = %s",
        [run_id, step_slug],
    )
    return msg_id


def _release(rec: dict[str, Any]) -> None:
    item = {k: (str(rec[k]) if k == "run_id" else rec[k]) for k in ("run_id", "step_slug", "task_index")}
    rows = q(
        "select * from pgflow.release_tasks(%s::jsonb)", [json.dumps([{**item, "attempt": rec["attempt"]}])]
    )
    assert [r["outcome"] for r in rows] == ["released"]


def _stall(rec: dict[str, Any]) -> None:
    backdate_started(rec["run_id"], rec["step_slug"], 41)
    assert requeue_stalled()["requeued"] == 1


def _claimed(run_id: uuid.UUID) -> dict[str, Any]:
    msg_id = _repoint(run_id, "a")
    (rec,) = claim_at("side", "f", [msg_id])
    assert rec["outcome"] == "claimed", rec
    return rec


def test_claim_and_its_visibility_use_the_snapshot() -> None:
    make_flow("f", step("a", timeout=40))
    run_id = start("f")
    decoy = queue_snapshot("f")
    rec = _claimed(run_id)
    assert rec["run_id"] == run_id
    assert_visible_in("side", rec["message_id"], 42)
    assert queue_snapshot("f") == decoy


@pytest.mark.parametrize("operation", ["complete", "retry", "exhaust", "release", "stalled"])
def test_each_operation_acts_on_the_snapshot_queue(operation: str) -> None:
    make_flow("f", step("a", max_attempts=1 if operation == "exhaust" else 3, timeout=10), base_delay=5)
    run_id = start("f")
    rec = _claimed(run_id)
    msg_id = rec["message_id"]
    decoy = queue_snapshot("f")
    assert decoy["live"].keys() == {msg_id}, "the flow's own queue still holds message 1 (the decoy)"

    if operation == "complete":
        assert complete(rec, "done") == "completed"
        assert archived_ids("side") == {msg_id}
        assert live_ids("side") == set()
    elif operation == "retry":
        assert fail(rec) == "retrying"
        assert_visible_in("side", msg_id, 10)  # floor(base_delay 5 * 2^1)
    elif operation == "exhaust":
        assert fail(rec) == "failed"
        assert archived_ids("side") == {msg_id}
    elif operation == "release":
        _release(rec)
        assert vt_in("side", msg_id) <= 0
    else:
        _stall(rec)
        assert vt_in("side", msg_id) <= 0
    assert queue_snapshot("f") == decoy, f"{operation} touched the flow's own queue"


def test_the_send_path_reads_the_steps_persisted_queue() -> None:
    make_flow("f", step("a"), step("b", "a"))
    q("select pgmq.create('side')")
    q("update pgflow.steps set queue_name = 'side' where flow_slug = 'f' and step_slug = 'b'")
    run_id = start("f")
    (rec,) = claim_at("f", "f", [task(run_id, "a")["message_id"]])
    assert complete(rec, 1) == "completed"
    b = task(run_id, "b")
    assert (b["queue_name"], b["message_id"]) == ("side", 1)
    assert message_row("side", 1)["message"]["step_slug"] == "b"
    assert live_ids("f") == set()
