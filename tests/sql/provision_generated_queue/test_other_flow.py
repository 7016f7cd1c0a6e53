"""A generated name derived by another concrete flow (its lower(flow_slug)) or referenced by its steps is
refused, whether or not that flow's queue exists yet."""

from collections.abc import Callable

from tests.sql.support import compile_flow, create_flow, db_error, shape, shape_step


def test_name_derived_by_another_flow_with_a_queue(unchanged: Callable[[], Callable[[], None]]) -> None:
    compile_flow("f", shape(shape_step("a")))
    create_flow("g")
    check = unchanged()
    message = db_error("select pgflow.provision_generated_queue('g', 'f')")
    assert "belongs to flow 'f'" in message and "not to flow 'g'" in message
    check()


def test_name_derived_by_another_flow_without_a_queue_yet(
    unchanged: Callable[[], Callable[[], None]],
) -> None:
    create_flow("f")  # no queue DDL: its generated name is derived all the same
    create_flow("g")
    check = unchanged()
    message = db_error("select pgflow.provision_generated_queue('g', 'f')")
    assert "belongs to flow 'f'" in message
    check()


def test_name_derived_by_a_mixed_case_flow(unchanged: Callable[[], Callable[[], None]]) -> None:
    compile_flow("Orders", shape(shape_step("a")))
    create_flow("billing")
    check = unchanged()
    message = db_error("select pgflow.provision_generated_queue('billing', 'orders')")
    assert "belongs to flow 'Orders'" in message
    check()
    assert db_error("select pgflow.create_flow('orders')")


def test_invalid_generated_names_are_refused(unchanged: Callable[[], Callable[[], None]]) -> None:
    create_flow("f")
    check = unchanged()
    for name in ("F", "x" * 48, "", "a-b"):
        assert "invalid" in db_error("select pgflow.provision_generated_queue('f', %s)", [name])
    check()
