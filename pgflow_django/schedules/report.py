"""How a schedule reads to an operator: its state in words, its last run's status, JSON, and the
one-line error for a name no schedule has. Shared by ``manage.py pgflow_schedules`` and the admin."""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final, Protocol

from django.db import connections

from pgflow_django.conf import get_settings
from pgflow_django.db import queries as db_queries
from pgflow_django.db.query import fetch_all
from pgflow_django.runs.coverage import any_live_worker, flow_service, worker_commands
from pgflow_django.schedules import queries
from pgflow_django.schedules.store import ScheduleNotFound, ScheduleView, get_schedule
from pgflow_django.suggest import known_and_closest

_LISTED: Final = 10


class _Stateful(Protocol):
    @property
    def enabled(self) -> bool: ...
    @property
    def paused_reason(self) -> str | None: ...
    @property
    def paused_detail(self) -> str | None: ...


def state_of(view: _Stateful) -> str:
    """``active``, ``disabled``, ``paused`` (with the operator's note) or ``removed from code``."""
    if view.paused_reason == "removed_from_code":
        return "removed from code"
    if view.paused_reason is not None:
        return f"paused: {view.paused_detail}" if view.paused_detail else "paused"
    return "active" if view.enabled else "disabled"


def run_statuses(run_ids: Iterable[uuid.UUID | None], *, using: str = "default") -> dict[uuid.UUID, str]:
    """The status of each run that still exists (a pruned run is absent from the result)."""
    wanted = sorted({uuid.UUID(str(run_id)) for run_id in run_ids if run_id is not None})
    if not wanted:
        return {}
    with connections[using].cursor() as cursor:
        return {row.run_id: row.status for row in fetch_all(cursor, db_queries.RUN_STATUSES, [wanted])}


def last_run_status(view: ScheduleView, statuses: dict[uuid.UUID, str]) -> str | None:
    """The last run's status; ``pruned`` once its run is gone; None before the first fire."""
    if view.last_run_id is None:
        return None
    return statuses.get(view.last_run_id, "pruned")


def next_fire_times(
    name: str, upcoming: Sequence[datetime], jitter: int, *, limit: int = 5, using: str = "default"
) -> list[datetime]:
    """When the next planned ticks fire, jitter included (``pgflow.schedule_fire_at``), earliest first."""
    if not upcoming:
        return []
    with connections[using].cursor() as cursor:
        rows = fetch_all(cursor, queries.SCHEDULE_FIRE_TIMES, [name, jitter, list(upcoming), limit])
        return [row.fire_at for row in rows]


def schedule_dict(
    view: ScheduleView, statuses: dict[uuid.UUID, str], gaps: dict[str, WorkerGap] | None = None
) -> dict[str, Any]:
    """A schedule as JSON-ready data (run ids as strings, times ISO 8601 in UTC); ``gaps`` as
    :func:`worker_gaps` gives them."""
    gap = (gaps or {}).get(view.name)
    return {
        "name": view.name,
        "flow_slug": view.flow_slug,
        "cron": view.cron,
        "timezone": view.timezone,
        "state": state_of(view),
        "enabled": view.enabled,
        "paused_reason": view.paused_reason,
        "paused_detail": view.paused_detail,
        "paused_at": view.paused_at,
        "origin": view.origin,
        "catch_up": view.catch_up,
        "max_catch_up": view.max_catch_up,
        "jitter": view.jitter,
        "input": view.input,
        "input_callable": view.input_callable,
        "next_fire_at": view.next_fire_at,
        "upcoming": list(view.upcoming[:5]),
        "last_tick": view.last_tick,
        "last_fired_at": view.last_fired_at,
        "last_run_id": None if view.last_run_id is None else str(view.last_run_id),
        "last_run_status": last_run_status(view, statuses),
        "missed_ticks": view.missed_ticks,
        "last_error": view.last_error,
        "worker_warning": None if gap is None else gap.warning,
        "plan_error": view.plan_error,
        "plan_failed_at": view.plan_failed_at,
    }


@dataclass(frozen=True)
class WorkerGap:
    """Why an active schedule's runs would not run (or it would not fire): no live worker for them."""

    warning: str
    """Short, for a list's state: ``no live worker``, ``no live worker for step S``."""
    detail: str
    """One sentence: what waits, and whether anything fires the schedule at all."""
    commands: list[str]
    """The ``manage.py pgflow_worker`` command lines that would run its flow's unserved steps."""


def task_path_of(schedule_input: Any) -> str | None:
    """The task a ``@task`` schedule calls (its stored input's ``task``), else None."""
    if isinstance(schedule_input, dict) and isinstance(schedule_input.get("task"), str):
        return str(schedule_input["task"])
    return None


def worker_gaps(schedules: Iterable[tuple[str, str, Any]], *, using: str = "default") -> dict[str, WorkerGap]:
    """For each active schedule given as ``(name, flow_slug, stored input)`` whose flow has a step no
    live worker runs, why (by ``pgflow_django.runs.coverage``'s rule of a live worker); two
    statements however many schedules, a third when one has such a step."""
    wanted = list(schedules)
    services = flow_service({flow for _, flow, _ in wanted}, using=using)
    gaps: dict[str, WorkerGap] = {}
    fired: bool | None = None
    for name, flow, schedule_input in wanted:
        service = services[flow]
        warning = service.warning()
        if warning is None:
            continue
        task_path = task_path_of(schedule_input)
        if service.steps:
            commands = worker_commands(service.unserved, task_path=task_path)
        else:
            commands = [f"manage.py pgflow_worker --{'tasks' if task_path else f'flow {flow}'}"]
        if not service.steps:
            what = f"flow {flow} is not compiled and no worker runs it: its ticks fail"
        elif len(service.unserved) == len(service.steps):
            what = f"no live worker runs flow {flow}: its runs wait in the queue until one starts"
        else:
            steps = ", ".join(step.step_slug for step in service.unserved)
            what = f"no live worker runs step(s) {steps} of flow {flow}: its runs wait there until one starts"
        if fired is None:
            fired = get_settings().scheduler == "pg_cron" or any_live_worker(using=using)
        if not fired:
            what += (
                "; and no worker is live at all, so nothing fires it unless manage.py pgflow_scheduler runs"
            )
        gaps[name] = WorkerGap(warning, what, commands)
    return gaps


def schedule_not_found(name: str, *, using: str = "default") -> str:
    """One line for a name no schedule has: the known names and the closest match."""
    with connections[using].cursor() as cursor:
        known = [row.schedule_name for row in fetch_all(cursor, queries.SCHEDULE_NAMES)]
    listed, hint = known_and_closest(name, known, most=_LISTED)
    return f"no schedule named {name!r} (known schedules: {listed}){hint}"


def find_schedule(name: str, *, using: str = "default") -> ScheduleView:
    """``get_schedule``, whose ScheduleNotFound names the known schedules and the closest match."""
    try:
        return get_schedule(name, using=using)
    except ScheduleNotFound:
        raise ScheduleNotFound(schedule_not_found(name, using=using)) from None
