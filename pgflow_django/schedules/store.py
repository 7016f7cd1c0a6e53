"""The runtime API: create, edit, pause, resume, delete and trigger schedules, and read them back.

Every function runs on Django's connection (``using``), so inside ``transaction.atomic()`` it commits
or rolls back with the caller. Schedules declared in code (``origin == "code"``) are changed by
editing their declaration; the API pauses, resumes and triggers them but refuses to edit or delete
them while they are declared. A definition change that moves the ticks (cron, timezone, jitter)
replans from now: ticks of the old definition that have not fired are dropped, not caught up.
"""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime
from typing import Any, Final, Unpack

from django.db import connections, transaction

from pgflow_django.db.dbguard import require_postgresql
from pgflow_django.db.query import fetch_all, fetch_one, fetch_value
from pgflow_django.schedules import queries
from pgflow_django.schedules.callables import resolve_callable
from pgflow_django.schedules.clock import database_now
from pgflow_django.schedules.cron import InvalidSchedule, stored_zone
from pgflow_django.schedules.definition import ScheduleOptions, TaskTarget, build_spec
from pgflow_django.schedules.firing import evaluate_input
from pgflow_django.schedules.planner import plan_schedules
from pgflow_django.schedules.views import ScheduleView, TickView, as_uuid

_UNSET: Final[Any] = object()


class ScheduleNotFound(LookupError):
    """No schedule has this name."""


class ScheduleExists(ValueError):
    """Another schedule already has this name."""


class ScheduleDeclared(ValueError):
    """The schedule is declared in code: change its declaration instead."""


def create_schedule(
    target: Any, *, cron: str, using: str = "default", **options: Unpack[ScheduleOptions]
) -> ScheduleView:
    """Create a runtime schedule of a Flow, flow slug or ``@task`` and plan its ticks from now.

    The arguments mean what they mean for ``schedule()``; raises InvalidSchedule or ScheduleExists.
    """
    spec = build_spec(target, cron=cron, **options)
    require_postgresql(using)
    with transaction.atomic(using=using), connections[using].cursor() as cursor:
        if fetch_value(cursor, queries.CREATE_SCHEDULE, spec.parameters()) is None:
            raise ScheduleExists(f"a schedule named {spec.name!r} exists; pick another name or edit it")
        plan_schedules(cursor, names=[spec.name])
    return get_schedule(spec.name, using=using)


def edit_schedule(
    name: str,
    *,
    target: Any = _UNSET,
    cron: Any = _UNSET,
    input: Any = _UNSET,
    timezone: Any = _UNSET,
    catch_up: Any = _UNSET,
    max_catch_up: Any = _UNSET,
    jitter: Any = _UNSET,
    enabled: Any = _UNSET,
    using: str = "default",
) -> ScheduleView:
    """Change a runtime schedule; arguments left out keep their value. A new cron, timezone or
    jitter, or enabling it again, plans its ticks from now (nothing of the past is caught up).
    ``input`` may be a value or a callable (as for ``schedule``)."""
    with transaction.atomic(using=using), connections[using].cursor() as cursor:
        current = _locked(cursor, name)
        _refuse_declared(current, "edit")
        task_path = current.input["task"] if target is _UNSET and _is_task_payload(current.input) else None
        if input is not _UNSET:
            new_input = input
        elif current.input_callable is not None:
            new_input = resolve_callable(current.input_callable)
        else:
            new_input = current.input["kwargs"] if task_path else current.input
        spec = build_spec(
            current.flow_slug if target is _UNSET else target,
            cron=current.cron if cron is _UNSET else cron,
            input=new_input,
            name=name,
            timezone=current.timezone if timezone is _UNSET else timezone,
            catch_up=current.catch_up if catch_up is _UNSET else catch_up,
            max_catch_up=current.max_catch_up if max_catch_up is _UNSET else max_catch_up,
            jitter=current.jitter if jitter is _UNSET else jitter,
            enabled=current.enabled if enabled is _UNSET else enabled,
            task_path=task_path,
        )
        fetch_value(cursor, queries.EDIT_SCHEDULE, spec.parameters())
        plan_schedules(cursor, names=[name])
    return get_schedule(name, using=using)


def pause_schedule(name: str, *, detail: str | None = None, using: str = "default") -> ScheduleView:
    """Pause a schedule (declared or runtime): it fires nothing until resumed; a sync keeps the pause."""
    with transaction.atomic(using=using), connections[using].cursor() as cursor:
        current = _locked(cursor, name)
        if current.paused_reason is None:
            fetch_value(cursor, queries.PAUSE_SCHEDULE, [detail, name])
    return get_schedule(name, using=using)


def resume_schedule(name: str, *, now: datetime | None = None, using: str = "default") -> ScheduleView:
    """Resume an operator-paused schedule. Ticks that came while it was paused never fire (they count
    as missed); the next tick after ``now`` (default: the database's clock) does."""
    with transaction.atomic(using=using), connections[using].cursor() as cursor:
        moment = (now or database_now(cursor)).astimezone(UTC)
        current = _locked(cursor, name)
        if current.paused_reason == "removed_from_code":
            raise ScheduleDeclared(
                f"schedule {name!r} was removed from code: declare it again with schedule(...), or delete it"
            )
        if current.paused_reason is not None:
            fetch_value(cursor, queries.RESUME_SCHEDULE, {"now": moment, "name": name})
            plan_schedules(cursor, now=moment, names=[name])
    return get_schedule(name, using=using)


def delete_schedule(name: str, *, using: str = "default") -> int:
    """Delete a runtime schedule, or a declared one removed from code, with its ledger of fired ticks
    (the runs stay); returns how many ledger rows were deleted."""
    with transaction.atomic(using=using), connections[using].cursor() as cursor:
        current = _locked(cursor, name)
        if current.origin == "code" and current.paused_reason != "removed_from_code":
            raise ScheduleDeclared(
                f"schedule {name!r} is declared in code: remove its schedule(...) declaration first "
                "(the next sync disables it), then delete it"
            )
        ticks = int(fetch_value(cursor, queries.SCHEDULE_TICK_COUNT, [name]))
        fetch_value(cursor, queries.DELETE_SCHEDULE, [name])
    return ticks


def trigger_now(name: str, *, input: Any = _UNSET, using: str = "default") -> uuid.UUID:
    """Start one run of the schedule now (the database's clock), outside its ticks, recorded in its
    ledger as ``manual``; works on paused schedules. ``input`` overrides the stored input (or the
    callable's result)."""
    with transaction.atomic(using=using), connections[using].cursor() as cursor:
        current = _locked(cursor, name)
        moment = database_now(cursor)
        value: Any = None
        if input is not _UNSET:
            value = (
                TaskTarget(current.input["task"]).payload(input) if _is_task_payload(current.input) else input
            )
        elif current.input_callable is not None:
            value = evaluate_input(
                current.input_callable, current.input, moment.astimezone(stored_zone(current.timezone))
            )
        run_id = fetch_value(
            cursor,
            queries.TRIGGER_SCHEDULE,
            [name, moment, None if value is None else json.dumps(value)],
        )
    return as_uuid(run_id)


def get_schedule(name: str, *, using: str = "default") -> ScheduleView:
    """One schedule by name; raises ScheduleNotFound."""
    require_postgresql(using)
    with connections[using].cursor() as cursor:
        row = fetch_one(cursor, queries.GET_SCHEDULE, [name])
    if row is None:
        raise ScheduleNotFound(f"no schedule named {name!r}")
    return row


def list_schedules(*, using: str = "default") -> list[ScheduleView]:
    """Every schedule, by name."""
    require_postgresql(using)
    with connections[using].cursor() as cursor:
        return fetch_all(cursor, queries.ALL_SCHEDULES)


def recent_ticks(name: str, *, limit: int = 20, using: str = "default") -> list[TickView]:
    """The schedule's latest fired ticks, newest first."""
    require_postgresql(using)
    with connections[using].cursor() as cursor:
        rows = fetch_all(cursor, queries.RECENT_TICKS, [name, limit])
    return rows


def _locked(cursor: Any, name: str) -> ScheduleView:
    row = fetch_one(cursor, queries.LOCK_SCHEDULE, [name])
    if row is None:
        raise ScheduleNotFound(f"no schedule named {name!r}")
    return row


def _refuse_declared(current: ScheduleView, verb: str) -> None:
    if current.origin == "code":
        raise ScheduleDeclared(
            f"schedule {current.name!r} is declared in code: change its schedule(...) declaration "
            f"to {verb} it"
        )


def _is_task_payload(value: Any) -> bool:
    return isinstance(value, dict) and set(value) == {"task", "args", "kwargs"}


__all__ = [
    "InvalidSchedule",
    "ScheduleDeclared",
    "ScheduleExists",
    "ScheduleNotFound",
    "ScheduleView",
    "TickView",
    "create_schedule",
    "delete_schedule",
    "edit_schedule",
    "get_schedule",
    "list_schedules",
    "pause_schedule",
    "recent_ticks",
    "resume_schedule",
    "trigger_now",
]
