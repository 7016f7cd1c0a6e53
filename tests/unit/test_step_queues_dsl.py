"""``with_step_queues(flow)``: every step gets a generated private queue, checked before any database
access (issue 5, item 1). Names are ``lower(flow__step)`` when that fits 47 characters, else
``lower(flow__<zero-based index>)``, else the whole flow is refused naming both candidates."""

from __future__ import annotations

from typing import Any

import pytest

from pgflow_django import Flow, FlowDefinitionError, StepQueuedFlow, with_step_queues
from pgflow_django.flows.slugs import InvalidSlug, is_valid_queue_name, step_queue_name


def build_support(slug: str = "support") -> Flow:
    """classify -> enrich (map) -> deliver: the issue's support-thread pipeline."""
    flow = Flow(slug, max_attempts=4, base_delay=2, timeout=30)

    @flow.step()
    def classify(thread: Any) -> list[str]:
        return ["a", "b"]

    @flow.map(array=classify, timeout=5)
    def enrich(item: Any) -> str:
        return str(item)

    @flow.step(depends_on=[classify, enrich], if_={"classify": ["a"]})
    def deliver(deps: Any) -> str:
        return "sent"

    return flow


def flow_with_steps(slug: str, *step_slugs: str) -> Flow:
    """A linear flow with the given step slugs, in order."""
    flow = Flow(slug)
    previous: str | None = None
    for step_slug in step_slugs:
        flow.step(slug=step_slug, depends_on=() if previous is None else [previous])(lambda value: value)
        previous = step_slug
    return flow


# -- generated names -----------------------------------------------------------------------------


def test_readable_names_in_definition_order() -> None:
    stepped = with_step_queues(build_support())
    assert isinstance(stepped, StepQueuedFlow)
    assert stepped.queue_mode == "step"
    assert list(stepped.step_queues.items()) == [
        ("classify", "support__classify"),
        ("enrich", "support__enrich"),
        ("deliver", "support__deliver"),
    ]
    assert stepped.route() == dict(stepped.step_queues)
    assert list(stepped.route()) == ["classify", "enrich", "deliver"]


def test_names_are_lowercase_even_for_mixed_case_slugs() -> None:
    stepped = with_step_queues(flow_with_steps("SupportDesk", "classifyThread", "Deliver"))
    assert dict(stepped.step_queues) == {
        "classifyThread": "supportdesk__classifythread",
        "Deliver": "supportdesk__deliver",
    }
    assert all(is_valid_queue_name(queue) for queue in stepped.step_queues.values())


def test_queue_for_takes_a_slug_or_the_step_function() -> None:
    flow = Flow("lookup")

    @flow.step()
    def first(value: Any) -> Any:
        return value

    stepped = with_step_queues(flow)
    assert stepped.queue_for("first") == stepped.queue_for(first) == "lookup__first"
    with pytest.raises(FlowDefinitionError, match="first"):
        stepped.queue_for("nope")


def test_step_queues_mapping_is_read_only() -> None:
    stepped = with_step_queues(build_support())
    with pytest.raises(TypeError):
        stepped.step_queues["classify"] = "elsewhere"  # type: ignore[index]


def test_long_step_slug_falls_back_to_its_index_alone() -> None:
    """Only the step whose readable name is too long uses its index; the others stay readable."""
    long_step = "s" * 40
    stepped = with_step_queues(flow_with_steps("billing", "short", long_step, "tail"))
    assert dict(stepped.step_queues) == {
        "short": "billing__short",
        long_step: "billing__1",
        "tail": "billing__tail",
    }


def test_readable_name_of_exactly_47_characters_is_kept() -> None:
    flow_slug = "f" * 40
    stepped = with_step_queues(flow_with_steps(flow_slug, "a" * 5, "b" * 6))
    assert list(stepped.step_queues.values()) == [f"{flow_slug}__{'a' * 5}", f"{flow_slug}__1"]
    assert len(f"{flow_slug}__{'a' * 5}") == 47


def test_fallback_fits_up_to_the_limit_then_the_flow_is_refused() -> None:
    """A 43-character flow slug takes index fallbacks up to two digits; at 44 characters, index 10
    no longer fits and the whole flow is refused."""
    steps = [f"st{i}x" for i in range(11)]
    ok = with_step_queues(flow_with_steps("f" * 43, *steps))
    assert ok.step_queues[steps[10]] == "f" * 43 + "__10"
    assert len(ok.step_queues[steps[10]]) == 47

    with pytest.raises(FlowDefinitionError) as info:
        with_step_queues(flow_with_steps("g" * 44, *steps))
    message = str(info.value)
    assert f"'{'g' * 44}__{steps[10]}'" in message
    assert f"'{'g' * 44}__10'" in message


def test_flow_slug_too_long_for_any_name_is_refused_naming_both_candidates() -> None:
    flow_slug = "Checkout" + "x" * 38  # 46 characters: even 'flow__0' is 49
    base = flow_with_steps(flow_slug, "pay")
    with pytest.raises(FlowDefinitionError) as info:
        with_step_queues(base)
    message = str(info.value)
    readable, fallback = f"{flow_slug}__pay".lower(), f"{flow_slug}__0".lower()
    assert f"'{readable}' ({len(readable)} characters)" in message
    assert f"'{fallback}' ({len(fallback)} characters)" in message
    assert "47" in message
    assert "\n" not in message
    assert list(base.steps) == ["pay"], "the plain flow is unchanged"


def test_45_character_flow_slug_cannot_be_step_queued() -> None:
    with pytest.raises(FlowDefinitionError, match="neither generated queue name"):
        with_step_queues(flow_with_steps("a" * 45, "b"))


def test_python_mirror_raises_a_slug_error() -> None:
    """The slug-level helper raises InvalidSlug (a ValueError) that with_step_queues turns into a
    FlowDefinitionError; both name the two candidates."""
    with pytest.raises(InvalidSlug, match=r"'x{45}__step'.*'x{45}__3'"):
        step_queue_name("x" * 45, "step", 3)
    assert step_queue_name("Shop", "Pay", 7) == "shop__pay"


# -- what may be wrapped ---------------------------------------------------------------------------


def test_empty_flow_is_refused() -> None:
    with pytest.raises(FlowDefinitionError, match=r"'nothing_yet'.*no steps"):
        with_step_queues(Flow("nothing_yet"))


@pytest.mark.parametrize("value", ["support", None, 42, object()])
def test_non_flow_argument_is_refused(value: object) -> None:
    with pytest.raises(FlowDefinitionError, match="takes a Flow"):
        with_step_queues(value)  # type: ignore[arg-type]


def test_double_wrapping_is_refused() -> None:
    stepped = with_step_queues(build_support())
    with pytest.raises(FlowDefinitionError, match="already step-queued"):
        with_step_queues(stepped)


# -- steps are fixed -----------------------------------------------------------------------------


def test_adding_a_step_after_wrapping_is_refused() -> None:
    stepped = with_step_queues(build_support())

    def late(value: Any) -> Any:
        return value

    with pytest.raises(FlowDefinitionError, match="step-queued"):
        stepped.step()(late)
    with pytest.raises(FlowDefinitionError, match="with_step_queues"):
        stepped.step(slug="late", depends_on=["deliver"])(late)
    with pytest.raises(FlowDefinitionError, match="step-queued"):
        stepped.map(slug="late_map")(late)
    assert list(stepped.steps) == ["classify", "enrich", "deliver"]
    assert list(stepped.step_queues) == ["classify", "enrich", "deliver"]


def test_steps_added_to_the_plain_flow_later_do_not_reach_the_wrapped_one() -> None:
    base = build_support()
    stepped = with_step_queues(base)
    base.step(slug="audit", depends_on=["deliver"])(lambda deps: deps)
    assert list(base.steps) == ["classify", "enrich", "deliver", "audit"]
    assert list(stepped.steps) == ["classify", "enrich", "deliver"]
    assert "audit" not in stepped.route()


# -- copy ----------------------------------------------------------------------------------------


def test_copy_regenerates_every_queue_for_the_new_slug() -> None:
    stepped = with_step_queues(build_support())
    twin = stepped.copy(slug="support_v2")
    assert isinstance(twin, StepQueuedFlow)
    assert twin.slug == "support_v2"
    assert dict(twin.step_queues) == {
        "classify": "support_v2__classify",
        "enrich": "support_v2__enrich",
        "deliver": "support_v2__deliver",
    }
    assert dict(stepped.step_queues)["classify"] == "support__classify", "the original keeps its queues"
    assert twin.shape()["steps"] == stepped.shape()["steps"]
    assert twin.options == stepped.options
    with pytest.raises(FlowDefinitionError, match="step-queued"):
        twin.step(slug="late")(lambda value: value)


def test_copy_to_a_longer_slug_switches_to_index_fallbacks() -> None:
    stepped = with_step_queues(flow_with_steps("short", "classification"))
    longer = "support_thread_pipeline_version_two_x"  # 37 characters
    assert dict(stepped.copy(slug=longer).step_queues) == {"classification": f"{longer}__0"}


def test_copy_to_a_slug_that_cannot_fit_is_refused() -> None:
    stepped = with_step_queues(flow_with_steps("short", "a"))
    with pytest.raises(FlowDefinitionError, match="neither generated queue name"):
        stepped.copy(slug="z" * 46)


def test_plain_copy_of_the_base_flow_stays_plain() -> None:
    """flow.copy(slug=...) of the plain flow is what runs it both ways side by side."""
    base = build_support()
    stepped = with_step_queues(base.copy(slug="support_steps"))
    assert base.queue_mode == "flow"
    assert set(base.route().values()) == {"support"}
    assert stepped.queue_mode == "step"
    assert set(stepped.route().values()) == {
        "support_steps__classify",
        "support_steps__enrich",
        "support_steps__deliver",
    }


# -- shape -------------------------------------------------------------------------------------------


def test_shape_carries_step_mode_and_the_route_in_definition_order() -> None:
    base = build_support()
    stepped = with_step_queues(base)
    shape = stepped.shape()
    assert shape["queue_mode"] == "step"
    assert list(shape["route"].items()) == [
        ("classify", "support__classify"),
        ("enrich", "support__enrich"),
        ("deliver", "support__deliver"),
    ]
    assert shape["steps"] == base.shape()["steps"], "the DAG is the plain flow's own"
    assert shape["options"] == {"max_attempts": 4, "base_delay": 2, "timeout": 30, "priority": 0}
    assert [step["slug"] for step in shape["steps"]] == list(shape["route"])
    assert base.shape()["queue_mode"] == "flow"


def test_step_definitions_and_handlers_are_shared_with_the_plain_flow() -> None:
    base = build_support()
    stepped = with_step_queues(base)
    for slug, definition in base.steps.items():
        assert stepped.steps[slug] is definition
    assert [definition.index for definition in stepped.steps.values()] == [0, 1, 2]
    assert "StepQueuedFlow" in repr(stepped) and "support" in repr(stepped)
