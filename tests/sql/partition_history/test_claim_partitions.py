"""A claim on a partitioned history starts only the tasks whose messages it read: each partition
numbers its rows from its own first page, so a queued task of another partition can sit at the same
tuple id as the one claimed."""

from __future__ import annotations

import uuid

from tests.sql.support import jb, make_flow, new_worker, old_run_id, q, start, start_tasks, step


def task_position(run_id: uuid.UUID) -> tuple[int, int]:
    """(page, line) of the run's task in its partition."""
    row_id = q("select ctid::text as row_id from pgflow.step_tasks where run_id = %s", [run_id])[0]["row_id"]
    page, line = row_id.strip("()").split(",")
    return int(page), int(line)


def test_a_claim_starts_only_its_own_task_where_partitions_share_a_tuple_id(partitioned: None) -> None:
    """Runs of two days' partitions are started, each time in the partition whose last task sits
    lower, until a task of one sits at the tuple id of a task of the other (rows other tests wrote
    and rolled back still take their line pointers, so where each partition starts is not known)."""
    make_flow("ctid", step("a"))
    runs: dict[int, dict[tuple[int, int], uuid.UUID]] = {1: {}, 0: {}}
    last = {days: (-1, -1) for days in runs}
    pair = None
    for _ in range(2000):
        days = min(runs, key=lambda d: last[d])
        run_id = start("ctid", {}, old_run_id(days))
        last[days] = task_position(run_id)
        runs[days][last[days]] = run_id
        twin = runs[1 - days].get(last[days])
        if twin is not None:
            pair = (run_id, twin)
            break
    assert pair is not None, f"no two tasks of different partitions share a tuple id: {last}"
    claimed, twin = pair
    message = q("select message_id from pgflow.step_tasks where run_id = %s", [claimed])[0]["message_id"]
    read = q("select msg_id from pgmq.read('ctid', 30, 1, %s::jsonb)", [jb({"run_id": str(claimed)})])
    assert read == [{"msg_id": message}]

    assert [row["run_id"] for row in start_tasks("ctid", [message], new_worker("ctid"))] == [claimed]
    started = q("select run_id from pgflow.step_tasks where flow_slug = 'ctid' and status <> 'queued'")
    assert [row["run_id"] for row in started] == [claimed], f"{twin} was started without its message"
