"""Start-up refusals: one clear line and a non-zero exit, before registering or polling."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from django.db import connection

from tests.sql.support import val
from tests.workers import run_manage, url_from_settings

pytestmark = pytest.mark.django_db(transaction=True)


def error_line(result: object) -> str:
    stderr = getattr(result, "stderr", "")
    lines = [line for line in stderr.strip().splitlines() if line.strip()]
    assert len(lines) == 1, f"expected one line on stderr, got:\n{stderr}"
    return lines[0]


def workers() -> int:
    return int(val("select count(*) from pgflow.workers"))


def test_unknown_flow(database_url: str) -> None:
    before = workers()
    result = run_manage(database_url, "pgflow_worker", "--flow", "no_such_flow")
    assert result.returncode != 0
    line = error_line(result)
    assert "no registered flow 'no_such_flow'" in line
    assert "example_chain" in line
    assert workers() == before


def test_step_needs_its_flow(database_url: str) -> None:
    result = run_manage(database_url, "pgflow_worker", "--step", "first")
    assert result.returncode != 0
    assert "--step selects one step of one step-queued flow: pass exactly one --flow" in error_line(result)


@pytest.mark.parametrize(
    ("option", "value"), [("--concurrency", "0"), ("--batch-size", "-1"), ("--poll-interval", "0")]
)
def test_bad_option_values(database_url: str, option: str, value: str) -> None:
    result = run_manage(database_url, "pgflow_worker", "--flow", "example_chain", option, value)
    assert result.returncode != 0
    assert option.lstrip("-") in error_line(result)


@pytest.fixture
def unmigrated_url() -> Iterator[str]:
    """An empty database on the same server: nothing of pgflow is installed there."""
    name = f"test_unmigrated_{uuid.uuid4().hex[:8]}"
    with connection.cursor() as cursor:
        cursor.execute(f'create database "{name}"')
    try:
        yield url_from_settings({**connection.settings_dict, "NAME": name})
    finally:
        with connection.cursor() as cursor:
            cursor.execute(f'drop database if exists "{name}" with (force)')


def test_database_not_migrated(unmigrated_url: str) -> None:
    result = run_manage(unmigrated_url, "pgflow_worker", "--flow", "example_chain")
    assert result.returncode != 0
    line = error_line(result)
    assert "not migrated" in line
    assert "manage.py migrate" in line


def test_changed_flow_is_refused_without_recompile(database_url: str, clean_example_flows: None) -> None:
    with connection.cursor() as cursor:
        cursor.execute("select pgflow.create_flow('example_chain')")
        cursor.execute("select pgflow.add_step('example_chain', 'something_else')")
    before = workers()
    result = run_manage(
        database_url,
        "pgflow_worker",
        "--flow",
        "example_chain",
        env={"DJANGO_DEBUG": "0", "PGFLOW_ON_SHAPE_CHANGE": "refuse"},
    )
    assert result.returncode != 0
    assert "differs from its compiled definition" in error_line(result)
    assert workers() == before
