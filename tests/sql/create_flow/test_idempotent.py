from tests.sql.support import create_flow, val


def test_second_call_is_a_no_op() -> None:
    create_flow("orders", max_attempts=4)
    create_flow("orders", max_attempts=4)
    assert val("select count(*) as n from pgflow.flows where flow_slug = 'orders'") == 1
    assert val("select count(*) as n from pgmq.list_queues() where queue_name = 'orders'") == 1
    assert val("select opt_max_attempts from pgflow.flows where flow_slug = 'orders'") == 4


def test_second_call_keeps_messages() -> None:
    create_flow("orders")
    val("select pgmq.send('orders', '{}'::jsonb) as id")
    create_flow("orders")
    assert val("select count(*) as n from pgmq.q_orders") == 1
