"""A worker checks its queue's tables at start-up: pgflow.queue_access gets the queue's static branch
back when the tables have PGMQ's layout again, and a queue whose tables differ is named in a warning
(its operations go through PGMQ's dynamic SQL)."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import pytest
from django.db import connection

from pgflow_django import Flow, compile_flow
from pgflow_django.worker.options import WorkerOptions
from pgflow_django.worker.queue_worker import QueueWorker
from tests.sql.queue_access.support import BRANCH_SOURCES
from tests.sql.support import q, val

pytestmark = pytest.mark.django_db(transaction=True)

checked = Flow("wtest_queue_access")


@checked.step()
def only(flow_input: Any) -> Any:
    return flow_input


@pytest.fixture
def compiled(transactional_db: None) -> Iterator[None]:
    compile_flow(checked, on_change="replace")
    yield
    q("alter table pgmq.a_wtest_queue_access alter column headers type jsonb")
    with connection.cursor() as cursor:
        cursor.execute("select pgflow.delete_flow_and_data('wtest_queue_access')")


def _has_branch() -> bool:
    source = val(BRANCH_SOURCES)
    return "if v_queue = 'wtest_queue_access' then" in str(source)


def _prepare() -> None:
    worker = QueueWorker(checked, WorkerOptions.from_settings())
    worker.prepare()
    assert worker.engine is not None
    worker.engine.close()


def test_start_up_writes_the_branch_a_changed_layout_had_removed(
    compiled: None, caplog: pytest.LogCaptureFixture
) -> None:
    q("alter table pgmq.a_wtest_queue_access alter column headers type json")
    q("select pgflow.write_queue_access()")
    q("alter table pgmq.a_wtest_queue_access alter column headers type jsonb")
    assert not _has_branch()
    with caplog.at_level(logging.WARNING):
        _prepare()
    assert _has_branch()
    assert "not laid out as PGMQ" not in caplog.text


def test_start_up_warns_about_a_queue_whose_tables_differ(
    compiled: None, caplog: pytest.LogCaptureFixture
) -> None:
    q("alter table pgmq.a_wtest_queue_access alter column headers type json")
    with caplog.at_level(logging.WARNING):
        _prepare()
    assert not _has_branch()
    assert "queue=wtest_queue_access: its tables are not laid out as PGMQ 1.11-1.13 makes them" in caplog.text
