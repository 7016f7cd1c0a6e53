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
