from tests.sql.support import add_step, create_flow, q1


def test_defaults_of_a_root_step() -> None:
    create_flow("f")
    returned = add_step("f", "a")
    row = q1("select * from pgflow.steps where flow_slug = 'f' and step_slug = 'a'")
    assert returned["step_slug"] == "a"
    assert row["step_type"] == "single"
    assert row["deps_count"] == 0
    assert row["when_unmet"] == "skip"
    assert row["when_exhausted"] == "fail"
    assert row["required_input_pattern"] is None
    assert row["forbidden_input_pattern"] is None
    for opt in ("opt_max_attempts", "opt_base_delay", "opt_timeout", "opt_start_delay"):
        assert row[opt] is None


def test_options_stored() -> None:
    create_flow("f")
    add_step(
        "f",
        "a",
        [],
        max_attempts=7,
        base_delay=3,
        timeout=11,
        start_delay=4,
        step_type="map",
        required_input_pattern={"x": 1},
        forbidden_input_pattern={"y": 2},
        when_unmet="fail",
        when_exhausted="skip-cascade",
    )
    row = q1("select * from pgflow.steps where flow_slug = 'f' and step_slug = 'a'")
    assert (row["opt_max_attempts"], row["opt_base_delay"], row["opt_timeout"], row["opt_start_delay"]) == (
        7,
        3,
        11,
        4,
    )
    assert row["step_type"] == "map"
    assert row["required_input_pattern"] == {"x": 1}
    assert row["forbidden_input_pattern"] == {"y": 2}
    assert (row["when_unmet"], row["when_exhausted"]) == ("fail", "skip-cascade")
