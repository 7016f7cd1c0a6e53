import pytest

from tests.sql.support import claim, claim_one, complete, make_flow, run, start, state, step, task


@pytest.mark.parametrize("output", [0, "", False, [], {}, None])
def test_falsy_output_stored_as_itself(output: object) -> None:
    make_flow("f", step("a"), step("b", "a"))
    run_id = start("f")
    rec = claim_one("f", "a")
    assert complete(rec, output) == "completed"
    assert task(run_id, "a")["output"] == output
    a = state(run_id, "a")
    assert a["status"] == "completed"
    assert a["output"] == output
    assert claim_one("f", "b")["input"] == {"a": output}


@pytest.mark.parametrize("output", [0, "", False, [], {}])
def test_falsy_output_is_not_sql_null(output: object) -> None:
    make_flow("f", step("a"))
    run_id = start("f")
    assert complete(claim("f")[0], output) == "completed"
    from tests.sql.support import val

    assert val("select output is not null as x from pgflow.step_states where run_id = %s", [run_id]) is True
    assert run(run_id)["output"] == {"a": output}


def test_falsy_map_elements_kept_in_aggregate() -> None:
    make_flow("f", step("m", step_type="map"))
    run_id = start("f", [1, 2, 3, 4, 5])
    values = [0, "", False, [], {}]
    for rec in claim("f"):
        assert complete(rec, values[rec["task_index"]]) == "completed"
    assert state(run_id, "m")["output"] == values
