from tests.sql.support import create_flow, execute_ok, other_connection, queue_exists, val


def test_queue_named_after_flow() -> None:
    assert not queue_exists("orders")
    create_flow("orders")
    assert queue_exists("orders")
    assert val("select to_regclass('pgmq.q_orders') is not null as e") is True
    assert val("select to_regclass('pgmq.a_orders') is not null as e") is True


def test_insert_notifies_listeners_without_throttle() -> None:
    """Workers LISTEN on PGMQ's channel 'pgmq.q_<queue>.INSERT'; every inserting statement must wake them
    (no throttle: two sends right after each other give two notifications). Committed on separate
    connections because NOTIFY is only delivered at commit; the probe flow is deleted afterwards."""
    with other_connection() as listener, other_connection() as writer:
        writer.execute("select pgflow.create_flow('notify_probe')")
        try:
            listener.execute('listen "pgmq.q_notify_probe.INSERT"')
            writer.execute("select pgmq.send('notify_probe', '{}'::jsonb)")
            writer.execute("select pgmq.send('notify_probe', '{}'::jsonb)")
            got = list(listener.notifies(timeout=5, stop_after=2))
            assert len(got) == 2
            assert {n.channel for n in got} == {"pgmq.q_notify_probe.INSERT"}
        finally:
            writer.execute("select pgflow.delete_flow_and_data('notify_probe')")


def test_existing_queue_is_kept() -> None:
    execute_ok("select pgmq.create('orders')")
    execute_ok("select pgmq.send('orders', '{\"kept\": true}'::jsonb)")
    create_flow("orders")
    assert val("select count(*) as n from pgmq.q_orders") == 1
    assert val("select count(*) as n from pgflow.flows where flow_slug = 'orders'") == 1
