"""Compiling a step-queued flow (queue mode ``step``): exactly the generated private queues are created
(never the default queue ``lower(flow_slug)``), each step row carries its queue, each step's tasks land
on its own queue, an exact definition verifies and reuses its queues, and a local recompile replaces
them."""

from __future__ import annotations

from tests.sql.step_queues.support import chain, compile_steps, flow_row, meta, route, step_shape, tables
from tests.sql.support import (
    compile_flow,
    complete,
    db_error,
    jb,
    live_ids,
    meta_names,
    q,
    q1,
    shape,
    shape_step,
    start,
    task,
    val,
)


def _oids(queue_name: str) -> dict[str, int]:
    return q1(
        "select format('pgmq.%%I', 'q_' || %s)::regclass::oid as q, "
        "format('pgmq.%%I', 'a_' || %s)::regclass::oid as a",
        [queue_name, queue_name],
    )


def test_creates_exactly_the_generated_queues() -> None:
    before = set(meta(""))
    answer = compile_flow(
        "Shop", step_shape(shape_step("a"), shape_step("Pay", "a"), shape_step("s" * 50, "Pay"))
    )
    assert answer == {"status": "compiled", "differences": [], "options_updated": []}
    expected = {"a": "shop__a", "Pay": "shop__pay", "s" * 50: "shop__2"}
    assert route("Shop") == expected
    assert set(meta("")) - before == set(expected.values())
    assert meta_names("shop") == [], "no default queue for a step-queued flow"
    assert tables("shop") == {"q": False, "a": False}
    for queue in expected.values():
        assert tables(queue) == {"q": True, "a": True}
        assert meta_names(queue) == [queue]
    row = flow_row("Shop")
    assert row is not None and row["queue_mode"] == "step"
    assert [r["q"] for r in q("select q from pgflow.flow_queues('Shop') as q order by 1")] == sorted(
        expected.values()
    )


def test_each_steps_tasks_land_on_its_own_queue() -> None:
    routes = chain()
    run_id = start("f", {"x": 1})
    for step_slug in ("a", "b"):
        row = task(run_id, step_slug)
        assert row["queue_name"] == routes[step_slug] == f"f__{step_slug}"
        assert live_ids(routes[step_slug]) == {row["message_id"]}
    assert q("select * from pgflow.step_tasks where run_id = %s and step_slug = 'c'", [run_id]) == []

    # claim through each private queue with its step selector, then complete
    for step_slug in ("a", "b"):
        msg_id = task(run_id, step_slug)["message_id"]
        (rec,) = q(
            "select * from pgflow.start_tasks(%s, 'f', array[%s]::bigint[], gen_random_uuid(), %s)",
            [routes[step_slug], msg_id, step_slug],
        )
        assert rec["outcome"] == "claimed" and rec["step_slug"] == step_slug
        assert complete(rec, step_slug) == "completed"
        assert live_ids(routes[step_slug]) == set()

    c_task = task(run_id, "c")
    assert c_task["queue_name"] == "f__c"
    assert live_ids("f__c") == {c_task["message_id"]}
    assert live_ids("f__a") == live_ids("f__b") == set()


def test_verifying_again_reuses_the_queues() -> None:
    definition = step_shape(shape_step("a"), shape_step("b", "a"))
    compile_flow("f", definition)
    start("f")
    start("f")
    oids = {queue: _oids(queue) for queue in ("f__a", "f__b")}
    seq = val("select last_value from pgmq.q_f__a_msg_id_seq")
    before = meta("")

    for _ in range(2):
        assert compile_flow("f", definition) == {
            "status": "verified",
            "differences": [],
            "options_updated": [],
        }

    assert {queue: _oids(queue) for queue in ("f__a", "f__b")} == oids
    assert meta("") == before
    assert live_ids("f__a") == {1, 2}
    assert val("select last_value from pgmq.q_f__a_msg_id_seq") == seq
    q("select pgflow.add_step('f', 'b', array['a'])")  # identical step: idempotent, same route
    q("select pgflow.add_step('f', 'b', array['a'], queue_name => 'f__b')")
    assert route("f") == {"a": "f__a", "b": "f__b"}


def test_verification_updates_options_in_place() -> None:
    compile_flow("f", step_shape(shape_step("a"), timeout=60))
    answer = compile_flow("f", step_shape(shape_step("a", timeout=7), timeout=30))
    assert answer["status"] == "verified"
    assert answer["options_updated"] == ["flow timeout: 60 -> 30", "step a timeout: default -> 7"]
    assert route("f") == {"a": "f__a"}


def test_verification_refuses_a_missing_private_queue() -> None:
    definition = step_shape(shape_step("a"), shape_step("b", "a"))
    compile_flow("f", definition)
    q("select pgmq.drop_queue('f__b')")
    message = db_error("select pgflow.ensure_flow_compiled('f', %s::jsonb)", [jb(definition)])
    assert "'f__b'" in message and "does not exist" in message


def test_recompile_replaces_the_private_queues() -> None:
    compile_steps("f", shape_step("a"), shape_step("b", "a"))
    start("f")
    answer = compile_flow("f", step_shape(shape_step("a"), shape_step("c", "a")), allow_recompile=True)
    assert answer["status"] == "recompiled"
    assert route("f") == {"a": "f__a", "c": "f__c"}
    assert meta("f__") == ["f__a", "f__c"]
    assert tables("f__b") == {"q": False, "a": False}
    assert live_ids("f__a") == set(), "the old run's messages went with the old queue"
    assert val("select count(*) as n from pgflow.runs where flow_slug = 'f'") == 0


def test_recompile_from_step_mode_to_plain_mode_and_back() -> None:
    compile_steps("f", shape_step("a"), shape_step("b", "a"))
    plain = shape(shape_step("a"), shape_step("b", "a"))
    assert compile_flow("f", plain, allow_recompile=True)["status"] == "recompiled"
    assert route("f") == {"a": "f", "b": "f"}
    assert meta("f") == ["f"]
    row = flow_row("f")
    assert row is not None and row["queue_mode"] == "flow"

    assert (
        compile_flow("f", step_shape(shape_step("a"), shape_step("b", "a")), allow_recompile=True)["status"]
        == "recompiled"
    )
    assert route("f") == {"a": "f__a", "b": "f__b"}
    assert meta("f") == ["f__a", "f__b"]


def test_empty_step_queued_flow_is_refused() -> None:
    message = db_error("select pgflow.ensure_flow_compiled('f', %s::jsonb)", [jb(step_shape())])
    assert "has no steps" in message
    assert flow_row("f") is None
