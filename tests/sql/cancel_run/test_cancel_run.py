from tests.sql.support import claim, make_flow, q, start, step, task, val


def test_cancel_ends_a_started_run_as_failed_and_terminalizes_its_tasks() -> None:
    make_flow("f", step("a", step_type="map"))
    run_id = start("f", [1, 2, 3])
    claim("f", qty=1)
    assert val("select pgflow.cancel_run(%s) as o", [run_id]) == "cancelled"
    run = q("select status, error_message from pgflow.runs where run_id = %s", [run_id])[0]
    assert run == {"status": "failed", "error_message": "cancelled"}
    statuses = [r["status"] for r in q("select status from pgflow.step_tasks where run_id = %s", [run_id])]
    assert statuses == ["cancelled"] * 3
    assert val("select count(*) as n from pgmq.q_f") == 0, "their messages are archived"
    assert val("select count(*) as n from pgmq.a_f") == 3


def test_cancel_of_a_finished_run_changes_nothing() -> None:
    make_flow("f", step("a"))
    run_id = start("f")
    records = claim("f")
    q("select pgflow.complete_task(%s, 'a', 0, %s, '1'::jsonb)", [run_id, records[0]["attempt"]])
    assert val("select pgflow.cancel_run(%s) as o", [run_id]) == "completed"
    assert task(run_id, "a")["status"] == "completed"
