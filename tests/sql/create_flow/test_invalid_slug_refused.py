import pytest

from tests.sql.support import db_error, val


@pytest.mark.parametrize("slug", ["", "1flow", "has-dash", "run", "semi;colon", "quote'x"])
def test_invalid_slug_refused_before_anything(slug: str) -> None:
    db_error("select pgflow.create_flow(%s)", [slug])
    assert val("select count(*) as n from pgflow.flows") == 0
    assert val("select count(*) as n from pgmq.list_queues()") == 0
