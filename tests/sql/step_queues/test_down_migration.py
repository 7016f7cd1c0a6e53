"""Migrating below 0005_step_queues is refused while a step-queued flow exists (its private queues and
tasks have no representation before it), naming the flows to delete first. The backward SQL runs
inside a savepoint that is rolled back, so the test database keeps its schema."""

from __future__ import annotations

from django.db import transaction

from pgflow_django.sql import migration_sql
from tests.sql.step_queues.support import compile_steps
from tests.sql.support import db_error, make_flow, q, shape_step, step, val

DOWN = migration_sql("0005_step_queues_down.sql")


def test_refused_while_a_step_queued_flow_exists_naming_it() -> None:
    make_flow("plain", step("a"))
    compile_steps("Zeta", shape_step("a"))
    compile_steps("alpha", shape_step("a"))
    message = db_error(DOWN)
    assert "cannot migrate pgflow below 0005_step_queues" in message
    assert "step-queued flows exist (" in message
    assert "Zeta" in message and "alpha" in message  # listed in the database's collation order
    assert "plain" not in message
    assert "pgflow_delete_flow" in message
    assert val("select pgflow.protocol_version() as v") == 3
    assert val("select to_regclass('pgflow.worker_support') is not null as t")


def test_allowed_once_the_step_queued_flows_are_deleted() -> None:
    """The guard is the only obstacle: with plain flows only, the backward SQL runs (rolled back here)."""
    make_flow("plain", step("a"))
    compile_steps("gone", shape_step("a"))
    q("select pgflow.delete_flow_and_data('gone')")
    with transaction.atomic():
        q(DOWN)
        assert val("select pgflow.protocol_version() as v") == 2
        assert val("select to_regclass('pgflow.worker_support') is null as t")
        transaction.set_rollback(True)
    assert val("select pgflow.protocol_version() as v") == 3
    assert val("select queue_mode from pgflow.flows where flow_slug = 'plain'") == "flow"
