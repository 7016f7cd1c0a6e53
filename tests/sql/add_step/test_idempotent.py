from tests.sql.support import add_step, create_flow, db_error, q, val


def test_identical_step_added_twice_is_a_no_op() -> None:
    create_flow("f")
    add_step("f", "a")
    first = add_step("f", "b", ["a"], timeout=5)
    second = add_step("f", "b", ["a"], timeout=5)
    assert first["step_index"] == second["step_index"]
    assert val("select count(*) as n from pgflow.steps where flow_slug = 'f'") == 2
    assert val("select count(*) as n from pgflow.deps where flow_slug = 'f'") == 1


def test_same_slug_with_other_definition_refused() -> None:
    create_flow("f")
    add_step("f", "a")
    add_step("f", "b")
    add_step("f", "c", ["a"])
    db_error("select pgflow.add_step('f', 'c', array['b'])")
    deps = q("select dep_slug from pgflow.deps where flow_slug = 'f' and step_slug = 'c'")
    assert [d["dep_slug"] for d in deps] == ["a"]
