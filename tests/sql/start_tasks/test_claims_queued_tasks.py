from tests.sql.support import claim, make_flow, new_worker, start, start_tasks, step, task


def test_claim_marks_started_and_counts_attempt() -> None:
    make_flow("f", step("a"))
    run_id = start("f", {"x": 1})
    worker = new_worker("f")
    records = claim("f", worker)
    assert len(records) == 1
    rec = records[0]
    row = task(run_id, "a")
    assert row["status"] == "started"
    assert row["attempts_count"] == 1
    assert row["last_worker_id"] == worker
    assert row["started_at"] is not None
    assert rec["attempt"] == 1
    assert rec["run_id"] == run_id
    assert rec["step_slug"] == "a"
    assert rec["task_index"] == 0
    assert rec["flow_slug"] == "f"
    assert rec["message_id"] == row["message_id"]


def test_many_messages_claimed_in_one_call() -> None:
    make_flow("f", step("m", step_type="map"))
    run_id = start("f", [1, 2, 3, 4])
    ids = [t["message_id"] for t in __import__("tests.sql.support", fromlist=["tasks"]).tasks(run_id)]
    records = start_tasks("f", ids)
    assert sorted(r["task_index"] for r in records) == [0, 1, 2, 3]


def test_unknown_message_ids_are_ignored() -> None:
    make_flow("f", step("a"))
    run_id = start("f")
    msg = task(run_id, "a")["message_id"]
    records = start_tasks("f", [msg + 1000, msg])
    assert [r["message_id"] for r in records] == [msg]
    assert start_tasks("f", []) == []


def test_second_claim_counts_second_attempt() -> None:
    make_flow("f", step("a", max_attempts=3))
    run_id = start("f")
    first = claim("f")[0]
    from tests.sql.support import fail, make_visible

    assert fail(first) == "retrying"
    make_visible("f")
    second = claim("f")[0]
    assert second["attempt"] == 2
    assert task(run_id, "a")["attempts_count"] == 2


def test_record_shape() -> None:
    make_flow("f", step("a"))
    start("f", {"x": 1})
    rec = claim("f")[0]
    assert {"flow_slug", "run_id", "step_slug", "task_index", "message_id", "attempt", "input"} <= set(rec)
