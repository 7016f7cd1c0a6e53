"""A mixed-case flow slug routes to its lowercase canonical queue: 'MyFlow' -> queue 'myflow' on steps,
tasks and in PGMQ; the queue-aware claim reaches it with either spelling, and the previous release's
3-argument claim resolves it through lower(flow_slug)."""

from tests.sql.support import (
    archived_ids,
    claim_at,
    complete,
    live_ids,
    make_flow,
    meta_names,
    new_worker,
    q,
    read_ids,
    start,
    step,
    task,
    tasks,
)


def test_mixed_case_slug_routes_to_the_lowercase_queue() -> None:
    make_flow("MyFlow", step("First"), step("then", "First"))
    run_id = start("MyFlow")
    assert {r["queue_name"] for r in q("select queue_name from pgflow.steps where flow_slug = 'MyFlow'")} == {
        "myflow"
    }
    (row,) = tasks(run_id)
    assert (row["queue_name"], row["message_id"]) == ("myflow", 1)
    assert meta_names("myflow") == ["myflow"], "PGMQ metadata holds the canonical spelling only"
    assert live_ids("myflow") == {1}


def test_queue_aware_claim_with_either_spelling_reaches_the_same_tables() -> None:
    make_flow("MyFlow", step("a"))
    first = start("MyFlow")
    second = start("MyFlow")
    (rec,) = claim_at("myflow", "MyFlow", [task(first, "a")["message_id"]])
    assert (rec["outcome"], rec["run_id"], rec["flow_slug"]) == ("claimed", first, "MyFlow")
    (rec2,) = claim_at("MyFlow", "MyFlow", [task(second, "a")["message_id"]])
    assert (rec2["outcome"], rec2["run_id"]) == ("claimed", second)
    assert complete(rec, 1) == "completed"
    assert archived_ids("myflow") == {rec["message_id"]}


def test_legacy_three_argument_claim_resolves_lower_flow_slug() -> None:
    make_flow("MyFlow", step("a"))
    make_flow("other", step("a"))
    run_id = start("MyFlow")
    other = start("other")
    assert task(run_id, "a")["message_id"] == task(other, "a")["message_id"] == 1
    ids = read_ids("myflow")
    assert ids == [1]
    records = q(
        "select * from pgflow.start_tasks(%s, %s::bigint[], %s::uuid)",
        ["MyFlow", ids, new_worker("myflow")],
    )
    assert [
        (r["flow_slug"], r["run_id"], r["step_slug"], r["message_id"], r["attempt"]) for r in records
    ] == [("MyFlow", run_id, "a", 1, 1)]
    assert task(run_id, "a")["status"] == "started"
    assert task(other, "a")["status"] == "queued"
    assert complete(records[0], "ok") == "completed"
    assert archived_ids("myflow") == {1}
    assert archived_ids("other") == set()
