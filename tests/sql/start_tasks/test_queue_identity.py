from tests.sql.support import make_flow, start, start_tasks, step, task


def test_message_ids_match_within_the_named_flow_only() -> None:
    make_flow("f", step("a"))
    make_flow("g", step("a"))
    run_f = start("f")
    run_g = start("g")
    msg_f = task(run_f, "a")["message_id"]
    msg_g = task(run_g, "a")["message_id"]
    assert msg_f == msg_g, "both queues start their ids at 1: the id alone does not name a task"
    records = start_tasks("g", [msg_g])
    assert [r["run_id"] for r in records] == [run_g]
    assert task(run_f, "a")["status"] == "queued"
    assert task(run_g, "a")["status"] == "started"


def test_forged_message_body_does_not_authorize_a_claim() -> None:
    """Claims match the persisted (queue, message id); a message that merely names a task claims nothing."""
    from tests.sql.support import jb, val

    make_flow("f", step("a"))
    run_id = start("f")
    body = {"flow_slug": "f", "run_id": str(run_id), "step_slug": "a", "task_index": 0}
    forged = val("select pgmq.send('f', %s::jsonb) as id", [jb(body)])
    assert forged != task(run_id, "a")["message_id"]
    assert start_tasks("f", [forged]) == []
    row = task(run_id, "a")
    assert row["status"] == "queued"
    assert row["attempts_count"] == 0
