"""The in-process runner ends runs exactly as a worker subprocess does: the same run, step and task rows
(statuses, outputs, errors, attempt counts) for plain, map, conditional, retried, delayed, failed and
skipped cases, on a flow's queue, on step queues and on shared queues; both as ``drain`` commits
(``TransactionTestCase``) and as ``run_flow`` runs inside a test's transaction (``TestCase``: savepoints,
a claim sent with the previous batch's results). Only ids, times and worker ids may differ."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from django.db import connection, transaction

from pgflow_django import Flow, RoutedFlow, StepQueuedFlow, compile_flow, start_flow, wait_for_run
from testproject.example import flows as example
from tests.integration.testing import flows as testing_flows
from tests.integration.testing.snapshot import snapshot
from tests.workers import drop_shared_queues

CASES: list[tuple[str, Flow, Any]] = [
    ("plain, async and ctx.flow_input", example.chain, {"n": 3}),
    ("map", example.fanout, {"count": 5}),
    ("empty map", example.fanout, {"count": 0}),
    ("condition met", example.condition, {"n": 50}),
    ("condition unmet", example.condition, {"n": 1}),
    ("atomic map", example.ledger, [1, 2, 3]),
    ("retried, Retry(delay), start_delay", testing_flows.retried, {"n": 4}),
    ("failed after its attempts", testing_flows.failing, {"n": 7}),
    # one element: with siblings, which of them a worker records before the failure skips the step
    # depends on its threads' timing (docs/testing.md)
    ("exhausted map skip-cascade", testing_flows.skipping, [2]),
    ("step queues, a map element retried", testing_flows.stepped, {"count": 3}),
    ("shared queues, a map element retried", testing_flows.routed, {"count": 3}),
]

OWN_FLOWS: list[Flow] = [
    testing_flows.retried,
    testing_flows.failing,
    testing_flows.skipping,
    testing_flows.stepped,
    testing_flows.routed,
]

OWN_QUEUES = [
    *(flow.slug for flow in OWN_FLOWS),
    *(testing_flows.stepped.queue_for(step) for step in testing_flows.stepped.steps),
    *testing_flows.SHARED_QUEUES,
]


def wait_for_worker_sessions_to_end(timeout: float = 15.0) -> None:
    """A stopped worker's server sessions (its engine's and its handlers' ORM connections) end a moment
    after its process; waiting for them spares the test database's teardown a refused drop."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with connection.cursor() as cursor:
            cursor.execute(
                "select count(*) from pg_stat_activity where datname = current_database()"
                " and pid <> pg_backend_pid()"
            )
            if cursor.fetchone()[0] == 0:
                return
        time.sleep(0.05)


def worker_arguments(flow: Flow) -> list[list[str]]:
    """The workers a deployment runs for ``flow``: one per flow, per step queue, or per shared queue."""
    if isinstance(flow, StepQueuedFlow):
        return [["--flow", flow.slug, "--step", step] for step in flow.steps]
    if isinstance(flow, RoutedFlow):
        return [["--queue", queue, "--flow", flow.slug] for queue in dict.fromkeys(flow.step_queues.values())]
    return [["--flow", flow.slug]]


@pytest.fixture
def clean_testing_flows(clean_example_flows: None) -> Iterator[None]:
    def clean() -> None:
        with connection.cursor() as cursor:
            cursor.execute(
                "select pgflow.delete_flow_and_data(flow_slug) from pgflow.flows where flow_slug = any(%s)",
                [[flow.slug for flow in OWN_FLOWS]],
            )
            cursor.execute("delete from pgflow.workers where queue_name = any(%s)", [OWN_QUEUES])
            drop_shared_queues(cursor, list(testing_flows.SHARED_QUEUES))

    clean()
    yield
    clean()


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_in_process_rows_match_a_worker_subprocess(
    pgflow: Any, pgflow_worker: Any, clean_testing_flows: None
) -> None:
    flows = list({flow.slug: flow for _, flow, _ in CASES}.values())
    for flow in flows:
        compile_flow(flow)

    in_process = {}
    for name, flow, flow_input in CASES:
        run_id = start_flow(flow, flow_input)
        pgflow.drain(flows=[flow])
        in_process[name] = snapshot(run_id)

    in_transaction = {}
    with transaction.atomic():  # as in TestCase: never committed
        for name, flow, flow_input in CASES:
            in_transaction[name] = snapshot(pgflow.run_flow(flow, flow_input).run_id)
        transaction.set_rollback(True)

    by_worker = {name: start_flow(flow, flow_input) for name, flow, flow_input in CASES}
    workers = [
        pgflow_worker(*arguments, settings="tests.testing_settings", ready=False)
        for flow in flows
        for arguments in worker_arguments(flow)
    ]
    for worker in workers:
        worker.wait_ready(90)
    for name, run_id in by_worker.items():
        wait_for_run(run_id, timeout=60)
        assert snapshot(run_id) == in_process[name], name
        assert in_transaction[name] == in_process[name], name
    for worker in workers:
        worker.stop()
    wait_for_worker_sessions_to_end()

    # the cases cover what they claim to
    statuses = {name: rows["run"][1] for name, rows in in_process.items()}
    assert statuses["failed after its attempts"] == "failed"
    assert statuses["exhausted map skip-cascade"] == "completed"
    retried_tasks = {row[0]: row[3] for row in in_process["retried, Retry(delay), start_delay"]["tasks"]}
    assert retried_tasks == {"shaky": 3, "asks": 2}
    skipped = {row[0]: row[1] for row in in_process["condition unmet"]["steps"]}
    assert skipped == {"classify": "completed", "big": "skipped", "small": "completed"}
    for name in ("step queues, a map element retried", "shared queues, a map element retried"):
        squares = {(row[0], row[1]): row[3] for row in in_process[name]["tasks"]}
        assert squares[("square", 1)] == 2 and sum(squares.values()) == 6, squares
        assert in_process[name]["run"][3] == {"total": 14}
