from tests.sql.support import make_flow, queue_messages, start, step, tasks


def test_root_step_task_and_message() -> None:
    make_flow("f", step("a"), step("b", "a"))
    run_id = start("f", {"x": 1})
    rows = tasks(run_id)
    assert [(t["step_slug"], t["task_index"], t["status"], t["attempts_count"]) for t in rows] == [
        ("a", 0, "queued", 0)
    ]
    msgs = queue_messages("f")
    assert len(msgs) == 1
    assert rows[0]["message_id"] == msgs[0]["msg_id"]
    assert msgs[0]["message"] == {"flow_slug": "f", "run_id": str(run_id), "step_slug": "a", "task_index": 0}


def test_root_map_one_task_per_element() -> None:
    make_flow("f", step("m", step_type="map"))
    run_id = start("f", ["x", "y", "z"])
    rows = tasks(run_id, "m")
    assert [t["task_index"] for t in rows] == [0, 1, 2]
    assert all(t["status"] == "queued" for t in rows)
    msgs = {m["msg_id"]: m["message"] for m in queue_messages("f")}
    assert len(msgs) == 3
    for t in rows:
        assert msgs[t["message_id"]] == {
            "flow_slug": "f",
            "run_id": str(run_id),
            "step_slug": "m",
            "task_index": t["task_index"],
        }


def test_messages_visible_immediately_without_start_delay() -> None:
    make_flow("f", step("a"))
    start("f")
    assert queue_messages("f")[0]["vt_in"] <= 0.5
