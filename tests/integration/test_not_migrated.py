"""A database without pgflow's schema: the Python API and the tasks backend raise one line naming
``manage.py migrate`` (and ``INSTALLED_APPS`` when the app is missing), not ``ProgrammingError:
schema "pgflow" does not exist``.

The API runs in real ``manage.py shell`` processes on a brand-new database of the test server
(tests/first_hour_settings.py; ``FIRST_HOUR_WITHOUT_PGFLOW=1`` leaves the app out), outside and
inside ``transaction.atomic()``. The error is read from the failed statement: a migrated database
pays nothing for it.
"""

from __future__ import annotations

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.db import ProgrammingError, connection, transaction
from django.test.utils import CaptureQueriesContext

from pgflow_django import start_flow
from pgflow_django.db.dbguard import NotMigrated, not_migrated
from tests.first_hour import fresh_database, manage

API_SCRIPT = """
from django.core.exceptions import ImproperlyConfigured
from django.db import transaction
from pgflow_django import (
    cancel_run, compile_flow, get_run, retry_run, run_now, start_flow, start_flows, wait_for_run,
)
from testproject.example.flows import chain
from testproject.example.tasks import add

calls = {
    "start_flow": lambda: start_flow("example_chain", {}),
    "start_flows": lambda: start_flows("example_chain", [{}, {}]),
    "enqueue": lambda: add.enqueue(1, 2),
    "get_run": lambda: get_run("6f1b6a4e-0000-4000-8000-000000000000"),
    "get_result": lambda: add.get_result("6f1b6a4e-0000-4000-8000-000000000000"),
    "compile_flow": lambda: compile_flow(chain),
    "wait_for_run": lambda: wait_for_run("6f1b6a4e-0000-4000-8000-000000000000", timeout=1),
    "cancel_run": lambda: cancel_run("6f1b6a4e-0000-4000-8000-000000000000"),
    "retry_run": lambda: retry_run("6f1b6a4e-0000-4000-8000-000000000000"),
    "run_now": lambda: run_now("6f1b6a4e-0000-4000-8000-000000000000"),
}


def atomic(call):
    def inside():
        with transaction.atomic():
            return call()
    return inside


for name, call in [*calls.items(), *((f"atomic-{name}", atomic(call)) for name, call in calls.items())]:
    try:
        call()
        print(name, "no error")
    except Exception as exc:
        kind = "ImproperlyConfigured" if isinstance(exc, ImproperlyConfigured) else "other"
        print(name, type(exc).__name__, kind, repr(str(exc)))
"""

NAMES = [
    "start_flow",
    "start_flows",
    "enqueue",
    "get_run",
    "get_result",
    "compile_flow",
    "wait_for_run",
    "cancel_run",
    "retry_run",
    "run_now",
]


def api_lines(env: dict[str, str]) -> dict[str, str]:
    result = manage("shell", "-c", API_SCRIPT, env=env)
    assert result.returncode == 0, result.stderr
    lines = {}
    for line in result.stdout.splitlines():
        name, _, rest = line.partition(" ")
        if name.removeprefix("atomic-") in NAMES:
            lines[name] = rest
    assert sorted(lines) == sorted([*NAMES, *(f"atomic-{name}" for name in NAMES)]), result.stdout
    return lines


def missing(name: str) -> str:
    """What PostgreSQL says first when ``name``'s call meets a database without the pgflow schema."""
    if name.removeprefix("atomic-") in {"get_run", "get_result", "wait_for_run"}:
        return 'relation "pgflow.runs" does not exist'
    return 'schema "pgflow" does not exist'


@pytest.mark.django_db(transaction=True)
def test_an_unmigrated_database_says_run_migrate() -> None:
    with fresh_database() as url:
        lines = api_lines({"DATABASE_URL": url})
    for name, rest in lines.items():
        expected = f"the database is not migrated for pgflow ({missing(name)}); run `manage.py migrate`"
        assert rest == f"NotMigrated ImproperlyConfigured {expected!r}", name


@pytest.mark.django_db(transaction=True)
def test_without_the_app_in_installed_apps_it_says_add_it_then_migrate() -> None:
    with fresh_database() as url:
        lines = api_lines({"DATABASE_URL": url, "FIRST_HOUR_WITHOUT_PGFLOW": "1"})
    for name, rest in lines.items():
        expected = (
            "'pgflow_django' is not in INSTALLED_APPS and the database is not migrated for pgflow "
            f"({missing(name)}): add 'pgflow_django' to INSTALLED_APPS, then run `manage.py migrate`"
        )
        assert rest == f"NotMigrated ImproperlyConfigured {expected!r}", name


def failed_statement(sql: str) -> ProgrammingError:
    """The error of ``sql`` on the (migrated) test database, in a savepoint so the test goes on."""
    try:
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute(sql)
    except ProgrammingError as exc:
        return exc
    raise AssertionError(f"{sql} did not fail")


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("sql", "primary"),
    [
        ("select * from pgflow.no_such_table", 'relation "pgflow.no_such_table" does not exist'),
        ("select pgmq.no_such_function()", "function pgmq.no_such_function() does not exist"),
        ("select null::pgflow.no_such_type", 'type "pgflow.no_such_type" does not exist'),
    ],
)
def test_a_missing_pgflow_or_pgmq_object_is_not_migrated(sql: str, primary: str) -> None:
    problem = not_migrated(failed_statement(sql))
    assert str(problem) == f"the database is not migrated for pgflow ({primary}); run `manage.py migrate`"


@pytest.mark.django_db
def test_another_alias_is_named_in_the_migrate_command() -> None:
    exc = failed_statement("select pgflow.no_such_function()")
    problem = not_migrated(exc, "reports")
    assert isinstance(problem, NotMigrated) and isinstance(problem, ImproperlyConfigured)
    assert str(problem) == (
        "database alias 'reports' is not migrated for pgflow (function pgflow.no_such_function() does not "
        "exist); run `manage.py migrate --database reports`"
    )


@pytest.mark.django_db
@pytest.mark.parametrize(
    "sql",
    [
        "select * from no_such_table",  # the project's own missing table: not pgflow's business
        "select no_such_function()",
        "select pgflow.start_flow(",  # syntax error (42601)
        "select * from pgmq.q_no_such_queue",  # a queue dropped by hand: migrate would not bring it back
    ],
)
def test_other_errors_are_left_as_they_are(sql: str) -> None:
    assert not_migrated(failed_statement(sql)) is None


@pytest.mark.django_db
def test_a_migrated_database_pays_no_extra_statement() -> None:
    from pgflow_django import compile_flow
    from testproject.example.flows import chain

    compile_flow(chain)
    with CaptureQueriesContext(connection) as queries:
        start_flow(chain, {"n": 1})
    statements = " ".join(query["sql"] for query in queries.captured_queries).lower()
    for probe in ("pg_namespace", "to_regclass", "to_regnamespace", "pg_proc", "information_schema"):
        assert probe not in statements
