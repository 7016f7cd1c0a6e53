from tests.sql.support import make_flow, start, state, step, tasks


def test_forbidden_pattern_present_skips_step() -> None:
    make_flow("f", step("a", forbidden_input_pattern={"block": True}))
    run_id = start("f", {"block": True})
    a = state(run_id, "a")
    assert a["status"] == "skipped"
    assert a["skip_reason"] == "condition_unmet"
    assert tasks(run_id, "a") == []


def test_forbidden_pattern_absent_starts_step() -> None:
    make_flow("f", step("a", forbidden_input_pattern={"block": True}))
    run_id = start("f", {"block": False})
    assert state(run_id, "a")["status"] == "started"


def test_both_patterns() -> None:
    make_flow(
        "f",
        step("a", required_input_pattern={"kind": "x"}, forbidden_input_pattern={"dry_run": True}),
    )
    assert state(start("f", {"kind": "x"}), "a")["status"] == "started"
    assert state(start("f", {"kind": "x", "dry_run": True}), "a")["status"] == "skipped"
    assert state(start("f", {"kind": "y"}), "a")["status"] == "skipped"
