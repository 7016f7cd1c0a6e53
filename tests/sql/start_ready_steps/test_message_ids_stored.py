from tests.sql.support import claim_one, complete, make_flow, queue_messages, start, state, step, tasks


def test_each_task_stores_its_own_message() -> None:
    make_flow("f", step("a"), step("m", "a", step_type="map"))
    run_id = start("f")
    assert complete(claim_one("f", "a"), ["x", "y", "z"]) == "completed"
    rows = tasks(run_id, "m")
    bodies = {m["msg_id"]: m["message"] for m in queue_messages("f")}
    assert len({t["message_id"] for t in rows}) == 3
    for t in rows:
        assert bodies[t["message_id"]]["task_index"] == t["task_index"]
        assert bodies[t["message_id"]]["step_slug"] == "m"
    m = state(run_id, "m")
    assert (m["status"], m["remaining_tasks"]) == ("started", 3)


def test_direct_call_is_idempotent() -> None:
    from tests.sql.support import q

    make_flow("f", step("a"))
    run_id = start("f")
    q("select pgflow.start_ready_steps(array[%s::uuid])", [run_id])
    q("select pgflow.start_ready_steps(array[%s::uuid])", [run_id])
    assert len(tasks(run_id)) == 1
    assert len(queue_messages("f")) == 1
