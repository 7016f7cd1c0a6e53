from tests.sql.support import claim_one, complete, make_flow, q, run, start, step


def test_no_op_while_steps_remain() -> None:
    make_flow("f", step("a"), step("b", "a"))
    run_id = start("f")
    assert complete(claim_one("f", "a"), 1) == "completed"
    q("select pgflow.maybe_complete_runs(array[%s::uuid])", [run_id])
    r = run(run_id)
    assert r["status"] == "started"
    assert r["output"] is None
    assert r["completed_at"] is None


def test_no_op_on_completed_run() -> None:
    make_flow("f", step("a"))
    run_id = start("f")
    assert complete(claim_one("f", "a"), "x") == "completed"
    before = run(run_id)
    q("select pgflow.maybe_complete_runs(array[%s::uuid])", [run_id])
    assert run(run_id) == before


def test_no_op_on_failed_run() -> None:
    make_flow("f", step("a"))
    run_id = start("f")
    q("select pgflow.fail_run(%s, 'stop')", [run_id])
    q("select pgflow.maybe_complete_runs(array[%s::uuid])", [run_id])
    assert run(run_id)["status"] == "failed"
