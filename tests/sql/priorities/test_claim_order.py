"""The worker's claim (``worker_queries.CLAIM``, read and claim in one statement) takes the visible
messages of a queue highest priority first, in message id order (FIFO) within a priority; a retried
message keeps its priority and its place; a hidden message of any priority is not taken."""

from __future__ import annotations

import uuid

import pytest
from django.db import connection

from pgflow_django.db.query import fetch_all
from pgflow_django.worker import queries as worker_queries
from tests.sql.support import fail, make_flow, new_worker, q, q1, qtable, step

pytestmark = pytest.mark.django_db


def start(flow: str, priority: int | None, label: str) -> uuid.UUID:
    row = q1(
        "select run_id from pgflow.start_flow(%s, jsonb_build_object('label', %s::text), null, null,"
        " %s::integer)",
        [flow, label, priority],
    )
    return uuid.UUID(str(row["run_id"]))


def claim(flow: str, worker: uuid.UUID, qty: int = 1) -> list[worker_queries.ClaimRow]:
    with connection.cursor() as cursor:
        rows = fetch_all(
            cursor,
            worker_queries.CLAIM,
            {
                "queue": flow,
                "vt": 30,
                "qty": qty,
                "flow": flow,
                "worker": worker,
                "step": None,
                "gen_flows": [],
                "gens": [],
            },
            table=qtable(flow),
        )
    return [row for row in rows if row.outcome == "claimed"]


def labels(flow: str, rows: list[worker_queries.ClaimRow]) -> list[str]:
    by_run = {
        str(r["run_id"]): r["label"]
        for r in q("select run_id, input->>'label' as label from pgflow.runs where flow_slug = %s", [flow])
    }
    return [by_run[str(row.run_id)] for row in rows]


def test_higher_priority_first_fifo_within_a_priority() -> None:
    flow = make_flow("co_order", step("a"))
    plan = [(0, "z1"), (5, "f1"), (-5, "n1"), (None, "z2"), (5, "f2"), (100, "top"), (-5, "n2"), (0, "z3")]
    for priority, label in plan:
        start(flow, priority, label)
    worker = new_worker(flow)
    taken = [labels(flow, claim(flow, worker))[0] for _ in plan]
    assert taken == ["top", "f1", "f2", "z1", "z2", "z3", "n1", "n2"]
    assert claim(flow, worker) == []


def test_one_claim_takes_the_highest_batch() -> None:
    flow = make_flow("co_batch", step("a"))
    for index in range(10):
        start(flow, index % 3, f"m{index}")
    rows = claim(flow, new_worker(flow), qty=4)
    assert sorted(labels(flow, rows)) == sorted(["m2", "m5", "m8", "m1"])


def test_a_retried_task_keeps_its_priority_and_its_place() -> None:
    flow = make_flow("co_retry", step("a"), max_attempts=3)
    start(flow, 50, "urgent")
    worker = new_worker(flow)
    (first,) = claim(flow, worker)
    start(flow, 10, "later")
    start(flow, 50, "urgent2")
    record = {"run_id": first.run_id, "step_slug": "a", "task_index": 0, "attempt": first.attempt}
    assert fail(record, retry_delay=0) == "retrying"
    taken = [labels(flow, claim(flow, worker))[0] for _ in range(3)]
    assert taken == ["urgent", "urgent2", "later"]


def test_hidden_messages_are_skipped_whatever_their_priority() -> None:
    flow = make_flow("co_hidden", step("a"))
    start(flow, 90, "delayed")
    q(f"update pgmq.{qtable(flow)} set vt = clock_timestamp() + interval '1 hour'")
    start(flow, -90, "visible")
    worker = new_worker(flow)
    assert labels(flow, claim(flow, worker, qty=5)) == ["visible"]


def test_foreign_headers_do_not_break_the_read() -> None:
    flow = make_flow("co_foreign", step("a"))
    start(flow, None, "plain")
    q(
        'select pgmq.send(%s, \'{"not": "pgflow"}\'::jsonb, \'{"priority": "high"}\'::jsonb, 0)',
        [flow],
    )
    with connection.cursor() as cursor:
        rows = fetch_all(
            cursor,
            worker_queries.CLAIM,
            {
                "queue": flow,
                "vt": 30,
                "qty": 5,
                "flow": flow,
                "worker": new_worker(flow),
                "step": None,
                "gen_flows": [],
                "gens": [],
            },
            table=qtable(flow),
        )
    assert rows[0].read_count == 2
    assert labels(flow, [row for row in rows if row.outcome == "claimed"]) == ["plain"]
