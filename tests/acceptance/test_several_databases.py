"""Two pgflow databases in one Django project (``tests/multidb_settings.py``): the same flow slug
compiled in each, a worker per alias (``--database``), commands given ``--database``; every run lands,
and is worked, only in its own database.

The two databases are made and migrated once for the module on the test server (named after the
test database), emptied before each test and dropped after the last.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import psycopg
import pytest
from django.db import connection

from tests.workers import WorkerProcess, drop_shared_queues, run_manage, url_from_settings, wait_until

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

FLOW = "example_chain"
SETTINGS = "tests.multidb_settings"


class Pair:
    """The two databases' URLs, a direct connection to each, and ``manage.py`` on both aliases."""

    def __init__(self, database_url: str) -> None:
        parts = urlsplit(database_url)
        base = parts.path.lstrip("/")
        self.server = urlunsplit(parts._replace(path="/postgres"))
        self.names = {"default": f"{base}_multi_a", "second": f"{base}_multi_b"}
        self.urls = {alias: urlunsplit(parts._replace(path=f"/{name}")) for alias, name in self.names.items()}
        with psycopg.connect(self.server, autocommit=True) as conn:
            for name in self.names.values():
                conn.execute(f'drop database if exists "{name}" with (force)')
                conn.execute(f'create database "{name}"')
        self.env = {
            "DJANGO_SETTINGS_MODULE": SETTINGS,
            "PGFLOW_TEST_URL_A": self.urls["default"],
            "PGFLOW_TEST_URL_B": self.urls["second"],
        }
        self.conns = {alias: psycopg.connect(url, autocommit=True) for alias, url in self.urls.items()}

    def manage(self, *args: str) -> Any:
        result = run_manage(self.urls["default"], *args, env=self.env, timeout=300)
        assert result.returncode == 0, result.stdout + result.stderr
        return result

    def rows(self, alias: str, query: str, params: Any = None) -> list[tuple[Any, ...]]:
        return self.conns[alias].execute(query, params).fetchall()

    def runs(self, alias: str) -> dict[str, str]:
        return {
            str(run_id): status
            for run_id, status in self.rows(alias, "select run_id, status from pgflow.runs")
        }

    def reset(self) -> None:
        """Both databases as migrated: no schedule, flow, run, worker row or shared queue."""
        for conn in self.conns.values():
            with conn.cursor() as cursor:
                cursor.execute("delete from pgflow.schedules")
                cursor.execute("select pgflow.delete_flow_and_data(flow_slug) from pgflow.flows")
                cursor.execute("delete from pgflow.workers")
                drop_shared_queues(cursor)

    def close(self) -> None:
        for conn in self.conns.values():
            conn.close()
        with psycopg.connect(self.server, autocommit=True) as conn:
            for name in self.names.values():
                conn.execute(f'drop database if exists "{name}" with (force)')


@pytest.fixture(scope="module")
def migrated_pair(django_db_setup: None, django_db_blocker: Any) -> Iterator[Pair]:
    """The two databases, migrated once for the module: each ``migrate`` is a subprocess of seconds."""
    with django_db_blocker.unblock():
        databases = Pair(url_from_settings(connection.settings_dict))
    try:
        databases.manage("migrate", "--noinput")
        databases.manage("migrate", "--noinput", "--database", "second")
        yield databases
    finally:
        databases.close()


@pytest.fixture
def pair(database_url: str, migrated_pair: Pair) -> Pair:
    migrated_pair.reset()
    return migrated_pair


@pytest.fixture
def spawn(pair: Pair, tmp_path: Path) -> Iterator[Any]:
    started: list[WorkerProcess] = []

    def start(alias: str) -> WorkerProcess:
        with pytest.MonkeyPatch.context() as patch:
            for key, value in pair.env.items():
                patch.setenv(key, value)
            log = tmp_path / f"worker-{alias}-{len(started)}.log"
            worker = WorkerProcess(
                pair.urls["default"], FLOW, ["--database", alias, "--poll-interval", "0.2"], log
            )
        started.append(worker)
        return worker.wait_ready()

    yield start
    for worker in started:
        worker.stop()


def start_runs(pair: Pair, alias: str, count: int, first: int) -> list[str]:
    return [
        pair.manage(
            "pgflow_start", FLOW, "--input", json.dumps({"n": first + i}), "--database", alias
        ).stdout.strip()
        for i in range(count)
    ]


def test_a_worker_per_alias_works_only_its_own_database(pair: Pair, spawn: Any) -> None:
    pair.manage("pgflow_compile", FLOW)
    pair.manage("pgflow_compile", FLOW, "--database", "second")
    in_a = start_runs(pair, "default", 3, 0)
    in_b = start_runs(pair, "second", 2, 100)
    assert set(pair.runs("default")) == set(in_a) and set(pair.runs("second")) == set(in_b)

    worker_b = spawn("second")
    wait_until(
        lambda: set(pair.runs("second").values()) == {"completed"}, 30, "the runs of the second database"
    )
    assert set(pair.runs("default").values()) == {"started"}, (
        "the second database's worker took nothing of the first"
    )
    assert pair.rows("default", "select count(*) from pgflow.step_tasks where status <> 'queued'") == [(0,)]

    spawn("default")
    wait_until(
        lambda: set(pair.runs("default").values()) == {"completed"}, 30, "the runs of the first database"
    )
    outputs = dict(pair.rows("second", "select run_id::text, output from pgflow.runs"))
    assert sorted(output["third"]["flow_n"] for output in outputs.values()) == [100, 101]
    assert f"database=second ({pair.names['second']}@" in worker_b.log()

    listed = json.loads(
        pair.manage("pgflow_runs", "--flow", FLOW, "--format", "json", "--database", "second").stdout
    )
    assert sorted(run["run_id"] for run in listed) == sorted(in_b)
    workers = {alias: pair.rows(alias, "select count(*) from pgflow.workers")[0][0] for alias in pair.conns}
    assert workers == {"default": 1, "second": 1}


def test_an_unknown_alias_is_one_line_listing_the_aliases(pair: Pair) -> None:
    result = run_manage(pair.urls["default"], "pgflow_runs", "--database", "third", env=pair.env)
    assert result.returncode != 0
    assert result.stderr.strip().splitlines() == [
        "CommandError: unknown database alias 'third'; DATABASES has: default, second"
    ], result.stderr


def test_a_tasks_worker_serves_the_backend_of_its_database(pair: Pair) -> None:
    enqueue = (
        "from testproject.example.tasks import add; from tests.multidb_tasks import add_second; "
        "print(add_second.enqueue(2, 3).id); print(add.enqueue(4, 5).id)"
    )
    in_b, in_a = pair.manage("shell", "-c", enqueue).stdout.split()[-2:]
    assert set(pair.runs("second")) == {in_b} and set(pair.runs("default")) == {in_a}

    pair.manage("pgflow_worker", "--tasks", "--database", "second", "--until-empty")
    assert pair.runs("second") == {in_b: "completed"}
    assert pair.rows("second", "select output from pgflow.runs") == [({"call": 5},)]
    assert pair.runs("default") == {in_a: "started"}, "the other database's task waits for its own worker"

    pair.manage("pgflow_worker", "--tasks", "--until-empty")
    assert pair.runs("default") == {in_a: "completed"}


def test_schedules_are_listed_paused_and_triggered_on_the_chosen_alias(pair: Pair) -> None:
    pair.manage("pgflow_compile", FLOW, "--database", "second")
    create = (
        "from pgflow_django.schedules import create_schedule; "
        "create_schedule('example_chain', cron='0 3 * * *', input={'n': 7}, name='nightly', using='second')"
    )
    pair.manage("shell", "-c", create)
    listed = json.loads(pair.manage("pgflow_schedules", "--format", "json", "--database", "second").stdout)
    assert [schedule["name"] for schedule in listed] == ["nightly"]
    assert json.loads(pair.manage("pgflow_schedules", "--format", "json").stdout) == []

    pair.manage("pgflow_schedules", "pause", "nightly", "--database", "second")
    assert pair.rows("second", "select paused_reason from pgflow.schedules") == [("operator",)]
    pair.manage("pgflow_schedules", "trigger", "nightly", "--database", "second")
    assert list(pair.runs("second").values()) == ["started"] and pair.runs("default") == {}
