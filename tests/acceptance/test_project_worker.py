"""One ``pgflow_worker`` process, started with no selection, serves the whole project: plain,
step-queued and routed flows and the tasks backend's queues, in one claim loop with one registration
and the same three engine connections whatever the number of queues; and a backlog on one queue
delays another queue's work by at most one claim round."""

from __future__ import annotations

import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from pgflow_django import start_flow
from pgflow_django.flows.compiler import compile_flow
from pgflow_django.flows.registry import get_flow, get_flows
from pgflow_django.management.health import problems
from pgflow_django.runs.coverage import coverage
from testproject.example.support import open_thread, support_routed, support_thread_steps
from testproject.example.tasks import add, send_welcome
from tests.sql.support import q, val
from tests.tasks_support import SETTINGS_MODULE, clean_task_flows, status
from tests.workers import clean_example_flows, spawn_worker_process, wait_until

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

FAST = ("--poll-interval", "0.2", "--heartbeat-seconds", "0.5")


def start_worker(database_url: str, log: Path, *args: str) -> subprocess.Popen[bytes]:
    return spawn_worker_process(
        database_url, *FAST, *args, settings=SETTINGS_MODULE, stderr=log.open("wb"), text=False
    )


def stop(process: subprocess.Popen[bytes], log: Path) -> None:
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
    assert process.wait(30) == 0, log.read_text()


@pytest.fixture
def cleaned(database_url: str) -> Iterator[str]:
    from django.db import connection

    from tests.integration.test_worker_shared_queues import _clean

    def clean() -> None:
        clean_task_flows()
        _clean()
        with connection.cursor() as cursor:
            clean_example_flows(cursor)
            cursor.execute(
                "select pgflow.delete_flow_and_data(flow_slug) from pgflow.flows where flow_slug = any(%s)",
                [[flow.slug for flow in get_flows().values()]],
            )
            cursor.execute("delete from pgflow.workers")

    clean()
    yield database_url
    clean()


def test_one_process_serves_every_flow_queue_mode_and_task(cleaned: str, tmp_path: Path) -> None:
    for flow in (get_flow("example_chain"), support_thread_steps, support_routed):
        compile_flow(flow)
    chain = start_flow(get_flow("example_chain"), {"n": 1})
    _, steps_run = open_thread("steps", ["please refund"], flow=support_thread_steps)
    _, routed_run = open_thread("routed", ["please refund"], flow=support_routed)
    total = add.enqueue(20, 22)
    mail = send_welcome.enqueue("new@example.com")
    runs = [chain, steps_run, routed_run]

    log = tmp_path / "worker.log"
    process = start_worker(cleaned, log)
    try:
        wait_until(
            lambda: (
                process.poll() is None
                and val(
                    "select count(*) from pgflow.runs where run_id = any(%s) and status = 'completed'", [runs]
                )
                == 3
                and add.get_result(total.id).status == status.SUCCESSFUL
                and send_welcome.get_result(mail.id).status == status.SUCCESSFUL
            ),
            90,
            "every run and task to complete",
        )
        assert add.get_result(total.id).return_value == 42
        workers = q("select worker_id, queue_name from pgflow.workers where stopped_at is null")
        assert len(workers) == 1 and workers[0]["queue_name"] == "*", workers
        served = {
            (row["flow_slug"], row["step_slug"]): row["queue_name"]
            for row in q("select flow_slug, step_slug, queue_name from pgflow.worker_support")
        }
        for step in support_thread_steps.steps:
            assert served[(support_thread_steps.slug, step)] == support_thread_steps.queue_for(step)
        assert served[("example_chain", "first")] == "example_chain"
        queues = set(served.values())
        assert {"default", "mail", "support_fast", "support_bulk"} <= queues and len(queues) > 20
        engine_connections = val(
            "select count(*) from pg_stat_activity where application_name like 'pgflow_worker %%'"
            " and datname = current_database()"
        )
        assert engine_connections == 3, f"{len(queues)} queues on {engine_connections} engine connections"
        uncovered = q(
            "select s.flow_slug, s.step_slug from pgflow.steps as s"
            " where s.flow_slug = any(%s) and not exists (select 1 from pgflow.worker_support as w"
            " where w.flow_slug = s.flow_slug"
            " and w.step_slug = s.step_slug and w.queue_name = s.queue_name)",
            [["example_chain", support_thread_steps.slug, support_routed.slug]],
        )
        assert uncovered == []
        served_flows = {"example_chain", support_thread_steps.slug, support_routed.slug}
        routes = [row for row in coverage() if row.flow_slug in served_flows and row.in_route]
        assert len(routes) >= 6 and all(row.covered for row in routes), routes
        assert problems(flows=sorted(served_flows)) == []
    finally:
        stop(process, log)
    text = log.read_text()
    assert text.count(" started queue=* ") == 1, text


STARVED = 1_000
"""Backlog tasks completed while one chain run waits that mean it starves: its three steps take a
round or two each (a few dozen backlog tasks, measured under load), far from this."""


def test_a_backlog_on_one_queue_delays_another_flow_by_one_claim_round(cleaned: str, tmp_path: Path) -> None:
    """10,000 map tasks of example_sleepy wait on its queue; each run of example_chain started
    meanwhile is claimed within one claim round of the worker hearing of it: at most the backlog's
    claim already under way and one more. The worker's debug log orders the notifications and claims."""
    sleepy, chain = get_flow("example_sleepy"), get_flow("example_chain")
    for flow in (sleepy, chain):
        compile_flow(flow)
    backlog = start_flow(sleepy, [{"sleep": 0.002}] * 10_000)
    log = tmp_path / "worker.log"
    process = start_worker(
        cleaned,
        log,
        *(
            "--flow",
            "example_sleepy",
            "--flow",
            "example_chain",
            "--concurrency",
            "4",
            "--log-level",
            "debug",
        ),
    )

    def backlog_done() -> int:
        return int(
            val(
                "select count(*) from pgflow.step_tasks where run_id = %s and status = 'completed'", [backlog]
            )
        )

    def chain_run_done(run: object, backlog_before: int) -> bool:
        if val("select status from pgflow.runs where run_id = %s", [run]) == "completed":
            return True
        moved = backlog_done() - backlog_before
        assert moved < STARVED, f"{moved} backlog tasks completed while a chain run waited"
        return False

    try:
        wait_until(lambda: backlog_done() >= 200, 60, "the backlog to be under way")
        for _ in range(5):
            run = start_flow(chain, {"n": 1})
            backlog_before = backlog_done()
            # Bounded in backlog tasks run meanwhile, not in seconds: a starved chain run fails as
            # soon as the backlog has moved on by STARVED tasks, while a loaded machine slows both alike.
            try:
                wait_until(
                    lambda run=run, before=backlog_before: chain_run_done(run, before),
                    120,
                    "the chain run to complete beside the backlog",
                )
            except AssertionError as exc:  # what the worker did meanwhile: its notifications and claims
                raise AssertionError(f"{exc}\n" + "\n".join(log.read_text().splitlines()[-80:])) from None
        left = val(
            "select count(*) from pgflow.step_tasks where run_id = %s and status = 'queued'", [backlog]
        )
        assert left > 0, "the backlog must still be waiting while the chain runs"
    finally:
        stop(process, log)
    lines = log.read_text().splitlines()
    delays: list[int] = []
    counting: int | None = None
    for line in lines:
        if "insert notification of queue=example_chain" in line and counting is None:
            counting = 0
        elif counting is not None and "message(s) queue=example_sleepy " in line and " claimed " in line:
            counting += 1
        elif counting is not None and "message(s) queue=example_chain " in line and " claimed 1 " in line:
            delays.append(counting)
            counting = None
    assert len(delays) >= 5, "\n".join(lines[-40:])  # a second step not handed off is announced too
    assert max(delays) <= 2, f"backlog claims between each chain run's notification and its claim: {delays}"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--exclude-flow", "nope"], "--exclude-flow nope: not a registered flow"),
        (["--queue", "nope"], "no registered flow or task uses queue 'nope'"),
        (["--exclude-queue", "nope"], "--exclude-queue nope: not a served queue"),
        (["--step", "x"], "pass exactly one --flow"),
        (["--flow", "support_routed", "--step", "route"], "is routed to shared queues"),
        (["--tasks", "--exclude-queue", "mail"], "pass it with --exclude-queue"),
        (["--flow", "example_chain", "--flow", "example_chain"], "--flow example_chain is given twice"),
    ],
)
def test_selection_mistakes_are_one_line(cleaned: str, tmp_path: Path, args: list[str], message: str) -> None:
    log = tmp_path / "worker.log"
    process = start_worker(cleaned, log, *args)
    assert process.wait(60) == 1
    lines = [line for line in log.read_text().splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("CommandError: ") and message in lines[0], lines


def test_exclude_flow_leaves_that_flow_to_other_workers(cleaned: str, tmp_path: Path) -> None:
    chain, ledger_flow = get_flow("example_chain"), get_flow("example_ledger")
    for flow in (chain, ledger_flow):
        compile_flow(flow)
    done = start_flow(chain, {"n": 1})
    left = start_flow(ledger_flow, [{}])
    log = tmp_path / "worker.log"
    process = start_worker(cleaned, log, "--exclude-flow", "example_ledger", "--until-empty")
    assert process.wait(90) == 0, log.read_text()
    assert val("select status from pgflow.runs where run_id = %s", [done]) == "completed"
    assert val("select status from pgflow.runs where run_id = %s", [left]) == "started"
    assert val("select count(*) from pgflow.worker_support where flow_slug = 'example_ledger'") == 0


def test_a_paused_flow_stops_only_its_own_queue_until_resumed(cleaned: str, tmp_path: Path) -> None:
    from pgflow_django.runs import operations

    chain, ledger_flow = get_flow("example_chain"), get_flow("example_ledger")
    for flow in (chain, ledger_flow):
        compile_flow(flow)
    log = tmp_path / "worker.log"
    process = start_worker(cleaned, log, "--flow", "example_chain", "--flow", "example_ledger")
    try:
        wait_until(lambda: " started queue=* " in log.read_text(), 60, "the worker to start")
        operations.pause("example_ledger")
        wait_until(lambda: "not polling queue=example_ledger" in log.read_text(), 30, "the pause to be seen")
        held = start_flow(ledger_flow, [{}])
        served = start_flow(chain, {"n": 1})
        wait_until(
            lambda: val("select status from pgflow.runs where run_id = %s", [served]) == "completed",
            30,
            "the other flow's run to complete while one flow is paused",
        )
        time.sleep(1.0)  # two heartbeats: the paused queue is still not read
        assert val("select status from pgflow.runs where run_id = %s", [held]) == "started"
        assert val("select attempts_count from pgflow.step_tasks where run_id = %s", [held]) == 0
        assert process.poll() is None
        operations.resume("example_ledger")
        wait_until(
            lambda: val("select status from pgflow.runs where run_id = %s", [held]) == "completed",
            30,
            "the resumed flow's run to complete",
        )
        assert "queue=example_ledger was resumed: polling it again" in log.read_text()
    finally:
        stop(process, log)
        operations.resume("example_ledger")


def test_until_empty_ends_beside_a_paused_flow(cleaned: str, tmp_path: Path) -> None:
    """A paused flow's queue has nothing runnable for this worker: --until-empty decides without it."""
    from pgflow_django.runs import operations

    chain, ledger_flow = get_flow("example_chain"), get_flow("example_ledger")
    for flow in (chain, ledger_flow):
        compile_flow(flow)
    operations.pause("example_ledger")
    try:
        done = start_flow(chain, {"n": 1})
        held = start_flow(ledger_flow, [{}])
        log = tmp_path / "worker.log"
        process = start_worker(
            cleaned, log, "--flow", "example_chain", "--flow", "example_ledger", "--until-empty"
        )
        assert process.wait(60) == 0, log.read_text()
        assert val("select status from pgflow.runs where run_id = %s", [done]) == "completed"
        assert val("select attempts_count from pgflow.step_tasks where run_id = %s", [held]) == 0
        assert "nothing runnable on queue(s)" in log.read_text()
    finally:
        operations.resume("example_ledger")
