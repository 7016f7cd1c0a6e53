"""The coordinated-upgrade boundary, in both mismatched directions (issue 4, item 9).

- Upgraded database + a worker of the previous release (``tests/previous_release_client.py``, protocol 1):
  refused at start-up, before it registers or polls, with an error that says to deploy the new worker.
  A previous-release worker that was already running (the drain window) still claims with the
  3-argument ``start_tasks`` and completes, through the flow's default queue.
- Previous database (the test database migrated back to 0002) + the new worker
  (``manage.py pgflow_worker``): refused before it registers or polls, with an error that says to migrate.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.db.migrations.loader import MigrationLoader

from tests import workers
from tests.previous_release_client import IncompatibleDatabase, LegacyTask, PreviousReleaseWorker
from tests.sql.support import compile_flow, q, shape, shape_step, start, val
from tests.tasks_support import clean_task_flows

pytestmark = pytest.mark.django_db(transaction=True)

APP = "pgflow"
PREVIOUS = "0002_core"
SHAPE = shape(shape_step("first"), shape_step("second", "first"))
FLOWS = ("boundary_new", "DrainChain", "boundary_prev")


def _latest() -> str:
    return sorted(
        name for app, name in MigrationLoader(None, ignore_no_migrations=True).disk_migrations if app == APP
    )[-1]


def _applied() -> list[str]:
    """The applied pgflow migrations on disk (not the names a squashed migration replaces)."""
    loader = MigrationLoader(connection)
    return sorted(
        name for app, name in loader.applied_migrations if app == APP and (app, name) in loader.graph.nodes
    )


def _clean(cursor: Any) -> None:
    """Remove this module's flows (with runs and queues) and worker rows; valid SQL at 0002 and later."""
    cursor.execute(
        "select pgflow.delete_flow_and_data(flow_slug) from pgflow.flows where flow_slug = any(%s)",
        [list(FLOWS)],
    )
    cursor.execute(
        "delete from pgflow.workers where lower(queue_name) = any(%s)", [[f.lower() for f in FLOWS]]
    )
    workers.clean_example_flows(cursor)


@pytest.fixture
def cleanup() -> Iterator[Any]:
    with connection.cursor() as cursor:
        _clean(cursor)
        yield cursor
        _clean(cursor)


def _handler(task: LegacyTask) -> Any:
    return {"step": task.step_slug, "seen": task.input}


def _read_counts(queue: str) -> list[tuple[int, int]]:
    return [
        (r["msg_id"], r["read_ct"]) for r in q(f"select msg_id, read_ct from pgmq.q_{queue} order by msg_id")
    ]


# ------------------------------------------------------------------ upgraded database, previous worker


def test_previous_release_worker_is_refused_before_registering_or_polling(cleanup: Any) -> None:
    assert val("select pgflow.protocol_version() as v") == 4
    compile_flow("boundary_new", SHAPE)
    start("boundary_new", {"n": 1})
    workers_before = q("select * from pgflow.workers order by worker_id")
    messages_before = _read_counts("boundary_new")
    assert messages_before == [(1, 0)]

    client = PreviousReleaseWorker(cleanup, "boundary_new", SHAPE)
    with pytest.raises(IncompatibleDatabase) as refused:
        client.start()

    message = str(refused.value)
    assert "protocol 4" in message
    assert "deploy the new worker" in message
    assert not client.registered
    assert q("select * from pgflow.workers order by worker_id") == workers_before
    assert _read_counts("boundary_new") == messages_before, "the refused worker read nothing"


def test_previous_release_worker_drains_through_the_default_queue(cleanup: Any) -> None:
    """A worker of the previous release, started before the upgrade, keeps claiming (3-argument
    start_tasks) and completing during the drain window: its mixed-case flow's default queue is found
    through lower(flow_slug)."""
    compile_flow("DrainChain", SHAPE)
    runs = [start("DrainChain", {"n": n}) for n in range(3)]
    assert {
        r["queue_name"] for r in q("select queue_name from pgflow.step_tasks where flow_slug = 'DrainChain'")
    } == {"drainchain"}
    client = PreviousReleaseWorker(cleanup, "DrainChain", SHAPE)
    client.register()  # it checked the database when it started, before the upgrade

    outcomes = client.drain(_handler)

    assert outcomes == ["completed"] * 6
    statuses = q(
        "select run_id, status, output from pgflow.runs where flow_slug = 'DrainChain' order by run_id"
    )
    assert {r["run_id"] for r in statuses} == set(runs)
    assert {r["status"] for r in statuses} == {"completed"}
    tasks = q(
        "select queue_name, message_id, status, last_worker_id from pgflow.step_tasks "
        "where flow_slug = 'DrainChain'"
    )
    assert {(t["queue_name"], t["status"], t["last_worker_id"]) for t in tasks} == {
        ("drainchain", "completed", client.worker_id)
    }
    archived = {r["msg_id"] for r in q("select msg_id from pgmq.a_drainchain")}
    assert archived == {t["message_id"] for t in tasks}
    assert q("select count(*) as n from pgmq.q_drainchain") == [{"n": 0}]
    assert q("select * from pgflow.worker_pauses") == []
    client.stop()


# ------------------------------------------------------------------ previous database, new worker


@pytest.fixture
def previous_database(cleanup: Any) -> Iterator[Any]:
    """The test database migrated back to the previous release (0002); forward again afterwards."""
    latest = _latest()
    # the downs of 0006 and 0005 refuse while routed or step-queued flows or shared queues exist: tests
    # that committed (task flows, the support flows) may have left some in this worker's database
    clean_task_flows()
    with connection.cursor() as cursor:
        cursor.execute(
            "select pgflow.delete_flow_and_data(flow_slug) from pgflow.flows where queue_mode <> 'flow'"
        )
        workers.drop_shared_queues(cursor)
    MigrationExecutor(connection).migrate([(APP, PREVIOUS)])
    assert _applied()[-1] == PREVIOUS
    try:
        with connection.cursor() as cursor:
            yield cursor
    finally:
        with connection.cursor() as cursor:
            _clean(cursor)
        MigrationExecutor(connection).migrate([(APP, latest)])
        assert _applied()[-1] == latest


def test_new_worker_is_refused_on_the_previous_database(previous_database: Any) -> None:
    cursor = previous_database
    assert val("select pgflow.protocol_version() as v") == 1

    # The previous release's own worker works on its database: the client is a faithful control.
    client = PreviousReleaseWorker(cursor, "boundary_prev", SHAPE)
    assert client.start() == "compiled"
    start("boundary_prev", {"n": 1})
    assert client.drain(_handler) == ["completed", "completed"]
    client.stop()

    # Work waiting for the new worker: example_chain, created through the previous release's API.
    cursor.execute("select pgflow.create_flow('example_chain', timeout => 10)")
    cursor.execute("select pgflow.add_step('example_chain', 'first')")
    cursor.execute("select pgflow.add_step('example_chain', 'second', array['first'])")
    cursor.execute("select pgflow.add_step('example_chain', 'third', array['second'])")
    start("example_chain", {"n": 1})
    workers_before = q("select * from pgflow.workers order by worker_id")
    messages_before = _read_counts("example_chain")
    assert messages_before == [(1, 0)]

    url = workers.url_from_settings(connection.settings_dict)
    result = workers.run_manage(url, "pgflow_worker", "--flow", "example_chain", timeout=60)

    assert result.returncode == 1, result.stdout + result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    assert "manage.py migrate" in lines[0]
    assert "not migrated" in lines[0]
    assert q("select * from pgflow.workers order by worker_id") == workers_before
    assert _read_counts("example_chain") == messages_before, "the refused worker read nothing"
    assert _applied()[-1] == PREVIOUS
