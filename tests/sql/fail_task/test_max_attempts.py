from tests.sql.support import claim, fail, make_flow, make_visible, run, start, step, task


def test_max_attempts_counts_the_first_attempt() -> None:
    make_flow("f", step("a", max_attempts=1))
    run_id = start("f")
    assert fail(claim("f")[0]) == "failed"
    assert task(run_id, "a")["attempts_count"] == 1
    assert run(run_id)["status"] == "failed"


def test_three_attempts_then_failed() -> None:
    make_flow("f", step("a"), max_attempts=3, base_delay=0)
    run_id = start("f")
    outcomes = []
    for _ in range(3):
        make_visible("f")
        outcomes.append(fail(claim("f")[0], "again"))
    assert outcomes == ["retrying", "retrying", "failed"]
    row = task(run_id, "a")
    assert row["attempts_count"] == 3
    assert row["status"] == "failed"
    assert row["error_message"] == "again"
    assert row["failed_at"] is not None
