"""The claim's read (``worker_queries.CLAIM``) walks the queue's priority index to the first visible entries:
with a backlog of 10,000 tasks of mixed priorities (and hidden ones of the highest), it reads by
``<queue table>_priority_idx`` with no sort of the queue's rows (PostgreSQL 16 and later sort the
batch's ten ids for an ordered aggregate: not a sort of the queue), and touches a number of index
entries that does not grow with the backlog."""

from __future__ import annotations

import json

import pytest
from django.db import connection

from pgflow_django.worker import queries as worker_queries
from tests.sql.plans.support import nodes
from tests.sql.support import make_flow, new_worker, q, qtable, step

pytestmark = pytest.mark.django_db

PRIORITIES = (-50, 0, 10, 50)
PER_PRIORITY = 2500
QTY = 10


def test_the_read_is_an_index_walk_that_stops_after_the_batch() -> None:
    flow = make_flow("plan_prio", step("a"))
    table = qtable(flow)
    # the backlog's set-up starts from plans made now, not from the ones earlier tests left cached in
    # this session: on PostgreSQL 18, start_flows of 2,500 runs on those ran 16 minutes, and still
    # 189 s once the run probes held only the key (open in the hot-path work; tests/sql/plans checks
    # the plans a fresh session makes)
    q("discard plans")
    for priority in PRIORITIES:
        q(
            "select count(*) from pgflow.start_flows(%s, %s::jsonb, null, null, %s::integer)",
            [flow, json.dumps([{}] * PER_PRIORITY), priority],
        )
    # the highest priority's first 200 messages are in flight: the walk steps over them
    q(
        f"update pgmq.{table} set vt = clock_timestamp() + interval '1 hour'"
        f" where msg_id in (select msg_id from pgmq.{table} where pgflow.message_priority(headers) = 50"
        "                   order by msg_id limit 200)"
    )
    q(f"analyze pgmq.{table}")
    params = {
        "queue": flow,
        "vt": 30,
        "qty": QTY,
        "flow": flow,
        "worker": new_worker(flow),
        "step": None,
        "gen_flows": [],
        "gens": [],
    }
    with connection.cursor() as cursor:
        statement = worker_queries.CLAIM.statement(table=table)
        cursor.execute(b"explain (analyze, format json) " + statement.as_bytes(cursor.cursor), params)
        (plan,) = cursor.fetchone()[0]
    scans = [node for node in nodes(plan["Plan"]) if node.get("Relation Name") == table]
    walked = [node for node in scans if node.get("Index Name") == f"{table}_priority_idx"]
    assert walked, f"the read does not use the priority index: {scans}"
    sorted_reads = [
        node
        for node in nodes(plan["Plan"])
        if node["Node Type"] == "Sort" and any(below.get("Relation Name") == table for below in nodes(node))
    ]
    assert not sorted_reads, "the queue's entries are sorted instead of read in index order"
    assert all(node["Node Type"] != "Seq Scan" for node in scans)
    touched = sum(node["Actual Rows"] + node.get("Rows Removed by Filter", 0) for node in walked)
    assert touched <= 200 + 2 * QTY, "the walk should stop after the hidden entries and one batch"
