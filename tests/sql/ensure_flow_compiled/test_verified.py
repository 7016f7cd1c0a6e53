from tests.sql.support import compile_flow, q, shape, shape_step, start, val


def test_same_shape_is_verified_and_changes_nothing() -> None:
    definition = shape(shape_step("a"), shape_step("b", "a", step_type="map"))
    assert compile_flow("f", definition)["status"] == "compiled"
    run_id = start("f")
    before = q("select step_slug, step_index, created_at from pgflow.steps where flow_slug = 'f' order by 1")
    result = compile_flow("f", definition)
    assert result["status"] == "verified"
    assert result["differences"] == []
    assert result["options_updated"] == []
    after = q("select step_slug, step_index, created_at from pgflow.steps where flow_slug = 'f' order by 1")
    assert before == after
    assert val("select count(*) as n from pgflow.runs where run_id = %s", [run_id]) == 1


def test_flow_created_by_api_is_verified() -> None:
    val("select pgflow.create_flow('f') is not null as x")
    val("select pgflow.add_step('f', 'a') is not null as x")
    val("select pgflow.add_step('f', 'b', array['a']) is not null as x")
    result = compile_flow("f", shape(shape_step("a"), shape_step("b", "a")))
    assert result["status"] == "verified"
