"""The database system checks (``manage.py check --database default``), each shown firing and not.

Each test breaks the database inside its own transaction (renaming PGMQ objects, forgetting a
migration record); the rollback at the end of the test restores it.
"""

from __future__ import annotations

from typing import Any

import pytest
from django.core.checks import CheckMessage, run_checks
from django.core.management import call_command
from django.core.management.base import SystemCheckError
from django.core.management.commands.migrate import Command as MigrateCommand
from django.db import DataError, connection

from pgflow_django.worker.preflight import pending_migrations


def database_messages() -> list[CheckMessage]:
    return [
        message
        for message in run_checks(tags=["database"], databases=["default"])
        if message.id.startswith("pgflow.")
    ]


def test_migrated_database_with_pgmq_passes() -> None:
    assert database_messages() == []
    call_command("check", "--database", "default", "--fail-level", "WARNING")


def test_pending_migrations_warn() -> None:
    with connection.cursor() as cursor:
        cursor.execute(
            "delete from django_migrations where app = 'pgflow' and name = "
            "(select max(name) from django_migrations where app = 'pgflow') returning name"
        )
        (forgotten,) = cursor.fetchone()
    assert pending_migrations() == [f"pgflow.{forgotten}"]
    (message,) = database_messages()
    assert message.id == "pgflow.W001"
    assert forgotten in message.msg
    assert message.hint and "manage.py migrate pgflow" in message.hint


def test_migrate_itself_does_not_warn_about_the_migrations_it_applies() -> None:
    class Migrate(MigrateCommand):
        def handle(self, *args: Any, **options: Any) -> None:
            self.found = database_messages()

    with connection.cursor() as cursor:
        cursor.execute("delete from django_migrations where app = 'pgflow'")
    assert [message.id for message in database_messages()] == ["pgflow.W001"]
    command = Migrate()
    command.handle()
    assert command.found == []


def test_pgmq_lacking_a_function_is_an_error() -> None:
    with connection.cursor() as cursor:
        cursor.execute("alter function pgmq.set_vt(text, bigint[], integer) rename to set_vt_hidden")
    (message,) = database_messages()
    assert message.id == "pgflow.E008"
    assert "pgmq.set_vt(text,bigint[],integer)" in message.msg and "1.11" in message.msg
    assert message.hint and "ALTER EXTENSION pgmq UPDATE" in message.hint
    with pytest.raises(SystemCheckError, match=r"pgflow\.E008"):
        call_command("check", "--database", "default")


def test_pgmq_missing_is_an_error_once_pgflow_is_migrated() -> None:
    with connection.cursor() as cursor:
        cursor.execute("alter schema pgmq rename to pgmq_hidden_by_test")
    (message,) = database_messages()
    assert message.id == "pgflow.E008"
    assert "not installed" in message.msg
    assert message.hint and "CREATE EXTENSION pgmq" in message.hint


def test_pgmq_missing_before_migrate_is_left_to_migrate() -> None:
    """``migrate`` installs PGMQ, so a fresh database only gets the pending-migrations warning."""
    with connection.cursor() as cursor:
        cursor.execute("alter schema pgmq rename to pgmq_hidden_by_test")
        cursor.execute("delete from django_migrations where app = 'pgflow'")
    assert [message.id for message in database_messages()] == ["pgflow.W001"]


def test_database_that_cannot_be_inspected_is_an_error() -> None:
    with connection.cursor() as cursor, pytest.raises(DataError, match="division by zero"):
        cursor.execute("select 1 / 0")  # the test's transaction is now aborted
    (message,) = database_messages()
    assert message.id == "pgflow.E009"
    assert "current transaction is aborted" in message.msg
    assert message.hint
