"""Django signals: each sent once, after the commit that made the change, by the process that made
it; a receiver that raises never breaks the worker. Workers run in this process (real threads, real
connections) so that the receivers connected here hear them."""

from __future__ import annotations

import io
import logging
import threading
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import transaction
from django.dispatch import Signal
from django.test import Client

from pgflow_django import (
    Flow,
    acancel_run,
    cancel_run,
    compile_flow,
    signals,
    start_flow,
    start_flows,
    wait_for_run,
)
from pgflow_django.flows.context import TaskContext
from tests.sql.support import q
from tests.workers import InProcessWorker

pytestmark = pytest.mark.django_db(transaction=True)

sig = Flow("otest_signals", max_attempts=2, base_delay=0, timeout=10)


@sig.step(atomic=True)
def first(flow_input: Any) -> Any:
    return list(range(flow_input["n"]))


@sig.map(array=first)
def each(item: Any) -> Any:
    return item * 2


@sig.step(depends_on=[each])
def last(deps: Any, ctx: TaskContext) -> Any:
    if ctx.flow_input["fail"]:
        raise RuntimeError("boom")
    return sum(deps["each"])


ALL = {
    "run_started": signals.run_started,
    "run_completed": signals.run_completed,
    "run_failed": signals.run_failed,
    "step_completed": signals.step_completed,
    "step_failed": signals.step_failed,
    "task_failed": signals.task_failed,
    "task_retried": signals.task_retried,
    "run_cancelled": signals.run_cancelled,
}


class Heard:
    """Every signal sent, as (name, sender, kwargs, thread name)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.items: list[tuple[str, str, dict[str, Any], str]] = []
        self._receivers: list[tuple[Signal, Any]] = []
        for name, signal in ALL.items():
            receiver = self._receiver(name)
            signal.connect(receiver, weak=False)
            self._receivers.append((signal, receiver))

    def _receiver(self, name: str) -> Any:
        def receive(sender: str, signal: Signal, **kwargs: Any) -> None:
            with self.lock:
                self.items.append((name, sender, kwargs, threading.current_thread().name))

        return receive

    def of(self, run_id: uuid.UUID, name: str | None = None) -> list[tuple[str, dict[str, Any]]]:
        with self.lock:
            return [
                (n, kwargs)
                for n, _, kwargs, _ in self.items
                if kwargs.get("run_id") == run_id and (name is None or n == name)
            ]

    def close(self) -> None:
        for signal, receiver in self._receivers:
            signal.disconnect(receiver)


@pytest.fixture
def heard(transactional_db: None) -> Iterator[Heard]:
    compile_flow(sig, on_change="replace")
    listening = Heard()
    yield listening
    listening.close()
    q("select pgflow.delete_flow_and_data('otest_signals')")
    q("delete from pgflow.workers where queue_name = 'otest_signals'")


@pytest.fixture
def worker(heard: Heard) -> Iterator[InProcessWorker]:
    started = InProcessWorker(sig, poll_interval=0.2, ready=False, concurrency=4)
    yield started
    started.stop()


def test_a_completed_run_sends_its_start_each_step_and_its_completion(
    heard: Heard, worker: InProcessWorker
) -> None:
    run_id = start_flow(sig, {"n": 3, "fail": False})
    assert heard.of(run_id) == [("run_started", {"run_id": run_id})]
    assert wait_for_run(run_id, timeout=30).status == "completed"
    worker.stop()
    names = [name for name, _ in heard.of(run_id)]
    assert sorted(names) == sorted(
        ["run_started", "step_completed", "step_completed", "step_completed", "run_completed"]
    )
    assert [kw["step_slug"] for _, kw in heard.of(run_id, "step_completed")] == ["first", "each", "last"]
    assert names[-1] == "run_completed"
    senders = {(name, thread) for name, sender, kwargs, thread in heard.items if kwargs["run_id"] == run_id}
    assert ("run_started", "MainThread") in senders  # the starting process, the caller's own thread
    assert ("step_completed", "MainThread") not in senders  # the worker's threads


def test_a_failing_task_sends_its_retry_its_failure_and_its_steps_and_runs(
    heard: Heard, worker: InProcessWorker
) -> None:
    run_id = start_flow(sig, {"n": 2, "fail": True})
    assert wait_for_run(run_id, timeout=30).status == "failed"
    worker.stop()
    retried = heard.of(run_id, "task_retried")
    failed = heard.of(run_id, "task_failed")
    assert [(kw["step_slug"], kw["task_index"], kw["attempt"]) for _, kw in retried] == [("last", 0, 1)]
    assert [(kw["step_slug"], kw["attempt"], kw["error"]) for _, kw in failed] == [
        ("last", 2, "RuntimeError: boom")
    ]
    assert [(kw["step_slug"], kw["error"]) for _, kw in heard.of(run_id, "step_failed")] == [
        ("last", "RuntimeError: boom")
    ]
    assert [kw["step_slug"] for _, kw in heard.of(run_id, "run_failed")] == ["last"]
    assert heard.of(run_id, "run_completed") == []
    assert [kw["step_slug"] for _, kw in heard.of(run_id, "step_completed")] == ["first", "each"]


def test_run_started_waits_for_the_callers_commit_and_a_rollback_sends_nothing(heard: Heard) -> None:
    with transaction.atomic():
        kept = start_flows(sig, [{"n": 1, "fail": False}] * 2)
        assert heard.of(kept[0]) == []
    assert [heard.of(run_id) for run_id in kept] == [[("run_started", {"run_id": run_id})] for run_id in kept]
    chosen = uuid.uuid4()
    with pytest.raises(RuntimeError), transaction.atomic():
        start_flow(sig, {"n": 1, "fail": False}, run_id=chosen)
        raise RuntimeError("roll back")
    assert heard.of(chosen) == []


def test_two_workers_send_each_step_and_run_completion_once(heard: Heard) -> None:
    """Both workers complete tasks of the same map step concurrently; the one whose completion
    finished the step (or the run) sends its signal, the other does not."""
    workers = [
        InProcessWorker(sig, poll_interval=0.2, ready=False, concurrency=4, batch_size=2) for _ in range(2)
    ]
    try:
        run_ids = start_flows(sig, [{"n": 40, "fail": False} for _ in range(4)])
        for run_id in run_ids:
            assert wait_for_run(run_id, timeout=60).status == "completed"
    finally:
        for started in workers:
            started.stop()
    for run_id in run_ids:
        steps = sorted(kw["step_slug"] for _, kw in heard.of(run_id, "step_completed"))
        assert steps == ["each", "first", "last"], steps
        assert len(heard.of(run_id, "run_completed")) == 1
    workers_seen = q(
        "select count(distinct last_worker_id) as n from pgflow.step_tasks"
        " where flow_slug = 'otest_signals' and step_slug = 'each'"
    )
    assert workers_seen[0]["n"] == 2, "both workers should have completed tasks of the map step"


def test_a_receiver_that_raises_never_breaks_the_worker(
    heard: Heard, worker: InProcessWorker, caplog: pytest.LogCaptureFixture
) -> None:
    def broken(sender: str, **kwargs: Any) -> None:
        raise ValueError("receiver bug")

    for signal in ALL.values():
        signal.connect(broken, weak=False)
    try:
        with caplog.at_level(logging.ERROR, logger="pgflow_django.signals"):
            ok = start_flow(sig, {"n": 2, "fail": False})
            bad = start_flow(sig, {"n": 1, "fail": True})
            assert wait_for_run(ok, timeout=30).status == "completed"
            assert wait_for_run(bad, timeout=30).status == "failed"
            later = start_flow(sig, {"n": 1, "fail": False})
            assert wait_for_run(later, timeout=30).status == "completed"
    finally:
        for signal in ALL.values():
            signal.disconnect(broken)
    assert worker.thread.is_alive()
    assert len(heard.of(ok, "run_completed")) == 1  # the other receivers still heard it
    raised = [r for r in caplog.records if "signal receiver" in r.getMessage()]
    assert raised and all(r.exc_info and isinstance(r.exc_info[1], ValueError) for r in raised)
    assert {r.pgflow_flow for r in raised} == {"otest_signals"}  # type: ignore[attr-defined]


def test_run_cancelled_is_sent_once_after_the_commit_by_every_cancel_path(
    heard: Heard, admin_client: Client
) -> None:
    """``cancel_run``, ``acancel_run``, ``manage.py pgflow_cancel`` and the admin's action: each cancel
    sends ``run_cancelled`` once, when it commits; a refused or rolled-back cancel sends nothing."""
    python, rolled_back, coroutine, command, admin = start_flows(sig, [{"n": 1, "fail": False}] * 5)
    with transaction.atomic():
        assert cancel_run(python, reason="duplicate order").cancelled
        assert heard.of(python, "run_cancelled") == []
    assert heard.of(python, "run_cancelled") == [
        ("run_cancelled", {"run_id": python, "reason": "duplicate order"})
    ]
    assert not cancel_run(python).cancelled  # refused: it has finished
    with pytest.raises(RuntimeError), transaction.atomic():
        assert cancel_run(rolled_back).cancelled
        raise RuntimeError("roll back")
    assert heard.of(rolled_back) == [("run_started", {"run_id": rolled_back})]
    assert async_to_sync(acancel_run)(coroutine).cancelled
    call_command("pgflow_cancel", str(command), stdout=io.StringIO())
    with pytest.raises(CommandError, match="had already finished"):
        call_command("pgflow_cancel", str(command), stdout=io.StringIO())
    response = admin_client.post(
        "/admin/pgflow/run/",
        {"action": "cancel_runs", "_selected_action": [str(admin), str(command)]},
        follow=True,
    )
    assert response.status_code == 200
    cancelled = [(sender, kw) for name, sender, kw, _ in heard.items if name == "run_cancelled"]
    assert cancelled == [
        ("otest_signals", {"run_id": python, "reason": "duplicate order"}),
        ("otest_signals", {"run_id": coroutine, "reason": None}),
        ("otest_signals", {"run_id": command, "reason": None}),
        ("otest_signals", {"run_id": admin, "reason": None}),
    ]
    assert [name for name, *_ in heard.items if name not in ("run_started", "run_cancelled")] == [], (
        "a cancelled run ends failed, but sends no run_failed"
    )
