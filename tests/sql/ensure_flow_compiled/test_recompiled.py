from tests.sql.support import compile_flow, q, queue_exists, shape, shape_step, start, val

BASE = shape(shape_step("a"), shape_step("b", "a"))
OTHER = shape(shape_step("x"), shape_step("y", "x", step_type="map"), max_attempts=7)


def test_mismatch_recompiled_when_allowed() -> None:
    compile_flow("f", BASE)
    run_id = start("f")
    result = compile_flow("f", OTHER, allow_recompile=True)
    assert result["status"] == "recompiled"
    steps = q("select step_slug, step_type from pgflow.steps where flow_slug = 'f' order by step_index")
    assert [(s["step_slug"], s["step_type"]) for s in steps] == [("x", "single"), ("y", "map")]
    assert val("select opt_max_attempts from pgflow.flows where flow_slug = 'f'") == 7
    assert val("select count(*) as n from pgflow.runs where run_id = %s", [run_id]) == 0
    assert queue_exists("f")
    assert val("select count(*) as n from pgmq.q_f") == 0


def test_allow_recompile_does_not_touch_a_matching_flow() -> None:
    compile_flow("f", BASE)
    run_id = start("f")
    assert compile_flow("f", BASE, allow_recompile=True)["status"] == "verified"
    assert val("select count(*) as n from pgflow.runs where run_id = %s", [run_id]) == 1


def test_recompile_leaves_other_flows_alone() -> None:
    compile_flow("f", BASE)
    compile_flow("g", BASE)
    other_run = start("g")
    compile_flow("f", OTHER, allow_recompile=True)
    assert val("select count(*) as n from pgflow.runs where run_id = %s", [other_run]) == 1
    assert val("select count(*) as n from pgflow.steps where flow_slug = 'g'") == 2
