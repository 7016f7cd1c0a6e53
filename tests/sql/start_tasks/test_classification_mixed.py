"""Classification of mixed batches, and the outcomes ``missing`` and ``ineligible``: every message of a
batch is classified before anything changes; without a fatal message each is handled by its outcome in
the same call, with one fatal message nothing is claimed."""

import uuid

from tests.sql.support import (
    archived_ids,
    assert_visible_in,
    backdate_started,
    claim_at,
    complete,
    live_ids,
    make_flow,
    pause_row,
    q,
    send_raw,
    start,
    step,
    task,
    unarchive,
    vt_in,
)


def test_valid_and_foreign_messages_are_processed_together() -> None:
    make_flow("f", step("a"), step("b"))
    run_id = start("f")
    a = task(run_id, "a")["message_id"]
    b = task(run_id, "b")["message_id"]
    foreign = send_raw("f", ["not", "pgflow"])
    records = claim_at("f", "f", [a, foreign, b])
    assert {r["message_id"]: r["outcome"] for r in records} == {
        a: "claimed",
        b: "claimed",
        foreign: "foreign",
    }
    assert task(run_id, "a")["status"] == task(run_id, "b")["status"] == "started"
    assert archived_ids("f") == {foreign}
    assert live_ids("f") == {a, b}
    assert pause_row("f") is None


def test_every_non_fatal_outcome_in_one_batch() -> None:
    make_flow("f", step("queued", timeout=20), step("running", timeout=20), step("done"))
    run_id = start("f")
    ids = {slug: task(run_id, slug)["message_id"] for slug in ("queued", "running", "done")}
    (running,) = claim_at("f", "f", [ids["running"]])
    assert running["outcome"] == "claimed"
    (done,) = claim_at("f", "f", [ids["done"]])
    assert complete(done, 1) == "completed"
    unarchive("f", ids["done"])
    backdate_started(run_id, "running", 10)
    q("update pgmq.q_f set vt = clock_timestamp() - interval '1 second'")
    foreign = send_raw("f", "text")
    missing = 424_242

    records = claim_at("f", "f", [*ids.values(), foreign, missing])

    assert {r["message_id"]: r["outcome"] for r in records} == {
        ids["queued"]: "claimed",
        ids["running"]: "started",
        ids["done"]: "terminal",
        foreign: "foreign",
        missing: "missing",
    }
    assert task(run_id, "queued")["status"] == "started"
    assert task(run_id, "running")["attempts_count"] == 1
    assert_visible_in("f", ids["running"], 40)
    assert_visible_in("f", ids["queued"], 22)
    assert archived_ids("f") == {ids["done"], foreign}
    assert pause_row("f") is None


def test_valid_and_fatal_claims_nothing() -> None:
    make_flow("f", step("a"), step("b"))
    run_id = start("f")
    a = task(run_id, "a")["message_id"]
    b = task(run_id, "b")["message_id"]
    foreign = send_raw("f", 5)
    fatal = send_raw("f", {"flow_slug": "f", "run_id": str(uuid.uuid4()), "step_slug": "a", "task_index": 3})
    records = claim_at("f", "f", [a, b, foreign, fatal])
    assert {r["message_id"]: r["outcome"] for r in records} == {
        a: "released",
        b: "released",
        foreign: "released",
        fatal: "fatal",
    }
    assert {task(run_id, s)["status"] for s in ("a", "b")} == {"queued"}
    assert {task(run_id, s)["attempts_count"] for s in ("a", "b")} == {0}
    assert archived_ids("f") == set()
    assert live_ids("f") == {a, b, foreign, fatal}
    assert pause_row("f")["reason"] == "fatal"


def test_missing_message_changes_nothing() -> None:
    make_flow("f", step("a"))
    run_id = start("f")
    (rec,) = claim_at("f", "f", [77])
    assert (rec["outcome"], rec["message_id"]) == ("missing", 77)
    assert task(run_id, "a")["status"] == "queued"
    assert pause_row("f") is None
    assert archived_ids("f") == set()


def test_queued_task_of_a_terminal_run_is_ineligible_and_untouched() -> None:
    make_flow("f", step("a"))
    run_id = start("f")
    msg = task(run_id, "a")["message_id"]
    # the guard itself: a run that is terminal while its task row still says queued
    q("update pgflow.runs set status = 'failed', failed_at = now() where run_id = %s", [run_id])
    q("update pgmq.q_f set vt = clock_timestamp() + interval '9 seconds'")
    (rec,) = claim_at("f", "f", [msg])
    assert (rec["outcome"], rec["message_id"]) == ("ineligible", msg)
    row = task(run_id, "a")
    assert (row["status"], row["attempts_count"]) == ("queued", 0)
    assert live_ids("f") == {msg}
    assert 8 < vt_in("f", msg) <= 9
    assert pause_row("f") is None
