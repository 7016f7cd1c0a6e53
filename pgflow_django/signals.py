"""Django signals for run, step and task transitions, sent after the transaction that made them commits.

Each is sent by the process that made the change: ``run_started`` by the process that called
``start_flow``/``start_flows`` (a web process, usually), once its transaction commits;
``run_cancelled`` by the process that called ``cancel_run`` (the admin's action and
``manage.py pgflow_cancel`` call it too), once its transaction commits; the others by the worker
that recorded the completion or failure, after ``pgflow.complete_tasks``/``fail_task`` returned
(their statements commit on their own) or after an ``atomic=True`` handler's transaction committed.
``sender`` is the flow slug (a run of a later version of the flow sends it too). A receiver that
raises is logged and never reaches the worker or the caller (signals are sent with ``send_robust``).
"""

from __future__ import annotations

import logging
import uuid
from typing import Any

from django.dispatch import Signal

logger = logging.getLogger("pgflow_django.signals")

run_started = Signal()
"""A run was started (kwargs: ``run_id``). Sent by the starting process after its commit."""
run_completed = Signal()
"""Every step of a run finished (kwargs: ``run_id``). Sent by the worker whose completion finished it."""
run_failed = Signal()
"""A run failed (kwargs: ``run_id``, ``step_slug`` of the failing step, ``error``)."""
step_completed = Signal()
"""Every task of a step completed (kwargs: ``run_id``, ``step_slug``)."""
step_failed = Signal()
"""A step failed: a task ran out of attempts (kwargs: ``run_id``, ``step_slug``, ``error``)."""
task_failed = Signal()
"""A task's last attempt failed (kwargs: ``run_id``, ``step_slug``, ``task_index``, ``attempt``,
``error``)."""
task_retried = Signal()
"""A task's attempt failed and it will run again (kwargs as ``task_failed``)."""
run_cancelled = Signal()
"""A started run was cancelled (kwargs: ``run_id``, ``reason``: the one given, or None). Sent by the
cancelling process after its commit; a cancel of a finished run changes nothing and sends nothing."""

WORKER_SIGNALS = (run_completed, run_failed, step_completed, step_failed, task_failed, task_retried)
"""The signals a worker sends: it looks up what its results changed only while one has a receiver."""


def worker_listening() -> bool:
    """True when any worker-sent signal has a receiver (otherwise recording results costs nothing more)."""
    return any(signal.has_listeners() for signal in WORKER_SIGNALS)


def send(signal: Signal, flow_slug: str, **kwargs: Any) -> None:
    """Send ``signal`` robustly: a receiver's exception is logged with its traceback and swallowed."""
    for receiver, result in signal.send_robust(sender=flow_slug, **kwargs):
        if isinstance(result, Exception):
            logger.error(
                "signal receiver %s raised for flow=%s",
                getattr(receiver, "__qualname__", repr(receiver)),
                flow_slug,
                exc_info=result,
                extra={"pgflow_flow": flow_slug, "pgflow_run_id": str(kwargs.get("run_id", ""))},
            )


def send_run_started(flow_slug: str, run_ids: list[uuid.UUID], using: str) -> None:
    """Queue ``run_started`` for each run, sent when the caller's transaction commits (at once in
    autocommit); a rolled-back start sends nothing."""
    if not run_started.has_listeners():
        return
    from django.db import transaction

    def sent() -> None:
        for run_id in run_ids:
            send(run_started, flow_slug, run_id=run_id)

    transaction.on_commit(sent, using=using)


def send_run_cancelled(flow_slug: str, run_id: uuid.UUID, reason: str | None, using: str) -> None:
    """Queue ``run_cancelled``, sent when the cancelling transaction commits (at once in autocommit);
    a rolled-back cancel sends nothing."""
    if not run_cancelled.has_listeners():
        return
    from django.db import transaction

    transaction.on_commit(lambda: send(run_cancelled, flow_slug, run_id=run_id, reason=reason), using=using)
