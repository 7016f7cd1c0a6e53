"""Shape and routing are compared separately: a mismatch answer says which differs ("mismatch":
["shape"], ["routing"] or both) and changes nothing; a client-generated route that disagrees with the
database's is an error before anything is created. Python's compile_flow raises FlowMismatch with the
same kinds and a one-line message."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from pgflow_django import Flow, with_step_queues
from pgflow_django.flows.compiler import FlowMismatch
from pgflow_django.flows.compiler import compile_flow as compile_python
from tests.sql.step_queues.support import flow_row, meta, route, step_shape
from tests.sql.support import compile_flow, db_error, jb, shape, shape_step, start

Unchanged = Callable[[], Callable[[], None]]
STEPS = (shape_step("a"), shape_step("b", "a"))


def mismatch(flow_slug: str, definition: dict[str, Any]) -> dict[str, Any]:
    answer = compile_flow(flow_slug, definition)
    assert answer["status"] == "mismatch", answer
    assert answer["options_updated"] == []
    return answer


def test_same_shape_in_step_mode_over_a_plain_flow_is_a_routing_mismatch(unchanged: Unchanged) -> None:
    compile_flow("f", shape(*STEPS))
    start("f")
    check = unchanged()
    answer = mismatch("f", step_shape(*STEPS))
    assert answer["mismatch"] == ["routing"]
    assert answer["differences"] == [
        "queue mode: step in the definition, flow in the database",
        "route of step a: queue f__a in the definition, f in the database",
        "route of step b: queue f__b in the definition, f in the database",
    ]
    check()


def test_same_shape_in_plain_mode_over_a_step_queued_flow_is_a_routing_mismatch(unchanged: Unchanged) -> None:
    compile_flow("f", step_shape(*STEPS))
    start("f")
    check = unchanged()
    answer = mismatch("f", shape(*STEPS))
    assert answer["mismatch"] == ["routing"]
    assert answer["differences"][0] == "queue mode: flow in the definition, step in the database"
    assert "route of step a: queue f in the definition, f__a in the database" in answer["differences"]
    check()


def test_changed_shape_in_the_same_mode_is_a_shape_mismatch(unchanged: Unchanged) -> None:
    compile_flow("f", step_shape(*STEPS))
    check = unchanged()
    answer = mismatch("f", step_shape(shape_step("a"), shape_step("b", "a", step_type="map")))
    assert answer["mismatch"] == ["shape"]
    assert answer["differences"] == ["~ step b: step_type single -> map"]
    check()


def test_changed_shape_and_mode_is_both(unchanged: Unchanged) -> None:
    compile_flow("f", shape(*STEPS))
    check = unchanged()
    answer = mismatch("f", step_shape(shape_step("a"), shape_step("b"), shape_step("c", "b")))
    assert answer["mismatch"] == ["shape", "routing"]
    differences = answer["differences"]
    assert "+ step c depending on b" in differences
    assert "queue mode: step in the definition, flow in the database" in differences
    check()


def test_a_moved_step_with_an_index_fallback_differs_in_shape_and_routing(unchanged: Unchanged) -> None:
    """A fallback name carries the step's index, so moving the step changes its queue too."""
    long_step = "s" * 50
    compile_flow("f", step_shape(shape_step("a"), shape_step(long_step)))
    assert route("f") == {"a": "f__a", long_step: "f__1"}
    check = unchanged()
    answer = mismatch("f", step_shape(shape_step(long_step), shape_step("a")))
    assert answer["mismatch"] == ["shape", "routing"]
    assert (
        f"route of step {long_step}: queue f__0 in the definition, f__1 in the database"
        in answer["differences"]
    )
    check()


def test_a_client_route_that_disagrees_is_refused_before_anything_is_created(unchanged: Unchanged) -> None:
    check = unchanged()
    wrong = step_shape(*STEPS, route={"a": "f__a", "b": "f__other"})
    message = db_error("select pgflow.ensure_flow_compiled('f', %s::jsonb)", [jb(wrong)])
    assert "client generated the route" in message
    assert "f__other" in message
    check()
    assert flow_row("f") is None and meta("f") == []


@pytest.mark.parametrize(
    "client_route",
    [
        {"a": "f", "b": "f"},  # a plain client's route sent in step mode
        {"b": "f__b", "a": "f__a"},  # same pairs, another order: jsonb objects compare unordered
        {"a": "f__a"},  # incomplete
    ],
)
def test_client_route_must_equal_the_generated_one(
    client_route: dict[str, str], unchanged: Unchanged
) -> None:
    check = unchanged()
    definition = step_shape(*STEPS, route=client_route)
    if client_route == {"b": "f__b", "a": "f__a"}:
        assert compile_flow("f", definition)["status"] == "compiled"
        assert route("f") == {"a": "f__a", "b": "f__b"}
        return
    assert "client generated the route" in db_error(
        "select pgflow.ensure_flow_compiled('f', %s::jsonb)", [jb(definition)]
    )
    check()


def test_the_route_a_python_flow_generates_is_accepted_by_sql() -> None:
    base = Flow("Support_desk")
    base.step(slug="classify")(lambda value: value)
    base.step(slug="x" * 40, depends_on=["classify"])(lambda value: value)
    stepped = with_step_queues(base)
    assert compile_python(stepped).status == "compiled"
    assert route("Support_desk") == stepped.route()
    assert compile_python(stepped).status == "verified"


# -- Python ------------------------------------------------------------------------------------------


def _flow(slug: str, *steps: str) -> Flow:
    flow = Flow(slug)
    for step_slug in steps:
        flow.step(slug=step_slug)(lambda value: value)
    return flow


@pytest.mark.parametrize(
    ("database", "definition", "kinds", "what"),
    [
        ("plain", "step", ("routing",), "routing (queue mode and step queues) differs"),
        ("step", "step_changed", ("shape",), "shape differs"),
        (
            "plain",
            "step_changed",
            ("shape", "routing"),
            "shape and routing (queue mode and step queues) differs",
        ),
    ],
)
def test_flow_mismatch_names_what_differs(
    database: str, definition: str, kinds: tuple[str, ...], what: str
) -> None:
    flows: dict[str, Callable[[], Flow]] = {
        "plain": lambda: _flow("orders", "a", "b"),
        "step": lambda: with_step_queues(_flow("orders", "a", "b")),
        "step_changed": lambda: with_step_queues(_flow("orders", "a", "b", "c")),
    }
    assert compile_python(flows[database]()).status == "compiled"
    with pytest.raises(FlowMismatch) as info:
        compile_python(flows[definition](), on_change="refuse")
    assert info.value.kinds == kinds
    message = str(info.value)
    assert "\n" not in message
    assert what in message
    assert "new version" in message, "the fix names a new version"
    assert compile_python(flows[definition]()).status == "versioned", "by default it is a new version"
