"""pgflow runs only on PostgreSQL >= 15: every entry point says so in one line naming the alias.

Without this guard a SQLite project met ``no such table: pg_namespace`` from ``migrate``, a long
traceback from the worker and ``near "(": syntax error`` from ``enqueue()``.
"""

from __future__ import annotations

from typing import Any

from django.core.exceptions import ImproperlyConfigured
from django.db import DatabaseError, connections

MIN_SERVER_VERSION = 150000
"""PostgreSQL's ``server_version_num`` of the oldest supported release (15.0)."""
REQUIREMENT = "pgflow needs PostgreSQL >= 15"


class UnsupportedDatabase(ImproperlyConfigured):
    """A database alias that pgflow would use is not PostgreSQL >= 15."""


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
