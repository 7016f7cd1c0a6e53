"""What ``pgflow_worker --tasks`` runs: the task flows of every configured PgflowTaskBackend on one queue.

It sits beside the backend (``pgflow_django.tasks``), not in the worker: the worker package never
imports the tasks backend, so the two never import each other.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from django.core.exceptions import ImproperlyConfigured

from pgflow_django.flows.dsl import Flow
from pgflow_django.worker.preflight import PreflightError

if TYPE_CHECKING:
    from pgflow_django.tasks.backend import PgflowTaskBackend


def _backends(using: str | None = None) -> list[PgflowTaskBackend]:
    """The configured PgflowTaskBackends (those whose ``DATABASE`` is ``using``, when given); one
    clear error when there is none."""
    from django.conf import settings

    if not getattr(settings, "TASKS", None):
        raise PreflightError(
            "settings.TASKS is not configured; add a backend "
            "{'BACKEND': 'pgflow_django.tasks.PgflowTaskBackend', 'QUEUES': ['default']}"
        )
    try:
        from pgflow_django.tasks.backend import pgflow_backends

        backends = pgflow_backends()
    except ImproperlyConfigured as exc:
        raise PreflightError(str(exc)) from None
    if not backends:
        raise PreflightError("no TASKS backend is pgflow_django.tasks.PgflowTaskBackend; configure one first")
    if using is None:
        return backends
    chosen = [backend for backend in backends if backend.using == using]
    if not chosen:
        databases = ", ".join(sorted({repr(backend.using) for backend in backends}))
        raise PreflightError(
            f"no PgflowTaskBackend has DATABASE {using!r} (theirs: {databases}); pass --database one of them"
        )
    return chosen


def task_flows(queue: str | None, using: str | None = None) -> tuple[str, list[Flow]]:
    """The queue to poll and its task flows (of the backends on database ``using``, when given); one
    clear error when nothing can run."""
    backends = _backends(using)
    if queue is None:
        queues = sorted({name for backend in backends for name in backend.queues})
        if not queues or "default" in queues:
            queues = ["default"]
        if len(queues) > 1:
            raise PreflightError(
                f"the task backends use several queues; choose --queue from: {', '.join(queues)}"
            )
        queue = queues[0] if queues else "default"
    if all(backend.queues and queue not in backend.queues for backend in backends):
        configured = sorted({name for backend in backends for name in backend.queues})
        raise PreflightError(
            f"queue {queue!r} is not in the QUEUES of any TASKS backend ({', '.join(configured)})"
        )
    flows: dict[str, Flow] = {}
    try:
        for backend in backends:
            if backend.queues and queue not in backend.queues:
                continue
            for flow in backend.worker_flows(queue):
                flows.setdefault(flow.slug, flow)
    except ImproperlyConfigured as exc:
        raise PreflightError(str(exc)) from None
    if not flows:
        raise PreflightError(
            f"no task found for queue {queue!r}: tasks are discovered in installed apps' tasks modules and "
            "in OPTIONS['MODULES'] of each PgflowTaskBackend"
        )
    return queue, list(flows.values())


ALL_QUEUES = "*"
"""``--queue '*'``: every queue of the task backends."""


def task_queues(exclude: list[str], using: str | None = None) -> list[tuple[str, list[Flow]]]:
    """``--queue '*'``: each configured queue (a backend's ``QUEUES``, or the queues its tasks name
    when it lists none) with its task flows, minus ``exclude``; queues without a task are skipped."""
    backends = _backends(using)
    names: set[str] = set()
    for backend in backends:
        names.update(backend.queues or {task.queue_name for task in backend.discover_tasks()})
    unknown = sorted(set(exclude) - names)
    if unknown:
        raise PreflightError(
            f"--exclude-queue {', '.join(unknown)}: not a queue of the task backends "
            f"({', '.join(sorted(names)) or 'none'})"
        )
    chosen = sorted(names - set(exclude))
    found: list[tuple[str, list[Flow]]] = []
    for queue in chosen:
        try:
            found.append(task_flows(queue, using))
        except PreflightError as exc:
            if not str(exc).startswith("no task found"):
                raise
    if not found:
        raise PreflightError(
            f"--queue '*' found no queue with a task (queues: {', '.join(chosen) or 'none'}); tasks are "
            "discovered in installed apps' tasks modules and in OPTIONS['MODULES'] of each PgflowTaskBackend"
        )
    return found


def project_task_flows(using: str) -> list[tuple[str, Flow]]:
    """For a worker serving the whole project: (queue, task flow) for every queue of the
    PgflowTaskBackends on database ``using`` (their ``QUEUES``, or the queues their tasks name); none
    when the project configures no such backend."""
    from django.conf import settings

    if not getattr(settings, "TASKS", None):
        return []
    try:
        from pgflow_django.tasks.backend import pgflow_backends

        backends = [backend for backend in pgflow_backends() if backend.using == using]
        found: list[tuple[str, Flow]] = []
        for backend in backends:
            names = backend.queues or {task.queue_name for task in backend.discover_tasks()}
            for queue in sorted(names):
                found.extend((queue, flow) for flow in backend.worker_flows(queue))
    except ImproperlyConfigured as exc:
        raise PreflightError(str(exc)) from None
    return found
