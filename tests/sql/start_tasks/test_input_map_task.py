from tests.sql.support import claim, complete, make_flow, start, step


def test_root_map_task_gets_its_element_of_run_input() -> None:
    make_flow("f", step("m", step_type="map"))
    start("f", [{"id": "x"}, "y", 3])
    by_index = {r["task_index"]: r["input"] for r in claim("f")}
    assert by_index == {0: {"id": "x"}, 1: "y", 2: 3}


def test_dependent_map_task_gets_its_element_of_dep_output() -> None:
    make_flow("f", step("a"), step("m", "a", step_type="map"))
    start("f", {"ignored": True})
    (a,) = claim("f")
    assert complete(a, ["p", "q", {"r": 1}]) == "completed"
    by_index = {r["task_index"]: r["input"] for r in claim("f")}
    assert by_index == {0: "p", 1: "q", 2: {"r": 1}}


def test_map_of_map_gets_elements_of_parent_map_output() -> None:
    make_flow("f", step("m1", step_type="map"), step("m2", "m1", step_type="map"))
    start("f", [1, 2, 3])
    for rec in claim("f"):
        assert complete(rec, rec["input"] * 100) == "completed"
    by_index = {r["task_index"]: r["input"] for r in claim("f") if r["step_slug"] == "m2"}
    assert by_index == {0: 100, 1: 200, 2: 300}
