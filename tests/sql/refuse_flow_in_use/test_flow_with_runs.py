"""The history tables keep no foreign key to flows and steps; pgflow.refuse_flow_in_use keeps what the
keys' NO ACTION gave: a flow or step that runs still name is neither deleted nor renamed."""

from django.db import DatabaseError

from tests.sql.support import db_error, make_flow, q, start, step, val


def test_a_flow_with_runs_is_not_deleted() -> None:
    make_flow("f", step("a"), step("b", "a"))
    start("f")
    assert "cannot delete the flow row of flow 'f': it has runs" in db_error(
        "delete from pgflow.flows where flow_slug = 'f'"
    )
    assert "cannot delete step b of flow 'f': it has runs" in db_error(
        "delete from pgflow.steps where flow_slug = 'f' and step_slug = 'b'"
    )
    assert val("select count(*) as n from pgflow.steps where flow_slug = 'f'") == 2


def test_the_refusal_is_a_foreign_key_violation() -> None:
    make_flow("f", step("a"))
    start("f")
    try:
        q("delete from pgflow.flows where flow_slug = 'f'")
    except DatabaseError as error:
        assert getattr(error.__cause__, "sqlstate", None) == "23503"
    else:
        raise AssertionError("the delete went through")


def test_a_flow_or_step_with_runs_is_not_renamed() -> None:
    make_flow("f", step("a"))
    start("f")
    assert "cannot update the flow row of flow 'f'" in db_error(
        "update pgflow.flows set flow_slug = 'g' where flow_slug = 'f'"
    )
    assert "cannot update step a of flow 'f'" in db_error(
        "update pgflow.steps set step_slug = 'z' where flow_slug = 'f'"
    )


def test_options_of_a_flow_with_runs_still_change() -> None:
    make_flow("f", step("a"))
    start("f")
    q("update pgflow.flows set opt_timeout = 9 where flow_slug = 'f'")
    q("update pgflow.steps set opt_timeout = 9, step_slug = step_slug where flow_slug = 'f'")
    assert val("select opt_timeout from pgflow.steps where flow_slug = 'f'") == 9


def test_a_flow_without_runs_is_deleted_and_delete_flow_and_data_deletes_one_with_runs() -> None:
    make_flow("idle", step("a"))
    q("delete from pgflow.deps where flow_slug = 'idle'")
    q("delete from pgflow.steps where flow_slug = 'idle'")
    q("delete from pgflow.flows where flow_slug = 'idle'")
    make_flow("f", step("a"), step("b", "a"))
    start("f")
    q("select pgflow.delete_flow_and_data('f')")
    assert val("select count(*) as n from pgflow.flows") == 0
