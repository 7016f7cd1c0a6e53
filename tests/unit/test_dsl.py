from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import pytest

from pgflow_django import Flow, FlowDefinitionError, InvalidSlug, Retry, StepDefinition
from pgflow_django.flows.dsl import FlowOptions, StepOptions


def build_orders(slug: str = "process_order") -> Flow:
    orders = Flow(slug, max_attempts=3, base_delay=1, timeout=60)

    @orders.step()
    def validate(flow_input: Any, ctx: Any) -> dict[str, Any]:
        return {"ok": True}

    @orders.step(depends_on=[validate], timeout=30)
    def charge(deps: Any, ctx: Any) -> dict[str, Any]:
        return {"captured": True}

    @orders.map(array=validate)
    def notify(item: Any) -> None:
        return None

    @orders.step(depends_on=[charge, "notify"], if_={"charge": {"captured": True}}, when_unmet="skip")
    def summarize(deps: Any, ctx: Any) -> None:
        return None

    return orders


# -- recording ---------------------------------------------------------------------------------------


def test_decorator_returns_the_function_unchanged() -> None:
    flow = Flow("returns_fn")

    def handler(flow_input: int) -> int:
        return flow_input + 1

    assert flow.step()(handler) is handler
    assert handler(1) == 2
    assert flow.steps["handler"].handler is handler


def test_steps_are_recorded_in_definition_order_with_their_index() -> None:
    flow = build_orders()
    assert list(flow.steps) == ["validate", "charge", "notify", "summarize"]
    assert [step.index for step in flow.steps.values()] == [0, 1, 2, 3]
    assert all(isinstance(step, StepDefinition) for step in flow.steps.values())


def test_step_definition_fields() -> None:
    flow = build_orders()
    charge = flow.steps["charge"]
    assert charge.slug == "charge"
    assert charge.step_type == "single"
    assert charge.deps == ("validate",)
    assert charge.options == StepOptions(timeout=30)
    assert charge.atomic is False
    notify = flow.steps["notify"]
    assert notify.step_type == "map"
    assert notify.deps == ("validate",)
    assert notify.accepts_context is False
    summarize = flow.steps["summarize"]
    assert summarize.deps == ("charge", "notify")
    assert summarize.required_input_pattern == {"charge": {"captured": True}}
    assert summarize.forbidden_input_pattern is None
    assert summarize.when_unmet == "skip"
    assert summarize.when_exhausted == "fail"


def test_step_definition_is_frozen() -> None:
    step = build_orders().steps["validate"]
    with pytest.raises(AttributeError):
        step.slug = "other"  # type: ignore[misc]


def test_steps_mapping_is_read_only() -> None:
    flow = build_orders()
    with pytest.raises(TypeError):
        flow.steps["x"] = flow.steps["validate"]  # type: ignore[index]


def test_deps_are_sorted_and_deduplicated() -> None:
    flow = Flow("sorted_deps")

    @flow.step()
    def zeta(flow_input: Any) -> None: ...

    @flow.step()
    def alpha(flow_input: Any) -> None: ...

    @flow.step(depends_on=[zeta, "alpha", alpha])
    def last(deps: Any) -> None: ...

    assert flow.steps["last"].deps == ("alpha", "zeta")


def test_slug_defaults_to_the_function_name_and_can_be_given() -> None:
    flow = Flow("named")

    @flow.step(slug="first_step")
    def whatever(flow_input: Any) -> None: ...

    assert list(flow.steps) == ["first_step"]
    assert flow.step_slug(whatever) == "first_step"


def test_bare_step_decorator_is_accepted() -> None:
    flow = Flow("bare")

    @flow.step
    def only(flow_input: Any) -> int:
        return 1

    assert only(None) == 1
    assert list(flow.steps) == ["only"]


def test_depends_on_accepts_a_single_function_or_slug() -> None:
    flow = Flow("single_dep")

    @flow.step()
    def first(flow_input: Any) -> None: ...

    @flow.step(depends_on=first)
    def second(deps: Any) -> None: ...

    @flow.step(depends_on="second")
    def third(deps: Any) -> None: ...

    assert flow.steps["second"].deps == ("first",)
    assert flow.steps["third"].deps == ("second",)


def test_root_map_and_map_over_a_step() -> None:
    flow = Flow("maps")

    @flow.map()
    def each(item: Any) -> Any:
        return item

    @flow.map(array=each)
    def again(item: Any) -> Any:
        return item

    @flow.map(depends_on=[again])
    def third(item: Any) -> Any:
        return item

    assert flow.steps["each"].deps == ()
    assert flow.steps["each"].is_root and flow.steps["each"].is_map
    assert flow.steps["again"].deps == ("each",)
    assert flow.steps["third"].deps == ("again",)


def test_map_with_array_and_the_same_depends_on_is_one_dependency() -> None:
    flow = Flow("map_same_dep")

    @flow.step()
    def source(flow_input: Any) -> list[int]:
        return [1]

    @flow.map(array=source, depends_on=[source])
    def each(item: Any) -> Any:
        return item

    assert flow.steps["each"].deps == ("source",)


def test_handler_context_detection() -> None:
    flow = Flow("ctx")

    @flow.step()
    def with_ctx(flow_input: Any, ctx: Any) -> None: ...

    @flow.step()
    def without_ctx(flow_input: Any) -> None: ...

    @flow.step()
    def variadic(*args: Any) -> None: ...

    @flow.step()
    def optional_ctx(flow_input: Any, ctx: Any = None) -> None: ...

    assert flow.steps["with_ctx"].accepts_context
    assert not flow.steps["without_ctx"].accepts_context
    assert flow.steps["variadic"].accepts_context
    assert flow.steps["optional_ctx"].accepts_context


def test_atomic_and_all_options_are_recorded() -> None:
    flow = Flow("options")

    @flow.step(
        max_attempts=5,
        base_delay=0,
        timeout=1,
        start_delay=10,
        if_not={"skip": True},
        when_unmet="skip-cascade",
        when_exhausted="skip",
        atomic=True,
    )
    def only(flow_input: Any) -> None: ...

    step = flow.steps["only"]
    assert step.options == StepOptions(max_attempts=5, base_delay=0, timeout=1, start_delay=10)
    assert step.forbidden_input_pattern == {"skip": True}
    assert step.when_unmet == "skip-cascade"
    assert step.when_exhausted == "skip"
    assert step.atomic is True


def test_patterns_are_copied_so_later_mutation_does_not_leak() -> None:
    flow = Flow("copied_pattern")
    pattern: dict[str, Any] = {"kind": "a"}

    @flow.step(if_=pattern)
    def only(flow_input: Any) -> None: ...

    pattern["kind"] = "b"
    assert flow.steps["only"].required_input_pattern == {"kind": "a"}


def test_effective_options_fill_in_the_flow_defaults() -> None:
    flow = build_orders()
    assert flow.options == FlowOptions(max_attempts=3, base_delay=1, timeout=60)
    assert flow.effective_options("charge") == StepOptions(
        max_attempts=3, base_delay=1, timeout=30, start_delay=0, priority=0
    )


def test_flow_defaults_are_pgflows() -> None:
    """pgflow's defaults: 3 attempts, a 5 s base delay (retries after 10 s, 20 s) and a 60 s timeout."""
    assert Flow("defaults").options == FlowOptions(max_attempts=3, base_delay=5, timeout=60)
    assert FlowOptions() == FlowOptions(max_attempts=3, base_delay=5, timeout=60)


def test_get_step_by_function_or_slug() -> None:
    flow = Flow("lookup")

    @flow.step()
    def first(flow_input: Any) -> None: ...

    assert flow.get_step(first) is flow.get_step("first")
    with pytest.raises(FlowDefinitionError, match=r"'nope' is not a step of this flow.*steps: first"):
        flow.get_step("nope")


# -- shape -------------------------------------------------------------------------------------------


def test_shape_matches_the_documented_json() -> None:
    shape = build_orders().shape()
    assert shape == {
        "options": {"max_attempts": 3, "base_delay": 1, "timeout": 60, "priority": 0},
        "queue_mode": "flow",
        "route": {step: "process_order" for step in ("validate", "charge", "notify", "summarize")},
        "steps": [
            {
                "slug": "validate",
                "step_type": "single",
                "deps": [],
                "when_unmet": "skip",
                "when_exhausted": "fail",
                "required_input_pattern": None,
                "forbidden_input_pattern": None,
                "wait": None,
                "options": {
                    "max_attempts": None,
                    "base_delay": None,
                    "timeout": None,
                    "start_delay": None,
                    "priority": None,
                },
            },
            {
                "slug": "charge",
                "step_type": "single",
                "deps": ["validate"],
                "when_unmet": "skip",
                "when_exhausted": "fail",
                "required_input_pattern": None,
                "forbidden_input_pattern": None,
                "wait": None,
                "options": {
                    "max_attempts": None,
                    "base_delay": None,
                    "timeout": 30,
                    "start_delay": None,
                    "priority": None,
                },
            },
            {
                "slug": "notify",
                "step_type": "map",
                "deps": ["validate"],
                "when_unmet": "skip",
                "when_exhausted": "fail",
                "required_input_pattern": None,
                "forbidden_input_pattern": None,
                "wait": None,
                "options": {
                    "max_attempts": None,
                    "base_delay": None,
                    "timeout": None,
                    "start_delay": None,
                    "priority": None,
                },
            },
            {
                "slug": "summarize",
                "step_type": "single",
                "deps": ["charge", "notify"],
                "when_unmet": "skip",
                "when_exhausted": "fail",
                "required_input_pattern": {"charge": {"captured": True}},
                "forbidden_input_pattern": None,
                "wait": None,
                "options": {
                    "max_attempts": None,
                    "base_delay": None,
                    "timeout": None,
                    "start_delay": None,
                    "priority": None,
                },
            },
        ],
    }
    assert json.loads(json.dumps(shape)) == shape


def test_empty_flow_shape() -> None:
    assert Flow("empty", max_attempts=1, base_delay=0, timeout=1).shape() == {
        "options": {"max_attempts": 1, "base_delay": 0, "timeout": 1, "priority": 0},
        "queue_mode": "flow",
        "route": {},
        "steps": [],
    }


# -- copy --------------------------------------------------------------------------------------------


def test_copy_keeps_the_dag_under_a_new_slug() -> None:
    original = build_orders()
    twin = original.copy(slug="process_order_v2")
    assert twin.slug == "process_order_v2"
    assert twin.shape()["steps"] == original.shape()["steps"]
    assert set(twin.route().values()) == {"process_order_v2"}
    assert twin.options == original.options
    assert twin.steps["charge"] is original.steps["charge"]


def test_copy_is_independent_of_later_steps() -> None:
    original = Flow("copy_source")

    @original.step()
    def first(flow_input: Any) -> None: ...

    twin = original.copy(slug="copy_twin")

    @twin.step(depends_on=[first])
    def second(deps: Any) -> None: ...

    assert list(original.steps) == ["first"]
    assert list(twin.steps) == ["first", "second"]


def test_copy_validates_the_new_slug() -> None:
    with pytest.raises(InvalidSlug):
        Flow("copy_ok").copy(slug="bad-slug")


# -- definition-time errors ----------------------------------------------------------------------------


@pytest.mark.parametrize("slug", ["", "1flow", "has-dash", "run", "RUN", "f" * 48])
def test_invalid_flow_slug(slug: str) -> None:
    with pytest.raises(InvalidSlug, match="flow slug"):
        Flow(slug)


@pytest.mark.parametrize("slug", ["", "2nd", "with space", "run", "Run", "s" * 129])
def test_invalid_step_slug(slug: str) -> None:
    flow = Flow("bad_step_slug")
    with pytest.raises(InvalidSlug, match="flow 'bad_step_slug': step slug"):
        flow.step(slug=slug)(lambda flow_input: None)
    assert not flow.steps


def test_lambda_without_slug_asks_for_one() -> None:
    flow = Flow("lambdas")
    with pytest.raises(
        InvalidSlug, match=r"step slug \(the function's name\) '<lambda>' contains '<'; pass slug="
    ):
        flow.step()(lambda flow_input: None)


def test_function_named_run_is_refused() -> None:
    flow = Flow("reserved")

    def run(flow_input: Any) -> None: ...

    with pytest.raises(InvalidSlug, match="reserved word"):
        flow.step()(run)


def test_duplicate_step_slug() -> None:
    flow = Flow("dupes")

    @flow.step()
    def first(flow_input: Any) -> None: ...

    with pytest.raises(FlowDefinitionError, match="step 'first' of flow 'dupes' is defined twice"):

        @flow.step(slug="first")
        def other(flow_input: Any) -> None: ...

    assert list(flow.steps) == ["first"]


def test_unknown_dependency_slug_lists_the_steps() -> None:
    flow = Flow("unknown_dep")

    @flow.step()
    def first(flow_input: Any) -> None: ...

    with pytest.raises(FlowDefinitionError, match=r"'frist' is not a step of this flow.*\(steps: first\)"):
        flow.step(slug="second", depends_on=["frist"])(lambda deps: None)
    assert list(flow.steps) == ["first"]


def test_dependency_defined_later_is_refused() -> None:
    flow = Flow("later_dep")
    with pytest.raises(
        FlowDefinitionError, match=r"'later' is not a step.*define it before.*steps: none yet"
    ):
        flow.step(slug="early", depends_on=["later"])(lambda deps: None)


def test_self_dependency() -> None:
    flow = Flow("self_dep")
    with pytest.raises(FlowDefinitionError, match="depends on itself"):
        flow.step(slug="loop", depends_on=["loop"])(lambda deps: None)


def test_dependency_on_a_function_of_another_flow() -> None:
    other = Flow("other_flow")
    mine = Flow("my_flow")

    @other.step()
    def foreign(flow_input: Any) -> None: ...

    with pytest.raises(
        FlowDefinitionError, match=r"'foreign' is a step of flow 'other_flow', not of this flow"
    ):

        @mine.step(depends_on=[foreign])
        def local(deps: Any) -> None: ...


def test_dependency_on_an_undecorated_function() -> None:
    flow = Flow("undecorated")

    def plain(flow_input: Any) -> None: ...

    with pytest.raises(FlowDefinitionError, match=r"'plain' is not a step of this flow; decorate it"):
        flow.step(slug="after", depends_on=[plain])(lambda deps: None)


def test_function_used_twice_must_be_named_by_slug() -> None:
    flow = Flow("twice")

    def shared(flow_input: Any) -> None: ...

    flow.step(slug="a")(shared)
    flow.step(slug="b")(shared)
    with pytest.raises(FlowDefinitionError, match="used by steps a, b; name the step by its slug"):
        flow.step(slug="c", depends_on=[shared])(lambda deps: None)
    flow.step(slug="c", depends_on=["a"])(lambda deps: None)
    assert flow.steps["c"].deps == ("a",)


def test_dependency_of_a_wrong_type() -> None:
    flow = Flow("wrong_ref")
    with pytest.raises(FlowDefinitionError, match="named by its function or its slug, got int"):
        flow.step(slug="x", depends_on=[1])(lambda deps: None)  # type: ignore[list-item]


def test_map_with_two_dependencies() -> None:
    flow = Flow("map_two")

    @flow.step()
    def a(flow_input: Any) -> list[int]:
        return []

    @flow.step()
    def b(flow_input: Any) -> list[int]:
        return []

    with pytest.raises(
        FlowDefinitionError, match=r"is a map with 2 dependencies \(a, b\); a map has at most one"
    ):
        flow.map(slug="m1", array=a, depends_on=[b])(lambda item: item)
    with pytest.raises(FlowDefinitionError, match="a map has at most one"):
        flow.map(slug="m2", depends_on=[a, b])(lambda item: item)
    assert list(flow.steps) == ["a", "b"]


@pytest.mark.parametrize(
    ("option", "value"),
    [
        ("max_attempts", 0),
        ("max_attempts", -1),
        ("base_delay", -1),
        ("timeout", 0),
        ("start_delay", -1),
        ("timeout", 1.5),
        ("max_attempts", True),
        ("base_delay", "1"),
        ("timeout", 2**31),
    ],
)
def test_step_option_out_of_range(option: str, value: object) -> None:
    flow = Flow("bad_option")
    with pytest.raises(
        FlowDefinitionError, match=rf"step 'x' of flow 'bad_option': {option} must be a whole"
    ):
        flow.step(slug="x", **{option: value})(lambda flow_input: None)  # type: ignore[call-overload]
    assert not flow.steps


@pytest.mark.parametrize(
    ("option", "value"),
    [("max_attempts", 0), ("base_delay", -1), ("timeout", 0), ("timeout", None), ("max_attempts", 2.0)],
)
def test_flow_option_out_of_range(option: str, value: object) -> None:
    with pytest.raises(FlowDefinitionError, match=rf"flow 'bad_flow_option': {option} must be a whole"):
        Flow("bad_flow_option", **{option: value})  # type: ignore[arg-type]


@pytest.mark.parametrize("name", ["when_unmet", "when_exhausted"])
@pytest.mark.parametrize("value", ["skip_cascade", "retry", "", None])
def test_when_modes(name: str, value: object) -> None:
    flow = Flow("bad_mode")
    with pytest.raises(FlowDefinitionError, match=rf"{name} must be one of fail, skip, skip-cascade"):
        flow.step(slug="x", **{name: value})(lambda flow_input: None)  # type: ignore[call-overload]


@pytest.mark.parametrize("name", ["if_", "if_not"])
@pytest.mark.parametrize("value", [[1], "x", 1, True])
def test_condition_must_be_a_json_object(name: str, value: object) -> None:
    flow = Flow("bad_condition")
    with pytest.raises(FlowDefinitionError, match=rf"{name} must be a JSON object"):
        flow.step(slug="x", **{name: value})(lambda flow_input: None)  # type: ignore[call-overload]


def test_condition_must_be_serialisable() -> None:
    flow = Flow("unserialisable_condition")
    with pytest.raises(FlowDefinitionError, match="if_ is not JSON-serialisable"):
        flow.step(slug="x", if_={"when": object()})(lambda flow_input: None)


def test_dependent_condition_keys_must_be_dependencies() -> None:
    flow = Flow("condition_keys")

    @flow.step()
    def first(flow_input: Any) -> None: ...

    with pytest.raises(FlowDefinitionError, match=r"if_ names 'frist'.*use keys among: first"):
        flow.step(slug="second", depends_on=[first], if_={"frist": 1})(lambda deps: None)


def test_root_condition_may_use_any_input_key() -> None:
    flow = Flow("root_condition")
    flow.step(slug="first", if_={"anything": [1]})(lambda flow_input: None)
    assert flow.steps["first"].required_input_pattern == {"anything": [1]}


def test_atomic_must_be_a_bool() -> None:
    flow = Flow("bad_atomic")
    with pytest.raises(FlowDefinitionError, match="atomic must be True or False"):
        flow.step(slug="x", atomic="yes")(lambda flow_input: None)  # type: ignore[call-overload]


def test_handler_must_be_callable_with_the_input() -> None:
    flow = Flow("bad_handler")

    def no_args() -> None: ...

    def three(a: Any, b: Any, c: Any) -> None: ...

    def keyword_only(a: Any, *, b: Any) -> None: ...

    for handler in (no_args, three, keyword_only):
        with pytest.raises(FlowDefinitionError, match=r"must take \(input\) or \(input, ctx\)"):
            flow.step()(handler)
    with pytest.raises(FlowDefinitionError, match="must be a function, got int"):
        flow.step(slug="x")(1)  # type: ignore[type-var]


def test_positional_slug_is_explained() -> None:
    flow = Flow("positional")
    with pytest.raises(FlowDefinitionError, match=r"by keyword, e.g. @flow.step\(slug='name'\)"):
        flow.step("name")  # type: ignore[call-overload]


# -- Retry -------------------------------------------------------------------------------------------


def test_retry_carries_its_delay() -> None:
    retry = Retry(delay=7)
    assert retry.delay == 7
    assert "7s" in str(retry)
    assert str(Retry(0, "rate limited")) == "rate limited"
    assert isinstance(retry, Exception)


@pytest.mark.parametrize("delay", [-1, 1.5, "3", None, True, 2**31])
def test_retry_delay_must_be_whole_non_negative_seconds(delay: object) -> None:
    with pytest.raises(ValueError, match="Retry delay must be whole seconds"):
        Retry(delay=delay)  # type: ignore[arg-type]


# -- package -------------------------------------------------------------------------------------------


def test_package_imports_without_django_settings() -> None:
    code = (
        "import os, sys; os.environ.pop('DJANGO_SETTINGS_MODULE', None);"
        "import pgflow_django as p; assert p.Flow and p.Retry and p.StepDefinition and p.InvalidSlug;"
        "assert 'django.db' not in sys.modules, 'django.db imported';"
        "assert callable(p.start_flow) and callable(p.wait_for_run)"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_step_slugs_differing_only_in_case_are_refused() -> None:
    flow = Flow("case_flow")

    @flow.step(slug="Fetch")
    def fetch_one(data: object) -> object:
        return data

    with pytest.raises(FlowDefinitionError, match="differs only in case from step 'Fetch'"):

        @flow.step(slug="fetch")
        def fetch_two(data: object) -> object:
            return data


@pytest.mark.parametrize("decorator", ["step", "map"])
def test_an_unknown_step_option_is_a_type_error_listing_the_valid_ones(decorator: str) -> None:
    flow = Flow("unknown_option")
    with pytest.raises(
        TypeError, match=rf"^{decorator}\(\) got an unexpected keyword argument 'retries'; .*max_attempts"
    ):
        getattr(flow, decorator)(retries=3)
    assert flow.steps == {}
