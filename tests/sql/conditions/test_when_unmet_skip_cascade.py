from tests.sql.support import make_flow, run, start, state, step, tasks


def test_skip_cascade_skips_downstream() -> None:
    make_flow(
        "f",
        step("a", required_input_pattern={"go": True}, when_unmet="skip-cascade"),
        step("b", "a"),
        step("c", "b"),
        step("side"),
    )
    run_id = start("f", {"go": False})
    assert state(run_id, "a")["skip_reason"] == "condition_unmet"
    for slug in ("b", "c"):
        s = state(run_id, slug)
        assert s["status"] == "skipped"
        assert s["skip_reason"] == "dependency_skipped"
    assert [t["step_slug"] for t in tasks(run_id)] == ["side"]
    assert run(run_id)["remaining_steps"] == 1
    assert state(run_id, "side")["status"] == "started"


def test_whole_flow_skipped_completes_run_without_output() -> None:
    make_flow(
        "f",
        step("a", required_input_pattern={"go": True}, when_unmet="skip-cascade"),
        step("b", "a"),
    )
    run_id = start("f", {"go": False})
    r = run(run_id)
    assert r["status"] == "completed"
    assert r["output"] is None  # no completed leaf: no output, as in pgflow
