"""pgflow's create_flow defaults base_delay to 5 s, so a flow with default options retries after 10 s."""

from tests.sql.support import claim_one, create_flow, fail, make_flow, q, q1, queue_messages, start, step


def test_default_base_delay_is_five_seconds() -> None:
    create_flow("orders")
    assert q1("select opt_base_delay from pgflow.flows where flow_slug = 'orders'")["opt_base_delay"] == 5


def test_default_options_retry_after_ten_seconds() -> None:
    make_flow("f", step("a"))
    start("f")
    rec = claim_one("f")
    assert fail(rec) == "retrying"
    (message,) = queue_messages("f")
    assert 9 <= message["vt_in"] <= 10


def test_existing_flow_keeps_its_stored_base_delay() -> None:
    create_flow("orders", base_delay=1)
    create_flow("orders")
    assert q("select opt_base_delay from pgflow.flows where flow_slug = 'orders'") == [{"opt_base_delay": 1}]
