from tests.sql.support import compile_flow, q1, shape, shape_step


def test_runtime_options_updated_in_place_and_reported() -> None:
    compile_flow("f", shape(shape_step("a"), shape_step("b", "a", timeout=10)))
    result = compile_flow(
        "f",
        shape(
            shape_step("a", max_attempts=9, start_delay=3),
            shape_step("b", "a", timeout=20),
            max_attempts=5,
            base_delay=4,
            timeout=120,
        ),
    )
    assert result["status"] == "verified"
    assert result["differences"] == []
    reported = " ".join(result["options_updated"])
    assert result["options_updated"], "changed runtime options must be reported"
    for name in ("max_attempts", "base_delay", "timeout", "start_delay"):
        assert name in reported
    flow = q1("select * from pgflow.flows where flow_slug = 'f'")
    assert (flow["opt_max_attempts"], flow["opt_base_delay"], flow["opt_timeout"]) == (5, 4, 120)
    a = q1("select * from pgflow.steps where flow_slug = 'f' and step_slug = 'a'")
    assert (a["opt_max_attempts"], a["opt_start_delay"]) == (9, 3)
    b = q1("select * from pgflow.steps where flow_slug = 'f' and step_slug = 'b'")
    assert b["opt_timeout"] == 20


def test_unchanged_options_not_reported() -> None:
    definition = shape(shape_step("a", timeout=10), max_attempts=2)
    compile_flow("f", definition)
    assert compile_flow("f", definition)["options_updated"] == []
