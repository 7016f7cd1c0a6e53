"""The in-process runner ends runs exactly as a worker subprocess does: the same run, step and task rows
(statuses, outputs, errors, attempt counts) for plain, map, conditional, retried, delayed, failed and
skipped cases. Only ids, times and worker ids may differ."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from django.db import connection

from pgflow_django import Flow, compile_flow, start_flow, wait_for_run
from testproject.example import flows as example
from tests.integration.testing import flows as testing_flows
from tests.integration.testing.snapshot import snapshot

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
]

OWN_FLOWS = [testing_flows.retried, testing_flows.failing, testing_flows.skipping]


@pytest.fixture
def clean_testing_flows(clean_example_flows: None) -> Iterator[None]:
    def clean() -> None:
        with connection.cursor() as cursor:
            cursor.execute(
                "select pgflow.delete_flow_and_data(flow_slug) from pgflow.flows where flow_slug = any(%s)",
                [[flow.slug for flow in OWN_FLOWS]],
            )
            cursor.execute(
                "delete from pgflow.workers where queue_name = any(%s)", [[f.slug for f in OWN_FLOWS]]
            )

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

    by_worker = {name: start_flow(flow, flow_input) for name, flow, flow_input in CASES}
    workers = [
        pgflow_worker("--flow", flow.slug, settings="tests.testing_settings", ready=False) for flow in flows
    ]
    for worker in workers:
        worker.wait_ready(90)
    for name, run_id in by_worker.items():
        wait_for_run(run_id, timeout=60)
        assert snapshot(run_id) == in_process[name], name

    # the cases cover what they claim to
    statuses = {name: rows["run"][1] for name, rows in in_process.items()}
    assert statuses["failed after its attempts"] == "failed"
    assert statuses["exhausted map skip-cascade"] == "completed"
    retried_tasks = {row[0]: row[3] for row in in_process["retried, Retry(delay), start_delay"]["tasks"]}
    assert retried_tasks == {"shaky": 3, "asks": 2}
    skipped = {row[0]: row[1] for row in in_process["condition unmet"]["steps"]}
    assert skipped == {"classify": "completed", "big": "skipped", "small": "completed"}
