"""Schedules: flows and ``@task`` functions started on cron ticks, fired exactly once per tick.

Declare them in code with ``schedule(...)``, or manage runtime ones with ``create_schedule`` and
friends; ``pgflow.fire_due_schedules`` (called by every worker, by ``manage.py pgflow_scheduler``,
or by pg_cron) fires them. docs/schedules.md has the whole story.

The names below load on first access, as ``pgflow_django``'s do: the worker imports the firing side
(``service``, ``firing``, ``planner``), and importing it must not run the definition side
(``definition``, ``declare``, ``store``, ``sync``), which reaches the tasks backend, which imports the
worker.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pgflow_django.lazy import load_lazily

if TYPE_CHECKING:
    from pgflow_django.schedules.cron import InvalidSchedule
    from pgflow_django.schedules.declare import declared_schedules, schedule
    from pgflow_django.schedules.definition import CatchUp, ScheduleSpec
    from pgflow_django.schedules.firing import FiredTick, FireResult, fire_due
    from pgflow_django.schedules.planner import plan_schedules
    from pgflow_django.schedules.store import (
        ScheduleDeclared,
        ScheduleExists,
        ScheduleNotFound,
        create_schedule,
        delete_schedule,
        edit_schedule,
        get_schedule,
        list_schedules,
        pause_schedule,
        recent_ticks,
        resume_schedule,
        trigger_now,
    )
    from pgflow_django.schedules.sync import SyncResult, sync_declared_schedules
    from pgflow_django.schedules.views import ScheduleView, TickView

_LAZY = {
    "CatchUp": "definition",
    "FireResult": "firing",
    "FiredTick": "firing",
    "InvalidSchedule": "cron",
    "ScheduleDeclared": "store",
    "ScheduleExists": "store",
    "ScheduleNotFound": "store",
    "ScheduleSpec": "definition",
    "ScheduleView": "views",
    "SyncResult": "sync",
    "TickView": "views",
    "create_schedule": "store",
    "declared_schedules": "declare",
    "delete_schedule": "store",
    "edit_schedule": "store",
    "fire_due": "firing",
    "get_schedule": "store",
    "list_schedules": "store",
    "pause_schedule": "store",
    "plan_schedules": "planner",
    "recent_ticks": "store",
    "resume_schedule": "store",
    "schedule": "declare",
    "sync_declared_schedules": "sync",
    "trigger_now": "store",
}

__all__ = [
    "CatchUp",
    "FireResult",
    "FiredTick",
    "InvalidSchedule",
    "ScheduleDeclared",
    "ScheduleExists",
    "ScheduleNotFound",
    "ScheduleSpec",
    "ScheduleView",
    "SyncResult",
    "TickView",
    "create_schedule",
    "declared_schedules",
    "delete_schedule",
    "edit_schedule",
    "fire_due",
    "get_schedule",
    "list_schedules",
    "pause_schedule",
    "plan_schedules",
    "recent_ticks",
    "resume_schedule",
    "schedule",
    "sync_declared_schedules",
    "trigger_now",
]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    return load_lazily(globals(), name, None if module is None else f"{__name__}.{module}")
