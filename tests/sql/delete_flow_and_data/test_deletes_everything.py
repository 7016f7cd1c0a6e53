from tests.sql.support import claim, make_flow, q, queue_exists, start, step, val


def test_rows_gone_and_queue_dropped() -> None:
    make_flow("f", step("a"), step("b", "a"), step("m", "a", step_type="map"))
    start("f")
    start("f")
    claim("f", qty=1)
    q("select pgflow.delete_flow_and_data('f')")
    for table in ("flows", "steps", "deps", "runs", "step_states", "step_tasks"):
        assert val(f"select count(*) as n from pgflow.{table} where flow_slug = 'f'") == 0, table
    assert not queue_exists("f")
    assert val("select to_regclass('pgmq.q_f') is null as gone") is True
    assert val("select to_regclass('pgmq.a_f') is null as gone") is True


def test_other_flows_untouched() -> None:
    make_flow("f", step("a"))
    make_flow("g", step("a"))
    start("f")
    kept = start("g")
    q("select pgflow.delete_flow_and_data('f')")
    assert val("select count(*) as n from pgflow.runs where run_id = %s", [kept]) == 1
    assert val("select count(*) as n from pgflow.step_tasks where flow_slug = 'g'") == 1
    assert queue_exists("g")
    assert val("select count(*) as n from pgmq.q_g") == 1


def test_slug_can_be_created_again() -> None:
    make_flow("f", step("a"))
    start("f")
    q("select pgflow.delete_flow_and_data('f')")
    make_flow("f", step("x"), step("y", "x"))
    run_id = start("f")
    assert val("select count(*) as n from pgflow.step_states where run_id = %s", [run_id]) == 2
    assert queue_exists("f")
