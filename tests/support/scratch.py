"""Scratch databases on the test server: created for one test or module, dropped afterwards (with
``force``, so a connection a failing test left open cannot keep one alive)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
from django.db import connection
from psycopg import sql

from pgflow_django.db.pgmq_install import ensure_pgmq


def server_params() -> dict[str, Any]:
    """libpq parameters of the test database's server, as Django connects to it."""
    params = connection.get_connection_params()
    return {key: value for key, value in params.items() if key not in {"context", "cursor_factory"}}


@contextmanager
def empty_database(prefix: str, params: dict[str, Any], template: str | None = None) -> Iterator[str]:
    """The name of a new database ``pgflow_<prefix>_<random>`` on the server of ``params``: empty, or
    a copy of ``template`` (which nobody may be connected to)."""
    name = f"pgflow_{prefix}_{uuid.uuid4().hex[:12]}"
    create = sql.SQL("create database {}").format(sql.Identifier(name))
    if template is not None:
        create = sql.SQL("{} template {}").format(create, sql.Identifier(template))
    with psycopg.connect(**params, autocommit=True) as admin:
        admin.execute(create)
    try:
        yield name
    finally:
        with psycopg.connect(**params, autocommit=True) as admin:
            admin.execute(sql.SQL("drop database if exists {} with (force)").format(sql.Identifier(name)))


@contextmanager
def scratch_database(
    prefix: str, params: dict[str, Any], *setup: str, pgmq_sql: str | None = None
) -> Iterator[psycopg.Connection[Any]]:
    """An autocommit connection to a new database with PGMQ (``pgmq_sql``, else as migration 0001
    installs it) and then the ``setup`` statements, all in one transaction."""
    with (
        empty_database(prefix, params) as name,
        psycopg.connect(**{**params, "dbname": name}, autocommit=True) as conn,
    ):
        with conn.transaction(), conn.cursor() as cursor:
            if pgmq_sql is None:
                ensure_pgmq(cursor)
            else:
                cursor.execute(pgmq_sql.encode("utf-8"))
            for statement in setup:
                cursor.execute(statement.encode("utf-8"))
        yield conn
