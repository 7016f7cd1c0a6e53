"""Wrong routes and queue collisions are refused atomically (issue 6, items 1, 3 and 8): an external
PGMQ queue, a plain flow's default queue, the routed flow's own slug, a '__' name, an ambiguous case
alias, a missing or unknown step key and invalid names. After each error there is no flow row, no new
``pgflow.shared_queues`` row and no new PGMQ queue (the ``unchanged`` fixture compares every row count,
PGMQ relation and pgmq.meta row). A queue mode or route change on an existing slug is a ``routing``
mismatch that changes nothing; a plain flow cannot take a shared queue's name later."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from tests.sql.shared_queues.support import (
    BULK,
    FAST,
    ROUTE,
    STEPS,
    compile_routed,
    declared,
    listed,
    route_of,
    routed_shape,
)
from tests.sql.step_queues.support import flow_row, step_shape
from tests.sql.support import compile_flow, db_error, jb, make_flow, q, shape, step, val

Unchanged = Callable[[], Callable[[], None]]


def refused(flow_slug: str, route: dict[str, Any], *steps: dict[str, Any]) -> str:
    """Compile a routed flow, which must fail leaving nothing of it behind; returns the message."""
    definition = routed_shape(*(steps or STEPS), route=route)
    message = db_error("select pgflow.ensure_flow_compiled(%s, %s::jsonb)", [flow_slug, jb(definition)])
    assert flow_row(flow_slug) is None
    assert val("select count(*) as n from pgflow.steps where flow_slug = %s", [flow_slug]) == 0
    return message


def test_an_external_queue_is_never_adopted(unchanged: Unchanged) -> None:
    q("select pgmq.create('sq_external')")
    q("select pgmq.send('sq_external', '{\"app\": 1}'::jsonb)")
    check = unchanged()
    message = refused("sq_support", {**ROUTE, "deliver": "sq_external"})
    assert "PGMQ queue 'sq_external' exists but was not declared shared by pgflow" in message
    assert "never adopts" in message
    check()
    assert FAST not in listed() and FAST not in declared(), "the first queue's creation was rolled back"
    assert val("select count(*) as n from pgmq.q_sq_external") == 1, "the application's message is untouched"


def test_an_external_queue_spelled_in_another_case_is_never_adopted(unchanged: Unchanged) -> None:
    q("select pgmq.create('SQ_Upper')")
    check = unchanged()
    message = refused("sq_support", {**ROUTE, "enrich": "sq_upper"})
    assert "PGMQ queue 'SQ_Upper' exists but was not declared shared" in message
    check()


def test_a_plain_flows_default_queue_is_refused(unchanged: Unchanged) -> None:
    make_flow("sq_plain", step("a"))
    check = unchanged()
    message = refused("sq_support", {**ROUTE, "classify": "sq_plain"})
    assert "queue name 'sq_plain' is the default queue name reserved for flow 'sq_plain'" in message
    check()
    assert "sq_plain" not in declared()


def test_a_plain_flows_default_queue_in_mixed_case_is_refused(unchanged: Unchanged) -> None:
    make_flow("SqMixed", step("a"))
    check = unchanged()
    message = refused("sq_support", {**ROUTE, "classify": "sqmixed"})
    assert "is the default queue name reserved for flow 'SqMixed'" in message
    check()


def test_the_routed_flows_own_slug_is_refused(unchanged: Unchanged) -> None:
    check = unchanged()
    message = refused("sq_self", {**ROUTE, "deliver": "sq_self"})
    assert "queue name 'sq_self' is the default queue name reserved for flow 'sq_self'" in message
    check()
    message = refused("Sq_Self", {**ROUTE, "deliver": "sq_self"})
    assert "is the default queue name reserved for flow 'Sq_Self'" in message
    check()


def test_another_routed_flows_slug_is_refused(unchanged: Unchanged) -> None:
    """Every flow slug stays reserved for a plain queue, routed or not."""
    compile_routed("sq_first")
    check = unchanged()
    message = refused("sq_second", {**ROUTE, "deliver": "sq_first"})
    assert "is the default queue name reserved for flow 'sq_first'" in message
    check()


def test_a_generated_name_is_refused(unchanged: Unchanged) -> None:
    compile_flow("sq_stepped", step_shape(*STEPS))
    check = unchanged()
    message = refused("sq_support", {**ROUTE, "deliver": "sq_stepped__deliver"})
    assert 'invalid shared queue name(s) deliver -> "sq_stepped__deliver"' in message
    assert "'__' is reserved for generated queues" in message
    check()
    assert "'__'" in db_error("select pgflow.provision_shared_queue('sq_stepped__deliver')")
    check()


def test_two_case_aliases_in_pgmq_meta_are_ambiguous(unchanged: Unchanged) -> None:
    q("select pgmq.create('sq_amb')")
    q("select pgmq.create('SQ_AMB')")
    check = unchanged()
    message = refused("sq_support", {**ROUTE, "deliver": "sq_amb"})
    assert "shared queue 'sq_amb' is ambiguous" in message and "SQ_AMB, sq_amb" in message
    check()


def test_a_case_alias_of_a_declared_queue_blocks_its_reuse(unchanged: Unchanged) -> None:
    compile_routed("sq_support")
    q("select pgmq.create(%s)", [FAST.upper()])
    check = unchanged()
    message = refused("sq_other", {"classify": FAST, "enrich": BULK, "deliver": BULK})
    assert f"shared queue '{FAST}' is ambiguous" in message and FAST.upper() in message
    check()
    message = db_error(
        "select pgflow.ensure_flow_compiled('sq_support', %s::jsonb)", [jb(routed_shape(*STEPS, route=ROUTE))]
    )
    assert "ambiguous" in message, "verification refuses too"
    check()


@pytest.mark.parametrize(
    ("route", "expected"),
    [
        ({"classify": FAST, "enrich": FAST}, "has no queue for step(s) 'deliver'"),
        ({}, "has no queue for step(s) 'classify', 'enrich', 'deliver'"),
        (
            {**ROUTE, "ghost": FAST},
            "names 'ghost', which are not its steps (steps: classify, enrich, deliver)",
        ),
        ({**ROUTE, "Classify": FAST}, "names 'Classify', which are not its steps"),
    ],
)
def test_missing_and_unknown_step_keys_are_refused(
    route: dict[str, str], expected: str, unchanged: Unchanged
) -> None:
    check = unchanged()
    message = refused("sq_support", route)
    assert f"route of flow 'sq_support' {expected}" in message
    check()


@pytest.mark.parametrize(
    "name",
    ["SQ_FAST", "sq-fast", "", "q" * 48, "sq__fast", 7, None, ["sq_fast"], "sq fast"],
)
def test_invalid_queue_names_are_refused(name: Any, unchanged: Unchanged) -> None:
    check = unchanged()
    message = refused("sq_support", {**ROUTE, "enrich": name})
    assert "route of flow 'sq_support': invalid shared queue name(s) enrich -> " in message
    check()


def test_a_route_that_is_not_an_object_is_refused(unchanged: Unchanged) -> None:
    check = unchanged()
    for route in (None, ["sq_fast"], "sq_fast"):
        definition = {**shape(*STEPS), "queue_mode": "routed", "route": route}
        message = db_error("select pgflow.ensure_flow_compiled('sq_support', %s::jsonb)", [jb(definition)])
        assert "routed flow 'sq_support' needs a \"route\" object" in message
    definition = {**shape(*STEPS), "queue_mode": "routed"}
    assert '"route" object' in db_error(
        "select pgflow.ensure_flow_compiled('sq_support', %s::jsonb)", [jb(definition)]
    )
    check()


def test_add_step_of_a_routed_flow_needs_a_declared_queue(unchanged: Unchanged) -> None:
    q("select pgflow.create_flow('sq_manual', queue_mode => 'routed')")
    check = unchanged()
    for queue in (None, "sq_undeclared", "sq_manual"):
        message = db_error("select pgflow.add_step('sq_manual', 'a', queue_name => %s)", [queue])
        assert "a routed flow's step needs a declared shared queue" in message
    check()


def test_a_queue_mode_change_is_a_routing_mismatch_that_changes_nothing(unchanged: Unchanged) -> None:
    compile_flow("sq_mode", shape(*STEPS))
    check = unchanged()
    answer = compile_routed("sq_mode")
    assert answer["status"] == "mismatch" and answer["mismatch"] == ["routing"], answer
    assert answer["differences"][0] == "queue mode: routed in the definition, flow in the database"
    check()
    assert FAST not in declared() and FAST not in listed(), "no queue declared for a refused route"

    compile_routed("sq_routed")
    check = unchanged()
    answer = compile_flow("sq_routed", shape(*STEPS))
    assert answer["status"] == "mismatch" and answer["mismatch"] == ["routing"], answer
    assert answer["differences"][0] == "queue mode: flow in the definition, routed in the database"
    answer = compile_flow("sq_routed", step_shape(*STEPS))
    assert answer["status"] == "mismatch" and answer["mismatch"] == ["routing"], answer
    check()


def test_a_route_change_is_a_routing_mismatch_that_changes_nothing(unchanged: Unchanged) -> None:
    compile_routed("sq_support")
    check = unchanged()
    answer = compile_routed("sq_support", {**ROUTE, "enrich": BULK, "deliver": "sq_new"})
    assert answer["status"] == "mismatch" and answer["mismatch"] == ["routing"], answer
    assert answer["differences"] == [
        f"route of step enrich: queue {BULK} in the definition, {FAST} in the database",
        f"route of step deliver: queue sq_new in the definition, {BULK} in the database",
    ]
    check()
    assert route_of("sq_support") == ROUTE and "sq_new" not in declared()


def test_a_plain_flow_cannot_take_a_shared_queues_name_later(unchanged: Unchanged) -> None:
    compile_routed("sq_support")
    check = unchanged()
    message = db_error("select pgflow.create_flow(%s)", [BULK])
    assert f"flow slug '{BULK}' names the declared shared queue '{BULK}'" in message
    message = db_error("select pgflow.ensure_flow_compiled(%s, %s::jsonb)", [FAST, jb(shape(*STEPS))])
    assert "names the declared shared queue" in message
    check()


def test_a_plain_flow_cannot_take_the_name_of_a_declared_queue_missing_from_pgmq(
    unchanged: Unchanged,
) -> None:
    compile_routed("sq_support")
    q("select pgflow.delete_flow_and_data('sq_support')")
    q("select pgmq.drop_queue(%s)", [BULK])
    assert BULK in declared() and BULK not in listed()
    check = unchanged()
    message = db_error("select pgflow.ensure_flow_compiled(%s, %s::jsonb)", [BULK, jb(shape(*STEPS))])
    assert "shared" in message
    check()
