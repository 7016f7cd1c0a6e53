"""A queue with a generated name that no persisted definition owns is never adopted."""

from collections.abc import Callable

from tests.sql.support import compile_flow, db_error, jb, meta_names, q, shape, shape_step, val


def test_compiler_refuses_an_existing_queue_without_definition(
    unchanged: Callable[[], Callable[[], None]],
) -> None:
    q("select pgmq.create('orders')")
    q("select pgmq.send('orders', '{\"app\": 1}'::jsonb)")
    check = unchanged()
    message = db_error(
        "select pgflow.ensure_flow_compiled('orders', %s::jsonb)", [jb(shape(shape_step("a")))]
    )
    assert "already exists" in message and "'orders'" in message
    check()
    assert val("select count(*) as n from pgmq.q_orders") == 1


def test_provisioning_refuses_an_existing_queue_no_definition_owns(
    unchanged: Callable[[], Callable[[], None]],
) -> None:
    q("select pgmq.create('orders')")
    check = unchanged()
    message = db_error("select pgflow.provision_generated_queue('orders', 'orders')")
    assert "never adopts" in message
    assert "'orders'" in message
    check()
    assert meta_names("orders") == ["orders"]


def test_a_queue_created_after_the_flow_was_deleted_is_not_adopted_by_a_new_flow(
    unchanged: Callable[[], Callable[[], None]],
) -> None:
    compile_flow("orders", shape(shape_step("a")))
    q("select pgflow.delete_flow_and_data('orders')")
    q("select pgmq.create('orders')")
    check = unchanged()
    message = db_error(
        "select pgflow.ensure_flow_compiled('orders', %s::jsonb)", [jb(shape(shape_step("a")))]
    )
    assert "already exists" in message
    check()
