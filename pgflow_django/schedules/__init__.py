"""Schedules: flows and ``@task`` functions started on cron ticks, fired exactly once per tick.

Declare them in code with ``schedule(...)``, or manage runtime ones with ``create_schedule`` and
friends; ``pgflow.fire_due_schedules`` (called by every worker, by ``manage.py pgflow_scheduler``,
or by pg_cron) fires them. docs/schedules.md has the whole story.
"""

from pgflow_django.schedules.cron import InvalidSchedule
from pgflow_django.schedules.declare import declared_schedules, schedule
from pgflow_django.schedules.definition import CatchUp, ScheduleSpec
from pgflow_django.schedules.firing import FiredTick, FireResult, fire_due
from pgflow_django.schedules.planner import plan_schedules
from pgflow_django.schedules.store import (
    ScheduleDeclared,
    ScheduleExists,
    ScheduleNotFound,
    ScheduleView,
    TickView,
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
