import pytest

from tests.sql.support import db_error, val


@pytest.mark.parametrize(
    "args",
    ["max_attempts => 0", "base_delay => -1", "timeout => 0", "max_attempts => -3"],
)
def test_out_of_range_option_refused(args: str) -> None:
    db_error(f"select pgflow.create_flow('orders', {args})")
    assert val("select count(*) as n from pgflow.flows") == 0
    assert val("select count(*) as n from pgmq.list_queues() where queue_name = 'orders'") == 0
