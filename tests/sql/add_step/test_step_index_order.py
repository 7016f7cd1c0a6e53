from tests.sql.support import add_step, create_flow, q


def test_steps_indexed_in_definition_order() -> None:
    create_flow("f")
    add_step("f", "zeta")
    add_step("f", "alpha", ["zeta"])
    add_step("f", "mid", ["zeta"])
    rows = q("select step_slug, step_index from pgflow.steps where flow_slug = 'f' order by step_index")
    assert [r["step_slug"] for r in rows] == ["zeta", "alpha", "mid"]
    first = rows[0]["step_index"]
    assert [r["step_index"] for r in rows] == [first, first + 1, first + 2]


def test_index_is_per_flow() -> None:
    create_flow("f1")
    create_flow("f2")
    a = add_step("f1", "a")
    b = add_step("f2", "b")
    assert a["step_index"] == b["step_index"]
