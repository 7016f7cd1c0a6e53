"""The previous release's three-argument claim ``start_tasks(flow_slug, msg_ids, worker_id)`` stays a
wrapper for workers still draining during an upgrade: it claims through the default queue
``lower(flow_slug)`` and returns the claimed tasks only, as ``step_task_record``."""

from tests.sql.support import complete, make_flow, new_worker, q, start, step, task


def _read(queue: str) -> list[int]:
    return [m["msg_id"] for m in q("select msg_id from pgmq.read(%s, 5, 100)", [queue])]


def test_claims_through_the_default_queue_and_returns_claimed_tasks_only() -> None:
    make_flow("Legacy", step("a"))
    run_id = start("Legacy")
    ids = _read("legacy")
    records = q(
        "select * from pgflow.start_tasks('Legacy', %s::bigint[], %s::uuid)",
        [[*ids, 999999], new_worker("legacy")],
    )
    assert [
        (r["flow_slug"], r["run_id"], r["step_slug"], r["task_index"], r["attempt"]) for r in records
    ] == [("Legacy", run_id, "a", 0, 1)]
    assert set(records[0]) == {
        "flow_slug",
        "run_id",
        "step_slug",
        "task_index",
        "message_id",
        "attempt",
        "input",
    }
    assert task(run_id, "a")["status"] == "started"
    assert complete(records[0], "done") == "completed"


def test_a_message_of_a_finished_task_is_archived_and_not_returned() -> None:
    make_flow("legacy2", step("a"))
    run_id = start("legacy2")
    ids = _read("legacy2")
    worker = new_worker("legacy2")
    (claimed,) = q("select * from pgflow.start_tasks('legacy2', %s::bigint[], %s::uuid)", [ids, worker])
    assert complete(claimed, 1) == "completed"
    assert q("select * from pgflow.start_tasks('legacy2', %s::bigint[], %s::uuid)", [ids, worker]) == []
    assert task(run_id, "a")["status"] == "completed"
