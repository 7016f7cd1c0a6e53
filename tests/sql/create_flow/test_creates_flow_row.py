from tests.sql.support import create_flow, q1


def test_defaults() -> None:
    returned = create_flow("orders")
    row = q1("select * from pgflow.flows where flow_slug = 'orders'")
    assert (row["opt_max_attempts"], row["opt_base_delay"], row["opt_timeout"]) == (3, 5, 60)
    assert returned["flow_slug"] == "orders"


def test_explicit_options() -> None:
    returned = create_flow("orders", max_attempts=5, base_delay=2, timeout=30)
    row = q1("select * from pgflow.flows where flow_slug = 'orders'")
    assert (row["opt_max_attempts"], row["opt_base_delay"], row["opt_timeout"]) == (5, 2, 30)
    assert returned["opt_max_attempts"] == 5
