from tests.sql.support import compile_flow, q, q1, queue_exists, shape, shape_step


def test_new_flow_is_compiled() -> None:
    result = compile_flow(
        "orders",
        shape(
            shape_step("validate"),
            shape_step("charge", "validate", timeout=30),
            shape_step("notify", "validate", step_type="map"),
            shape_step(
                "summarize",
                "notify",
                "charge",
                required_input_pattern={"charge": {"ok": True}},
                when_unmet="skip-cascade",
                when_exhausted="skip",
            ),
            max_attempts=4,
            base_delay=2,
            timeout=90,
        ),
    )
    assert result["status"] == "compiled"
    assert result.get("differences", []) == []
    flow = q1("select * from pgflow.flows where flow_slug = 'orders'")
    assert (flow["opt_max_attempts"], flow["opt_base_delay"], flow["opt_timeout"]) == (4, 2, 90)
    steps = q("select * from pgflow.steps where flow_slug = 'orders' order by step_index")
    assert [s["step_slug"] for s in steps] == ["validate", "charge", "notify", "summarize"]
    assert steps[1]["opt_timeout"] == 30
    assert steps[2]["step_type"] == "map"
    assert steps[3]["required_input_pattern"] == {"charge": {"ok": True}}
    assert (steps[3]["when_unmet"], steps[3]["when_exhausted"]) == ("skip-cascade", "skip")
    deps = q(
        "select dep_slug from pgflow.deps where flow_slug = 'orders' and step_slug = 'summarize' order by 1"
    )
    assert [d["dep_slug"] for d in deps] == ["charge", "notify"]
    assert queue_exists("orders")
