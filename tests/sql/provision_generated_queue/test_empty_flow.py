"""The compiler provisions the default queue of a plain flow without steps; start_ready_steps does no
queue DDL (a queue dropped by hand is not silently created again by starting a run)."""

from tests.sql.support import (
    compile_flow,
    db_error,
    meta_names,
    pgmq_relations,
    q,
    shape,
    shape_step,
    val,
)


def test_empty_plain_flow_provisions_its_default_queue() -> None:
    result = compile_flow("Empty", shape())
    assert result["status"] == "compiled"
    assert meta_names("empty") == ["empty"]
    assert {"q_empty", "a_empty", "q_empty_msg_id_seq"} <= pgmq_relations()
    assert val("select count(*) as n from pgflow.steps where flow_slug = 'Empty'") == 0
    assert compile_flow("Empty", shape())["status"] == "verified"
    assert meta_names("empty") == ["empty"]


def test_starting_a_run_does_not_recreate_a_dropped_queue() -> None:
    compile_flow("f", shape(shape_step("a")))
    q("select pgmq.drop_queue('f')")
    assert db_error("select pgflow.start_flow('f', '{}'::jsonb)")
    assert meta_names("f") == []
    assert not {"q_f", "a_f"} & pgmq_relations()
