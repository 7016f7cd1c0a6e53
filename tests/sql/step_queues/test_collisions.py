"""Generated private queue names that collide are refused atomically: a queue with a generated name that
no definition owns, a case alias of it in pgmq.meta, a name another flow owns, or a collision on the
last step only. After the error there is no flow row, no step, no new pgmq.meta row and no new queue."""

from __future__ import annotations

from collections.abc import Callable

from tests.sql.step_queues.support import compile_steps, flow_row, meta, route, step_shape, tables
from tests.sql.support import (
    compile_flow,
    db_error,
    jb,
    meta_names,
    q,
    shape,
    shape_step,
    val,
)

Unchanged = Callable[[], Callable[[], None]]
STEPS = (shape_step("a"), shape_step("b", "a"), shape_step("c", "b"))


def refused(flow_slug: str, *steps: dict[str, object]) -> str:
    """Compile in step mode, which must fail; the flow has left nothing behind. Returns the message."""
    message = db_error(
        "select pgflow.ensure_flow_compiled(%s, %s::jsonb)", [flow_slug, jb(step_shape(*steps))]
    )
    assert flow_row(flow_slug) is None
    assert val("select count(*) as n from pgflow.steps where flow_slug = %s", [flow_slug]) == 0
    return message


def test_existing_queue_without_an_owning_definition(unchanged: Unchanged) -> None:
    q("select pgmq.create('f__b')")
    q("select pgmq.send('f__b', '{\"app\": 1}'::jsonb)")
    check = unchanged()
    message = refused("f", *STEPS)
    assert "'f__b' already exists" in message and "never adopts" in message
    check()
    assert meta("f") == ["f__b"]
    assert val("select count(*) as n from pgmq.q_f__b") == 1, "the application's message is untouched"


def test_case_alias_alone_is_refused(unchanged: Unchanged) -> None:
    """PGMQ lowercases table names, not metadata: 'F__B' owns the tables q_f__b would use."""
    q("select pgmq.create('F__B')")
    assert meta_names("f__b") == ["F__B"]
    check = unchanged()
    message = refused("f", *STEPS)
    assert "'F__B' already exists" in message
    check()


def test_two_case_aliases_in_pgmq_meta_are_ambiguous(unchanged: Unchanged) -> None:
    q("select pgmq.create('f__b')")
    q("select pgmq.create('F__b')")
    assert meta_names("f__b") == ["F__b", "f__b"]
    check = unchanged()
    message = refused("f", *STEPS)
    assert "ambiguous" in message and "F__b" in message
    check()


def test_alias_of_a_compiled_flows_private_queue_blocks_verification(unchanged: Unchanged) -> None:
    definition = step_shape(*STEPS)
    compile_flow("f", definition)
    q("select pgmq.create('F__B')")
    check = unchanged()
    message = db_error("select pgflow.ensure_flow_compiled('f', %s::jsonb)", [jb(definition)])
    assert "ambiguous" in message and "F__B" in message
    check()


def test_collision_on_the_last_step_leaves_nothing_of_the_flow(unchanged: Unchanged) -> None:
    q("select pgmq.create('f__c')")
    check = unchanged()
    message = refused("f", *STEPS)
    assert "'f__c' already exists" in message
    check()
    for queue in ("f__a", "f__b"):
        assert tables(queue) == {"q": False, "a": False}, f"{queue} was rolled back"


def test_collision_on_an_index_fallback_name(unchanged: Unchanged) -> None:
    long_step = "s" * 50
    q("select pgmq.create('f__1')")
    check = unchanged()
    message = refused("f", shape_step("a"), shape_step(long_step, "a"))
    assert "'f__1' already exists" in message
    check()


def test_add_step_refuses_a_colliding_generated_queue(unchanged: Unchanged) -> None:
    q("select pgflow.create_flow('f', queue_mode => 'step')")
    q("select pgflow.add_step('f', 'a')")
    q("select pgmq.create('f__b')")
    check = unchanged()
    assert "already exists" in db_error("select pgflow.add_step('f', 'b', array['a'])")
    check()
    assert route("f") == {"a": "f__a"}


def test_add_step_refuses_a_queue_name_that_is_not_the_generated_one(unchanged: Unchanged) -> None:
    q("select pgflow.create_flow('f', queue_mode => 'step')")
    check = unchanged()
    for wrong in ("f", "f__other", "F__A"):
        message = db_error("select pgflow.add_step('f', 'a', queue_name => %s)", [wrong])
        assert "is not its route" in message and "'f__a'" in message
    check()


def test_a_name_another_flow_owns_is_refused_by_provisioning(unchanged: Unchanged) -> None:
    """The guard exists on the one provisioning path even though generation cannot reach it (below)."""
    compile_steps("f", shape_step("a"))
    q("select pgflow.create_flow('g', queue_mode => 'step')")
    check = unchanged()
    message = db_error("select pgflow.provision_generated_queue('g', 'f__a')")
    assert "belongs to flow 'f'" in message and "not to flow 'g'" in message
    check()


def test_generated_names_of_two_flows_cannot_collide() -> None:
    """Cross-flow collisions of generated names are impossible by the slug rules: no slug contains
    '__', starts with '_' or a digit, or ends with '_', so the first '__' in a generated name ends the
    flow slug. Flows 'a' + step 'b_c' and 'a_b' + step 'c' get 'a__b_c' and 'a_b__c'; no flow slug
    can be 'a__b' (a default queue equal to flow 'a''s step 'b'); and case-only twins are refused."""
    assert [
        val("select pgflow.step_queue_name(%s, %s, %s) as n", args)
        for args in (("a", "b_c", 0), ("a_b", "c", 0), ("a", "b", 0))
    ] == ["a__b_c", "a_b__c", "a__b"]
    compile_steps("a", shape_step("b_c"), shape_step("b", "b_c"))
    compile_steps("a_b", shape_step("c"))
    assert route("a") == {"b_c": "a__b_c", "b": "a__b"}
    assert route("a_b") == {"c": "a_b__c"}
    assert meta("a") == ["a__b", "a__b_c", "a_b__c"]
    for bad in ("a__b", "a_", "_a", "1a"):
        assert not val("select pgflow.is_valid_slug(%s) as v", [bad]), bad
    assert "invalid flow slug" in db_error(
        "select pgflow.ensure_flow_compiled('a__b', %s::jsonb)", [jb(shape())]
    )
    assert "differs only in case" in db_error(
        "select pgflow.ensure_flow_compiled('A', %s::jsonb)", [jb(step_shape(shape_step("b_c")))]
    )


def test_a_step_queued_flow_keeps_its_default_name_reserved(unchanged: Unchanged) -> None:
    """A new flow whose default queue name exists is refused in step mode too, though it would not
    use that queue: the name stays reserved for the slug in both modes."""
    q("select pgmq.create('f')")
    check = unchanged()
    message = refused("f", *STEPS)
    assert "'f' already exists" in message
    check()
