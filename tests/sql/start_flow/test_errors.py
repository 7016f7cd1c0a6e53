from tests.sql.support import db_error, make_flow, start, step, val


def test_unknown_flow_refused() -> None:
    db_error("select * from pgflow.start_flow('ghost', '{}'::jsonb)")
    assert val("select count(*) as n from pgflow.runs") == 0


def test_duplicate_run_id_refused() -> None:
    make_flow("f", step("a"))
    run_id = start("f")
    db_error("select * from pgflow.start_flow('f', '{}'::jsonb, %s::uuid)", [run_id])
    assert val("select count(*) as n from pgflow.runs") == 1


def test_sql_null_input_refused() -> None:
    make_flow("f", step("a"))
    db_error("select * from pgflow.start_flow('f', null::jsonb)")
    assert val("select count(*) as n from pgflow.runs") == 0
