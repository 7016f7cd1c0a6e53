"""kill -9 of the worker that is starting a child run: the child is started inside the completion
that starts the parent's subflow step, so the dead worker's transaction leaves either no child (and
stalled recovery runs the step before it again) or its one child; after recovery and a new worker,
every parcel has exactly one child run and the order completes."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator

import pytest
from django.db import connection

from pgflow_django import compile_flow, get_run, start_flow
from tests.integration.durable.docs_flows import orders, shipping
from tests.sql.support import other_connection, q, val
from tests.workers import spawn_worker_process, wait_until

pytestmark = pytest.mark.django_db(transaction=True)

FAST = ("--poll-interval", "0.2", "--heartbeat-seconds", "0.5", "--stalled-check-seconds", "0.5")


@pytest.fixture
def flows() -> Iterator[None]:
    compile_flow(orders)
    yield
    with connection.cursor() as cursor:
        for flow in (orders, shipping):
            cursor.execute("select pgflow.delete_flow_and_data(%s)", [flow.slug])


def finished(run_id: object) -> object:
    run = get_run(run_id)
    return run if run.status != "started" else None


def worker(database_url: str) -> subprocess.Popen[str]:
    return spawn_worker_process(database_url, *FAST, settings="tests.durable_settings")


def test_a_worker_killed_while_starting_children_leaves_one_child_per_parcel(
    database_url: str, flows: None
) -> None:
    with other_connection() as holder:
        # every start of a shipping run waits for this lock (start_flows takes it shared)
        holder.execute("select pg_advisory_lock(hashtextextended('pgflow:start:durable_shipping', 0))")
        first = worker(database_url)
        try:
            order = start_flow(orders, {"parcels": [{"id": 1}, {"id": 2}, {"id": 3}]})
            blocked = wait_until(
                lambda: holder.execute(
                    "select pid from pg_stat_activity"
                    " where wait_event = 'advisory' and datname = current_database()"
                ).fetchone(),
                60,
                "the worker's completion to wait for the child start",
            )[0]
            first.kill()
            first.communicate(timeout=30)
        finally:
            holder.execute("select pg_advisory_unlock_all()")
        wait_until(
            lambda: (
                holder.execute("select count(*) from pg_stat_activity where pid = %s", [blocked]).fetchone()
                == (0,)
            ),
            60,
            "the killed worker's backend to end",
        )

    children = val("select count(*) from pgflow.runs where parent_run_id = %s", [order])
    assert children in (0, 3), "the child start is all or nothing with the completion that made it"
    # the dead worker's claims: recovered as stalled-task recovery does once their timeout passes
    q(
        "update pgflow.step_tasks set started_at = now() - interval '1 hour'"
        " where status = 'started' and last_worker_id is not null"
    )
    q("select * from pgflow.requeue_stalled_tasks()")

    second = worker(database_url)
    try:
        run = wait_until(lambda: finished(order), 60, "the order to finish")
    finally:
        second.terminate()
        second.communicate(timeout=30)
    assert run.status == "completed"
    assert run.outputs["confirm"] == {"tracking": ["TRK-1", "TRK-2", "TRK-3"]}
    assert q(
        "select parent_task_index, count(*)::int as n from pgflow.runs where parent_run_id = %s"
        " group by parent_task_index order by 1",
        [order],
    ) == [{"parent_task_index": i, "n": 1} for i in range(3)]
