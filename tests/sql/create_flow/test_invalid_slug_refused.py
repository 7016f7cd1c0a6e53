import pytest

from tests.sql.support import db_error, val


@pytest.mark.parametrize("slug", ["", "1flow", "has-dash", "run", "semi;colon", "quote'x"])
def test_invalid_slug_refused_before_anything(slug: str) -> None:
    flows = val("select count(*) as n from pgflow.flows")
    queues = val("select count(*) as n from pgmq.list_queues()")
    db_error("select pgflow.create_flow(%s)", [slug])
    assert val("select count(*) as n from pgflow.flows") == flows
    assert val("select count(*) as n from pgmq.list_queues()") == queues
