from tests.sql.support import add_step, create_flow, db_error, val


def test_unknown_dependency_refused() -> None:
    create_flow("f")
    add_step("f", "a")
    message = db_error("select pgflow.add_step('f', 'b', array['a', 'nope'])")
    assert "nope" in message
    assert val("select count(*) as n from pgflow.steps where flow_slug = 'f'") == 1
    assert val("select count(*) as n from pgflow.deps where flow_slug = 'f'") == 0


def test_self_dependency_refused() -> None:
    create_flow("f")
    db_error("select pgflow.add_step('f', 'a', array['a'])")
    assert val("select count(*) as n from pgflow.steps where flow_slug = 'f'") == 0


def test_dependency_of_other_flow_refused() -> None:
    create_flow("f")
    create_flow("g")
    add_step("g", "a")
    db_error("select pgflow.add_step('f', 'b', array['a'])")
    assert val("select count(*) as n from pgflow.steps where flow_slug = 'f'") == 0


def test_unknown_flow_refused() -> None:
    db_error("select pgflow.add_step('ghost', 'a')")
    assert val("select count(*) as n from pgflow.steps") == 0
