from tests.sql.support import create_flow, val


def test_second_call_is_a_no_op() -> None:
    create_flow("orders", max_attempts=4)
    create_flow("orders", max_attempts=4)
    assert val("select count(*) as n from pgflow.flows where flow_slug = 'orders'") == 1
    assert val("select count(*) as n from pgmq.list_queues() where queue_name = 'orders'") == 0
    assert val("select opt_max_attempts from pgflow.flows where flow_slug = 'orders'") == 4


def test_second_call_keeps_messages() -> None:
    create_flow("orders")
    val("select pgflow.add_step('orders', 'a') is not null as ok")
    val("select pgmq.send('orders', '{}'::jsonb) as id")
    create_flow("orders")
    assert val("select count(*) as n from pgmq.q_orders") == 1


def test_second_call_with_other_options_keeps_the_existing_row() -> None:
    """Runtime options change through ensure_flow_compiled; create_flow on an existing slug returns the
    stored row unchanged (pgflow's behaviour; the contract's "idempotent upsert" does not say more)."""
    create_flow("orders", max_attempts=4, timeout=30)
    returned = create_flow("orders", max_attempts=9, timeout=99)
    assert (returned["opt_max_attempts"], returned["opt_timeout"]) == (4, 30)
    assert val("select opt_max_attempts from pgflow.flows where flow_slug = 'orders'") == 4
