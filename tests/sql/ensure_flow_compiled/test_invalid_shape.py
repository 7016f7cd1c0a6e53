from tests.sql.support import db_error, jb, shape, shape_step, val


def test_invalid_definition_refused_without_leftovers() -> None:
    bad = shape(shape_step("a"), shape_step("b"), shape_step("m", "a", "b", step_type="map"))
    db_error("select pgflow.ensure_flow_compiled('f', %s::jsonb)", [jb(bad)])
    assert val("select count(*) as n from pgflow.flows where flow_slug = 'f'") == 0
    assert val("select count(*) as n from pgflow.steps where flow_slug = 'f'") == 0


def test_unknown_dependency_refused() -> None:
    bad = shape(shape_step("a"), shape_step("b", "ghost"))
    db_error("select pgflow.ensure_flow_compiled('f', %s::jsonb)", [jb(bad)])
    assert val("select count(*) as n from pgflow.flows where flow_slug = 'f'") == 0
