"""A flow deleted under a running worker: the worker stops with one clear line instead of looping."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from tests.sql.support import q
from tests.workers import WorkerProcess

pytestmark = pytest.mark.django_db(transaction=True)


def test_worker_stops_when_its_flow_is_deleted(spawn_worker: Callable[..., WorkerProcess]) -> None:
    worker = spawn_worker("example_chain", "--poll-interval", "0.1", "--max-poll-seconds", "0.2")
    q("select pgflow.delete_flow_and_data('example_chain')")
    assert worker.wait(20) == 0
    log = worker.log()
    assert "queue example_chain no longer exists (was flow example_chain deleted?)" in log
    assert log.count("no longer exists") == 1
    assert "Traceback" not in log
