from tests.sql.support import (
    assert_visible_in,
    claim,
    fail,
    make_flow,
    make_visible,
    start,
    state,
    step,
    task,
    vt_in,
)


def test_retry_requeues_with_exponential_delay() -> None:
    make_flow("f", step("a"), max_attempts=4, base_delay=5)
    run_id = start("f")
    rec = claim("f")[0]
    assert fail(rec, "first") == "retrying"
    row = task(run_id, "a")
    assert row["status"] == "queued"
    assert row["attempts_count"] == 1
    assert row["error_message"] == "first"
    # floor(5 * 2^1) = 10 s
    assert_visible_in("f", rec["message_id"], 10)
    assert state(run_id, "a")["status"] == "started"

    make_visible("f")
    rec = claim("f")[0]
    assert rec["attempt"] == 2
    assert fail(rec, "second") == "retrying"
    # floor(5 * 2^2) = 20 s
    assert_visible_in("f", rec["message_id"], 20)


def test_zero_base_delay_retries_now() -> None:
    make_flow("f", step("a", base_delay=0), max_attempts=3)
    run_id = start("f")
    rec = claim("f")[0]
    assert fail(rec) == "retrying"
    assert vt_in("f", rec["message_id"]) <= 0.1
    assert claim("f")[0]["attempt"] == 2
    assert task(run_id, "a")["attempts_count"] == 2


def test_step_base_delay_overrides_flow() -> None:
    make_flow("f", step("a", base_delay=7), base_delay=1, max_attempts=3)
    start("f")
    rec = claim("f")[0]
    assert fail(rec) == "retrying"
    assert_visible_in("f", rec["message_id"], 14)


def test_retried_message_not_visible_until_delay() -> None:
    make_flow("f", step("a"), base_delay=30, max_attempts=3)
    start("f")
    rec = claim("f")[0]
    assert fail(rec) == "retrying"
    assert claim("f") == []
