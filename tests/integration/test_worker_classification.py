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

import uuid
from collections.abc import Callable

import pytest

from pgflow_django import start_flow, wait_for_run
from pgflow_django.flows.compiler import compile_flow
from pgflow_django.flows.registry import get_flow
from tests.integration.commands_support import manage_in_process
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


def test_fatal_message_stops_the_worker_and_pauses_until_resumed(
    spawn_worker: Callable[..., WorkerProcess], database_url: str
) -> None:
    worker = spawn_worker(FLOW, *FAST)
    worker_id = worker.worker_id
    hidden_run = str(uuid.uuid4())
    fatal = _send(
        {"flow_slug": FLOW, "run_id": hidden_run, "step_slug": "first", "task_index": 0, "note": MARKER}
    )

    assert worker.wait(30) == 1
    log = worker.log()
    errors = [line for line in log.splitlines() if " ERROR " in line]
    assert len(errors) == 1, log
    assert f"queue={FLOW}" in errors[0]
    assert f"msg_ids={fatal}" in errors[0]
    assert "pgflow_resume" in errors[0]
    assert "Traceback" not in log
    _assert_no_bodies(log, extra=(hidden_run,))

    pause = _pause()
    assert pause is not None
    assert (pause["reason"], pause["queue_name"]) == ("fatal", FLOW)
    assert str(fatal) in str(pause["detail"])
    assert val("select count(*) from pgmq.q_example_chain where msg_id = %s", [fatal]) == 1, (
        "a fatal message is left in the queue for inspection"
    )
    assert val("select stopped_at is not null from pgflow.workers where worker_id = %s", [worker_id])

    # A new worker refuses to start while the flow is paused, and does not register.
    registered = val("select count(*) from pgflow.workers")
    refused = run_manage(database_url, "pgflow_worker", "--flow", FLOW, *FAST, timeout=60)
    assert refused.returncode == 1, refused.stdout + refused.stderr
    lines = [line for line in refused.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, refused.stderr
    assert "paused" in lines[0] and "fatal" in lines[0]
    assert f"pgflow_resume {FLOW}" in lines[0]
    assert val("select count(*) from pgflow.workers") == registered
    _assert_no_bodies(refused.stdout, refused.stderr, extra=(hidden_run,))

    # The operator inspects and removes the culprit, then resumes: a new worker starts and runs work.
    q("select pgmq.archive(%s, %s::bigint)", [FLOW, fatal])
    resumed = manage_in_process("pgflow_resume", FLOW, settings={})
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert "resumed" in resumed.stdout and "fatal" in resumed.stdout
    assert _pause() is None
    again = spawn_worker(FLOW, *FAST)
    run = wait_for_run(start_flow(FLOW, {"n": 2}), timeout=30)
    assert run.status == "completed"
    assert again.process.poll() is None
    _assert_no_bodies(again.log(), extra=(hidden_run,))


def test_valid_work_read_with_a_fatal_message_is_not_claimed(
    spawn_worker: Callable[..., WorkerProcess], database_url: str
) -> None:
    """The fatal batch is claimed by nobody: its valid task stays queued with no attempt, visible again."""
    compile_flow(get_flow(FLOW))
    fatal = _send({"flow_slug": FLOW, "run_id": str(uuid.uuid4()), "step_slug": "first", "task_index": 0})
    run_id = start_flow(FLOW, {"n": 3})
    worker = spawn_worker(FLOW, *FAST, ready=False)
    assert worker.wait(30) == 1, worker.log()
    task = q("select status, attempts_count, message_id from pgflow.step_tasks where run_id = %s", [run_id])
    assert [(t["status"], t["attempts_count"]) for t in task] == [("queued", 0)]
    visible = val(
        "select bool_and(vt <= clock_timestamp()) from pgmq.q_example_chain where msg_id = any(%s)",
        [[fatal, task[0]["message_id"]]],
    )
    assert visible is True
    assert _pause()["reason"] == "fatal"


def test_operator_pause_stops_a_running_worker_at_its_next_heartbeat(
    spawn_worker: Callable[..., WorkerProcess], database_url: str
) -> None:
    worker = spawn_worker(FLOW, *FAST)
    paused = manage_in_process("pgflow_pause", FLOW, "--detail", "deploying v42", settings={})
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

    assert manage_in_process("pgflow_resume", FLOW, settings={}).returncode == 0
    spawn_worker(FLOW, *FAST)
    assert wait_for_run(start_flow(FLOW, {"n": 4}), timeout=30).status == "completed"
