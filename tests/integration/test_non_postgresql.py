"""SQLite (any non-PostgreSQL database) and PostgreSQL older than 15: one line at every entry point.

The SQLite runs are real ``manage.py`` processes on a SQLite file (tests/first_hour_settings.py with
``FIRST_HOUR_SQLITE``); the version rule runs on the real server's version number, and a brand-new
PostgreSQL database shows that pgflow's checks do not block ``migrate`` of other apps.
"""

from __future__ import annotations

import importlib
import pkgutil
from pathlib import Path

import pytest
from django.db import connection

from pgflow_django.db.dbguard import MIN_SERVER_VERSION, require_postgresql, version_problem
from pgflow_django.management import commands
from pgflow_django.management.cli import PgflowCommand
from tests.first_hour import fresh_database, manage

LINE = (
    "pgflow needs PostgreSQL >= 15; database alias 'default' is sqlite (django.db.backends.sqlite3): "
    "point DATABASES['default'] at a PostgreSQL server (ENGINE 'django.db.backends.postgresql')"
)

COMMANDS = {
    "pgflow_worker": ["--flow", "example_chain"],
    "pgflow_compile": [],
    "pgflow_start": ["example_chain", "--input", "{}"],
    "pgflow_runs": [],
    "pgflow_audit": [],
    "pgflow_coverage": [],
    "pgflow_delete_flow": ["example_chain", "--yes"],
    "pgflow_pause": ["example_chain"],
    "pgflow_resume": ["example_chain"],
    "pgflow_prune": ["--older-than", "7d"],
    "pgflow_prune_shared": ["default", "--older-than", "7d"],
    "pgflow_requeue_stalled": [],
    "pgflow_metrics": [],
    "pgflow_health": ["--flow", "example_chain"],
}

API_SCRIPT = """
from pgflow_django import get_run, start_flow, start_flows, wait_for_run
from testproject.example.tasks import add
calls = {
    "start_flow": lambda: start_flow("example_chain", {}),
    "start_flows": lambda: start_flows("example_chain", [{}, {}]),
    "get_run": lambda: get_run("6f1b6a4e-0000-4000-8000-000000000000"),
    "wait_for_run": lambda: wait_for_run("6f1b6a4e-0000-4000-8000-000000000000", timeout=1),
    "enqueue": lambda: add.enqueue(1, 2),
    "get_result": lambda: add.get_result("6f1b6a4e-0000-4000-8000-000000000000"),
}
for name, call in calls.items():
    try:
        call()
        print(name, "no error")
    except Exception as exc:
        print(name, type(exc).__name__, exc)
"""


@pytest.fixture
def sqlite(tmp_path: Path) -> dict[str, str]:
    return {"FIRST_HOUR_SQLITE": str(tmp_path / "db.sqlite3")}


@pytest.mark.django_db
@pytest.mark.parametrize("args", [["check"], ["migrate"], ["check", "--database", "default"]])
def test_check_and_migrate_name_the_alias(sqlite: dict[str, str], args: list[str]) -> None:
    result = manage(*args, env=sqlite)
    assert result.returncode == 1
    assert f"default: (pgflow.E020) {LINE}" in result.stderr
    assert "Traceback" not in result.stderr and "pg_namespace" not in result.stderr


@pytest.mark.django_db
def test_migrate_without_checks_stops_before_pgflow_touches_sqlite(sqlite: dict[str, str]) -> None:
    result = manage("migrate", "--skip-checks", env=sqlite)
    assert result.returncode == 1
    assert result.stderr.strip().splitlines() == [f"CommandError: {LINE}"]


@pytest.mark.django_db
@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_every_command_says_one_line(sqlite: dict[str, str], name: str) -> None:
    result = manage(name, *COMMANDS[name], env=sqlite)
    assert result.returncode == 1, result.stderr
    assert result.stderr.strip().splitlines() == [f"CommandError: {LINE}"]


def test_every_pgflow_command_goes_through_the_guard() -> None:
    """The guard lives in ``PgflowCommand.handle``: a command of another base would skip it."""
    for info in pkgutil.iter_modules(commands.__path__):
        if info.name.startswith("pgflow_"):
            command = importlib.import_module(f"{commands.__name__}.{info.name}").Command
            assert issubclass(command, PgflowCommand), info.name


@pytest.mark.django_db
def test_the_python_api_and_the_tasks_backend_say_one_line(sqlite: dict[str, str]) -> None:
    result = manage("shell", "-c", API_SCRIPT, env=sqlite)
    assert result.returncode == 0, result.stderr
    names = ["start_flow", "start_flows", "get_run", "wait_for_run", "enqueue", "get_result"]
    lines = [line for line in result.stdout.splitlines() if line.split(" ")[0] in names]
    assert lines == [f"{name} UnsupportedDatabase {LINE}" for name in names]


@pytest.mark.django_db
def test_the_version_rule_on_the_real_server() -> None:
    real = int(connection.pg_version)  # type: ignore[attr-defined]
    assert real >= MIN_SERVER_VERSION
    assert version_problem("default", real) is None
    require_postgresql("default")
    assert version_problem("default", MIN_SERVER_VERSION) is None
    assert version_problem("default", 140011) == (
        "pgflow needs PostgreSQL >= 15; database alias 'default' is PostgreSQL 14.11: upgrade the server"
    )
    assert version_problem("reports", 90624) == (
        "pgflow needs PostgreSQL >= 15; database alias 'reports' is PostgreSQL 9.6: upgrade the server"
    )


@pytest.mark.django_db(transaction=True)
def test_an_unmigrated_postgresql_database_does_not_block_other_apps() -> None:
    with fresh_database() as url:
        env = {"DATABASE_URL": url}
        check = manage("check", "--database", "default", env=env)
        assert check.returncode == 0, check.stderr
        other = manage("migrate", "contenttypes", env=env)
        assert other.returncode == 0, other.stderr
        assert "Applying contenttypes.0001_initial... OK" in other.stdout
        worker = manage("pgflow_worker", "--flow", "example_chain", env=env)
        assert worker.returncode == 1
        assert "CommandError: the database is not migrated for pgflow" in worker.stderr
