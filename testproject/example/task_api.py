"""The tasks framework of this Django version: django.tasks (Django 6), else the django_tasks backport.

Django 6.0's ``@task`` takes no keywords for the backend (6.1 and the backport pass them to its
``task_class``), so there the example's ``max_attempts`` / ``timeout`` / ``base_delay`` are set on
the task it built."""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable
from typing import Any

try:
    from django.tasks import task as framework_task
except ImportError:
    from django_tasks import task as framework_task

ENGINE_OPTIONS = ("max_attempts", "timeout", "base_delay")


def _passes_backend_keywords() -> bool:
    parameters = inspect.signature(framework_task).parameters.values()
    return any(parameter.kind is inspect.Parameter.VAR_KEYWORD for parameter in parameters)


def _task_with_engine_options(function: Callable[..., Any] | None = None, **options: Any) -> Any:
    engine = {name: options.pop(name) for name in ENGINE_OPTIONS if name in options}

    def build(func: Callable[..., Any]) -> Any:
        built = framework_task(**options)(func)
        return dataclasses.replace(built, **engine) if engine else built

    return build if function is None else build(function)


task = framework_task if _passes_backend_keywords() else _task_with_engine_options

__all__ = ["task"]
