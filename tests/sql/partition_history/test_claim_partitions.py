"""A claim on a partitioned history starts only the tasks whose messages it read: each partition
numbers its rows from its own first page, so a queued task of another partition can sit at the same
tuple id as the one claimed (here the first row of two fresh partitions, next week's)."""

from __future__ import annotations

from tests.sql.support import jb, make_flow, new_worker, old_run_id, q, start, start_tasks, step


def test_a_claim_starts_only_its_own_task_where_partitions_share_a_tuple_id(partitioned: None) -> None:
    q("select pgflow.create_history_partitions(through => now() + interval '9 days')")
    make_flow("ctid", step("a"))
    claimed, twin = start("ctid", {}, old_run_id(-8)), start("ctid", {}, old_run_id(-9))
    rows = q(
        "select run_id, ctid::text as row_id, tableoid::regclass::text as part from pgflow.step_tasks"
        " where flow_slug = 'ctid' order by run_id"
    )
    assert [row["run_id"] for row in rows] == [claimed, twin]
    assert rows[0]["row_id"] == rows[1]["row_id"] == "(0,1)" and rows[0]["part"] != rows[1]["part"], rows
    message = q("select message_id from pgflow.step_tasks where run_id = %s", [claimed])[0]["message_id"]
    read = q("select msg_id from pgmq.read('ctid', 30, 1, %s::jsonb)", [jb({"run_id": str(claimed)})])
    assert read == [{"msg_id": message}]

    assert [row["run_id"] for row in start_tasks("ctid", [message], new_worker("ctid"))] == [claimed]
    started = q("select run_id from pgflow.step_tasks where flow_slug = 'ctid' and status <> 'queued'")
    assert [row["run_id"] for row in started] == [claimed], f"{twin} was started without its message"
