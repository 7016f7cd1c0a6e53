""" "All migrations applied" must equal "schema files installed", and every frozen delta must be used.

The test database is migrated by pytest-django; a scratch database on the same server gets PGMQ the
way migration 0001 installs it and then the schema files, and the two catalogs of schema ``pgflow``
are compared through ``pgflow_django.db.catalog``. A schema file edited without a matching migration
delta (or the reverse) shows up here as a line of the diff.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from django.db import connection
from django.db.migrations.loader import MigrationLoader
from django.db.migrations.operations.special import RunSQL

from pgflow_django.db.catalog import Snapshot, diff, snapshot
from pgflow_django.sql import MIGRATIONS_DIR, schema_sql
from pgflow_django.sql.runsql import RunSqlFile
from tests.support.scratch import scratch_database, server_params

APP_LABEL = "pgflow"

pytestmark = pytest.mark.django_db


@pytest.fixture(scope="module")
def scratch(django_db_setup: None, django_db_blocker: Any) -> Iterator[psycopg.Connection[Any]]:
    """A fresh database on the test server with PGMQ and the schema files installed; dropped afterwards."""
    with django_db_blocker.unblock():
        params = server_params()
    with scratch_database("drift", params, schema_sql()) as conn:
        yield conn


def _scratch_snapshot(conn: psycopg.Connection[Any]) -> Snapshot:
    with conn.cursor() as cursor:
        return snapshot(cursor)


def _migrated_snapshot() -> Snapshot:
    with connection.cursor() as cursor:
        return snapshot(cursor)


def _pgflow_migrations() -> dict[str, Any]:
    loader = MigrationLoader(None, ignore_no_migrations=True)
    return {name: migration for (app, name), migration in loader.disk_migrations.items() if app == APP_LABEL}


def test_every_pgflow_migration_is_applied_to_the_test_database() -> None:
    loader = MigrationLoader(connection)
    names = sorted(name for app, name in loader.disk_migrations if app == APP_LABEL)
    assert names
    assert [name for name in names if (APP_LABEL, name) not in loader.applied_migrations] == []


def test_migrated_catalog_equals_installed_schema_files(scratch: psycopg.Connection[Any]) -> None:
    expected = _scratch_snapshot(scratch)
    actual = _migrated_snapshot()
    lines = diff(expected, actual)
    assert not lines, (
        "the migrated database (actual) differs from the installed schema files (expected); write the "
        "missing delta, or refreeze an unreleased one (python -m pgflow_django.sql.freeze NNNN_name "
        "--force):\n" + "\n".join(lines)
    )
    assert expected["schema"], "schema pgflow is missing: the comparison would be vacuous"
    assert len(expected["relations"]) >= 7
    assert expected["functions"]


def test_the_comparison_sees_a_changed_column_and_function(scratch: psycopg.Connection[Any]) -> None:
    with scratch.transaction(force_rollback=True):
        scratch.execute("alter table pgflow.runs add column drift_probe integer")
        scratch.execute(
            "create or replace function pgflow.is_valid_slug(slug text) returns boolean "
            "language sql immutable as $$ select true $$"
        )
        lines = diff(_scratch_snapshot(scratch), _migrated_snapshot())
    assert "missing columns pgflow.runs.drift_probe" in lines
    assert any(
        line.startswith("changed functions pgflow.is_valid_slug(slug text): source_md5") for line in lines
    )


def test_each_frozen_delta_is_loaded_by_exactly_one_migration() -> None:
    deltas = sorted(MIGRATIONS_DIR.glob("*.sql"))
    references: dict[str, list[str]] = {path.name: [] for path in deltas}
    texts = {path.name: path.read_text(encoding="utf-8") for path in deltas}
    for name, migration in sorted(_pgflow_migrations().items()):
        for operation in migration.operations:
            if not isinstance(operation, RunSQL):
                continue
            assert isinstance(operation, RunSqlFile), f"{name} runs inline SQL; SQL belongs in sql/migrations"
            for statement in (operation.sql, operation.reverse_sql):
                files = [file for file, text in texts.items() if text == statement]
                assert statement == RunSQL.noop or files, f"{name} runs SQL that matches no file"
                for file in files:
                    references[file].append(name)
    assert references, "no frozen deltas found"
    assert {file: names for file, names in references.items() if len(names) != 1} == {}
