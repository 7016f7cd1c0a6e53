from tests.sql.support import (
    assert_visible_in,
    claim,
    fail,
    make_flow,
    make_visible,
    run,
    start,
    step,
    task,
)


def test_retry_delay_overrides_backoff_and_keeps_attempt_accounting() -> None:
    make_flow("f", step("a"), max_attempts=2, base_delay=5)
    run_id = start("f")
    rec = claim("f")[0]
    assert fail(rec, "rate limited", retry_delay=3) == "retrying"
    assert_visible_in("f", rec["message_id"], 3)
    assert task(run_id, "a")["attempts_count"] == 1
    make_visible("f")
    rec = claim("f")[0]
    assert rec["attempt"] == 2
    # max_attempts=2 reached: the override does not buy an extra attempt
    assert fail(rec, "still limited", retry_delay=3) == "failed"
    assert task(run_id, "a")["status"] == "failed"
    assert run(run_id)["status"] == "failed"


def test_large_override() -> None:
    make_flow("f", step("a"), max_attempts=3, base_delay=1)
    start("f")
    rec = claim("f")[0]
    assert fail(rec, retry_delay=600) == "retrying"
    assert_visible_in("f", rec["message_id"], 600)
