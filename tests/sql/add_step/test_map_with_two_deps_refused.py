from tests.sql.support import add_step, create_flow, db_error, val


def test_map_with_two_dependencies_refused() -> None:
    create_flow("f")
    add_step("f", "a")
    add_step("f", "b")
    message = db_error("select pgflow.add_step('f', 'm', array['a', 'b'], step_type => 'map')")
    assert "map" in message.lower()
    assert val("select count(*) as n from pgflow.steps where flow_slug = 'f' and step_slug = 'm'") == 0
    assert val("select count(*) as n from pgflow.deps where flow_slug = 'f'") == 0
