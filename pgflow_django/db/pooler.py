"""A transaction pooler pgflow was not told about, said in one line naming ``PGFLOW["POOLER"]``.

Behind PgBouncer in transaction mode, consecutive transactions of one client run on different server
connections: a statement psycopg prepared on one (after ``prepare_threshold`` runs) is missing from
the next (``prepared statement "_pg3_0" does not exist``) or clashes with another client's (``...
already exists``), and a LISTEN hears nothing. ``PGFLOW["POOLER"] = "transaction"`` makes the engine
prepare nothing and poll instead. Without it the worker met these errors deep in its claim loop, as
tracebacks; the worker and the scheduler now look before they start, and commands turn the errors
into the same line.
"""

from __future__ import annotations

from typing import Any, Final

import psycopg
from django.core.exceptions import ImproperlyConfigured

from pgflow_django.db import queries
from pgflow_django.db.query import fetch_value

SETTING: Final = 'PGFLOW["POOLER"] = "transaction"'
PREPARED_STATEMENT_STATES: Final = frozenset({"26000", "42P05"})
"""invalid_sql_statement_name, duplicate_prepared_statement: psycopg's own prepared statements met
another server connection than theirs (pgflow prepares nothing by name)."""


class PoolerNotConfigured(ImproperlyConfigured):
    """The database is reached through a transaction pooler, and ``PGFLOW["POOLER"]`` does not say so."""


def require_announced_pooler(using: str = "default") -> None:
    """Before a worker or scheduler starts its engine connections: ``PoolerNotConfigured`` (one line)
    when ``using`` goes through a transaction pooler that ``PGFLOW["POOLER"]`` does not name."""
    from pgflow_django.conf import get_settings
    from pgflow_django.db.connect import connection_params

    pooler = get_settings().pooler
    if pooler == "transaction":
        return
    problem = unannounced_pooler(connection_params(using, pooler), using)
    if problem is not None:
        raise PoolerNotConfigured(problem)


def prepared_statement_problem(exc: BaseException) -> str | None:
    """The one line for an error of a statement prepared on another pooled server connection (in
    ``exc`` or its causes), else None."""
    cause: BaseException | None = exc
    while cause is not None:
        if getattr(cause, "sqlstate", None) in PREPARED_STATEMENT_STATES:
            first = (str(cause).strip().splitlines() or [type(cause).__name__])[0]
            return f"{first}: the database connection goes through a transaction pooler; set {SETTING}"
        cause = cause.__cause__
    return None


def unannounced_pooler(params: dict[str, Any], alias: str) -> str | None:
    """The one line when ``params`` (an alias's psycopg keywords) reach PostgreSQL through a
    transaction pooler, else None.

    A direct session reports its own backend pid in the protocol's key data; a pooler reports one of
    its own. Two sessions that are open together but run on one server connection can only be
    transaction (or statement) pooling: a session-mode pooler gives each its own. A server that
    cannot be reached is left to the caller's own error."""
    keywords = {**params, "autocommit": True, "connect_timeout": params.get("connect_timeout", 10)}
    keywords.setdefault("application_name", "pgflow pooler probe")
    try:
        with psycopg.connect(**keywords) as first:
            server_pid = _server_pid(first)
            if first.info.backend_pid == server_pid:
                return None
            with psycopg.connect(**keywords) as second:
                if _server_pid(second) != server_pid:
                    return None
    except psycopg.Error:
        return None
    return (
        f"database alias {alias!r} goes through a transaction pooler (two sessions ran on one server "
        f"connection), where prepared statements and LISTEN break; set {SETTING}"
    )


def _server_pid(conn: psycopg.Connection[Any]) -> int:
    with conn.cursor() as cursor:
        return int(fetch_value(cursor, queries.BACKEND_PID))
