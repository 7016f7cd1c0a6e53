"""Message classification seen from a real worker process (issue 4, item 5).

- A foreign message (not pgflow-shaped) is archived with one warning naming the queue and message id,
  and the worker goes on with valid work.
- A pgflow-shaped message that matches no task is fatal: the worker logs one error naming the queue and
  the message id and exits 1; the subscription is paused (reason fatal); a new worker refuses to start
  (exit 1, pointing at pgflow_resume); after ``manage.py pgflow_resume`` a new worker starts.
- ``manage.py pgflow_pause`` makes a running worker stop at its next heartbeat.

Logs never contain message bodies: every body sent here carries a marker that must not appear.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from pgflow_django import start_flow, wait_for_run
from tests.sql.support import jb, q, val
from tests.workers import WorkerProcess, run_manage, wait_until

pytestmark = pytest.mark.django_db(transaction=True)

FLOW = "example_chain"
MARKER = "body-marker-7f3a9c"
FAST = ("--poll-interval", "0.1", "--max-poll-seconds", "0.2", "--heartbeat-seconds", "0.5")


def _send(body: object) -> int:
    return int(val("select pgmq.send(%s, %s::jsonb)", [FLOW, jb(body)]))


def _pause() -> dict[str, object] | None:
    rows = q("select * from pgflow.worker_pauses where flow_slug = %s and step_slug = ''", [FLOW])
    return rows[0] if rows else None


def _lines(text: str, needle: str) -> list[str]:
    return [line for line in text.splitlines() if needle in line]


def _assert_no_bodies(*texts: str, extra: tuple[str, ...] = ()) -> None:
    for text in texts:
        for secret in (MARKER, *extra):
            assert secret not in text, f"a message body leaked into the output:\n{text}"


def test_foreign_message_is_archived_with_a_warning_and_work_goes_on(
    spawn_worker: Callable[..., WorkerProcess],
) -> None:
    worker = spawn_worker(FLOW, *FAST)
    foreign = _send({"note": MARKER, "order_id": 12})
    run_id = start_flow(FLOW, {"n": 1})

    run = wait_for_run(run_id, timeout=30)
    assert run.status == "completed"
    assert run.output == {"third": {"n": 1, "flow_n": 1}}
    wait_until(
        lambda: val("select count(*) from pgmq.a_example_chain where msg_id = %s", [foreign]) == 1,
        10,
        "the foreign message to be archived",
    )
    assert val("select count(*) from pgmq.q_example_chain where msg_id = %s", [foreign]) == 0

    log = worker.log()
    warnings = _lines(log, "foreign message")
    assert len(warnings) == 1, log
    assert "WARNING" in warnings[0]
    assert f"queue={FLOW}" in warnings[0]
    assert f"msg_ids={foreign}" in warnings[0]
    assert worker.process.poll() is None, "the worker keeps running"
    assert _pause() is None
    worker.terminate()
    assert worker.wait(15) == 0
    _assert_no_bodies(worker.log())


def test_operator_pause_stops_a_running_worker_at_its_next_heartbeat(
    spawn_worker: Callable[..., WorkerProcess], database_url: str
) -> None:
    worker = spawn_worker(FLOW, *FAST)
    paused = run_manage(database_url, "pgflow_pause", FLOW, "--detail", "deploying v42")
    assert paused.returncode == 0, paused.stdout + paused.stderr
    assert worker.wait(10) == 0
    log = worker.log()
    stops = _lines(log, "was paused")
    assert len(stops) == 1, log
    assert "operator" in stops[0] and f"queue={FLOW}" in stops[0]
    assert _pause()["reason"] == "operator"

    refused = run_manage(database_url, "pgflow_worker", "--flow", FLOW, *FAST, timeout=60)
    assert refused.returncode == 1
    assert "pgflow_resume" in refused.stderr and "operator" in refused.stderr

    assert run_manage(database_url, "pgflow_resume", FLOW).returncode == 0
    spawn_worker(FLOW, *FAST)
    assert wait_for_run(start_flow(FLOW, {"n": 4}), timeout=30).status == "completed"
