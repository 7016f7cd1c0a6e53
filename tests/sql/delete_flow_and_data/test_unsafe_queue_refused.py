"""Deleting a flow whose generated queue is missing, ambiguous (case aliases in pgmq.meta) or malformed
(queue table, archive table or sequence gone) fails and drops nothing: every row, queue, archive and
metadata row is still there."""

from collections.abc import Callable

import pytest

from tests.sql.support import claim_all, complete, db_error, make_flow, meta_names, q, start, step

DAMAGE = {
    "missing": ("select pgmq.drop_queue('f')", "does not exist"),
    "ambiguous": ("select pgmq.create('F')", "ambiguous"),
    "queue table gone": ("drop table pgmq.q_f", "queue table pgmq.q_f is missing"),
    "archive table gone": ("drop table pgmq.a_f", "archive table pgmq.a_f is missing"),
    "sequence gone": (
        "alter table pgmq.q_f alter column msg_id drop identity",
        "sequence pgmq.q_f_msg_id_seq is missing",
    ),
}


@pytest.mark.parametrize("damage", list(DAMAGE))
def test_deletion_fails_and_drops_nothing(damage: str, unchanged: Callable[[], Callable[[], None]]) -> None:
    make_flow("f", step("a"), step("b", "a"))
    make_flow("g", step("a"))
    start("f")
    (rec,) = claim_all("f")
    assert complete(rec, 1) == "completed"
    start("f")
    start("g")
    statement, expected = DAMAGE[damage]
    q(statement)
    check = unchanged()

    message = db_error("select pgflow.delete_flow_and_data('f')")
    assert expected in message
    assert "nothing was deleted" in message
    check()
    assert q("select flow_slug from pgflow.flows order by 1") == [{"flow_slug": "f"}, {"flow_slug": "g"}]
    if damage == "ambiguous":
        assert meta_names("f") == ["F", "f"]


def test_a_flow_never_given_a_queue_is_deleted() -> None:
    """create_flow alone provisions nothing: there is no generated queue to be uncertain about."""
    q("select pgflow.create_flow('bare')")
    q("select pgflow.delete_flow_and_data('bare')")
    assert q("select * from pgflow.flows where flow_slug = 'bare'") == []
