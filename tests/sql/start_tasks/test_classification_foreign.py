"""Classification, outcome ``foreign``: a message in the queue that matches no task and whose body is not
pgflow-shaped (a JSON object with string flow_slug, step_slug, a uuid run_id and a non-negative integer
task_index). It is archived; nothing else changes and the subscription is not paused."""

import json
import uuid
from typing import Any

import pytest

from tests.sql.support import (
    archived_ids,
    claim_at,
    live_ids,
    make_flow,
    pause_row,
    q,
    send_raw,
    start,
    step,
    task,
)

RUN = str(uuid.uuid4())
SHAPED = {"flow_slug": "f", "run_id": RUN, "step_slug": "a", "task_index": 0}


def _without(key: str) -> dict[str, Any]:
    return {k: v for k, v in SHAPED.items() if k != key}


BODIES: dict[str, Any] = {
    "sql null": None,
    "json null": "null",
    "string": '"hello"',
    "number": "42",
    "boolean": "true",
    "array": json.dumps([SHAPED]),
    "empty object": "{}",
    "no flow_slug": _without("flow_slug"),
    "no run_id": _without("run_id"),
    "no step_slug": _without("step_slug"),
    "no task_index": _without("task_index"),
    "flow_slug not a string": {**SHAPED, "flow_slug": 1},
    "step_slug null": {**SHAPED, "step_slug": None},
    "run_id not a uuid": {**SHAPED, "run_id": "run-1"},
    "run_id a number": {**SHAPED, "run_id": 7},
    "task_index a string": {**SHAPED, "task_index": "0"},
    "task_index negative": {**SHAPED, "task_index": -1},
    "task_index fractional": {**SHAPED, "task_index": 1.5},
    "unrelated object": {"order_id": 17, "note": "not pgflow"},
}


def _send(body: Any) -> int:
    if body is None:
        return send_raw("f", None)
    if isinstance(body, str):
        return send_raw("f", body, raw_json=True)
    return send_raw("f", body)


@pytest.mark.parametrize("kind", list(BODIES))
def test_foreign_message_is_archived(kind: str) -> None:
    make_flow("f", step("a"))
    run_id = start("f")
    task_msg = task(run_id, "a")["message_id"]
    msg = _send(BODIES[kind])
    assert msg != task_msg
    vt_before = q("select vt from pgmq.q_f where msg_id = %s", [task_msg])

    (rec,) = claim_at("f", "f", [msg])
    assert (rec["outcome"], rec["message_id"], rec["run_id"]) == ("foreign", msg, None)
    assert msg not in live_ids("f")
    assert msg in archived_ids("f")
    assert pause_row("f") is None
    row = task(run_id, "a")
    assert (row["status"], row["attempts_count"]) == ("queued", 0)
    assert q("select vt from pgmq.q_f where msg_id = %s", [task_msg]) == vt_before


def test_is_pgflow_message_accepts_the_shape_pgflow_sends() -> None:
    """The control: the reference body itself is pgflow-shaped (so the cases above differ by one thing)."""
    assert q("select pgflow.is_pgflow_message(%s::jsonb) as ok", [json.dumps(SHAPED)]) == [{"ok": True}]
