from tests.sql.support import claim, claim_items, make_flow, q, start, step, task, val


def test_released_claim_is_queued_and_visible_now_and_the_next_claim_is_a_new_attempt() -> None:
    make_flow("f", step("a", timeout=60))
    run_id = start("f")
    records = claim("f")
    outcomes = q("select * from pgflow.release_tasks(%s::jsonb)", [claim_items(records)])
    assert [o["outcome"] for o in outcomes] == ["released"]
    row = task(run_id, "a")
    assert (row["status"], row["attempts_count"]) == ("queued", 1)
    assert val(
        "select vt <= clock_timestamp() as visible from pgmq.q_f where msg_id = %s", [row["message_id"]]
    )
    again = claim("f")
    assert [r["attempt"] for r in again] == [2], "a new attempt number keeps the released claim fenced off"


def test_stale_release_changes_nothing() -> None:
    make_flow("f", step("a"))
    run_id = start("f")
    first = claim("f")
    q("select * from pgflow.release_tasks(%s::jsonb)", [claim_items(first)])
    second = claim("f")
    outcomes = q("select * from pgflow.release_tasks(%s::jsonb)", [claim_items(first)])
    assert [o["outcome"] for o in outcomes] == ["stale"], "the first claim is no longer current"
    row = task(run_id, "a")
    assert (row["status"], row["attempts_count"]) == ("started", second[0]["attempt"])


def test_release_of_a_completed_task_is_stale() -> None:
    make_flow("f", step("a"))
    run_id = start("f")
    records = claim("f")
    q("select pgflow.complete_task(%s, 'a', 0, %s, '1'::jsonb)", [run_id, records[0]["attempt"]])
    outcomes = q("select * from pgflow.release_tasks(%s::jsonb)", [claim_items(records)])
    assert [o["outcome"] for o in outcomes] == ["stale"]
    assert task(run_id, "a")["status"] == "completed"


def test_task_without_attempts_left_is_kept_for_stalled_recovery() -> None:
    make_flow("f", step("a", max_attempts=1))
    run_id = start("f")
    records = claim("f")
    outcomes = q("select * from pgflow.release_tasks(%s::jsonb)", [claim_items(records)])
    assert [o["outcome"] for o in outcomes] == ["kept"]
    assert task(run_id, "a")["status"] == "started"
