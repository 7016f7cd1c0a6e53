from tests.sql.support import claim, complete, fail, make_flow, run, start, state, step, tasks


def test_skip_cascade_skips_everything_downstream() -> None:
    make_flow(
        "f",
        step("a", when_exhausted="skip-cascade", max_attempts=1),
        step("b", "a"),
        step("c", "b"),
        step("m", "a", step_type="map"),
        step("side"),
    )
    run_id = start("f")
    recs = {r["step_slug"]: r for r in claim("f")}
    assert fail(recs["a"]) == "skipped"
    by_slug = {s: state(run_id, s) for s in ("a", "b", "c", "m")}
    assert by_slug["a"]["skip_reason"] == "handler_failed"
    for slug in ("b", "c", "m"):
        assert by_slug[slug]["status"] == "skipped"
        assert by_slug[slug]["skip_reason"] == "dependency_skipped"
    assert [t["step_slug"] for t in tasks(run_id) if t["step_slug"] in {"b", "c", "m"}] == []
    assert run(run_id)["status"] == "started"
    assert complete(recs["side"], "s") == "completed"
    r = run(run_id)
    assert r["status"] == "completed"
    assert r["output"] == {"side": "s"}


def test_plain_skip_does_not_cascade() -> None:
    make_flow("f", step("a", when_exhausted="skip", max_attempts=1), step("b", "a"))
    run_id = start("f")
    assert fail(claim("f")[0]) == "skipped"
    assert state(run_id, "b")["status"] == "started"


def test_skip_cascade_terminalizes_sibling_tasks_as_skipped() -> None:
    from tests.sql.support import active_tasks, archived_ids, live_ids

    make_flow(
        "f",
        step("m", step_type="map", when_exhausted="skip-cascade", max_attempts=1),
        step("after", "m"),
    )
    run_id = start("f", [1, 2, 3])
    recs = claim("f", qty=2)
    msgs = {t["message_id"] for t in tasks(run_id)}
    assert fail(recs[0]) == "skipped"
    assert active_tasks(run_id) == []
    statuses = {t["task_index"]: t["status"] for t in tasks(run_id, "m")}
    statuses.pop(recs[0]["task_index"])
    assert set(statuses.values()) == {"skipped"}
    assert live_ids("f") == set()
    assert msgs <= archived_ids("f")
    assert state(run_id, "after")["skip_reason"] == "dependency_skipped"
    r = run(run_id)
    assert r["status"] == "completed"
    assert r["output"] is None  # no completed leaf: no output, as in pgflow
