from tests.sql.support import claim, claim_one, complete, make_flow, start, step


def test_dependent_gets_outputs_of_its_deps_by_slug() -> None:
    make_flow("f", step("a"), step("b"), step("c", "a", "b"), step("d", "c"))
    start("f", {"flow": "input"})
    for rec in claim("f"):
        assert complete(rec, {"from": rec["step_slug"]}) == "completed"
    c = claim_one("f", "c")
    assert c["input"] == {"a": {"from": "a"}, "b": {"from": "b"}}
    assert complete(c, [1, 2]) == "completed"
    assert claim_one("f", "d")["input"] == {"c": [1, 2]}


def test_dependent_of_map_gets_the_aggregated_array() -> None:
    make_flow("f", step("m", step_type="map"), step("after", "m"))
    start("f", [1, 2])
    for rec in claim("f"):
        assert complete(rec, rec["task_index"] * 10) == "completed"
    assert claim_one("f", "after")["input"] == {"m": [0, 10]}
