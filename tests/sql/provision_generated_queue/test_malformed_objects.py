"""A generated queue whose queue table, archive table or message id sequence is missing is refused before
anything changes, by the compiler's verification and by add_step."""

from collections.abc import Callable

import pytest

from tests.sql.support import compile_flow, db_error, jb, q, shape, shape_step, start

BREAK = {
    "archive table": ("drop table pgmq.a_f", "archive table pgmq.a_f is missing"),
    "queue table": ("drop table pgmq.q_f", "queue table pgmq.q_f is missing"),
    "sequence": (
        "alter table pgmq.q_f alter column msg_id drop identity",
        "sequence pgmq.q_f_msg_id_seq is missing",
    ),
}


@pytest.mark.parametrize("broken", list(BREAK))
def test_malformed_queue_is_refused_before_any_change(
    broken: str, unchanged: Callable[[], Callable[[], None]]
) -> None:
    definition = shape(shape_step("a"))
    compile_flow("f", definition)
    start("f")
    statement, problem = BREAK[broken]
    q(statement)
    check = unchanged()

    message = db_error("select pgflow.ensure_flow_compiled('f', %s::jsonb)", [jb(definition)])
    assert "malformed" in message and problem in message
    message = db_error("select pgflow.add_step('f', 'b')")
    assert "malformed" in message and problem in message
    check()


def test_queue_objects_problem_is_null_for_a_sound_queue() -> None:
    compile_flow("f", shape(shape_step("a")))
    assert q("select pgflow.queue_objects_problem('f') as p") == [{"p": None}]
