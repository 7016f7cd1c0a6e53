"""Migrating below 0005_step_queues is refused while a step-queued flow exists (its private queues and
tasks have no representation before it), naming the flows to delete first. The refusal happens in a
savepoint before any backward statement runs, so the test database keeps its schema."""

from __future__ import annotations

from pgflow_django.sql import migration_sql
from tests.sql.step_queues.support import compile_steps
from tests.sql.support import db_error, make_flow, q, shape_step, step, val

DOWN = migration_sql("0005_step_queues_down.sql")
GUARD = DOWN[: DOWN.index("$$;") + 3]
"""The first statement: the DO block that refuses while a step-queued flow exists."""


def test_refused_while_a_step_queued_flow_exists_naming_it() -> None:
    make_flow("plain", step("a"))
    compile_steps("Zeta", shape_step("a"))
    compile_steps("alpha", shape_step("a"))
    protocol = val("select pgflow.protocol_version() as v")
    message = db_error(DOWN)
    assert "cannot migrate pgflow below 0005_step_queues" in message
    assert "step-queued flows exist (" in message
    assert "Zeta" in message and "alpha" in message  # listed in the database's collation order
    assert "plain" not in message
    assert "pgflow_delete_flow" in message
    assert val("select pgflow.protocol_version() as v") == protocol
    assert val("select to_regclass('pgflow.worker_support') is not null as t")


def test_the_guard_passes_once_the_step_queued_flows_are_deleted() -> None:
    """The guard is the backward SQL's first statement; only it runs here, so the test holds whatever
    later migrations add on top of 0005."""
    assert GUARD.lstrip("-\n ").startswith("Frozen migration delta 0005_step_queues, backward")
    assert "do $$" in GUARD and "drop " not in GUARD
    make_flow("plain", step("a"))
    compile_steps("gone", shape_step("a"))
    assert "gone" in db_error(GUARD)
    q("select pgflow.delete_flow_and_data('gone')")
    q(GUARD)
    assert val("select count(*) as n from pgflow.flows") == 1
