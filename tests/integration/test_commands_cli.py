"""The contract every ``pgflow_*`` command keeps: ``--help`` explains and exits 0, a bad argument is one
line on stderr and exit 2, a database problem is one line and exit 1.

In this process for each command (``run``); as a real ``manage.py`` once, with ``--traceback``, and for
the databases that are not the test's (unreachable, not migrated)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from django.db import connection

from tests import workers
from tests.integration.commands_support import manage, manage_in_process, stderr_lines

COMMANDS = [
    "pgflow_compile",
    "pgflow_start",
    "pgflow_runs",
    "pgflow_requeue_stalled",
    "pgflow_prune",
    "pgflow_delete_flow",
    "pgflow_versions",
    "pgflow_retry",
    "pgflow_run_now",
    "pgflow_demo",
    "pgflow_scheduler",
]


@pytest.fixture(scope="module")
def test_database_url(django_db_setup: None, django_db_blocker: Any) -> str:
    """The test database's URL, for processes that must not need a committed transaction."""
    with django_db_blocker.unblock():
        return workers.url_from_settings(connection.settings_dict)


@pytest.mark.parametrize("command", COMMANDS)
def test_help_explains_with_examples(command: str) -> None:
    result = manage_in_process(command, "--help")
    assert result.returncode == 0, result.stderr
    assert "examples:" in result.stdout
    assert result.stderr == ""


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["pgflow_compile", "--format", "xml"], "argument --format: invalid choice: 'xml'"),
        (["pgflow_start"], "the following arguments are required: FLOW, --input"),
        (["pgflow_start", "cmd_greet", "--input", "{}", "--run-id", "42"], "'42' is not a UUID"),
        (["pgflow_start", "cmd_greet", "--input", "{}", "--wait", "--timeout", "0"], "seconds > 0"),
        (["pgflow_runs", "--limit", "0"], "argument --limit: expected a whole number >= 1"),
        (
            ["pgflow_worker", "--prefetch", "-1"],
            "argument --prefetch: expected a whole number >= 0, got '-1'",
        ),
        (["pgflow_runs", "--status", "done"], "argument --status: invalid choice: 'done'"),
        (["pgflow_requeue_stalled", "--now"], "unrecognized arguments: --now"),
        (["pgflow_prune", "--older-than", "7x"], "invalid duration '7x'"),
        (["pgflow_prune"], "the following arguments are required: --older-than"),
        (["pgflow_delete_flow"], "the following arguments are required: FLOW"),
        (["pgflow_versions"], "the following arguments are required: FLOW"),
        (["pgflow_retry", "--failed-since", "soon"], "invalid duration 'soon'"),
        (["pgflow_run_now", "not-a-run"], "'not-a-run' is not a UUID"),
        (["pgflow_versions", "orders", "--format", "yaml"], "argument --format: invalid choice: 'yaml'"),
        (["pgflow_demo", "--runs", "0"], "argument --runs: expected a whole number >= 1"),
        (["pgflow_scheduler", "--interval", "0"], "argument --interval: expected a number of seconds > 0"),
        (
            ["pgflow_scheduler", "--once", "--now", "2026-05-01T10:00"],
            "expected an ISO timestamp with an offset",
        ),
    ],
)
def test_bad_arguments_are_one_line_and_exit_2(args: list[str], message: str) -> None:
    result = manage_in_process(*args)
    assert result.returncode == 2
    lines = stderr_lines(result)
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith(f"manage.py {args[0]}: error: ")
    assert message in lines[0]
    assert lines[0].endswith("(see --help)")


def test_a_real_process_exits_2_on_a_bad_argument_and_shows_the_traceback_when_asked(
    test_database_url: str,
) -> None:
    refused = manage(test_database_url, "pgflow_runs", "--limit", "0")
    assert refused.returncode == 2
    assert stderr_lines(refused) == [
        "manage.py pgflow_runs: error: argument --limit: expected a whole number >= 1, got '0' (see --help)"
    ]
    traced = manage(test_database_url, "pgflow_start", "cmd_nope", "--input", "{}", "--traceback")
    assert traced.returncode == 1
    assert stderr_lines(traced)[0] == "Traceback (most recent call last):"
    assert stderr_lines(traced)[-1].startswith("django.core.management.base.CommandError: ")


def test_an_unreachable_database_is_one_line(tmp_path: Any) -> None:
    result = workers.run_manage("postgresql://postgres@127.0.0.1:1/nowhere", "pgflow_runs", timeout=60)
    assert result.returncode == 1
    lines = stderr_lines(result)
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("CommandError: cannot connect to the database: ")


@pytest.fixture
def empty_database_url(test_database_url: str) -> Iterator[str]:
    """A database of its own with nothing migrated (created and dropped outside the test transaction)."""
    name = f"{connection.settings_dict['NAME']}_empty"
    admin = psycopg.connect(test_database_url, autocommit=True)
    try:
        admin.execute(f'drop database if exists "{name}"')
        admin.execute(f'create database "{name}"')
        yield workers.url_from_settings({**connection.settings_dict, "NAME": name})
    finally:
        admin.execute(f'drop database if exists "{name}" with (force)')
        admin.close()


@pytest.mark.parametrize(
    "args",
    [
        ["pgflow_runs"],
        ["pgflow_requeue_stalled"],
        ["pgflow_prune", "--older-than", "7d"],
        ["pgflow_start", "cmd_greet", "--input", "{}"],
    ],
)
def test_an_unmigrated_database_says_migrate(empty_database_url: str, args: list[str]) -> None:
    result = manage(empty_database_url, *args)
    assert result.returncode == 1
    lines = stderr_lines(result)
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("CommandError: the database is not migrated for pgflow")
    assert lines[0].endswith("run `manage.py migrate`")
