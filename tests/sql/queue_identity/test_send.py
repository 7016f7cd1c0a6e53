"""start_ready_steps sends each task's message to its step's persisted queue and snapshots that queue on
the task; the same message ids in two queues belong to two different tasks."""

from tests.sql.support import (
    claim_all,
    complete,
    live_ids,
    message_row,
    q,
    q1,
    start_twins,
    step,
    tasks,
)


def test_each_task_snapshots_its_step_queue_and_its_message_lands_there() -> None:
    twins = start_twins(step("a"), step("m", step_type="map"), input=[10, 20])
    assert twins.ids == [1, 2, 3]
    for flow, run_id in (("f", twins.f), ("g", twins.g)):
        step_queues = {
            r["step_slug"]: r["queue_name"]
            for r in q("select step_slug, queue_name from pgflow.steps where flow_slug = %s", [flow])
        }
        assert step_queues == {"a": flow, "m": flow}
        for row in tasks(run_id):
            assert row["queue_name"] == step_queues[row["step_slug"]] == flow
            body = message_row(flow, row["message_id"])
            assert body is not None, f"message {row['message_id']} of {flow} is not in queue {flow}"
            assert body["message"] == {
                "flow_slug": flow,
                "run_id": str(run_id),
                "step_slug": row["step_slug"],
                "task_index": row["task_index"],
            }


def test_a_dependent_step_is_sent_to_its_own_flows_queue() -> None:
    twins = start_twins(step("a"), step("b", "a"))
    assert twins.ids == [1]
    (rec_f,) = claim_all("f")
    assert complete(rec_f, {"x": 1}) == "completed"
    b_f = q1("select * from pgflow.step_tasks where run_id = %s and step_slug = 'b'", [twins.f])
    assert (b_f["queue_name"], b_f["message_id"]) == ("f", 2)
    assert live_ids("f") == {2}
    assert live_ids("g") == {1}, "nothing was sent to g's queue"

    (rec_g,) = claim_all("g")
    assert complete(rec_g, {"x": 2}) == "completed"
    b_g = q1("select * from pgflow.step_tasks where run_id = %s and step_slug = 'b'", [twins.g])
    assert (b_g["queue_name"], b_g["message_id"]) == ("g", 2), "g's queue numbers its own messages"
    assert message_row("f", 2)["message"]["run_id"] == str(twins.f)
    assert message_row("g", 2)["message"]["run_id"] == str(twins.g)
