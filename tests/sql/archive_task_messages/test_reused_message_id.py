"""A live message whose id is already in its queue's archive (issue 15, item 7): a row inserted with a
reused id, after a restore or by hand. PGMQ's archive fails on the archive's key, and the claim, which
archives every batch's terminal messages, failed with it on every poll, so the whole queue stopped.
Archiving now deletes such a message (the archive keeps its first copy), warns naming the queue and
the id, archives the others, and the queue keeps moving."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from django.db import connection

from tests.sql.support import (
    archived_ids,
    archived_messages,
    claim,
    live_ids,
    make_flow,
    new_worker,
    q,
    start,
    step,
    task,
)


@pytest.fixture
def warnings() -> Iterator[list[str]]:
    """The WARNING texts the server sends on Django's connection during the test."""
    seen: list[str] = []

    def keep(diagnostic: Any) -> None:
        if diagnostic.severity_nonlocalized == "WARNING":
            seen.append(str(diagnostic.message_primary))

    connection.ensure_connection()
    raw = connection.connection
    raw.add_notice_handler(keep)
    yield seen
    raw.remove_notice_handler(keep)


def _completed_message(flow_slug: str) -> tuple[uuid.UUID, int]:
    """A run whose one task completed: its message is archived."""
    run_id = start(flow_slug)
    record = claim(flow_slug)[0]
    q("select pgflow.complete_task(%s, 'a', 0, %s, '1'::jsonb)", [run_id, record["attempt"]])
    return run_id, int(record["message_id"])


def _reinsert(flow_slug: str, msg_id: int) -> None:
    """Put a live row with an id the archive already holds, visible now."""
    q(
        f"insert into pgmq.q_{flow_slug} (msg_id, vt, message) overriding system value "
        "select msg_id, clock_timestamp(), message from pgmq.a_" + flow_slug + " where msg_id = %s",
        [msg_id],
    )


def test_the_claim_deletes_a_terminal_task_message_already_archived_and_claims_the_rest(
    warnings: list[str],
) -> None:
    make_flow("f", step("a"))
    _, reused = _completed_message("f")
    _reinsert("f", reused)
    fresh_run = start("f")
    fresh = int(task(fresh_run, "a")["message_id"])

    ids = [m["msg_id"] for m in q("select msg_id from pgmq.read('f', 5, 10)")]
    assert ids == [reused, fresh]
    outcomes = q(
        "select outcome, message_id from pgflow.start_tasks('f', 'f', %s::bigint[], %s) order by message_id",
        [ids, new_worker("f")],
    )

    assert outcomes == [
        {"outcome": "terminal", "message_id": reused},
        {"outcome": "claimed", "message_id": fresh},
    ]
    assert task(fresh_run, "a")["status"] == "started"
    assert live_ids("f") == {fresh}
    assert [m["msg_id"] for m in archived_messages("f")] == [reused], "the archive keeps its one copy"
    assert warnings == [
        f"queue f: message id(s) {reused} were already in its archive; "
        "deleted from the queue instead of archived again"
    ]


def test_a_batch_with_a_reused_id_archives_the_others(warnings: list[str]) -> None:
    make_flow("f", step("a"))
    _, reused = _completed_message("f")
    _reinsert("f", reused)
    others = [int(task(start("f"), "a")["message_id"]) for _ in range(2)]

    batch = [others[0], reused, others[1]]
    q("select pgflow.archive_task_messages(array['f', 'f', 'f'], %s::bigint[])", [batch])

    assert live_ids("f") == set()
    assert archived_ids("f") == {reused, *others}
    assert len(warnings) == 1 and str(reused) in warnings[0]


def test_archiving_without_a_reused_id_warns_nothing(warnings: list[str]) -> None:
    make_flow("f", step("a"))
    ids = [int(task(start("f"), "a")["message_id"]) for _ in range(2)]
    q("select pgflow.archive_task_messages(array['f', 'f'], %s::bigint[])", [ids])
    q("select pgflow.archive_task_messages(array['f', 'f'], %s::bigint[])", [ids])
    assert live_ids("f") == set()
    assert archived_ids("f") == set(ids)
    assert warnings == []
