"""A plain or step worker reads with its longest step timeout + 2 s, so the claim hides each message for
at least its task's timeout + 2 s without writing it a second time; a shared-queue worker reads briefly,
since it leaves other workers' messages as read."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from django.db import connection

from pgflow_django import Flow, compile_flow, start_flows
from pgflow_django.db.connect import connection_params
from pgflow_django.worker.connection import Engine
from pgflow_django.worker.options import WorkerOptions
from pgflow_django.worker.queue_worker import QueueWorker
from tests.sql.support import q

pytestmark = pytest.mark.django_db(transaction=True)

timed = Flow("wtest_claim_vt", timeout=40)


@timed.step()
def first(flow_input: Any) -> Any:
    return flow_input


@timed.step(depends_on=[first], timeout=90)
def slow(deps: Any) -> Any:
    return deps


@pytest.fixture
def engine(transactional_db: None) -> Iterator[Engine]:
    compile_flow(timed, on_change="replace")
    engine = Engine(connection_params(), "test")
    yield engine
    engine.close()
    with connection.cursor() as cursor:
        cursor.execute("select pgflow.delete_flow_and_data('wtest_claim_vt')")


def test_the_worker_reads_with_its_longest_step_timeout_plus_2_seconds(engine: Engine) -> None:
    worker = QueueWorker(timed, WorkerOptions.from_settings())
    worker.prepare()
    try:
        assert worker.read_visibility == 92
    finally:
        assert worker.engine is not None
        worker.engine.close()


def test_a_claim_after_such_a_read_leaves_the_longer_visibility_as_read(engine: Engine) -> None:
    """The root step's timeout is 40 s: the claim would hide its messages for 42 s, but the read already
    hid them for 92, so the claim does not write them again."""
    start_flows(timed, [{"i": i} for i in range(3)])
    table = engine.queue_table(timed.slug)
    claim = engine.claim(timed.slug, timed.slug, table, uuid.uuid4(), 92, 10)
    assert sorted(task.step_slug for task in claim.tasks) == ["first"] * 3
    rows = q(f"select read_ct, extract(epoch from vt - clock_timestamp())::float8 as vt_in from pgmq.{table}")
    assert [row["read_ct"] for row in rows] == [1, 1, 1]
    assert all(85 < row["vt_in"] <= 92 for row in rows), rows


def test_a_claim_after_a_brief_read_extends_the_visibility_to_the_task_timeout(engine: Engine) -> None:
    start_flows(timed, [{"i": 0}])
    table = engine.queue_table(timed.slug)
    claim = engine.claim(timed.slug, timed.slug, table, uuid.uuid4(), 5, 10)
    assert len(claim.tasks) == 1
    rows = q(f"select extract(epoch from vt - clock_timestamp())::float8 as vt_in from pgmq.{table}")
    assert 35 < rows[0]["vt_in"] <= 42, rows
