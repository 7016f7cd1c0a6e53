"""Every log record about a task carries the ``pgflow_*`` fields, and a handler's failed attempt its
exception (for error trackers), from a real worker running in this process."""

from __future__ import annotations

import json
import logging
import logging.config
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from pgflow_django import Flow, compile_flow, start_flow, wait_for_run
from pgflow_django.flows.context import TaskContext
from pgflow_django.worker.options import WorkerOptions
from pgflow_django.worker.queue_worker import QueueWorker
from tests.sql.support import q, val
from tests.unit.test_observability_docs import example
from tests.workers import REPO, wait_until

pytestmark = pytest.mark.django_db(transaction=True)

logged = Flow("otest_logs", max_attempts=2, base_delay=0, timeout=10)


@logged.step()
def wobbly(flow_input: Any, ctx: TaskContext) -> Any:
    if ctx.attempt == 1:
        raise ValueError("first attempt fails")
    return "ok"


STARTED = " started queue=otest_logs"


@pytest.fixture
def worker(transactional_db: None, caplog: pytest.LogCaptureFixture) -> Iterator[QueueWorker]:
    """A worker thread whose start-up record is captured in the setup phase: one it wrote while pytest
    moved from setup to the call would be in neither phase's records."""
    caplog.set_level(logging.INFO, logger="pgflow_django")
    compile_flow(logged, on_change="replace")
    started = QueueWorker(logged, WorkerOptions.from_settings(poll_interval=0.2))
    started.prepare()
    thread = threading.Thread(target=started.run)
    thread.start()
    wait_until(
        lambda: any(STARTED in r.getMessage() for r in caplog.records), 60, "the worker's start-up record"
    )
    yield started
    started.state.request_stop()
    thread.join(30)
    q("select pgflow.delete_flow_and_data('otest_logs')")
    q("delete from pgflow.workers where queue_name = 'otest_logs'")


def test_task_records_carry_the_fields_and_the_failure_its_exception(
    worker: QueueWorker, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.INFO, logger="pgflow_django"):
        run_id = start_flow(logged, {})
        assert wait_for_run(run_id, timeout=30).status == "completed"
    msg_id = val("select message_id from pgflow.step_tasks where run_id = %s", [run_id])
    expected = {
        "pgflow_flow": "otest_logs",
        "pgflow_step": "wobbly",
        "pgflow_run_id": str(run_id),
        "pgflow_task_index": 0,
        "pgflow_attempt": 1,
        "pgflow_queue": "otest_logs",
        "pgflow_msg_id": str(msg_id),
        "pgflow_worker_id": str(worker.worker_id),
    }
    failed = [r for r in caplog.records if r.getMessage().startswith("handler failed")]
    retried = [r for r in caplog.records if r.getMessage().startswith("task will be retried")]
    assert len(failed) == 1 and len(retried) == 1
    for record in failed + retried:
        assert {key: getattr(record, key, None) for key in expected} == expected
    assert failed[0].exc_info is not None and isinstance(failed[0].exc_info[1], ValueError)
    started = [r for r in caplog.get_records("setup") if STARTED in r.getMessage()]
    assert started and started[0].pgflow_worker_id == str(worker.worker_id)  # type: ignore[attr-defined]

    namespace: dict[str, Any] = {}
    exec(example("# settings.py: one JSON object per line"), namespace)
    config = namespace["LOGGING"]
    formatter = logging.config.DictConfigurator(config).configure_formatter(config["formatters"]["json"])
    shown = json.loads(formatter.format(failed[0]))
    assert {key: shown[key] for key in expected} == expected
    assert "ValueError: first attempt fails" in shown["exc_info"]


SENTRY_SCRIPT = """
import json, logging, sys
import sentry_sdk
from sentry_sdk.transport import Transport
from tests.unit.test_observability_docs import example

events = []


class Captured(Transport):
    def capture_envelope(self, envelope):
        events.extend(item.payload.json for item in envelope.items if item.type == "event")


original_init = sentry_sdk.init
sentry_sdk.init = lambda **options: original_init(transport=Captured(), **options)
exec(example("# settings.py: Sentry with the pgflow fields as tags"), {"SENTRY_DSN": "https://k@sentry.invalid/1"})
try:
    raise ValueError("card declined")
except ValueError as exc:
    logging.getLogger("pgflow_django.worker").warning(
        "handler failed", exc_info=exc, extra={"pgflow_flow": "orders", "pgflow_msg_id": "17"}
    )
sentry_sdk.flush()
print(json.dumps(events))
"""


def test_the_sentry_example_turns_a_failed_attempt_into_an_event_tagged_with_the_fields() -> None:
    """In its own process: Sentry's Django integration patches Django for the rest of the process."""
    pytest.importorskip("sentry_sdk")
    result = subprocess.run(
        [sys.executable, "-c", SENTRY_SCRIPT],
        cwd=REPO,
        env={**os.environ, "DJANGO_SETTINGS_MODULE": "testproject.settings"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    [event] = json.loads(result.stdout.strip().splitlines()[-1])
    assert event["tags"]["pgflow_flow"] == "orders" and event["tags"]["pgflow_msg_id"] == "17"
    assert event["exception"]["values"][0]["type"] == "ValueError"
