"""``route_flow(flow, queues={step: queue})`` (issue 6, item 1): every step exactly once, each name a valid
shared queue name, all refused when the flow is defined (before any database access) with errors that
list the valid steps. The routed flow keeps the DAG, handlers and options; its steps are fixed."""

from __future__ import annotations

from typing import Any

import pytest

from pgflow_django import Flow, FlowDefinitionError, RoutedFlow, route_flow, with_step_queues
from pgflow_django.flows.slugs import shared_queue_problem

FAST, BULK = "thread_processing", "slack_delivery"


def build(slug: str = "support") -> Flow:
    """classify -> enrich (map) -> deliver_slack: the seed's example flow."""
    flow = Flow(slug, max_attempts=4, base_delay=2, timeout=30)

    @flow.step()
    def classify(thread: Any) -> list[str]:
        return ["a", "b"]

    @flow.map(array=classify, timeout=5)
    def enrich(item: Any) -> str:
        return str(item)

    @flow.step(depends_on=[classify, enrich])
    def deliver_slack(deps: Any) -> str:
        return "sent"

    return flow


ROUTE = {"classify": FAST, "enrich": FAST, "deliver_slack": BULK}


def refused(flow: Flow, queues: Any) -> str:
    with pytest.raises(FlowDefinitionError) as info:
        route_flow(flow, queues=queues)
    return str(info.value)


def test_two_steps_on_one_queue_and_a_third_on_another() -> None:
    flow = build()
    routed = route_flow(flow, queues=ROUTE)
    assert isinstance(routed, RoutedFlow)
    assert routed.slug == "support" and routed.queue_mode == "routed"
    assert dict(routed.step_queues) == ROUTE
    assert list(routed.step_queues) == ["classify", "enrich", "deliver_slack"], "definition order"
    assert routed.queue_for("enrich") == FAST
    assert routed.queue_for(flow.get_step("deliver_slack").handler) == BULK, "a step named by its function"
    assert routed.route() == ROUTE
    assert routed.options == flow.options
    assert dict(routed.steps) == dict(flow.steps), "the same step definitions and handlers"
    assert flow.queue_mode == "flow" and flow.queue_for("enrich") == "support", "the plain flow is unchanged"


def test_queues_are_distinct_in_first_use_order_and_steps_on_lists_each_queue() -> None:
    routed = route_flow(build(), queues={"classify": BULK, "enrich": FAST, "deliver_slack": BULK})
    assert routed.queues == (BULK, FAST)
    assert routed.steps_on(BULK) == ("classify", "deliver_slack")
    assert routed.steps_on(FAST) == ("enrich",)
    assert routed.steps_on("elsewhere") == ()


def test_the_shape_carries_the_queue_mode_and_the_route() -> None:
    flow = build()
    routed = route_flow(flow, queues=ROUTE)
    shape = routed.shape()
    assert shape["queue_mode"] == "routed"
    assert shape["route"] == ROUTE
    assert list(shape["route"]) == ["classify", "enrich", "deliver_slack"]
    assert shape["steps"] == flow.shape()["steps"] and shape["options"] == flow.shape()["options"]


def test_the_route_is_a_copy_the_caller_cannot_change() -> None:
    queues = dict(ROUTE)
    routed = route_flow(build(), queues=queues)
    queues["enrich"] = BULK
    assert routed.queue_for("enrich") == FAST
    with pytest.raises(TypeError):
        routed.step_queues["enrich"] = BULK  # type: ignore[index]


@pytest.mark.parametrize(
    ("queues", "expected"),
    [
        ({"classify": FAST, "enrich": FAST}, "no queue for 'deliver_slack'"),
        ({"classify": FAST}, "no queue for 'enrich', 'deliver_slack'"),
        ({}, "no queue for 'classify', 'enrich', 'deliver_slack'"),
        ({**ROUTE, "ghost": FAST}, "unknown step(s) 'ghost'"),
        ({**ROUTE, "Classify": FAST}, "unknown step(s) 'Classify'"),
        (
            {"classify": FAST, "enrich": FAST, "ghost": BULK},
            "unknown step(s) 'ghost'; no queue for 'deliver_slack'",
        ),
    ],
)
def test_missing_and_unknown_steps_are_listed_with_the_valid_steps(
    queues: dict[str, str], expected: str
) -> None:
    message = refused(build(), queues)
    assert expected in message
    assert "route_flow(flow 'support')" in message
    assert "give every step exactly one queue (steps: classify, enrich, deliver_slack)" in message


@pytest.mark.parametrize(
    ("name", "problem"),
    [
        ("Thread_Processing", "is invalid"),
        ("THREAD", "is invalid"),
        ("thread__processing", "contains '__'"),
        ("q" * 48, "is invalid"),
        ("", "is invalid"),
        ("thread-processing", "is invalid"),
        ("thread processing", "is invalid"),
        ("queue\u00e9", "is invalid"),
        (7, "is a int, not a string"),
        (None, "is a NoneType, not a string"),
    ],
)
def test_invalid_queue_names_are_refused_naming_the_step(name: object, problem: str) -> None:
    message = refused(build(), {**ROUTE, "enrich": name})
    assert f"queue {name!r} of step 'enrich' {problem}" in message
    assert shared_queue_problem(name) is not None, "the Python check SQL mirrors agrees"


def test_the_longest_name_is_accepted() -> None:
    name = "q" * 47
    assert route_flow(build(), queues={**ROUTE, "enrich": name}).queue_for("enrich") == name


@pytest.mark.parametrize("slug", ["support", "Support", "SUPPORT"])
def test_the_flows_own_default_queue_name_is_reserved(slug: str) -> None:
    message = refused(build(slug), {**ROUTE, "deliver_slack": "support"})
    assert "queue 'support' of step 'deliver_slack' is the flow's own default queue name" in message


@pytest.mark.parametrize("queues", [["classify"], ("classify", FAST), "classify", None, {FAST}])
def test_queues_must_be_a_mapping(queues: Any) -> None:
    message = refused(build(), queues)
    assert f"queues must be a mapping {{step_slug: queue_name}}, got {type(queues).__name__}" in message


def test_a_flow_without_steps_is_refused() -> None:
    assert "the flow has no steps; define its steps first" in refused(Flow("empty_flow"), {})


def test_only_a_plain_flow_can_be_routed() -> None:
    flow = build()
    routed = route_flow(flow, queues=ROUTE)
    assert "already has a route (routed); route the plain flow instead" in refused(routed, ROUTE)
    stepped = with_step_queues(flow)
    assert "already has a route (step); route the plain flow instead" in refused(stepped, ROUTE)
    assert "takes a Flow, got dict" in refused(ROUTE, ROUTE)  # type: ignore[arg-type]


def test_the_routed_flows_steps_are_fixed() -> None:
    flow = build()
    routed = route_flow(flow, queues=ROUTE)

    def later(deps: Any) -> str:
        return "late"

    with pytest.raises(FlowDefinitionError, match="its steps were fixed by route_flow"):
        routed.step(slug="later", depends_on=["classify"])(later)
    with pytest.raises(FlowDefinitionError, match="its steps were fixed by route_flow"):
        routed.map(slug="later_map")(later)
    assert list(routed.steps) == ["classify", "enrich", "deliver_slack"]

    flow.step(slug="later", depends_on=["classify"])(later)
    assert list(routed.steps) == ["classify", "enrich", "deliver_slack"], "a later step of the plain flow"
    assert "no queue for 'later'" in refused(flow, ROUTE), "...must be routed too"


def test_copy_keeps_the_route_under_a_new_slug() -> None:
    routed = route_flow(build(), queues=ROUTE)
    v2 = routed.copy(slug="support_v2")
    assert isinstance(v2, RoutedFlow) and v2.slug == "support_v2"
    assert dict(v2.step_queues) == ROUTE and v2.queues == routed.queues
    assert v2.shape()["route"] == routed.shape()["route"]
    assert v2.shape()["steps"] == routed.shape()["steps"]
    assert routed.slug == "support"
    with pytest.raises(FlowDefinitionError, match="its steps were fixed by route_flow"):
        v2.step(slug="extra")(lambda x: x)


def test_copy_to_a_slug_that_is_one_of_its_queues_is_refused() -> None:
    routed = route_flow(build(), queues=ROUTE)
    with pytest.raises(
        FlowDefinitionError, match="'slack_delivery' of step 'deliver_slack' is the flow's own"
    ):
        routed.copy(slug="slack_delivery")


def test_a_queue_may_share_its_name_with_a_step_or_another_flow() -> None:
    """Only '__' names and the flow's own slug are reserved in Python; another flow's default queue is
    refused by SQL, which knows the other flows."""
    routed = route_flow(build(), queues={**ROUTE, "enrich": "classify", "deliver_slack": "orders"})
    assert routed.queues == (FAST, "classify", "orders")


def test_unknown_step_in_queue_for_lists_the_steps() -> None:
    routed = route_flow(build(), queues=ROUTE)
    with pytest.raises(FlowDefinitionError, match=r"'ghost' is not a step of this flow.*classify, enrich"):
        routed.queue_for("ghost")


def test_repr_shows_each_steps_queue() -> None:
    routed = route_flow(build(), queues=ROUTE)
    assert repr(routed) == (
        "<RoutedFlow 'support': classify->thread_processing, enrich->thread_processing, "
        "deliver_slack->slack_delivery>"
    )
