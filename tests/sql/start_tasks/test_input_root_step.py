from tests.sql.support import claim, make_flow, start, step


def test_root_step_gets_flow_input() -> None:
    make_flow("f", step("a"))
    start("f", {"user": 7, "items": [1, 2]})
    assert claim("f")[0]["input"] == {"user": 7, "items": [1, 2]}


def test_root_step_gets_scalar_flow_input() -> None:
    make_flow("f", step("a"))
    start("f", "hello")
    assert claim("f")[0]["input"] == "hello"
