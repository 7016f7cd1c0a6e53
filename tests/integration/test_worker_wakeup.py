"""An idle worker wakes on PGMQ's insert notification; polling only covers lost notifications."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest
from django.db import connection

from pgflow_django import start_flow, wait_for_run
from tests.workers import WorkerProcess

pytestmark = pytest.mark.django_db(transaction=True)


def test_notification_wakes_an_idle_worker_long_before_its_poll(
    spawn_worker: Callable[..., WorkerProcess],
) -> None:
    spawn_worker("example_chain", "--poll-interval", "60", "--max-poll-seconds", "60")
    time.sleep(1.0)  # let the start-up read find the queue empty: from here on, only a wake-up helps
    started = time.monotonic()
    run = wait_for_run(start_flow("example_chain", {"n": 1}), timeout=45, poll=0.02)
    elapsed = time.monotonic() - started
    assert run.status == "completed"
    # half the poll interval: a loaded machine's slow steps, never a poll
    assert elapsed < 30, f"three steps took {elapsed:.1f}s with a 60 s poll interval"


def test_polling_finds_messages_whose_notification_was_lost(
    spawn_worker: Callable[..., WorkerProcess],
) -> None:
    spawn_worker("example_chain", "--poll-interval", "0.2", "--max-poll-seconds", "0.5")
    with connection.cursor() as cursor:
        cursor.execute("alter table pgmq.q_example_chain disable trigger pgflow_notify_insert")
    try:
        run = wait_for_run(start_flow("example_chain", {"n": 1}), timeout=15)
    finally:
        with connection.cursor() as cursor:
            cursor.execute("alter table pgmq.q_example_chain enable trigger pgflow_notify_insert")
    assert run.status == "completed"
