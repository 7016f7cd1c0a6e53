"""The task class of ``PgflowTaskBackend``: Django's task with the engine's retry and timeout options."""

from __future__ import annotations

import dataclasses
from typing import Any, Final

from pgflow_django.flows.slugs import TASK_STEP_SLUG
from pgflow_django.tasks.framework import tasks_api

STEP_SLUG: Final = TASK_STEP_SLUG
"""The one step of every task flow."""


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class PgflowTask(tasks_api.Task):  # type: ignore[misc]
    """A task with the engine's retry and timeout options, set per task through ``@task(...)``
    keywords (Django forwards unknown keywords to the backend's ``task_class``); None keeps the
    backend's ``OPTIONS``.

    ``idempotency_key`` is set per enqueue with ``task.using(idempotency_key="order-123")``: an
    enqueue whose key already has a run returns that run's result instead of enqueuing again."""

    max_attempts: int | None = None
    timeout: int | None = None
    base_delay: int | None = None
    idempotency_key: str | None = None

    def using(self, *, idempotency_key: str | None = None, **changes: Any) -> Any:
        """Django's ``Task.using`` (priority, queue_name, run_after, backend), plus an idempotency key."""
        changed = tasks_api.Task.using(self, **changes)  # slotted dataclass: no zero-argument super()
        if idempotency_key is None:
            return changed
        return dataclasses.replace(changed, idempotency_key=idempotency_key)


def module_path(task: Any) -> str:
    func = task.func
    return f"{func.__module__}.{func.__qualname__}"
