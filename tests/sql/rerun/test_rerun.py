from tests.sql.support import claim, db_error, make_flow, q, start, step, val


def test_rerun_starts_a_linked_run_with_the_same_input() -> None:
    make_flow("f", step("a"))
    run_id = start("f", {"x": 1})
    records = claim("f")
    q("select pgflow.complete_task(%s, 'a', 0, %s, '1'::jsonb)", [run_id, records[0]["attempt"]])
    new_id = val("select pgflow.rerun(%s) as id", [run_id])
    row = q("select status, input, rerun_of from pgflow.runs where run_id = %s", [new_id])[0]
    assert row == {"status": "started", "input": {"x": 1}, "rerun_of": run_id}


def test_rerun_of_a_started_run_is_refused() -> None:
    make_flow("f", step("a"))
    run_id = start("f")
    assert "still started" in db_error("select pgflow.rerun(%s)", [run_id])
