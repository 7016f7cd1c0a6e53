"""Django's tasks framework as this package uses it: Django 6's ``django.tasks``, or on Django 5.2 the
``django-tasks`` backport (the same API under the name ``django_tasks``), loaded once."""

from __future__ import annotations

from importlib import import_module
from typing import Any

from django.core.exceptions import ImproperlyConfigured


def _load_framework() -> tuple[str, Any]:
    """Django 6's ``django.tasks``, else the ``django_tasks`` backport: one namespace of what we use."""
    for name in ("django.tasks", "django_tasks"):
        try:
            package = import_module(name)
        except ImportError:
            continue
        base = import_module(f"{name}.base")
        backends = import_module(f"{name}.backends.base")
        exceptions = import_module(f"{name}.exceptions")
        signals = import_module(f"{name}.signals")
        if name == "django.tasks":
            normalize_json = import_module("django.utils.json").normalize_json
        else:
            normalize_json = import_module("django_tasks.utils").normalize_json
        namespace = type(
            "Framework",
            (),
            {
                "package": package,
                "Task": base.Task,
                "TaskContext": base.TaskContext,
                "TaskError": base.TaskError,
                "TaskResult": base.TaskResult,
                "TaskResultStatus": base.TaskResultStatus,
                "BaseTaskBackend": backends.BaseTaskBackend,
                "InvalidTask": getattr(exceptions, "InvalidTask", None) or exceptions.InvalidTaskError,
                "TaskResultDoesNotExist": exceptions.TaskResultDoesNotExist,
                "task_enqueued": signals.task_enqueued,
                "task_started": signals.task_started,
                "task_finished": signals.task_finished,
                "normalize_json": staticmethod(normalize_json),
            },
        )
        return name, namespace
    raise ImproperlyConfigured(
        "pgflow_django.tasks needs Django's tasks framework: Django >= 6.0, or on Django 5.2 the "
        "backport (pip install django-tasks)"
    )


FRAMEWORK, tasks_api = _load_framework()
"""Which framework is in use (``django.tasks`` or ``django_tasks``) and its classes and signals."""
