"""``compile_flow``: the Python side of the startup compiler, on the real database."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from django.db import connection

from pgflow_django import CompileResult, Flow, FlowMismatch, compile_flow, start_flow
from pgflow_django.flows.compiler import compile_flows
from tests.sql.support import q, q1, queue_exists, val


def orders_flow(slug: str = "orders", *, timeout: int = 60, charge_timeout: int | None = 30) -> Flow:
    flow = Flow(slug, max_attempts=3, base_delay=1, timeout=timeout)

    @flow.step()
    def validate(flow_input: Any) -> Any:
        return flow_input

    @flow.step(depends_on=[validate], timeout=charge_timeout, atomic=True)
    def charge(deps: Any) -> Any:
        return {"captured": True}

    @flow.map(array=validate, when_exhausted="skip")
    def notify(item: Any) -> Any:
        return item

    @flow.step(
        depends_on=[charge, notify],
        if_={"charge": {"captured": True}},
        if_not={"notify": []},
        when_unmet="skip-cascade",
    )
    def summarize(deps: Any) -> Any:
        return deps

    return flow


def persisted(slug: str) -> dict[str, Any]:
    return {
        "flow": q1(
            "select opt_max_attempts, opt_base_delay, opt_timeout from pgflow.flows where flow_slug = %s",
            [slug],
        ),
        "steps": q(
            "select step_slug, step_type, step_index, deps_count, opt_max_attempts, opt_base_delay, "
            "opt_timeout, opt_start_delay, required_input_pattern, forbidden_input_pattern, when_unmet, "
            "when_exhausted from pgflow.steps where flow_slug = %s order by step_index",
            [slug],
        ),
        "deps": [
            (row["dep_slug"], row["step_slug"])
            for row in q(
                "select dep_slug, step_slug from pgflow.deps where flow_slug = %s order by 2, 1", [slug]
            )
        ],
    }


def test_new_flow_is_compiled_with_every_step_option_and_its_queue() -> None:
    flow = orders_flow()
    result = compile_flow(flow)
    generation = val("select generation from pgflow.flows where flow_slug = 'orders'")
    assert result == CompileResult(flow_slug="orders", status="compiled", generation=generation)
    assert queue_exists("orders")
    stored = persisted("orders")
    assert stored["flow"] == {"opt_max_attempts": 3, "opt_base_delay": 1, "opt_timeout": 60}
    assert [(s["step_slug"], s["step_type"], s["step_index"], s["deps_count"]) for s in stored["steps"]] == [
        ("validate", "single", 0, 0),
        ("charge", "single", 1, 1),
        ("notify", "map", 2, 1),
        ("summarize", "single", 3, 2),
    ]
    assert stored["steps"][1]["opt_timeout"] == 30
    assert stored["steps"][2]["when_exhausted"] == "skip"
    assert stored["steps"][3]["required_input_pattern"] == {"charge": {"captured": True}}
    assert stored["steps"][3]["forbidden_input_pattern"] == {"notify": []}
    assert stored["steps"][3]["when_unmet"] == "skip-cascade"
    assert stored["deps"] == [
        ("validate", "charge"),
        ("validate", "notify"),
        ("charge", "summarize"),
        ("notify", "summarize"),
    ]


def test_persisted_shape_equals_the_python_shape_without_options() -> None:
    flow = orders_flow()
    compile_flow(flow)
    expected = [{k: v for k, v in step.items() if k != "options"} for step in flow.shape()["steps"]]
    assert val("select pgflow.flow_shape(%s) as s", ["orders"]) == {"steps": expected}


def test_same_definition_is_verified_and_changes_nothing() -> None:
    compile_flow(orders_flow())
    before = persisted("orders")
    result = compile_flow(orders_flow())
    assert result.status == "verified"
    assert result.differences == ()
    assert result.options_updated == ()
    assert persisted("orders") == before


def test_changed_options_are_a_new_version_by_default() -> None:
    compile_flow(orders_flow())
    result = compile_flow(orders_flow(timeout=90))
    assert (result.status, result.flow_slug) == ("versioned", "orders___v2")
    assert persisted("orders")["flow"]["opt_timeout"] == 60


def test_runtime_options_are_updated_in_place_and_reported_under_refuse() -> None:
    compile_flow(orders_flow())
    run_id = start_flow("orders", {"id": 1})
    result = compile_flow(orders_flow(timeout=90, charge_timeout=None), on_change="refuse")
    assert result.status == "verified"
    assert set(result.options_updated) == {"flow timeout: 60 -> 90", "step charge timeout: 30 -> default"}
    stored = persisted("orders")
    assert stored["flow"]["opt_timeout"] == 90
    assert stored["steps"][1]["opt_timeout"] is None
    assert val("select count(*) as n from pgflow.runs where run_id = %s", [run_id]) == 1


def test_a_copy_compiles_as_its_own_flow() -> None:
    original = orders_flow()
    compile_flow(original)
    assert compile_flow(original.copy(slug="orders_v2")).status == "compiled"
    assert val("select pgflow.flow_shape('orders_v2') as s", None) == val(
        "select pgflow.flow_shape('orders') as s"
    )


def changed_flow() -> Flow:
    flow = Flow("orders")

    @flow.step()
    def validate(flow_input: Any) -> Any:
        return flow_input

    @flow.step(depends_on=[validate])
    def ship(deps: Any) -> Any:
        return None

    return flow


def test_changed_shape_raises_a_mismatch_and_changes_nothing() -> None:
    compile_flow(orders_flow())
    run_id = start_flow("orders", {"id": 1})
    before = persisted("orders")
    with pytest.raises(FlowMismatch) as caught:
        compile_flow(changed_flow(), on_change="refuse")
    error = caught.value
    assert error.flow_slug == "orders"
    assert error.differences == (
        "- step charge",
        "- step notify",
        "- step summarize",
        "+ step ship depending on validate",
    )
    message = str(error)
    assert "\n" not in message
    assert message.startswith("flow 'orders' differs from its compiled definition in the database (")
    assert "add it as a new version" in message
    assert "manage.py pgflow_compile orders --replace (deletes 1 run (1 unfinished))" in message
    assert persisted("orders") == before
    assert val("select count(*) as n from pgflow.runs where run_id = %s", [run_id]) == 1


def test_replace_replaces_the_flow_and_deletes_its_runs() -> None:
    compile_flow(orders_flow())
    start_flow("orders", {"id": 1})
    result = compile_flow(changed_flow(), on_change="replace")
    assert (result.status, result.runs, result.unfinished_runs) == ("recompiled", 1, 1)
    assert [s["step_slug"] for s in persisted("orders")["steps"]] == ["validate", "ship"]
    assert val("select count(*) as n from pgflow.runs where flow_slug = 'orders'") == 0
    assert queue_exists("orders")


def test_compile_flows_in_order() -> None:
    first, second = orders_flow("orders_a"), orders_flow("orders_b")
    results = compile_flows([first, second])
    assert [(r.flow_slug, r.status) for r in results] == [("orders_a", "compiled"), ("orders_b", "compiled")]
    assert [r.status for r in compile_flows([first, second])] == ["verified", "verified"]


def test_empty_flow_compiles() -> None:
    assert compile_flow(Flow("empty_flow")).status == "compiled"
    assert val("select pgflow.flow_shape('empty_flow') as s") == {"steps": []}


@pytest.mark.django_db(transaction=True)
def test_concurrent_startups_compile_once() -> None:
    """Two workers starting at once: the advisory lock lets one compile and the other verify."""
    slug = "orders_concurrent"
    barrier = threading.Barrier(4)
    results: list[str] = []
    errors: list[BaseException] = []

    def startup() -> None:
        try:
            barrier.wait()
            results.append(compile_flow(orders_flow(slug)).status)
        except BaseException as exc:
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=startup) for _ in range(4)]
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(30)
        assert not errors
        assert sorted(results) == ["compiled", "verified", "verified", "verified"]
        assert len(persisted(slug)["steps"]) == 4
    finally:
        with connection.cursor() as cursor:
            cursor.execute(
                "select pgflow.delete_flow_and_data(%s) from pgflow.flows where flow_slug = %s", [slug, slug]
            )
