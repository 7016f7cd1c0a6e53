"""``manage.py pgflow_partition`` as a real process on a database of its own: the plan changes nothing,
``--yes`` partitions the history and the queue archives, ``--status`` says so, and ``--archives``
partitions the archives of a history partitioned before they could be, with one-line refusals. The
first test runs docs/howto/partition-history.md's blocks as the page shows them."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from django.db import connection

from tests import workers
from tests.docs_commands import blocks, manage_py_lines
from tests.integration.commands_support import manage, stderr_lines
from tests.sql.interleavings.support import Background


@pytest.fixture(scope="module")
def template_name(django_db_setup: None, django_db_blocker: Any) -> Iterator[str]:
    """A migrated database with one compiled flow, made once for the module (``migrate`` and
    ``pgflow_compile`` are subprocesses of seconds each), from which each test copies its own."""
    with django_db_blocker.unblock():
        settings = dict(connection.settings_dict)
    name = f"{settings['NAME']}_partition_template"
    url = workers.url_from_settings({**settings, "NAME": name})
    with _admin(settings) as admin:
        admin.execute(f'drop database if exists "{name}" with (force)')
        admin.execute(f'create database "{name}"')
    try:
        for args in (("migrate", "-v0"), ("pgflow_compile", "cmd_greet")):
            result = manage(url, *args)
            assert result.returncode == 0, result.stderr
        yield name
    finally:
        with _admin(settings) as admin:
            admin.execute(f'drop database if exists "{name}" with (force)')


@pytest.fixture
def database_url(template_name: str, django_db_blocker: Any) -> Iterator[str]:
    """A database of its own, copied from the template (created and dropped outside the test
    transaction: partitioning commits)."""
    with django_db_blocker.unblock():
        settings = dict(connection.settings_dict)
    name = f"{settings['NAME']}_partition"
    with _admin(settings) as admin:
        admin.execute(f'drop database if exists "{name}" with (force)')
        admin.execute(f'create database "{name}" template "{template_name}"')
    try:
        yield workers.url_from_settings({**settings, "NAME": name})
    finally:
        with _admin(settings) as admin:
            admin.execute(f'drop database if exists "{name}" with (force)')


def _admin(settings: dict[str, Any]) -> psycopg.Connection[Any]:
    return psycopg.connect(workers.url_from_settings(settings), autocommit=True)


def _archive_kind(url: str) -> str:
    with psycopg.connect(url) as conn:
        row = conn.execute(
            "select relkind::text from pg_class where oid = 'pgmq.a_cmd_greet'::regclass"
        ).fetchone()
    assert row is not None
    return str(row[0])


def _one_error(result: Any) -> str:
    assert result.returncode == 1, result.stdout
    lines = stderr_lines(result)
    assert len(lines) == 1, result.stderr
    return lines[0]


def test_partitioning_the_history_and_its_archives(database_url: str) -> None:
    """With the commands of docs/howto/partition-history.md, block by block: the plan, the weekly
    partitioning, its status as the page shows it (digits aside), the pruning, the query that lists
    the partitions and turning JIT off."""
    page = "howto/partition-history.md"
    [[plan], [apply, status], [prune]] = [
        [words[1:] for words in manage_py_lines(block)] for block in blocks(page, "sh")
    ]
    [status_shown] = blocks(page, "text")
    listing, jit = blocks(page, "sql")

    refused = _one_error(manage(database_url, "pgflow_partition", "--archives"))
    assert refused == (
        "CommandError: the history is not partitioned: run pgflow_partition without --archives "
        "(it partitions the queue archives too)"
    )
    planned = manage(database_url, *plan)
    assert planned.returncode == 0, planned.stderr
    assert "select pgflow.partition_queue_archive('cmd_greet');" in planned.stdout.splitlines()
    assert planned.stdout.rstrip().endswith("run again with --yes")
    assert _archive_kind(database_url) == "r", "the plan changes nothing"

    applied = manage(database_url, *apply)
    assert applied.returncode == 0, applied.stderr
    assert _archive_kind(database_url) == "p"
    shown = manage(database_url, *status)
    assert shown.stdout.splitlines()[-1] == "queue archives: 1 of 1 partitioned"
    assert shown.stdout.startswith("partitioned: 7 day(s) per partition")
    masked = [re.sub(r"\d+", "N", text).splitlines() for text in (shown.stdout, status_shown)]
    assert masked[0] == masked[1]
    again = _one_error(manage(database_url, "pgflow_partition", "--archives"))
    assert again == "CommandError: the queue archives are already partitioned: nothing to do (see --status)"

    pruned = manage(database_url, *prune, "--format", "json")  # the page's line, counted as it says
    assert pruned.returncode == 0, pruned.stderr
    counts = json.loads(pruned.stdout)
    assert counts["partitions"] == 0, counts  # a fresh history has no interval older than 30 days
    with psycopg.connect(database_url) as conn:
        partitions = [row[0] for row in conn.execute(listing).fetchall()]
        name = conn.execute("select current_database()").fetchone()
    assert "runs_default" in partitions and any(re.fullmatch(r"runs_p\d{8}", each) for each in partitions)
    assert name is not None and jit.strip() == "alter database mydb set jit = off;"
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute(jit.replace("mydb", f'"{name[0]}"'))
    with psycopg.connect(database_url) as conn:
        assert conn.execute("show jit").fetchone() == ("off",)


def _partition_as_migration_0031_did(database_url: str) -> None:
    """The history partitioned by the development migrations before 0032_archive_partitions (squashed into
    0007_squashed_0038 since): partition_history's steps without the queue archives', recorded with
    ``archives`` false, as 0032 found such a history."""
    with psycopg.connect(database_url) as conn:
        conn.execute("set local search_path = pg_catalog, pgflow, pgmq")  # as partition_history runs them
        steps = [row[0] for row in conn.execute("select pgflow.partition_history('1 day', 3, false)")]
        record = "insert into pgflow.history_partitioning (partition_interval, ahead, archives) values "
        assert sum(step.startswith(record) and step.endswith(", true)") for step in steps) == 1
        assert any(step.startswith("select pgflow.partition_queue_archive(") for step in steps)
        for step in steps:
            if step.startswith(record):
                step = step.removesuffix(", true)") + ", false)"
            if not step.startswith("select pgflow.partition_queue_archive("):
                conn.execute(step)


def test_archives_of_a_history_partitioned_before_they_could_be(database_url: str) -> None:
    _partition_as_migration_0031_did(database_url)
    status = manage(database_url, "pgflow_partition", "--status")
    assert status.stdout.splitlines()[-1] == (
        "queue archives: not partitioned (pgflow_partition --archives prints the plan)"
    )
    plan = manage(database_url, "pgflow_partition", "--archives")
    assert plan.stdout.splitlines() == [
        "update pgflow.history_partitioning set archives = true;",
        "select pgflow.partition_queue_archive('cmd_greet');",
        "-- nothing changed: 2 statement(s) above; run again with --yes",
    ]
    assert _archive_kind(database_url) == "r"
    applied = manage(database_url, "pgflow_partition", "--archives", "--yes")
    assert applied.returncode == 0, applied.stderr
    assert _archive_kind(database_url) == "p"
    status = manage(database_url, "pgflow_partition", "--status")
    assert status.stdout.splitlines()[-1] == "queue archives: 1 of 1 partitioned"


def test_partitioning_the_archive_under_a_draining_worker_loses_and_repeats_nothing(
    database_url: str,
) -> None:
    _partition_as_migration_0031_did(database_url)
    runs = 3000
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute(
            "select count(*) from pgflow.start_flows('cmd_greet',"
            " (select jsonb_agg(jsonb_build_object('name', g)) from generate_series(1, %s) as g))",
            [runs],
        )
    worker = Background(
        lambda: manage(database_url, "pgflow_worker", "--flow", "cmd_greet", "--until-empty", timeout=300)
    )
    with psycopg.connect(database_url, autocommit=True) as conn:
        workers.wait_until(
            lambda: conn.execute("select count(*) from pgmq.a_cmd_greet").fetchone() != (0,),
            60,
            "the worker's first completions",
        )
    applied = manage(database_url, "pgflow_partition", "--archives", "--yes")
    assert applied.returncode == 0, applied.stderr
    finished = worker.result(timeout=300)
    assert finished.returncode == 0, finished.stderr
    with psycopg.connect(database_url) as conn:
        statuses = conn.execute("select status, count(*) from pgflow.runs group by status").fetchall()
        archived = conn.execute("select count(*), count(distinct msg_id) from pgmq.a_cmd_greet").fetchone()
        unmatched = conn.execute(
            "select count(*) from pgflow.step_tasks as t"
            " where not exists (select 1 from pgmq.a_cmd_greet as a where a.msg_id = t.message_id)"
        ).fetchone()
        live = conn.execute("select count(*) from pgmq.q_cmd_greet").fetchone()
        attempts = conn.execute("select max(attempts_count) from pgflow.step_tasks").fetchone()
    assert statuses == [("completed", runs)]
    assert archived is not None and archived[0] == archived[1] == 2 * runs, (
        "every task's message archived once"
    )
    assert unmatched == (0,) and live == (0,) and attempts == (1,)
    assert _archive_kind(database_url) == "p"
