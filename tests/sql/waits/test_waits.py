"""Event and sleep steps on the engine (docs/durable.md): what starts a wait, what ends it, and what
leaves it alone. Each test runs in the test's transaction on the real schema and PGMQ."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from tests.sql.support import (
    backdate_started,
    claim_one,
    compile_flow,
    complete,
    db_error,
    jb,
    q,
    q1,
    requeue_stalled,
    run,
    shape,
    shape_step,
    start,
    state,
    task,
    val,
    wake_waits,
)


def event_step(
    slug: str, *deps: str, event: str = "go", key: str | None = None, seconds: int | None = None, **kw: Any
) -> dict[str, Any]:
    wait = {"kind": "event", "event": event, "key": key, "seconds": seconds}
    return {**shape_step(slug, *deps, **kw), "wait": {k: v for k, v in wait.items() if v is not None}}


def sleep_step(slug: str, *deps: str, seconds: int | None = None, until: str | None = None) -> dict[str, Any]:
    wait = {"kind": "sleep", "seconds": seconds, "until": until}
    return {**shape_step(slug, *deps), "wait": {k: v for k, v in wait.items() if v is not None}}


def send(
    event: str,
    payload: Any = None,
    *,
    run_id: uuid.UUID | None = None,
    key: str | None = None,
    event_id: str | None = None,
) -> int:
    return int(
        val(
            "select pgflow.send_event(%s, %s::jsonb, %s, %s, %s) as n",
            [event, None if payload is None else jb(payload), run_id, key, event_id],
        )
    )


def waits(run_id: uuid.UUID) -> list[dict[str, Any]]:
    return q("select * from pgflow.step_waits where run_id = %s order by step_slug", [run_id])


def due_now(run_id: uuid.UUID) -> None:
    q("update pgflow.step_waits set due_at = now() - interval '1 second' where run_id = %s", [run_id])


def test_an_event_step_waits_without_a_message_and_completes_with_the_payload() -> None:
    compile_flow("ev_basic", shape(shape_step("a"), event_step("approved", "a"), shape_step("b", "approved")))
    run_id = start("ev_basic", {"order": 1})
    complete(claim_one("ev_basic"), {"x": 1})

    waiting = task(run_id, "approved")
    assert (waiting["status"], waiting["message_id"], waiting["last_worker_id"]) == ("started", None, None)
    assert [(w["kind"], w["event_name"], w["due_at"]) for w in waits(run_id)] == [("event", "go", None)]
    assert val("select count(*) from pgmq.q_ev_basic") == 0  # nothing queued while it waits

    assert send("go", {"ok": True}, run_id=run_id) == 1  # delivered: the wait pass completes it
    assert state(run_id, "approved")["status"] == "started"
    assert wake_waits() == {"completed": 1, "failed": 0}
    assert state(run_id, "approved")["output"] == {"ok": True}
    assert waits(run_id) == []
    assert claim_one("ev_basic")["step_slug"] == "b"  # its dependent was queued by the send
    assert send("go", {"ok": False}, run_id=run_id) == 0  # a step takes one event


def test_a_keyed_event_reaches_every_run_with_that_key_and_only_them() -> None:
    compile_flow("ev_keyed", shape(event_step("approved", key="$.order.id")))
    first, second, other = (start("ev_keyed", {"order": {"id": n}}) for n in (42, 42, 7))
    assert [w["event_key"] for w in waits(first)] == ["42"]

    assert send("go", "yes", key="42") == 2
    assert wake_waits()["completed"] == 2
    assert [state(r, "approved")["status"] for r in (first, second, other)] == [
        "completed",
        "completed",
        "started",
    ]
    assert run(first)["output"] == {"approved": "yes"}


def test_an_event_sent_before_the_wait_is_kept_and_delivered_once_by_the_pass() -> None:
    compile_flow("ev_early", shape(shape_step("a"), event_step("approved", "a", key="$.id")))
    run_id = start("ev_early", {"id": "abc"})
    assert send("go", 1, key="abc") == 0
    assert send("go", 2, key="abc") == 0
    complete(claim_one("ev_early"), None)

    [pinned] = waits(run_id)
    assert pinned["event_seq"] is not None
    assert wake_waits() == {"completed": 1, "failed": 0}
    assert state(run_id, "approved")["output"] == 1  # the earliest kept event
    assert wake_waits() == {"completed": 0, "failed": 0}


def test_a_repeated_event_id_is_a_no_op_and_a_null_payload_is_json_null() -> None:
    compile_flow("ev_dedupe", shape(event_step("approved")))
    first, second = start("ev_dedupe"), start("ev_dedupe")
    assert send("go", run_id=first, event_id="d-1") == 1
    assert send("go", run_id=first, event_id="d-1") == 0
    assert send("go", run_id=second, event_id="d-1") == 0  # the id is the event's, whatever the target
    assert wake_waits()["completed"] == 1
    assert state(first, "approved")["output"] is None
    assert (
        val(
            "select output::text from pgflow.step_states where run_id = %s and step_slug = 'approved'",
            [first],
        )
        == "null"
    )


@pytest.mark.parametrize(
    ("when_timeout", "run_status", "step_status", "after"),
    [
        ("fail", "failed", "failed", "cancelled"),
        ("skip", "completed", "skipped", "completed"),
        ("skip-cascade", "completed", "skipped", "skipped"),
    ],
)
def test_a_timeout_applies_when_timeout(
    when_timeout: str, run_status: str, step_status: str, after: str
) -> None:
    slug = "ev_timeout_" + when_timeout.replace("-", "_")
    compile_flow(
        slug,
        shape(
            event_step("approved", seconds=60, when_exhausted=when_timeout),
            shape_step("b", "approved", when_unmet="skip"),
        ),
    )
    run_id = start(slug)
    [wait] = waits(run_id)
    assert 59 < (wait["due_at"] - wait["since"]).total_seconds() <= 61

    assert wake_waits() == {"completed": 0, "failed": 0}  # not due yet
    due_now(run_id)
    assert wake_waits() == {"completed": 0, "failed": 1}
    assert state(run_id, "approved")["status"] == step_status
    assert task(run_id, "approved")["error_message"] == "timed out waiting for event go"
    assert task(run_id, "approved")["attempt_errors"][0]["error"] == "timed out waiting for event go"
    if after == "completed":
        complete(claim_one(slug), "b ran")
    assert run(run_id)["status"] == run_status
    assert state(run_id, "b")["status"] in {after, "created"}


def test_a_sleep_completes_at_its_time_with_no_worker() -> None:
    compile_flow("sl_fixed", shape(sleep_step("nap", seconds=30), shape_step("b", "nap")))
    run_id = start("sl_fixed")
    [wait] = waits(run_id)
    assert wait["kind"] == "sleep"
    assert wake_waits()["completed"] == 0
    due_now(run_id)
    assert wake_waits()["completed"] == 1
    assert set(state(run_id, "nap")["output"]) == {"slept_until"}
    assert claim_one("sl_fixed")["step_slug"] == "b"


def test_a_sleep_until_a_bad_time_fails_that_run_alone() -> None:
    compile_flow("sl_until", shape(shape_step("a"), sleep_step("nap", "a", until="$.a.at")))
    good, bad = start("sl_until"), start("sl_until")
    from tests.sql.support import claim

    records = {r["run_id"]: r for r in claim("sl_until")}
    assert (
        val(
            "select count(*) from pgflow.complete_tasks(%s::jsonb) where outcome = 'completed'",
            [
                jb(
                    [
                        {
                            "run_id": str(good),
                            "step_slug": "a",
                            "task_index": 0,
                            "attempt": records[good]["attempt"],
                            "output": {"at": "2000-01-01T00:00:00Z"},
                        },
                        {
                            "run_id": str(bad),
                            "step_slug": "a",
                            "task_index": 0,
                            "attempt": records[bad]["attempt"],
                            "output": {"at": "next tuesday-ish"},
                        },
                    ]
                )
            ],
        )
        == 2
    )
    assert [w["error_message"] for w in waits(bad)] == [
        "sleep time $.a.at is not an ISO-8601 timestamp in the step's input"
    ]
    assert wake_waits() == {"completed": 1, "failed": 1}
    assert run(good)["status"] == "completed"
    assert state(good, "nap")["output"] == {"slept_until": "2000-01-01T00:00:00+00:00"}
    assert run(bad)["status"] == "failed"
    assert (
        run(bad)["error_message"]
        == "step nap failed: sleep time $.a.at is not an ISO-8601 timestamp in the step's input"
    )


def test_stalled_recovery_leaves_a_waiting_task_alone() -> None:
    compile_flow("ev_stalled", shape(event_step("approved"), timeout=5))
    run_id = start("ev_stalled")
    backdate_started(run_id, "approved", 3600)
    assert requeue_stalled() == {"requeued": 0, "permanently_stalled": 0}
    assert task(run_id, "approved")["status"] == "started"


def test_retry_run_after_a_timeout_waits_again_for_a_new_timeout() -> None:
    compile_flow("ev_retry", shape(event_step("approved", seconds=60)))
    run_id = start("ev_retry")
    due_now(run_id)
    assert wake_waits()["failed"] == 1
    assert run(run_id)["status"] == "failed"

    assert val("select pgflow.retry_run(%s)", [run_id]) == 1
    [wait] = waits(run_id)
    assert wait["attempt"] == 2 and wait["due_at"] > wait["since"]
    assert send("go", "late but welcome", run_id=run_id) == 1
    assert wake_waits()["completed"] == 1
    assert run(run_id)["status"] == "completed"
    assert task(run_id, "approved")["attempts_count"] == 2


def test_cancel_ends_the_waits_and_a_later_send_completes_nothing() -> None:
    compile_flow("ev_cancel", shape(event_step("approved", key="$.k"), sleep_step("nap", seconds=5)))
    run_id = start("ev_cancel", {"k": 1})
    assert len(waits(run_id)) == 2
    val("select pgflow.cancel_run(%s)", [run_id])
    assert waits(run_id) == []
    assert send("go", key="1") == 0
    assert {t["status"] for t in q("select status from pgflow.step_tasks where run_id = %s", [run_id])} == {
        "cancelled"
    }


def test_a_changed_wait_is_a_changed_shape() -> None:
    compile_flow("ev_shape", shape(event_step("approved", event="a")))
    answer = compile_flow("ev_shape", shape(event_step("approved", event="b")))
    assert answer["status"] == "mismatch"
    assert any(line.startswith("~ step approved: wait") for line in answer["differences"])
    assert compile_flow("ev_shape", shape(event_step("approved", event="a")))["status"] == "verified"


def test_send_event_refuses_what_it_cannot_deliver() -> None:
    assert "pass run_id (one run) or key" in db_error("select pgflow.send_event('go')")
    assert "not both" in db_error("select pgflow.send_event('go', null, gen_random_uuid(), '1')")
    assert "non-empty" in db_error("select pgflow.send_event('', null, gen_random_uuid())")
    assert "retention_seconds must be >= 0" in db_error(
        "select pgflow.send_event('go', null, gen_random_uuid(), retention_seconds => -1)"
    )


def test_expired_events_are_deleted_by_the_pass() -> None:
    compile_flow("ev_expiry", shape(event_step("approved", key="$.k")))
    val("select pgflow.send_event('go', null, key => 'z', retention_seconds => 0)")
    assert q1("select count(*) as n from pgflow.events where event_key = 'z'")["n"] == 1
    wake_waits()
    assert q1("select count(*) as n from pgflow.events where event_key = 'z'")["n"] == 0
    run_id = start("ev_expiry", {"k": "z"})
    assert waits(run_id)[0]["event_seq"] is None  # an expired event reaches no wait


def test_a_pinned_event_is_delivered_even_after_it_expires() -> None:
    compile_flow("ev_pinned_expiry", shape(shape_step("a"), event_step("approved", "a", key="$.k")))
    run_id = start("ev_pinned_expiry", {"k": "late"})
    val("select pgflow.send_event('go', '\"kept briefly\"'::jsonb, key => 'late', retention_seconds => 60)")
    complete(claim_one("ev_pinned_expiry"), None)  # the wait starts and takes the kept event
    assert waits(run_id)[0]["event_seq"] is not None
    q(
        "update pgflow.events set expires_at = now() - interval '1 second'"
        " where event_key = 'late' returning 1"
    )
    assert wake_waits() == {"completed": 1, "failed": 0}
    assert state(run_id, "approved")["output"] == "kept briefly"
    wake_waits()
    assert val("select count(*) from pgflow.events where event_key = 'late'") == 0  # gone once delivered
