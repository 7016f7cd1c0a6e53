"""Two pgmq.meta rows differing only in case ('Orders' and 'orders') address the same tables: the
generated-queue path refuses them as ambiguous, for a new flow and for a compiled one."""

from collections.abc import Callable

from tests.sql.support import (
    compile_flow,
    db_error,
    jb,
    meta_names,
    q,
    shape,
    shape_step,
    start,
)


def test_aliases_are_refused_for_a_new_flow(unchanged: Callable[[], Callable[[], None]]) -> None:
    q("select pgmq.create('Orders')")
    q("select pgmq.create('orders')")
    assert meta_names("orders") == ["Orders", "orders"]
    check = unchanged()
    assert "already exists" in db_error(
        "select pgflow.ensure_flow_compiled('orders', %s::jsonb)", [jb(shape(shape_step("a")))]
    )
    message = db_error("select pgflow.provision_generated_queue('orders', 'orders')")
    assert "ambiguous" in message and "Orders" in message
    check()


def test_an_alias_of_a_compiled_flows_queue_is_refused(unchanged: Callable[[], Callable[[], None]]) -> None:
    definition = shape(shape_step("a"))
    compile_flow("orders", definition)
    start("orders")
    q("select pgmq.create('Orders')")
    assert meta_names("orders") == ["Orders", "orders"]
    check = unchanged()
    message = db_error("select pgflow.ensure_flow_compiled('orders', %s::jsonb)", [jb(definition)])
    assert "ambiguous" in message
    message = db_error("select pgflow.add_step('orders', 'b')")
    assert "ambiguous" in message and "Orders" in message
    check()


def test_resolve_queue_spelling_needs_exactly_one_match() -> None:
    q("select pgmq.create('Orders')")
    assert q("select pgflow.resolve_queue_spelling('orders') as s") == [{"s": "Orders"}]
    q("select pgmq.create('orders')")
    assert "ambiguous" in db_error("select pgflow.resolve_queue_spelling('orders')")
    assert "does not exist" in db_error("select pgflow.resolve_queue_spelling('nothing_here')")
