"""flow.wait_for_event and flow.sleep: what they record, and every malformed option refused at
definition time with one line naming the step and the fix."""

from __future__ import annotations

from typing import Any

import pytest

from pgflow_django import Flow, FlowDefinitionError


def test_an_event_step_records_its_wait_and_returns_its_slug() -> None:
    flow = Flow("waits_event")

    @flow.step()
    def ask(order: Any) -> Any: ...

    slug = flow.wait_for_event(
        "approved",
        event="order.approved",
        key="$.order_id",
        depends_on=[ask],
        timeout=60,
        when_timeout="skip",
    )
    assert slug == "approved"
    step = flow.get_step("approved")
    assert not step.runs_handler and step.deps == ("ask",) and step.when_exhausted == "skip"
    assert step.shape()["wait"] == {
        "kind": "event",
        "event": "order.approved",
        "key": "$.order_id",
        "seconds": 60,
    }
    assert flow.get_step("ask").shape()["wait"] is None

    @flow.step(depends_on=[slug])
    def ship(deps: Any) -> Any: ...

    assert flow.get_step(ship).deps == ("approved",)


def test_a_sleep_step_takes_seconds_or_until() -> None:
    flow = Flow("waits_sleep")
    flow.sleep("nap", seconds=0)
    flow.sleep("until", until="$.charge.refund_after", depends_on=["nap"])
    assert flow.get_step("nap").shape()["wait"] == {"kind": "sleep", "seconds": 0}
    assert flow.get_step("until").shape()["wait"] == {"kind": "sleep", "until": "$.charge.refund_after"}


def test_calling_a_wait_steps_handler_says_it_has_none() -> None:
    flow = Flow("waits_handler")
    flow.sleep("nap", seconds=5)
    with pytest.raises(
        RuntimeError, match=r"step 'nap' of flow 'waits_handler' waits \(sleep 5s\); it has no handler"
    ):
        flow.get_step("nap").handler({})


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda f: f.wait_for_event("w", event=""), r"event must be a non-empty name"),
        (lambda f: f.wait_for_event("w", event="a\x1bb"), r"control characters"),
        (
            lambda f: f.wait_for_event("w", event="e", key="order_id"),
            r"key must be a JSON path such as '\$\.order_id'",
        ),
        (lambda f: f.wait_for_event("w", event="e", key="$.a b"), r"key must be a JSON path"),
        (lambda f: f.wait_for_event("w", event="e", timeout=0), r"timeout must be a whole number from 1"),
        (
            lambda f: f.wait_for_event("w", event="e", when_timeout="retry"),
            r"when_timeout must be one of fail, skip",
        ),
        (lambda f: f.sleep("s"), r"pass seconds= .* or until= .*, exactly one"),
        (lambda f: f.sleep("s", seconds=5, until="$.t"), r"exactly one"),
        (lambda f: f.sleep("s", seconds=-1), r"seconds must be a whole number from 0"),
        (lambda f: f.sleep("s", until="tomorrow"), r"until must be a JSON path"),
        (lambda f: f.sleep("s", seconds=1, depends_on=["missing"]), r"'missing' is not a step of this flow"),
    ],
)
def test_malformed_waits_are_refused_when_defined(call: Any, message: str) -> None:
    flow = Flow("waits_refused")
    with pytest.raises(FlowDefinitionError, match=message):
        call(flow)
    assert not flow.steps  # a refused step leaves the flow unchanged


def test_a_subflow_step_names_its_child_flow_and_maps_over_an_array() -> None:
    child = Flow("waits_child")

    @child.step()
    def work(item: Any) -> Any: ...

    parent = Flow("waits_parent")

    @parent.step()
    def items(order: Any) -> Any: ...

    assert parent.subflow("each", flow=child, array=items) == "each"
    parent.subflow("once", flow="waits_elsewhere", depends_on=["each"], when_exhausted="skip")
    each, once = parent.get_step("each"), parent.get_step("once")
    assert (each.step_type, each.deps, each.shape()["wait"]) == (
        "map",
        ("items",),
        {"kind": "subflow", "flow": "waits_child"},
    )
    assert (once.step_type, once.when_exhausted, once.wait.child if once.wait else None) == (
        "single",
        "skip",
        None,
    )
    assert parent.child_flows() == (child,)


def test_a_flow_cannot_start_itself_directly_or_through_others() -> None:
    from pgflow_django.flows.dsl import descendant_flows

    loop = Flow("waits_loop")
    with pytest.raises(FlowDefinitionError, match=r"a flow cannot start itself as a child flow"):
        loop.subflow("again", flow=loop)
    with pytest.raises(FlowDefinitionError, match=r"a flow cannot start itself as a child flow"):
        loop.subflow("again", flow="waits_loop")

    first, second, third = Flow("waits_a"), Flow("waits_b"), Flow("waits_c")
    first.subflow("to_b", flow=second)
    second.subflow("to_c", flow=third)
    assert descendant_flows(first) == [third, second]  # each child before the flow that starts it
    third.subflow("to_a", flow=first)
    with pytest.raises(
        FlowDefinitionError, match=r"child flows form a cycle \(waits_a -> waits_b -> waits_c -> waits_a\)"
    ):
        descendant_flows(first)


def test_subflow_refuses_what_is_not_a_flow() -> None:
    flow = Flow("waits_bad_child")
    with pytest.raises(FlowDefinitionError, match=r"flow= must be a Flow or a flow's slug, got int"):
        flow.subflow("x", flow=3)  # type: ignore[arg-type]
    with pytest.raises(FlowDefinitionError, match=r"flow= "):
        flow.subflow("x", flow="Not A Slug!")
    assert not flow.steps
