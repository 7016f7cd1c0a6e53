"""A ``DATABASE_URL`` through PgBouncer in transaction mode, without ``PGFLOW["POOLER"]``: one line
naming the setting, where the worker used to start and then log prepared-statement tracebacks from
its claim loop."""

from __future__ import annotations

import os
import subprocess
import sys
from typing import Any

import psycopg
import pytest

from pgflow_django.management.cli import describe_database_error
from tests.acceptance.test_pgbouncer import pgbouncer  # noqa: F401  (the fixture)
from tests.support.pgbouncer import PgBouncer
from tests.workers import MANAGE, REPO

pytestmark = pytest.mark.django_db(transaction=True)

SETTING = 'set PGFLOW["POOLER"] = "transaction"'


def _manage(url: str, settings: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "DATABASE_URL": url, "DJANGO_SETTINGS_MODULE": settings, "PYTHONUNBUFFERED": "1"}
    return subprocess.run(
        [sys.executable, str(MANAGE), *args], cwd=REPO, env=env, capture_output=True, text=True, timeout=60
    )


@pytest.mark.parametrize(
    "command",
    [
        ("pgflow_worker", "--flow", "rel_ledger", "--max-poll-seconds", "0.2", "--max-tasks", "1"),
        ("pgflow_scheduler", "--once"),
    ],
)
def test_a_worker_through_an_unannounced_pooler_stops_with_one_line(
    database_url: str,
    pgbouncer: PgBouncer,  # noqa: F811  (the imported fixture)
    command: tuple[str, ...],
) -> None:
    result = _manage(pgbouncer.url(database_url), "tests.ledger_settings", *command)
    assert result.returncode == 1, result.stderr[-3000:]
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("CommandError: "), result.stderr[-3000:]
    assert "database alias 'default' goes through a transaction pooler" in lines[0]
    assert lines[0].endswith(SETTING)


def test_with_the_setting_or_a_direct_connection_the_worker_starts(
    database_url: str,
    pgbouncer: PgBouncer,  # noqa: F811  (the imported fixture)
) -> None:
    args = ("pgflow_worker", "--flow", "rel_ledger", "--until-empty")
    pooled = _manage(pgbouncer.url(database_url), "tests.pooler_settings", *args)
    assert pooled.returncode == 0, pooled.stderr[-3000:]
    direct = _manage(database_url, "tests.ledger_settings", *args)
    assert direct.returncode == 0, direct.stderr[-3000:]
    assert "transaction pooler" not in direct.stderr


def test_a_prepared_statement_of_another_pooled_session_is_one_line_naming_the_setting(
    database_url: str,
    pgbouncer: PgBouncer,  # noqa: F811  (the imported fixture)
) -> None:
    """The commands' error line for what psycopg's own prepared statements meet behind the pooler."""
    url = pgbouncer.url(database_url)
    caught: Any = None
    sessions = [psycopg.connect(url, autocommit=True, prepare_threshold=0) for _ in range(6)]
    try:
        for attempt in range(5):
            for session in sessions:
                try:
                    session.execute("select %s::int", [attempt]).fetchone()
                except psycopg.Error as exc:
                    caught = exc
                    break
            if caught is not None:
                break
    finally:
        for session in sessions:
            session.close()
    assert caught is not None, "the pooler shared no server connection between sessions"
    line = describe_database_error(caught)
    assert line.startswith("prepared statement ") and line.endswith(f"transaction pooler; {SETTING}"), line
