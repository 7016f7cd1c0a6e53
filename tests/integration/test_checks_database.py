"""The database system checks (``manage.py check --database default``), each shown firing and not.

Each test breaks the database inside its own transaction (renaming PGMQ objects, forgetting a
migration record); the rollback at the end of the test restores it.
"""

from __future__ import annotations

from io import StringIO
from typing import Any

import pytest
from django.core.checks import INFO, WARNING, CheckMessage, run_checks
from django.core.management import call_command
from django.core.management.base import SystemCheckError
from django.core.management.commands.migrate import Command as MigrateCommand
from django.db import DataError, connection
from django.db.migrations.loader import MigrationLoader

from pgflow_django.worker.preflight import pending_migrations


def database_messages() -> list[CheckMessage]:
    """The findings that ask for something (warnings and errors); ``pgflow.I001`` only reports."""
    return [
        message
        for message in run_checks(tags=["database"], databases=["default"])
        if message.id.startswith("pgflow.") and message.level >= WARNING
    ]


def report() -> CheckMessage:
    (found,) = [
        message
        for message in run_checks(tags=["database"], databases=["default"])
        if message.id == "pgflow.I001"
    ]
    return found


def test_migrated_database_with_pgmq_passes() -> None:
    assert database_messages() == []
    call_command("check", "--database", "default", "--fail-level", "WARNING")


def test_pending_migrations_warn() -> None:
    # the last migration on disk, with the names it replaces when it is a squash (Django records
    # those too, and counts the squash applied while they all are)
    loader = MigrationLoader(None)
    ((app, forgotten),) = [node for node in loader.graph.leaf_nodes() if node[0] == "pgflow"]
    names = [forgotten, *(name for _, name in loader.disk_migrations[app, forgotten].replaces)]
    with connection.cursor() as cursor:
        cursor.execute("delete from django_migrations where app = 'pgflow' and name = any(%s)", [names])
        assert cursor.rowcount >= 1
    assert pending_migrations() == [f"pgflow.{forgotten}"]
    (message,) = database_messages()
    assert message.id == "pgflow.W001"
    assert forgotten in message.msg
    assert message.hint and "manage.py migrate --database default" in message.hint


def test_many_pending_migrations_are_counted_not_listed() -> None:
    """A new database has every migration pending: the warning counts them and names the ends."""
    with connection.cursor() as cursor:
        cursor.execute("delete from django_migrations where app = 'pgflow'")
    pending = pending_migrations()
    (message,) = database_messages()
    assert message.msg == (
        f"database 'default': {len(pending)} pgflow migration(s) not applied ({pending[0]} to {pending[-1]})"
    )
    assert message.hint == "run `manage.py migrate --database default`; workers refuse to start until then"
    assert f"pgflow {len(pending)} migration(s) behind" in report().msg


def test_check_reports_the_postgresql_and_pgmq_it_found() -> None:
    with connection.cursor() as cursor:
        cursor.execute("select current_setting('server_version_num')::int")
        (number,) = cursor.fetchone()
        cursor.execute("select extversion from pg_extension where extname = 'pgmq'")
        extension = cursor.fetchone()
    found = report()
    assert found.level == INFO
    pgmq = f"PGMQ {extension[0]} (extension)" if extension else "PGMQ (SQL-only install, no version recorded)"
    assert found.msg == (
        f"database 'default': PostgreSQL {number // 10000}.{number % 10000}, {pgmq}, pgflow migrated"
    )
    out = StringIO()
    call_command("check", "--database", "default", "--fail-level", "WARNING", stdout=out, stderr=out)
    assert "(pgflow.I001) database 'default': PostgreSQL " in out.getvalue()


def test_django_test_runner_checks_leave_the_report_out() -> None:
    from django.test.runner import DiscoverRunner

    class Runner(DiscoverRunner):
        def found(self) -> list[str]:
            return [message.id for message in run_checks(tags=["database"], databases=["default"])]

    assert "pgflow.I001" not in Runner().found()


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
