"""Message ids above 2^53 on a shared queue (issue 6, item 8): a double would round 9007199254741003 to
9007199254741004. The queue's sequence is moved past 2^53 before any run starts; the ids go exactly
through ``start_shared_tasks`` (SQL) and through the worker's ``Engine`` (its own connection: read and
claim in one statement with the support set, then ``complete_tasks``), unmatched and unsupported ids
included. The test commits, so it removes its flows, queues and declarations afterwards."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from pgflow_django import Flow, route_flow
from pgflow_django.db.connect import connection_params
from pgflow_django.flows.compiler import compile_flow
from pgflow_django.worker.connection import Engine, completion_item
from tests.sql.shared_queues.support import claim_shared, message_ids, purge_committed
from tests.sql.support import complete, jb, q, send_raw, start, val

pytestmark = pytest.mark.django_db(transaction=True)

QUEUE = "sq_big_ids"
BASE = 2**53 + 11
"""The first id after ``setval(seq, 2^53 + 10)``: odd, so a double cannot hold it."""
FLOWS = ("sq_big_a", "sq_big_b")


def handler(flow_input: Any) -> Any:
    return flow_input


def routed(slug: str) -> Flow:
    flow = Flow(slug, timeout=30)
    flow.step(slug="first")(handler)
    flow.step(slug="second", depends_on=["first"])(handler)
    return route_flow(flow, queues={"first": QUEUE, "second": QUEUE})


@pytest.fixture
def big_queue() -> Iterator[None]:
    purge_committed(FLOWS, [QUEUE])
    for slug in FLOWS:
        assert compile_flow(routed(slug)).status == "compiled"
    q(f"select setval('pgmq.q_{QUEUE}_msg_id_seq', %s)", [2**53 + 10])
    yield
    purge_committed(FLOWS, [QUEUE])


@pytest.mark.usefixtures("big_queue")
def test_sql_claim_and_completion_keep_exact_ids() -> None:
    run_id = start("sq_big_a", {"n": 1})
    (first_id,) = message_ids(run_id, "first")
    assert first_id == BASE and int(float(first_id)) != first_id, "an id a double cannot hold"
    unknown = send_raw(QUEUE, {"app": 1})
    (rec, other) = claim_shared(QUEUE, [first_id, unknown], [("sq_big_a", "first")])
    assert (rec["outcome"], rec["message_id"]) == ("claimed", BASE)
    assert (other["outcome"], other["message_id"]) == ("unmatched", BASE + 1)
    assert complete(rec, "one") == "completed"
    assert val(f"select count(*) as n from pgmq.a_{QUEUE} where msg_id = %s", [BASE]) == 1
    (second_id,) = message_ids(run_id, "second")
    assert second_id == BASE + 2
    assert val(
        "select message_id::text as t from pgflow.step_tasks where message_id = %s", [second_id]
    ) == str(second_id)


@pytest.mark.usefixtures("big_queue")
def test_the_engine_claims_and_completes_exact_ids() -> None:
    run_a = start("sq_big_a", {"n": 1})
    run_b = start("sq_big_b", {"n": 2})
    unknown = send_raw(QUEUE, jb({"app": 2}), raw_json=True)
    (id_a,), (id_b,) = message_ids(run_a, "first"), message_ids(run_b, "first")
    assert (id_a, id_b, unknown) == (BASE, BASE + 1, BASE + 2)

    engine = Engine(connection_params(), "supervisor")
    try:
        support = tuple(engine.shared_support(QUEUE, ["sq_big_a"]))
        assert support == (("sq_big_a", "first"), ("sq_big_a", "second"))
        worker_id = uuid.uuid4()
        claim = engine.claim(
            "sq_big_a", QUEUE, f"q_{QUEUE}", worker_id, vt=30, qty=10, shared_support=support
        )
        assert claim.read_count == 3
        assert [(t.flow_slug, t.step_slug, t.message_id) for t in claim.tasks] == [
            ("sq_big_a", "first", BASE)
        ]
        assert claim.unclaimed == {"unsupported": [BASE + 1], "unmatched": [BASE + 2]}
        (task,) = claim.tasks
        assert task.describe().startswith(f"queue={QUEUE} msg_id={BASE} ")
        items = "[" + completion_item(task, '"done"') + "]"
        assert [row[3] for row in engine.complete_tasks(items)] == ["completed"]
    finally:
        engine.close()

    assert val(f"select count(*) as n from pgmq.a_{QUEUE} where msg_id = %s", [BASE]) == 1
    assert message_ids(run_a, "second") == [BASE + 3]
    live = {int(r["msg_id"]) for r in q(f"select msg_id from pgmq.q_{QUEUE}")}
    assert live == {BASE + 1, BASE + 2, BASE + 3}, "B's and the unknown message stay"
