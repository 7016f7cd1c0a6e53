from tests.sql.support import (
    assert_visible_in,
    claim,
    make_flow,
    q,
    start,
    start_tasks,
    step,
    task,
    tasks,
)


def test_visibility_is_step_timeout_plus_2_seconds() -> None:
    make_flow("f", step("a", timeout=50), timeout=20)
    run_id = start("f")
    rec = claim("f", vt=1)[0]
    assert_visible_in("f", rec["message_id"], 52)
    assert task(run_id, "a")["status"] == "started"


def test_a_read_that_hid_the_message_long_enough_is_kept_and_not_written_again() -> None:
    """A worker reads with its longest timeout + 2 s: the claim then leaves the message row alone."""
    make_flow("f", step("a", timeout=50), step("b", "a", timeout=200))
    run_id = start("f")
    msg = task(run_id, "a")["message_id"]
    ids = [r["msg_id"] for r in q("select msg_id from pgmq.read('f', 202, 10)")]
    assert ids == [msg]
    version = q("select xmin::text as x from pgmq.q_f where msg_id = %s", [msg])[0]["x"]
    assert [r["message_id"] for r in start_tasks("f", ids)] == [msg]
    assert task(run_id, "a")["status"] == "started"
    assert_visible_in("f", msg, 202)
    assert q("select xmin::text as x from pgmq.q_f where msg_id = %s", [msg])[0]["x"] == version


def test_visibility_falls_back_to_flow_timeout() -> None:
    make_flow("f", step("a"), timeout=33)
    start("f")
    rec = claim("f", vt=1)[0]
    assert_visible_in("f", rec["message_id"], 35)


def test_visibility_set_before_returning_even_without_read() -> None:
    """start_tasks alone (no pgmq.read before it) must push every claimed message out of sight."""
    make_flow("f", step("m", step_type="map", timeout=70))
    run_id = start("f", [1, 2, 3])
    ids = [t["message_id"] for t in tasks(run_id, "m")]
    records = start_tasks("f", ids)
    assert len(records) == 3
    for msg_id in ids:
        assert_visible_in("f", msg_id, 72)
    assert q("select * from pgmq.read('f', 1, 10)") == []


def test_started_task_message_is_deferred_to_its_recovery_deadline() -> None:
    """A started task's message read again is benign: no attempt consumed, and it stays hidden until the
    task's stalled-recovery deadline (effective timeout + 30 s after its claim), not a fresh timeout."""
    make_flow("f", step("a", timeout=50))
    run_id = start("f")
    msg = task(run_id, "a")["message_id"]
    claim("f")
    q("update pgflow.step_tasks set started_at = now() - interval '20 seconds' where run_id = %s", [run_id])
    q("update pgmq.q_f set vt = clock_timestamp() + interval '7 seconds' where msg_id = %s", [msg])
    assert start_tasks("f", [msg]) == []
    assert task(run_id, "a")["attempts_count"] == 1
    assert_visible_in("f", msg, 60)
