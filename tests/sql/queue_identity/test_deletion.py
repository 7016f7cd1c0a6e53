"""Deleting one flow drops its own queue and rows; the other flow's queue, messages (same ids), archive,
sequence and rows are untouched, and it keeps working."""

from tests.sql.support import (
    archived_ids,
    claim_all,
    complete,
    live_ids,
    meta_names,
    pgmq_relations,
    q,
    queue_snapshot,
    start,
    start_twins,
    step,
    task,
    val,
)


def _rows_of(flow: str) -> dict[str, list[dict[str, object]]]:
    return {
        table: q(f"select * from pgflow.{table} where flow_slug = %s order by 1, 2, 3", [flow])
        for table in ("flows", "steps", "deps", "runs", "step_states", "step_tasks")
    }


def test_deleting_one_flow_leaves_the_other_flows_queue_and_data_untouched() -> None:
    twins = start_twins(step("a"), step("b", "a"), step("side"))
    assert twins.ids == [1, 2]
    for flow in ("f", "g"):
        recs = {r["step_slug"]: r for r in claim_all(flow)}
        assert complete(recs["a"], flow) == "completed"
    assert archived_ids("f") == archived_ids("g") == {task(twins.g, "a")["message_id"]}
    assert live_ids("f") == live_ids("g") == {1, 2, 3} - archived_ids("g")
    before_g = queue_snapshot("g")
    rows_g = _rows_of("g")
    seq_g = val("select last_value from pgmq.q_g_msg_id_seq")

    q("select pgflow.delete_flow_and_data('f')")

    assert meta_names("f") == []
    assert not {"q_f", "a_f", "q_f_msg_id_seq"} & pgmq_relations()
    assert all(rows == [] for rows in _rows_of("f").values())
    assert meta_names("g") == ["g"]
    assert {"q_g", "a_g", "q_g_msg_id_seq"} <= pgmq_relations()
    assert queue_snapshot("g") == before_g
    assert _rows_of("g") == rows_g
    assert val("select last_value from pgmq.q_g_msg_id_seq") == seq_g

    # g goes on: its next run gets the next id of g's own sequence
    again = start("g")
    assert task(again, "a")["message_id"] == seq_g + 1
    assert task(again, "a")["queue_name"] == "g"
