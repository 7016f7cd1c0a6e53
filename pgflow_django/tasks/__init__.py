"""A production backend for Django's tasks framework on pgflow.

``TASKS = {"default": {"BACKEND": "pgflow_django.tasks.PgflowTaskBackend", "QUEUES": ["default"]}}``.
One file a part, as Django's own ``tasks/backends`` does: ``framework`` (Django 6's ``django.tasks`` or
the ``django-tasks`` backport), ``task`` (the task class), ``backend`` (enqueue and results),
``handler`` (the task function as a step handler) and ``results`` (failures and outputs); what
``pgflow_worker --tasks`` runs is ``worker.task_flows``. The names below load on first use, so
importing the package needs no tasks framework until one of them is used.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pgflow_django.lazy import load_lazily

if TYPE_CHECKING:
    from pgflow_django.flows.slugs import task_flow_slug
    from pgflow_django.tasks.backend import PgflowTaskBackend, pgflow_backends
    from pgflow_django.tasks.framework import FRAMEWORK, tasks_api
    from pgflow_django.tasks.results import TaskFailure
    from pgflow_django.tasks.task import PgflowTask, module_path

_LAZY = {
    "FRAMEWORK": "pgflow_django.tasks.framework",
    "PgflowTask": "pgflow_django.tasks.task",
    "PgflowTaskBackend": "pgflow_django.tasks.backend",
    "TaskFailure": "pgflow_django.tasks.results",
    "module_path": "pgflow_django.tasks.task",
    "pgflow_backends": "pgflow_django.tasks.backend",
    "task_flow_slug": "pgflow_django.flows.slugs",
    "tasks_api": "pgflow_django.tasks.framework",
}

__all__ = [
    "FRAMEWORK",
    "PgflowTask",
    "PgflowTaskBackend",
    "TaskFailure",
    "module_path",
    "pgflow_backends",
    "task_flow_slug",
    "tasks_api",
]


def __getattr__(name: str) -> Any:
    return load_lazily(globals(), name, _LAZY.get(name))
