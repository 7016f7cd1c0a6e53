"""pgflow runs only on PostgreSQL >= 15, and only on a database migrated for it: every entry point
says so in one line naming the alias (and, for a missing schema, ``manage.py migrate``).

Without this guard a SQLite project met ``no such table: pg_namespace`` from ``migrate``, a long
traceback from the worker and ``near "(": syntax error`` from ``enqueue()``; an unmigrated
PostgreSQL database met ``ProgrammingError: schema "pgflow" does not exist`` from ``start_flow``.
"""

from __future__ import annotations

from typing import Any, Final

from django.core.exceptions import ImproperlyConfigured
from django.db import DatabaseError, connections

MIN_SERVER_VERSION = 150000
"""PostgreSQL's ``server_version_num`` of the oldest supported release (15.0)."""
REQUIREMENT = "pgflow needs PostgreSQL >= 15"


class UnsupportedDatabase(ImproperlyConfigured):
    """A database alias that pgflow would use is not PostgreSQL >= 15."""


class NotMigrated(ImproperlyConfigured):
    """A database alias that pgflow would use lacks its schema (or part of it): ``manage.py migrate``
    has not run there, or ``pgflow_django`` is not in ``INSTALLED_APPS``. The message, one line, says
    which and what to run, e.g. ``the database is not migrated for pgflow (schema "pgflow" does not
    exist); run `manage.py migrate```.

    Raised by ``start_flow``, ``start_flows``, ``get_run``, ``wait_for_run``, ``cancel_run``,
    ``retry_run``, ``run_now``, ``compile_flow`` and the tasks backend's ``enqueue`` and ``get_result``
    in place of the ``ProgrammingError`` of their failed statement (SQLSTATE 3F000, 42P01, 42883 or
    42704 on a pgflow or PGMQ name): nothing is checked beforehand, so a migrated database pays nothing
    for it. Inside ``transaction.atomic()`` the transaction is aborted, as after any failed statement."""


NOT_MIGRATED_STATES: Final = frozenset({"3F000", "42P01", "42883", "42704"})
"""invalid_schema_name, undefined_table, undefined_function, undefined_object: with a message that
starts with one of ``MISSING_OBJECTS``, a statement met a database not migrated (far enough) for pgflow."""
MISSING_OBJECTS: Final = (
    'schema "pgflow" ',
    'schema "pgmq" ',
    'relation "pgflow.',
    "function pgflow.",
    "function pgmq.",
    'type "pgflow.',
    "type pgflow.",
)
"""What migrations create. A missing PGMQ queue table (``relation "pgmq.q_..."``) is not among them:
a queue dropped by hand is not cured by ``migrate``."""


def vendor_problem(alias: str, settings_dict: dict[str, Any], vendor: str) -> str | None:
    """The one line for a database that is not PostgreSQL at all (known without connecting)."""
    if vendor == "postgresql":
        return None
    engine = settings_dict.get("ENGINE") or "no ENGINE"
    return (
        f"{REQUIREMENT}; database alias {alias!r} is {vendor} ({engine}): point DATABASES[{alias!r}] "
        "at a PostgreSQL server (ENGINE 'django.db.backends.postgresql')"
    )


def version_problem(alias: str, server_version: int) -> str | None:
    """The one line for a PostgreSQL server older than 15 (``server_version_num``, e.g. 140011)."""
    if server_version >= MIN_SERVER_VERSION:
        return None
    major = server_version // 10000
    minor = server_version % 10000 if major >= 10 else server_version // 100 % 100
    shown = f"{major}.{minor}"
    return f"{REQUIREMENT}; database alias {alias!r} is PostgreSQL {shown}: upgrade the server"


def require_postgresql(using: str = "default") -> None:
    """Raise ``UnsupportedDatabase`` unless ``using`` is PostgreSQL >= 15.

    A server that cannot be reached is left to the caller's own error (it says more about why);
    the version is read once per connection object.
    """
    connection = connections[using]
    problem = vendor_problem(using, connection.settings_dict, connection.vendor)
    if problem is None:
        try:
            connection.ensure_connection()
            version = int(connection.pg_version)  # type: ignore[attr-defined]
        except DatabaseError:
            return
        problem = version_problem(using, version)
    if problem is not None:
        raise UnsupportedDatabase(problem)


def not_migrated(exc: BaseException, using: str = "default") -> NotMigrated | None:
    """The ``NotMigrated`` error that a failed statement's ``exc`` means, or None when it means
    something else. Read from the error alone, on the error path: nothing is checked beforehand."""
    from django.apps import apps

    cause = exc.__cause__ if isinstance(exc, DatabaseError) else exc
    if getattr(cause, "sqlstate", None) not in NOT_MIGRATED_STATES:
        return None
    primary = getattr(getattr(cause, "diag", None), "message_primary", None) or str(cause).partition("\n")[0]
    primary = " ".join(primary.split())
    if not primary.startswith(MISSING_OBJECTS):
        return None
    command = "manage.py migrate" if using == "default" else f"manage.py migrate --database {using}"
    where = "the database" if using == "default" else f"database alias {using!r}"
    if not apps.is_installed("pgflow_django"):
        return NotMigrated(
            f"'pgflow_django' is not in INSTALLED_APPS and {where} is not migrated for pgflow ({primary}): "
            f"add 'pgflow_django' to INSTALLED_APPS, then run `{command}`"
        )
    return NotMigrated(f"{where} is not migrated for pgflow ({primary}); run `{command}`")


def raise_if_not_migrated(exc: BaseException, using: str = "default") -> None:
    """In an ``except`` block: raise ``NotMigrated`` (one line) in place of ``exc`` when the failed
    statement met a database without pgflow's schema; else return, for the caller to re-raise."""
    problem = not_migrated(exc, using)
    if problem is not None:
        raise problem from None
