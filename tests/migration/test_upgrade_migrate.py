"""Upgrading a database of the baseline release (0002) to the latest migration, on the test database.

Each test migrates pgflow back to 0002 with Django's ``MigrationExecutor``, loads data through that
release's SQL API, and migrates forward. A hazard must make the migration fail with the audit's report
and leave the database exactly as it was (catalog, row counts, sequences, recorded migrations); after
its documented repair the same data upgrades. Every test ends with its flows and queues removed, and
the module at the latest migration again, so the other tests find the database as they expect.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from django.core.management import call_command
from django.db import OperationalError, connection
from django.db.migrations.executor import MigrationExecutor
from django.db.migrations.loader import MigrationLoader
from psycopg import errors

from pgflow_django.db.upgrade import UpgradeBlocked
from tests import workers
from tests.migration import upgrade_support as fx

pytestmark = pytest.mark.django_db(transaction=True)

APP = "pgflow"
BASELINE = "0002_core"


def _migrations() -> list[str]:
    return sorted(
        name for app, name in MigrationLoader(None, ignore_no_migrations=True).disk_migrations if app == APP
    )


LATEST = _migrations()[-1]


def migrate(target: str) -> None:
    MigrationExecutor(connection).migrate([(APP, target)])


def applied() -> list[str]:
    """The applied pgflow migrations on disk (not the names a squashed migration replaces)."""
    loader = MigrationLoader(connection)
    return sorted(
        name for app, name in loader.applied_migrations if app == APP and (app, name) in loader.graph.nodes
    )


def _clear_later_queue_modes(cursor: Any) -> None:
    """Going back to 0002 is refused while step-queued or routed flows or shared queues exist (their
    down migrations say so); other tests may have left some, which this test does not need."""
    cursor.execute(
        "select pgflow.delete_flow_and_data(flow_slug) from pgflow.flows where queue_mode <> 'flow'"
    )
    workers.drop_shared_queues(cursor)


@pytest.fixture(scope="module")
def latest_at_the_end(django_db_setup: None, django_db_blocker: Any) -> Iterator[None]:
    """The test database migrated forward again once the module is done, whatever its tests left: a
    test that ends at 0002 leaves the next one nothing to migrate back (seconds each way)."""
    yield
    with django_db_blocker.unblock():
        migrate(LATEST)
        assert applied()[-1] == LATEST


@pytest.fixture
def baseline(latest_at_the_end: None) -> Iterator[Any]:
    """The test database at 0002; afterwards the fixtures' flows and queues are removed."""
    if applied()[-1] != BASELINE:
        with connection.cursor() as cursor:
            _clear_later_queue_modes(cursor)
        migrate(BASELINE)
    assert applied()[-1] == BASELINE
    try:
        with connection.cursor() as cursor:
            yield cursor
    finally:
        with connection.cursor() as cursor:
            fx.purge(cursor)


def backfill(cursor: Any) -> dict[str, set[tuple[Any, ...]]]:
    """(flow_slug, queue_name) of the fixtures' steps and tasks, and tasks without a message id."""
    like = "upg%"
    return {
        "steps": set(
            fx.rows(
                cursor,
                "select flow_slug, queue_name from pgflow.steps where lower(flow_slug) like %s",
                [like],
            )
        ),
        "tasks": set(
            fx.rows(
                cursor,
                "select flow_slug, queue_name from pgflow.step_tasks where lower(flow_slug) like %s",
                [like],
            )
        ),
        "null_ids": set(
            fx.rows(
                cursor,
                "select flow_slug, queue_name from pgflow.step_tasks"
                " where lower(flow_slug) like %s and message_id is null",
                [like],
            )
        ),
    }


def claim(cursor: Any, queue: str, flow_slug: str) -> list[tuple[Any, ...]]:
    """What an upgraded worker does: read its queue, then the queue-aware claim.

    Returns (outcome, run_id, step_slug, task_index, message_id, attempt) per message read."""
    ids = [row[0] for row in fx.rows(cursor, "select msg_id from pgmq.read(%s, 30, 100)", [queue])]
    if not ids:
        return []
    return fx.rows(
        cursor,
        "select outcome, run_id, step_slug, task_index, message_id, attempt"
        " from pgflow.start_tasks(%s, %s, %s::bigint[], %s::uuid) order by message_id",
        [queue, flow_slug, ids, fx.WORKER],
    )


def test_baseline_data_upgrades_with_queue_identity_backfilled(baseline: Any) -> None:
    cursor = baseline
    fx.load_normal(cursor)
    counted = "select count(*) from pgflow.{} where lower(flow_slug) like 'upg%%'"
    before = {
        table: fx.value(cursor, counted.format(table), []) for table in ("runs", "step_states", "step_tasks")
    }
    queued = fx.value(cursor, "select count(*) from pgmq.q_upg_orders")

    call_command("migrate", APP, verbosity=0)

    assert applied()[-1] == LATEST
    assert {table: fx.value(cursor, counted.format(table), []) for table in before} == before
    assert backfill(cursor) == {
        "steps": {("upg_orders", "upg_orders"), ("UpgMixed", "upgmixed")},
        "tasks": {("upg_orders", "upg_orders"), ("UpgMixed", "upgmixed")},
        "null_ids": {("upg_orders", "upg_orders")},
    }
    assert fx.rows(
        cursor, "select queue_name from pgmq.meta where lower(queue_name) like 'upg%' order by 1"
    ) == [
        ("UpgMixed",),
        ("upg_orders",),
    ]
    assert fx.value(cursor, "select count(*) from pgmq.q_upg_orders") == queued

    # Messages sent before the upgrade are claimed after it through their backfilled identity.
    claimed = claim(cursor, "upg_orders", "upg_orders")
    assert {row[0] for row in claimed} == {"claimed"}
    assert sorted((row[2], row[3]) for row in claimed) == [("charge", 0), ("validate", 0)]
    (mixed,) = claim(cursor, "upgmixed", "UpgMixed")
    assert mixed[0] == "claimed"
    assert fx.complete(cursor, mixed[1:], "ok") == "completed"
    assert fx.value(cursor, "select status from pgflow.runs where flow_slug = 'UpgMixed'") == "completed"
    assert fx.value(cursor, "select count(*) from pgmq.a_upgmixed") == 1
    assert fx.rows(cursor, "select queue_name from pgmq.meta where lower(queue_name) = 'upgmixed'") == [
        ("UpgMixed",)
    ]


@pytest.mark.parametrize("hazard", fx.HAZARDS, ids=lambda hazard: hazard.name)
def test_a_hazard_blocks_the_migration_and_changes_nothing(baseline: Any, hazard: fx.Hazard) -> None:
    cursor = baseline
    fx.load_normal(cursor)
    hazard.load(cursor)
    before = fx.state(cursor)

    with pytest.raises(UpgradeBlocked) as blocked:
        migrate(LATEST)

    assert fx.state(cursor) == before
    assert applied()[-1] == BASELINE
    report = str(blocked.value)
    assert report.startswith("pgflow migration 0003 stopped before changing anything")
    assert {finding.check for finding in blocked.value.findings if not finding.ok} == hazard.checks
    for check in hazard.checks:
        assert f"\n{check}: " in report

    hazard.repair(cursor)
    migrate(LATEST)
    assert applied()[-1] == LATEST
    found = backfill(cursor)
    assert found["steps"] and all(queue == flow.lower() for flow, queue in found["steps"] | found["tasks"])


def test_the_migration_waits_for_locks_only_until_the_lock_timeout(baseline: Any, settings: Any) -> None:
    """A worker still writing holds the migration up for PGMIGRATE_LOCK_TIMEOUT, then it fails cleanly."""
    cursor = baseline
    fx.load_normal(cursor)
    settings.PGMIGRATE_LOCK_TIMEOUT = 0.3
    before = fx.state(cursor)
    with psycopg.connect(**fx.server_params()) as worker:
        worker.execute("lock table pgflow.step_tasks in row exclusive mode")
        with pytest.raises(OperationalError) as failure:
            migrate(LATEST)
        worker.rollback()
    assert isinstance(failure.value.__cause__, errors.LockNotAvailable)
    assert fx.state(cursor) == before
    assert applied()[-1] == BASELINE


def test_manage_py_migrate_prints_the_report_and_exits_1(baseline: Any) -> None:
    """The operator's path: django-pgmigrate's ``migrate`` in a process of its own."""
    cursor = baseline
    fx.load_normal(cursor)
    fx.HAZARDS[-1].load(cursor)
    before = fx.state(cursor)

    result = workers.run_manage(workers.url_from_settings(connection.settings_dict), "migrate", APP)

    assert result.returncode == 1
    assert "UpgradeBlocked: pgflow migration 0003 stopped before changing anything" in result.stderr
    assert "\ncase_duplicate_flow_slugs: 1 problem(s)\n" in result.stderr
    assert "  - flow_slugs=UpgCase, upgcase\n" in result.stderr
    assert fx.state(cursor) == before
    assert applied()[-1] == BASELINE
