import pytest

from tests.sql.support import db_error, jb, make_flow, step, val


def _nothing_written() -> None:
    assert val("select count(*) as n from pgflow.runs") == 0
    assert val("select count(*) as n from pgflow.step_states") == 0
    assert val("select count(*) as n from pgflow.step_tasks") == 0
    assert val("select count(*) as n from pgmq.q_f") == 0


def test_non_array_element_for_root_map_rejects_the_whole_call() -> None:
    make_flow("f", step("m", step_type="map"))
    message = db_error("select * from pgflow.start_flows('f', %s::jsonb)", [jb([[1, 2], {"x": 1}, [3]])])
    assert "array" in message.lower()
    _nothing_written()


@pytest.mark.parametrize("inputs", ['{"a": 1}', '"x"', "null", "3"])
def test_inputs_must_be_an_array(inputs: str) -> None:
    make_flow("f", step("a"))
    db_error("select * from pgflow.start_flows('f', %s::jsonb)", [inputs])
    _nothing_written()


def test_unknown_flow_refused() -> None:
    make_flow("f", step("a"))
    db_error("select * from pgflow.start_flows('ghost', '[{}]'::jsonb)")
    _nothing_written()


def test_run_ids_count_must_match() -> None:
    make_flow("f", step("a"))
    db_error(
        "select * from pgflow.start_flows('f', '[{}, {}]'::jsonb, array[gen_random_uuid()])",
    )
    _nothing_written()
