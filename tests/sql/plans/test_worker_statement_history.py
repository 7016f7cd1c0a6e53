"""The statements the worker sends for every batch (the claim, the shared claim, the completion with
its hand-off, the transitions its signals need) read no history table in their own plan: the priority
and trace context of the tasks come from ``pgflow.task_details``, the transitions from
``pgflow.task_transitions``. A client statement is planned under the session's settings, not the hot
path's; on a partitioned history its own probe of ``pgflow.runs`` was priced over every partition, went
past ``jit_above_cost`` with 15 daily partitions, and was JIT-compiled on each execution (a completion
took about 50 ms instead of 3)."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from django.db import connection

from pgflow_django.db.query import Query
from pgflow_django.worker import queries as worker_queries
from tests.sql.plans.support import nodes
from tests.sql.support import make_flow, new_worker, qtable, step

pytestmark = pytest.mark.django_db

HISTORY = ("runs", "step_states", "step_tasks")


def history_reads(query: Query[Any], params: dict[str, Any] | list[Any], **identifiers: str) -> list[str]:
    with connection.cursor() as cursor:
        statement = query.statement(**identifiers)
        text = statement.encode() if isinstance(statement, str) else statement.as_bytes(cursor.cursor)
        cursor.execute(b"explain (verbose, format json) " + text, params)
        (plan,) = cursor.fetchone()[0]
    return [
        f"{node['Node Type']} on {node.get('Schema', '?')}.{node['Relation Name']}"
        for node in nodes(plan["Plan"])
        if node.get("Schema") == "pgflow" and str(node.get("Relation Name", "")).startswith(HISTORY)
    ]


@pytest.mark.parametrize(
    "query",
    [
        worker_queries.CLAIM,
        worker_queries.CLAIM_TRACED,
        worker_queries.CLAIM_SHARED,
        worker_queries.CLAIM_SHARED_TRACED,
    ],
    ids=lambda q: q.name,
)
def test_the_claim_reads_no_history_table_itself(query: Query[Any]) -> None:
    flow = make_flow("plan_claim_hist", step("a"))
    params = {
        "queue": flow,
        "vt": 30,
        "qty": 10,
        "flow": flow,
        "worker": new_worker(flow),
        "step": None,
        "flows": [flow],
        "steps": ["a"],
        "families": [flow],
        "gen_flows": [],
        "gens": [],
    }
    assert history_reads(query, params, table=qtable(flow)) == []


def test_the_completion_with_hand_off_reads_no_history_table_itself() -> None:
    flow = make_flow("plan_hop_hist", step("a"), step("b", "a"))
    params = {
        "items": "[]",
        "queue": flow,
        "worker": new_worker(flow),
        "flows": [flow, flow],
        "steps": ["a", "b"],
        "gens": [1, 1],
        "slots": 10,
        "traced": True,
    }
    assert history_reads(worker_queries.COMPLETE_AND_HAND_OFF, params) == []


def test_the_transitions_for_signals_read_no_history_table_themselves() -> None:
    params = [[uuid.uuid4()], ["a"], [0]]
    assert history_reads(worker_queries.TRANSITIONS, params) == []
