"""The support application's validation tests run real workers on committed data: each starts and
ends without the support flows, their threads and worker rows."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from django.db import connection

from tests.workers import Spawner

SUPPORT_FLOWS = ("support_thread", "support_thread_steps", "support_ack", "support_classify", "support_route")


def clean_support() -> None:
    with connection.cursor() as cursor:
        cursor.execute(
            "select pgflow.delete_flow_and_data(flow_slug) from pgflow.flows where flow_slug = any(%s)",
            [list(SUPPORT_FLOWS)],
        )
        cursor.execute("delete from pgflow.workers where function_name like 'support%%'")
        cursor.execute("delete from example_supportthread")


@pytest.fixture
def support_data(transactional_db: None) -> Iterator[None]:
    """The support flows and threads removed before and after (the tests commit)."""
    clean_support()
    yield
    clean_support()


@pytest.fixture
def support(support_data: None, spawn_worker: Spawner) -> Iterator[Spawner]:
    """Real workers, stopped before the support data is removed."""
    yield spawn_worker
    spawn_worker.stop_all()
