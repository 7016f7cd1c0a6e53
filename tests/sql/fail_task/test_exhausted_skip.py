from tests.sql.support import (
    active_tasks,
    archived_ids,
    claim,
    claim_one,
    complete,
    fail,
    live_ids,
    make_flow,
    run,
    start,
    state,
    step,
    tasks,
)


def test_skip_marks_step_skipped_and_dependents_proceed() -> None:
    make_flow(
        "f",
        step("a", when_exhausted="skip", max_attempts=1),
        step("b"),
        step("c", "a", "b"),
    )
    run_id = start("f")
    recs = {r["step_slug"]: r for r in claim("f")}
    assert fail(recs["a"], "nope") == "skipped"
    a = state(run_id, "a")
    assert a["status"] == "skipped"
    assert a["skip_reason"] == "handler_failed"
    assert a["skipped_at"] is not None
    assert run(run_id)["status"] == "started"
    assert state(run_id, "c")["remaining_deps"] == 1
    assert complete(recs["b"], "b-out") == "completed"
    c_rec = claim_one("f", "c")
    assert c_rec["input"] == {"b": "b-out"}
    assert complete(c_rec, "done") == "completed"
    r = run(run_id)
    assert r["status"] == "completed"
    assert r["output"] == {"c": "done"}


def test_skip_gives_map_child_size_zero() -> None:
    make_flow(
        "f",
        step("a", when_exhausted="skip", max_attempts=1),
        step("m", "a", step_type="map"),
        step("after", "m"),
    )
    run_id = start("f")
    assert fail(claim_one("f", "a")) == "skipped"
    m = state(run_id, "m")
    assert m["initial_tasks"] == 0
    assert m["status"] == "completed"
    assert m["output"] == []
    assert tasks(run_id, "m") == []
    assert claim_one("f", "after")["input"] == {"m": []}


def test_skip_terminalizes_sibling_map_tasks_as_skipped() -> None:
    make_flow("f", step("m", step_type="map", when_exhausted="skip", max_attempts=1))
    run_id = start("f", [1, 2, 3])
    recs = claim("f", qty=2)
    msgs = {t["message_id"] for t in tasks(run_id)}
    assert fail(recs[0]) == "skipped"
    assert active_tasks(run_id) == []
    statuses = {t["task_index"]: t["status"] for t in tasks(run_id, "m")}
    assert statuses.pop(recs[0]["task_index"]) == "failed"
    assert set(statuses.values()) == {"skipped"}
    assert live_ids("f") == set()
    assert msgs <= archived_ids("f")
    assert state(run_id, "m")["status"] == "skipped"
    r = run(run_id)
    assert r["status"] == "completed"
    assert r["output"] is None  # no completed leaf: no output, as in pgflow
