"""An exact persisted definition verifies and reuses its generated queue: compiling twice changes
neither the queue's objects nor its messages; provisioning it again is a no-op."""

from tests.sql.support import (
    compile_flow,
    live_ids,
    meta_names,
    pgmq_relations,
    q,
    q1,
    shape,
    shape_step,
    start,
    val,
)


def _objects() -> dict[str, object]:
    return q1(
        "select 'pgmq.q_f'::regclass::oid as q, 'pgmq.a_f'::regclass::oid as a, "
        "'pgmq.q_f_msg_id_seq'::regclass::oid as s"
    )


def test_compiling_the_same_definition_twice_reuses_the_queue() -> None:
    definition = shape(shape_step("a"), shape_step("b", "a"))
    assert compile_flow("f", definition)["status"] == "compiled"
    objects = _objects()
    start("f")
    start("f")
    relations = pgmq_relations()
    seq = val("select last_value from pgmq.q_f_msg_id_seq")

    assert compile_flow("f", definition)["status"] == "verified"
    assert compile_flow("f", definition)["status"] == "verified"

    assert _objects() == objects
    assert pgmq_relations() == relations
    assert meta_names("f") == ["f"]
    assert live_ids("f") == {1, 2}
    assert val("select last_value from pgmq.q_f_msg_id_seq") == seq
    assert {r["queue_name"] for r in q("select queue_name from pgflow.steps where flow_slug = 'f'")} == {"f"}


def test_provisioning_an_owned_queue_again_is_a_no_op() -> None:
    compile_flow("f", shape(shape_step("a")))
    start("f")
    objects = _objects()
    q("select pgflow.provision_generated_queue('f', 'f')")
    q("select pgflow.add_step('f', 'a')")  # identical step: idempotent, same route
    assert _objects() == objects
    assert live_ids("f") == {1}
    assert meta_names("f") == ["f"]
