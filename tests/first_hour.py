"""Helpers of the first-hour tests: ``manage.py`` runs with ``tests/first_hour_settings.py`` variants
and a brand-new (never migrated) database on the test server."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
from django.db import connection
from psycopg import sql

from tests.workers import MANAGE, REPO, url_from_settings

SETTINGS = "tests.first_hour_settings"


def manage(
    *args: str, env: dict[str, str] | None = None, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    """``manage.py ARGS`` with the first-hour settings on the test database (``env`` picks a variant)."""
    return subprocess.run(
        [sys.executable, str(MANAGE), *args],
        cwd=REPO,
        env={
            **os.environ,
            "DATABASE_URL": url_from_settings(connection.settings_dict),
            "DJANGO_SETTINGS_MODULE": SETTINGS,
            "PYTHONUNBUFFERED": "1",
            "PYTHONWARNINGS": "ignore",
            **(env or {}),
        },
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def server_params() -> dict[str, Any]:
    params = connection.get_connection_params()
    return {key: value for key, value in params.items() if key not in {"context", "cursor_factory"}}


@contextmanager
def fresh_database() -> Iterator[str]:
    """The DATABASE_URL of a new, empty database on the test server; dropped afterwards."""
    name = f"pgflow_fresh_{uuid.uuid4().hex[:12]}"
    params = server_params()
    with psycopg.connect(**params, autocommit=True) as admin:
        admin.execute(sql.SQL("create database {}").format(sql.Identifier(name)))
    try:
        yield url_from_settings({**connection.settings_dict, "NAME": name})
    finally:
        with psycopg.connect(**params, autocommit=True) as admin:
            admin.execute(sql.SQL("drop database if exists {} with (force)").format(sql.Identifier(name)))
