import pytest

from tests.sql.support import db_error, make_flow, start, state, step, val


@pytest.mark.parametrize("payload", ['{"a": 1}', '"text"', "1", "null", "true"])
def test_non_array_input_refused_before_any_row(payload: str) -> None:
    make_flow("f", step("m", step_type="map"))
    message = db_error("select * from pgflow.start_flow('f', %s::jsonb)", [payload])
    assert "array" in message.lower()
    assert val("select count(*) as n from pgflow.runs") == 0
    assert val("select count(*) as n from pgflow.step_states") == 0
    assert val("select count(*) as n from pgmq.q_f") == 0


def test_dependent_map_does_not_need_array_input() -> None:
    make_flow("f", step("a"), step("m", "a", step_type="map"))
    run_id = start("f", {"not": "an array"})
    assert state(run_id, "a")["status"] == "started"
