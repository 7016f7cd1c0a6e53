"""create_flow does no queue DDL: a flow's default queue lower(flow_slug) is provisioned by add_step or by
the compiler (which provisions it for an empty flow too), through one generated-queue path."""

from tests.sql.support import create_flow, db_error, execute_ok, other_connection, queue_exists, val


def test_create_flow_alone_creates_no_queue() -> None:
    create_flow("orders")
    assert not queue_exists("orders")


def test_add_step_provisions_the_default_queue() -> None:
    create_flow("Orders")
    execute_ok("select pgflow.add_step('Orders', 'a')")
    assert queue_exists("orders")
    assert val("select to_regclass('pgmq.q_orders') is not null as e") is True
    assert val("select to_regclass('pgmq.a_orders') is not null as e") is True
    assert val("select queue_name from pgflow.steps where flow_slug = 'Orders'") == "orders"


def test_compiler_provisions_the_default_queue_of_an_empty_flow() -> None:
    execute_ok("select pgflow.ensure_flow_compiled('empty', '{\"steps\": []}'::jsonb)")
    assert queue_exists("empty")


def test_insert_notifies_listeners_without_throttle() -> None:
    """Workers LISTEN on PGMQ's channel 'pgmq.q_<queue>.INSERT'; every inserting statement must wake them
    (no throttle: two sends right after each other give two notifications). Committed on separate
    connections because NOTIFY is only delivered at commit; the probe flow is deleted afterwards."""
    with other_connection() as listener, other_connection() as writer:
        writer.execute("select pgflow.ensure_flow_compiled('notify_probe', '{\"steps\": []}'::jsonb)")
        try:
            listener.execute('listen "pgmq.q_notify_probe.INSERT"')
            writer.execute("select pgmq.send('notify_probe', '{}'::jsonb)")
            writer.execute("select pgmq.send('notify_probe', '{}'::jsonb)")
            got = list(listener.notifies(timeout=5, stop_after=2))
            assert len(got) == 2
            assert {n.channel for n in got} == {"pgmq.q_notify_probe.INSERT"}
        finally:
            writer.execute("select pgflow.delete_flow_and_data('notify_probe')")


def test_existing_queue_is_never_adopted() -> None:
    execute_ok("select pgmq.create('orders')")
    execute_ok("select pgmq.send('orders', '{\"kept\": true}'::jsonb)")
    message = db_error("select pgflow.create_flow('orders')")
    assert "already exists" in message and "silently adopt" in message
    assert val("select count(*) as n from pgmq.q_orders") == 1
    assert val("select count(*) as n from pgflow.flows where flow_slug = 'orders'") == 0
