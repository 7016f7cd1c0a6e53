"""Schedules declared in code: ``schedule(flow_or_task, cron=..., ...)`` in an app's ``flows.py``
(or ``tasks.py`` for ``@task`` functions), or a module listed in ``PGFLOW["FLOWS"]``.

Each call records one definition in this process's registry; ``sync_declared_schedules`` (run by
``pgflow_compile`` and at worker start) writes them to the database.
"""

from __future__ import annotations

import threading
from typing import Any, Unpack

from pgflow_django.schedules.cron import InvalidSchedule
from pgflow_django.schedules.definition import ScheduleOptions, ScheduleSpec, build_spec

_declared: dict[str, tuple[ScheduleSpec, str]] = {}
_lock = threading.Lock()


def schedule(target: Any, *, cron: str, **options: Unpack[ScheduleOptions]) -> ScheduleSpec:
    """Declare that ``target`` (a Flow, or a ``@task`` of the pgflow tasks backend) runs on ``cron``.

    ``cron``: 5 fields, or 6 with a leading seconds field, read in ``timezone`` (IANA name).
    ``input``: the run input (for a task: its keyword arguments), or a module-level callable called
    with each tick (an aware datetime in ``timezone``) just before it fires; default ``{}``.
    ``name``: unique across schedules; default the flow slug (a task: its dotted path).
    ``catch_up``: after ticks were missed (nothing was firing), ``"all"`` fires up to
    ``max_catch_up`` of the latest missed ticks, ``"latest"`` (default) only the latest, ``"none"``
    none of them. ``jitter``: up to this many seconds of delay, fixed per tick, to spread load.
    ``enabled=False`` keeps the schedule stored but firing nothing.
    Declaring the same name twice with different definitions raises InvalidSchedule.
    """
    spec = build_spec(target, cron=cron, **options)
    where = _caller_module()
    with _lock:
        previous = _declared.get(spec.name)
        if previous is not None and previous[0] != spec:
            raise InvalidSchedule(
                f"schedule {spec.name!r} is declared twice with different definitions ({previous[1]} and "
                f"{where}); give one of them another name="
            )
        _declared[spec.name] = (spec, where)
    return spec


def declared_schedules() -> list[ScheduleSpec]:
    """Every schedule declared by the project's flow and task modules (imported here first)."""
    from pgflow_django.flows.registry import get_flows

    get_flows()
    _import_task_modules()
    with _lock:
        return [spec for spec, _ in sorted(_declared.values(), key=lambda item: item[0].name)]


def forget_declarations(*names: str) -> None:
    """Drop declarations from this process's registry (tests that declare schedules on the fly)."""
    with _lock:
        for name in names:
            _declared.pop(name, None)


def _import_task_modules() -> None:
    from django.core.exceptions import ImproperlyConfigured

    try:
        from pgflow_django.tasks.backend import pgflow_backends
    except ImproperlyConfigured:  # no tasks framework installed: no task schedules
        return
    for backend in pgflow_backends():
        backend.discover_tasks()


def _caller_module() -> str:
    import sys

    frame = sys._getframe(2)
    return str(frame.f_globals.get("__name__", "?"))
