"""Helpers of the first-hour tests: ``manage.py`` runs with ``tests/first_hour_settings.py`` variants
and a brand-new (never migrated) database on the test server."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager

from django.db import connection

from tests.support.scratch import empty_database, server_params
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


@contextmanager
def fresh_database() -> Iterator[str]:
    """The DATABASE_URL of a new, empty database on the test server; dropped afterwards."""
    with empty_database("fresh", server_params()) as name:
        yield url_from_settings({**connection.settings_dict, "NAME": name})
