"""Compiling routed flows declares and provisions their shared queues (issue 6, items 2, 3 and 8): two
steps on one queue and a third on another create exactly those two queues (declared in
``pgflow.shared_queues``, with the insert-notify trigger, and no default queue for the routed flow);
compiling again verifies and reuses them, as do a second flow and a second version of the flow; a
declared queue dropped by hand is created again by the next compilation."""

from __future__ import annotations

from tests.sql.shared_queues.support import (
    BULK,
    FAST,
    ROUTE,
    STEPS,
    compile_routed,
    declared,
    has_notify_trigger,
    listed,
    route_of,
)
from tests.sql.step_queues.support import flow_row, tables
from tests.sql.support import jb, q, shape, shape_step, val


def test_two_steps_on_one_queue_and_a_third_on_another() -> None:
    before_declared, before_listed = declared(), listed()
    answer = compile_routed("sq_support")
    assert answer["status"] == "compiled", answer
    assert declared() - before_declared == {FAST, BULK}
    assert listed() - before_listed == {FAST, BULK}, "exactly the two shared queues, no default queue"
    assert "sq_support" not in listed()
    for queue in (FAST, BULK):
        assert tables(queue) == {"q": True, "a": True}
        assert has_notify_trigger(queue)
    row = flow_row("sq_support")
    assert row is not None and row["queue_mode"] == "routed"
    assert route_of("sq_support") == ROUTE
    assert [r["q"] for r in q("select pgflow.flow_queues('sq_support') as q")] == [], "owns no queue"
    assert sorted(
        r["q"] for r in q("select distinct queue_name as q from pgflow.steps where flow_slug = 'sq_support'")
    ) == [BULK, FAST]


def test_compiling_again_verifies_and_reuses_the_queues() -> None:
    compile_routed("sq_support")
    before = (declared(), listed(), q("select queue_name, declared_at from pgflow.shared_queues order by 1"))
    q("select pgmq.send(%s, '{\"kept\": true}'::jsonb)", [FAST])
    answer = compile_routed("sq_support", timeout=9)
    assert answer["status"] == "verified", answer
    assert answer["options_updated"] == ["flow timeout: 60 -> 9"]
    assert (
        declared(),
        listed(),
        q("select queue_name, declared_at from pgflow.shared_queues order by 1"),
    ) == before
    assert val(f"select count(*) as n from pgmq.q_{FAST}") == 1, "the queue was not recreated"


def test_a_second_flow_and_a_second_version_reuse_the_queues() -> None:
    compile_routed("sq_support")
    before_declared, before_listed = declared(), listed()
    q("select pgmq.send(%s, '{\"kept\": true}'::jsonb)", [BULK])

    other = {"fetch": FAST, "notify": BULK}
    answer = compile_routed("sq_other", other, shape_step("fetch"), shape_step("notify", "fetch"))
    assert answer["status"] == "compiled", answer
    assert compile_routed("sq_support_v2")["status"] == "compiled"

    assert (declared(), listed()) == (before_declared, before_listed), "no queue declared or created"
    assert route_of("sq_other") == other and route_of("sq_support_v2") == ROUTE
    assert val(f"select count(*) as n from pgmq.q_{BULK}") == 1
    users = q(
        "select queue_name, array_agg(distinct flow_slug order by flow_slug) as flows from pgflow.steps "
        "where queue_name in (%s, %s) group by queue_name order by queue_name",
        [FAST, BULK],
    )
    assert users == [
        {"queue_name": BULK, "flows": ["sq_other", "sq_support", "sq_support_v2"]},
        {"queue_name": FAST, "flows": ["sq_other", "sq_support", "sq_support_v2"]},
    ]


def test_a_declared_queue_dropped_by_hand_is_created_again() -> None:
    compile_routed("sq_support")
    q("select pgmq.drop_queue(%s)", [FAST])
    assert FAST not in listed() and FAST in declared()

    answer = compile_routed("sq_support")
    assert answer["status"] == "verified", answer
    assert FAST in listed()
    assert tables(FAST) == {"q": True, "a": True} and has_notify_trigger(FAST)

    q("select pgmq.drop_queue(%s)", [BULK])
    assert (
        compile_routed("sq_later", {"classify": BULK, "enrich": BULK, "deliver": BULK})["status"]
        == "compiled"
    )
    assert BULK in listed() and has_notify_trigger(BULK), "a new flow naming it re-creates it too"


def test_provision_shared_queue_is_idempotent() -> None:
    before = listed()
    q("select pgflow.provision_shared_queue('sq_direct')")
    q("select pgflow.provision_shared_queue('sq_direct')")
    assert listed() - before == {"sq_direct"}
    assert "sq_direct" in declared()


def test_a_step_queued_and_a_plain_flow_are_unaffected() -> None:
    """Plain and private per-step compilation keep working beside routed flows on the same names."""
    compile_routed("sq_support")
    answer = val(
        "select pgflow.ensure_flow_compiled('sq_plain', %s::jsonb) ->> 'status' as s", [jb(shape(*STEPS))]
    )
    assert answer == "compiled"
    assert route_of("sq_plain") == {"classify": "sq_plain", "enrich": "sq_plain", "deliver": "sq_plain"}
    assert "sq_plain" not in declared()
