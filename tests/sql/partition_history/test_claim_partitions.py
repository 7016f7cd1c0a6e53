"""A claim on a partitioned history starts only the tasks whose messages it read: each partition
numbers its rows from its own first page, so a queued task of another partition can sit at the same
tuple id as the one claimed."""

from __future__ import annotations

from tests.sql.support import jb, make_flow, new_worker, old_run_id, q, start, start_tasks, step


def test_a_claim_starts_only_its_own_task_where_partitions_share_a_tuple_id(partitioned: None) -> None:
    make_flow("ctid", step("a"))
    for days in (1, 0):
        for _ in range(40):
            start("ctid", {}, old_run_id(days))
    pair = q(
        "select y.run_id as claimed, t.run_id as twin, y.message_id"
        "  from pgflow.step_tasks as y"
        "  join pgflow.step_tasks as t on t.ctid = y.ctid and t.tableoid <> y.tableoid"
        " where y.flow_slug = 'ctid' and t.flow_slug = 'ctid' and y.run_id < t.run_id"
        " limit 1"
    )
    assert pair, "no two tasks of different partitions share a tuple id"
    claimed, twin, message = pair[0]["claimed"], pair[0]["twin"], pair[0]["message_id"]
    read = q("select msg_id from pgmq.read('ctid', 30, 1, %s::jsonb)", [jb({"run_id": str(claimed)})])
    assert read == [{"msg_id": message}]

    assert [row["run_id"] for row in start_tasks("ctid", [message], new_worker("ctid"))] == [claimed]
    started = q("select run_id from pgflow.step_tasks where flow_slug = 'ctid' and status <> 'queued'")
    assert [row["run_id"] for row in started] == [claimed], f"{twin} was started without its message"
