"""Classification, outcome ``terminal``: the message's task is finished (completed, failed, skipped or
cancelled). The message is archived, idempotently, and the task is left as it is."""

import uuid
from collections.abc import Callable

import pytest

from tests.sql.support import (
    archived_ids,
    claim_at,
    complete,
    fail,
    live_ids,
    make_flow,
    pause_row,
    q,
    start,
    step,
    task,
    unarchive,
)


def _completed() -> tuple[uuid.UUID, str, int]:
    make_flow("f", step("a"))
    run_id = start("f")
    (rec,) = claim_at("f", "f", [task(run_id, "a")["message_id"]])
    assert complete(rec, "done") == "completed"
    return run_id, "a", 0


def _failed() -> tuple[uuid.UUID, str, int]:
    make_flow("f", step("a", max_attempts=1))
    run_id = start("f")
    (rec,) = claim_at("f", "f", [task(run_id, "a")["message_id"]])
    assert fail(rec) == "failed"
    return run_id, "a", 0


def _cancelled() -> tuple[uuid.UUID, str, int]:
    make_flow("f", step("a"))
    run_id = start("f")
    q("select pgflow.fail_run(%s, 'stopped')", [run_id])
    return run_id, "a", 0


def _skipped() -> tuple[uuid.UUID, str, int]:
    make_flow("f", step("m", step_type="map", when_exhausted="skip", max_attempts=1))
    run_id = start("f", [1, 2])
    (rec,) = claim_at("f", "f", [task(run_id, "m", 0)["message_id"]])
    assert fail(rec) == "skipped"
    return run_id, "m", 1


SETUPS: dict[str, Callable[[], tuple[uuid.UUID, str, int]]] = {
    "completed": _completed,
    "failed": _failed,
    "cancelled": _cancelled,
    "skipped": _skipped,
}


@pytest.mark.parametrize("status", sorted(SETUPS))
def test_terminal_task_message_is_archived_idempotently(status: str) -> None:
    run_id, step_slug, index = SETUPS[status]()
    row = task(run_id, step_slug, index)
    assert row["status"] == status
    msg = row["message_id"]
    assert msg in archived_ids("f")
    unarchive("f", msg)  # the message is still (again) in the queue
    assert msg in live_ids("f")

    (rec,) = claim_at("f", "f", [msg])
    assert (rec["outcome"], rec["message_id"], rec["run_id"]) == ("terminal", msg, None)
    assert msg not in live_ids("f")
    assert msg in archived_ids("f")
    assert task(run_id, step_slug, index) == row

    # once more: already archived, still terminal, no error and no second archive row
    (again,) = claim_at("f", "f", [msg])
    assert again["outcome"] == "terminal"
    assert q("select count(*) as n from pgmq.a_f where msg_id = %s", [msg]) == [{"n": 1}]
    assert task(run_id, step_slug, index) == row
    assert pause_row("f") is None
