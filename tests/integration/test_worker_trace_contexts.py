"""A traced worker reads each run's recorded trace context with the task itself, from the claim and
from the completion's hand-off, so no statement of its own reads them; an untraced worker reads none."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from django.db import connection

from pgflow_django import Flow, compile_flow, start_flows
from pgflow_django.db.connect import connection_params
from pgflow_django.worker.connection import Engine, HandOffScope, completion_item
from tests.sql.support import q, val

pytestmark = pytest.mark.django_db(transaction=True)

chain = Flow("wtest_trace_ctx")


@chain.step()
def first(flow_input: Any) -> Any:
    return flow_input


@chain.step(depends_on=[first])
def second(deps: Any) -> Any:
    return deps


CONTEXT = {"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}


@pytest.fixture
def engine(transactional_db: None) -> Iterator[Engine]:
    compile_flow(chain, on_change="replace")
    engine = Engine(connection_params(), "test")
    yield engine
    engine.close()
    with connection.cursor() as cursor:
        cursor.execute("select pgflow.delete_flow_and_data(%s)", [chain.slug])


def started_runs() -> tuple[uuid.UUID, uuid.UUID]:
    """Two runs; only the first was started inside a trace."""
    traced, plain = start_flows(chain, [{"n": 1}, {"n": 2}])
    q("update pgflow.runs set trace_context = %s::jsonb where run_id = %s", [json.dumps(CONTEXT), traced])
    return traced, plain


@pytest.mark.parametrize("traced", [True, False])
def test_the_claim_and_the_hand_off_carry_the_runs_trace_contexts(engine: Engine, traced: bool) -> None:
    traced_run, plain_run = started_runs()
    table = engine.queue_table(chain.slug)
    worker = uuid.uuid4()
    claim = engine.claim(chain.slug, chain.slug, table, worker, 30, 10, traced=traced)
    carried = {task.run_id: task.trace_context for task in claim.tasks}
    assert carried == {traced_run: CONTEXT if traced else None, plain_run: None}

    generation = int(val("select generation as v from pgflow.flows where flow_slug = %s", [chain.slug]))
    support = ((chain.slug, "first"), (chain.slug, "second"))
    scope = HandOffScope(chain.slug, worker, support, {chain.slug: generation}, traced)
    items = "[" + ",".join(completion_item(task, json.dumps(task.input)) for task in claim.tasks) + "]"
    outcomes, handed = engine.complete_and_hand_off(items, scope, 10)
    assert sorted(outcome.outcome for outcome in outcomes) == ["completed", "completed"]
    assert {task.run_id: (task.step_slug, task.trace_context) for task in handed} == {
        traced_run: ("second", CONTEXT if traced else None),
        plain_run: ("second", None),
    }
