from django.db import DatabaseError

from tests.sql.support import make_flow, q, queue_exists, savepoint, step, val


def test_unknown_flow_touches_nothing() -> None:
    """Deleting a flow that does not exist may error or do nothing; it never touches other flows."""
    make_flow("g", step("a"))
    try:
        with savepoint():
            q("select pgflow.delete_flow_and_data('ghost')")
    except DatabaseError:
        pass
    assert queue_exists("g")
    assert val("select count(*) as n from pgflow.flows") == 1
    assert val("select count(*) as n from pgflow.steps") == 1
