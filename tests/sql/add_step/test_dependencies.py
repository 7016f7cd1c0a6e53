from tests.sql.support import add_step, create_flow, q, val


def test_deps_rows_and_count() -> None:
    create_flow("f")
    add_step("f", "a")
    add_step("f", "b")
    add_step("f", "c", ["a", "b"])
    deps = q("select dep_slug from pgflow.deps where flow_slug = 'f' and step_slug = 'c' order by dep_slug")
    assert [d["dep_slug"] for d in deps] == ["a", "b"]
    assert val("select deps_count from pgflow.steps where flow_slug = 'f' and step_slug = 'c'") == 2


def test_map_with_one_dependency_accepted() -> None:
    create_flow("f")
    add_step("f", "a")
    row = add_step("f", "m", ["a"], step_type="map")
    assert row["step_type"] == "map"
    assert row["deps_count"] == 1
