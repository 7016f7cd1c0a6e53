"""psycopg connection keywords for a Django database alias: the worker's, the scheduler's and the
pooler check's own connections are opened from the same ``DATABASES`` entry Django uses, and where a
LISTEN goes (the worker's, ``await_run``'s)."""

from __future__ import annotations

from typing import Any

DJANGO_ONLY_OPTIONS = frozenset(
    {"isolation_level", "server_side_binding", "assume_role", "pool", "cursor_factory", "context"}
)
"""Keys of ``DATABASES[...]["OPTIONS"]`` that Django consumes itself and libpq would reject."""


def connection_params(using: str = "default", pooler: str | None = None) -> dict[str, Any]:
    """psycopg connection keywords built from Django's ``settings_dict`` for ``using``.

    Behind a transaction pooler (``pooler="transaction"``) psycopg prepares nothing: a statement it
    prepared after ``prepare_threshold`` runs would live on one server connection, and PgBouncer hands
    the next transaction to any of them. Direct connections keep psycopg's default, which spares the
    claim loop re-planning its statements.
    """
    from django.db import connections

    if using not in connections.settings:
        raise ValueError(
            f"unknown database alias {using!r}; DATABASES has: {', '.join(sorted(connections.settings))}"
        )
    settings_dict = connections[using].settings_dict
    params: dict[str, Any] = {
        key: value
        for key, value in (settings_dict.get("OPTIONS") or {}).items()
        if key not in DJANGO_ONLY_OPTIONS
    }
    if settings_dict.get("NAME"):
        params["dbname"] = settings_dict["NAME"]
    for key, name in (("USER", "user"), ("PASSWORD", "password"), ("HOST", "host"), ("PORT", "port")):
        if settings_dict.get(key):
            params[name] = str(settings_dict[key])
    if pooler == "transaction":
        params["prepare_threshold"] = None
    return params


def listen_params(
    params: dict[str, Any], pooler: str | None, listen_database: str | None, listen_url: str | None = None
) -> dict[str, Any] | None:
    """Where a LISTEN goes: ``listen_url`` (the worker's ``--listen-url``), else
    ``PGFLOW["LISTEN_DATABASE"]``'s alias, else ``params`` (the caller's own connection); None (poll
    only) behind a transaction pooler, where a LISTEN would hold a pooled server connection that
    PgBouncer may give to another client between transactions, and notifications would never reach
    this one."""
    if listen_url is not None:
        from psycopg import ProgrammingError
        from psycopg.conninfo import conninfo_to_dict

        try:
            return conninfo_to_dict(listen_url)
        except ProgrammingError as exc:
            raise ValueError(f"--listen-url is not a libpq connection string: {first_line(exc)}") from None
    if listen_database is not None:
        return connection_params(listen_database)
    if pooler == "transaction":
        return None
    return params


def first_line(exc: BaseException) -> str:
    """An error's first line: database errors carry multi-line details (and sometimes values) after it."""
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def describe_database(alias: str, params: dict[str, Any]) -> str:
    """``default (app@db.example:5432)``: which database the worker works on, without credentials."""
    where = str(params.get("host") or "local socket")
    if params.get("port"):
        where += f":{params['port']}"
    return f"{alias} ({params.get('dbname', '?')}@{where})"


def keep_handler_connections(using: str, conn_max_age: float | None) -> None:
    """Handler threads keep their Django connection across tasks (per ``conn_max_age``), checked
    for health before reuse, so a task pays neither a connect nor a restart's broken socket."""
    from django.db import connections

    settings_dict = connections.settings[using]
    settings_dict["CONN_MAX_AGE"] = conn_max_age
    if conn_max_age != 0:
        settings_dict["CONN_HEALTH_CHECKS"] = True
