"""Retention on shared archives (issue 6, item 6): ``prune_data_older_than`` never deletes a shared
queue's archived messages (several flows' messages meet there, so no flow's retention may apply), while
``prune_shared_archive(queue, retention)`` is the queue-wide retention of one declared shared queue, and
``manage.py pgflow_prune_shared`` its command. Time is simulated by back-dating ``archived_at``."""

from __future__ import annotations

import json

import pytest
from django.core.management.base import CommandError

from tests.integration.commands_support import call
from tests.sql.shared_queues.support import BULK, FAST, claim_shared, compile_routed, message_ids
from tests.sql.support import (
    archived_ids,
    complete,
    db_error,
    jb,
    old_run_id,
    q,
    shape,
    shape_step,
    start,
    val,
)

A, B = "sq_support", "sq_other"


def archive_all(flow_slug: str, queue: str, step_slug: str, runs: int, days: int = 0) -> set[int]:
    """Run ``runs`` one-step runs (started ``days`` ago) of a flow to completion; their archived
    message ids."""
    ids: set[int] = set()
    for n in range(runs):
        run_id = start(flow_slug, {"n": n}, old_run_id(days))
        (rec,) = claim_shared(queue, message_ids(run_id, step_slug), [(flow_slug, step_slug)])
        assert complete(rec, n) == "completed"
        ids.add(rec["message_id"])
    return ids


def backdate(queue: str, ids: set[int], days: int) -> None:
    q(
        f"update pgmq.a_{queue} set archived_at = now() - make_interval(days => %s) where msg_id = any(%s)",
        [days, list(ids)],
    )


def scene() -> dict[str, set[int]]:
    """A (one step on FAST) and B (one step on FAST, one on BULK): old and recent archived messages."""
    compile_routed(A, {"only": FAST}, shape_step("only"))
    compile_routed(B, {"first": FAST, "second": BULK}, shape_step("first"), shape_step("second"))
    old_a = archive_all(A, FAST, "only", 2, 41)
    old_b = archive_all(B, FAST, "first", 1, 41)
    recent = archive_all(A, FAST, "only", 1, 41)
    old_bulk = archive_all(B, BULK, "second", 1, 41)
    backdate(FAST, old_a | old_b, 40)
    backdate(BULK, old_bulk, 40)
    q(
        "update pgflow.runs set completed_at = now() - interval '40 days' "
        "where flow_slug in (%s, %s) and status = 'completed'",
        [A, B],
    )
    return {"old_fast": old_a | old_b, "recent_fast": recent, "old_bulk": old_bulk}


def test_prune_data_older_than_never_touches_a_shared_archive() -> None:
    ids = scene()
    q("select pgflow.ensure_flow_compiled('sq_private', %s::jsonb)", [jb(shape(shape_step("a")))])
    run_id = start("sq_private", {}, old_run_id(41))
    (msg,) = [r["msg_id"] for r in q("select msg_id from pgmq.read('sq_private', 5, 10)")]
    (rec,) = q(
        "select * from pgflow.start_tasks('sq_private', 'sq_private', %s::bigint[], gen_random_uuid())",
        [[msg]],
    )
    assert complete(rec, 1) == "completed"
    q("update pgmq.a_sq_private set archived_at = now() - interval '40 days'")
    q("update pgflow.runs set completed_at = now() - interval '40 days' where run_id = %s", [run_id])

    counts = val("select pgflow.prune_data_older_than(interval '30 days') as c")
    assert counts["archived_messages"] == 1, "only the private queue's old archived message"
    assert archived_ids("sq_private") == set()
    assert counts["runs"] == 4, "A's three old runs (routed flows' runs are pruned as usual) and one private"
    assert archived_ids(FAST) == ids["old_fast"] | ids["recent_fast"], "the shared archive is untouched"
    assert archived_ids(BULK) == ids["old_bulk"]


def test_prune_shared_archive_deletes_old_messages_of_that_queue_only() -> None:
    ids = scene()
    assert val("select pgflow.prune_shared_archive(%s, interval '30 days') as n", [FAST]) == len(
        ids["old_fast"]
    )
    assert archived_ids(FAST) == ids["recent_fast"], "whichever flow they belonged to; the recent one stays"
    assert archived_ids(BULK) == ids["old_bulk"], "another shared queue's archive is untouched"
    assert val("select pgflow.prune_shared_archive(%s, interval '30 days') as n", [FAST]) == 0
    backdate(FAST, ids["recent_fast"], 1)
    assert val("select pgflow.prune_shared_archive(%s, interval '0') as n", [FAST]) == 1


def test_prune_shared_archive_never_touches_live_messages() -> None:
    scene()
    run_id = start(A, {})
    (msg,) = message_ids(run_id, "only")
    q(f"update pgmq.q_{FAST} set enqueued_at = now() - interval '90 days'")
    val("select pgflow.prune_shared_archive(%s, interval '0') as n", [FAST])
    assert val(f"select count(*) as n from pgmq.q_{FAST} where msg_id = %s", [msg]) == 1


def test_prune_shared_archive_refuses_a_queue_that_is_not_shared_naming_the_shared_ones() -> None:
    compile_routed(A, {"only": FAST}, shape_step("only"))
    q("select pgflow.ensure_flow_compiled('sq_private', %s::jsonb)", [jb(shape(shape_step("a")))])
    q("select pgmq.create('sq_external')")
    for queue in ("sq_private", "sq_external", "sq_nowhere"):
        message = db_error("select pgflow.prune_shared_archive(%s, interval '1 day')", [queue])
        assert f"queue '{queue}' is not a shared queue declared by pgflow (shared queues: " in message
        assert FAST in message
    assert "non-negative" in db_error("select pgflow.prune_shared_archive(%s, interval '-1 day')", [FAST])
    assert "non-negative" in db_error("select pgflow.prune_shared_archive(%s, null)", [FAST])


def test_the_command_prints_text_and_json() -> None:
    ids = scene()
    out, _ = call("pgflow_prune_shared", FAST, "--older-than", "30d", "--no-color")
    assert out.strip() == f"pruned {len(ids['old_fast'])} archived message(s) of shared queue {FAST}"
    out, _ = call("pgflow_prune_shared", BULK, "--older-than", "29d12h", "--format", "json")
    assert json.loads(out) == {"queue": BULK, "archived_messages": 1}
    assert archived_ids(FAST) == ids["recent_fast"] and archived_ids(BULK) == set()


def test_the_command_refuses_a_queue_that_is_not_shared() -> None:
    compile_routed(A, {"only": FAST}, shape_step("only"))
    with pytest.raises(CommandError, match=r"'sq_nowhere' is not a shared queue declared by pgflow.*sq_fast"):
        call("pgflow_prune_shared", "sq_nowhere", "--older-than", "30d")
    with pytest.raises(CommandError, match="--older-than"):
        call("pgflow_prune_shared", FAST)
