"""The post-seed migrations (0007_squashed_0038, which holds 0010_pgflow_fidelity's backfill) on data
recorded by 0006: failed runs' started steps become 'cancelled' and their remaining_steps current; stored
flow options stay; going back restores 0006's step statuses and check."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.db.migrations.loader import MigrationLoader

from tests.migration import upgrade_support as fx

pytestmark = pytest.mark.django_db(transaction=True)

APP = "pgflow"
BEFORE = "0006_shared_queues"
FIDELITY = "0007_squashed_0038"
FLOW = "upg_fidelity"


def migrate(target: str) -> None:
    MigrationExecutor(connection).migrate([(APP, target)])


def latest() -> str:
    return max(
        name for app, name in MigrationLoader(None, ignore_no_migrations=True).disk_migrations if app == APP
    )


@pytest.fixture
def at_0006() -> Iterator[Any]:
    migrate(BEFORE)
    try:
        with connection.cursor() as cursor:
            yield cursor
    finally:
        with connection.cursor() as cursor:
            fx.purge(cursor)
        migrate(latest())


def _failed_run_at_0006(cursor: Any) -> Any:
    """a completes, b's condition is unmet with when_unmet = fail, c never starts, d was started."""
    cursor.execute("select pgflow.create_flow(%s)", [FLOW])
    cursor.execute("select pgflow.add_step(%s, 'a')", [FLOW])
    cursor.execute(
        "select pgflow.add_step(%s, 'b', array['a'],"
        " required_input_pattern => %s::jsonb, when_unmet => 'fail')",
        [FLOW, '{"a": {"ok": true}}'],
    )
    cursor.execute("select pgflow.add_step(%s, 'c', array['b'])", [FLOW])
    cursor.execute("select pgflow.add_step(%s, 'd')", [FLOW])
    run_id = fx.start(cursor, FLOW, {})
    (task_a,) = fx.claim_legacy(cursor, FLOW, "a")
    assert fx.complete(cursor, task_a, {"ok": False}) == "completed"
    return run_id


def _states(cursor: Any, run_id: Any) -> dict[str, str]:
    return dict(
        fx.rows(cursor, "select step_slug, status from pgflow.step_states where run_id = %s", [run_id])
    )


def test_failed_runs_are_brought_up_to_date_and_back(at_0006: Any) -> None:
    cursor = at_0006
    run_id = _failed_run_at_0006(cursor)
    assert fx.value(cursor, "select status from pgflow.runs where run_id = %s", [run_id]) == "failed"
    assert _states(cursor, run_id) == {"a": "completed", "b": "failed", "c": "created", "d": "started"}
    assert fx.value(cursor, "select remaining_steps from pgflow.runs where run_id = %s", [run_id]) == 4
    assert fx.value(cursor, "select opt_base_delay from pgflow.flows where flow_slug = %s", [FLOW]) == 1

    migrate(FIDELITY)
    assert _states(cursor, run_id) == {"a": "completed", "b": "failed", "c": "created", "d": "cancelled"}
    assert fx.value(cursor, "select remaining_steps from pgflow.runs where run_id = %s", [run_id]) == 3
    assert fx.value(cursor, "select opt_base_delay from pgflow.flows where flow_slug = %s", [FLOW]) == 1

    migrate(BEFORE)
    assert _states(cursor, run_id) == {"a": "completed", "b": "failed", "c": "created", "d": "started"}
    check = fx.value(
        cursor,
        "select pg_get_constraintdef(oid) from pg_constraint where conname = 'step_states_status_check'",
    )
    assert "cancelled" not in check
