"""System checks of schedules (registered by ``pgflow_django.checks``, which lists the ids).

Without a database: the declarations load (a bad cron, time zone, input or a name declared twice
with different definitions raises while ``flows.py`` is imported, and is reported here as E030
rather than as the flows' E001), every task module imports (E034: one line naming the module and
its exception), and each declared schedule's flow is registered (E031). With
``--database``: stored crons and time zones still parse and no zone is a host's own setting such
as 'localtime' (E032), no schedule that parses here recorded a planning failure of another host
(E035), no declared name is taken by a runtime schedule (E033), every active schedule's flow is
compiled there (W030), and a live worker runs each step of it (W031: its runs would wait in the
queue; with no live worker at all and ``PGFLOW["SCHEDULER"] = "workers"``, nothing fires it either).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django.core import checks
from django.core.exceptions import ImproperlyConfigured
from django.db import DatabaseError, connections

from pgflow_django.db.query import fetch_all, fetch_value
from pgflow_django.flows.registry import TaskModuleError
from pgflow_django.schedules import queries
from pgflow_django.schedules.cron import HOST_ZONES, InvalidSchedule, check_cron, check_timezone
from pgflow_django.schedules.definition import ScheduleSpec

_HINT_DECLARE = (
    "fix the schedule(...) call named in the message; the worker and pgflow_compile fail the same way"
)


def _declared() -> tuple[list[ScheduleSpec] | None, checks.CheckMessage | None]:
    """The declared schedules, or the E030 finding for the declaration that failed (None, None when
    the flows cannot be loaded for another reason: pgflow.E001 reports that)."""
    from pgflow_django.schedules.declare import declared_schedules

    try:
        return declared_schedules(), None
    except InvalidSchedule as exc:
        return None, checks.Error(
            f"a declared schedule{_where(exc)} is invalid: {' '.join(str(exc).split())}",
            hint=_HINT_DECLARE,
            id="pgflow.E030",
        )
    except TaskModuleError as exc:
        return None, checks.Error(
            f"{exc}; its tasks and their schedules are unknown",
            hint=f"fix the module (`python -c 'import {exc.module}'` shows the traceback) or stop listing it",
            obj=exc.module,
            id="pgflow.E034",
        )
    except (ImproperlyConfigured, ImportError):
        return None, None


def _where(exc: BaseException) -> str:
    """`` in module M, line N``: the module-level statement whose schedule(...) call raised."""
    found = ""
    trace = exc.__traceback__
    while trace is not None:
        frame = trace.tb_frame
        if frame.f_code.co_name == "<module>":
            found = f" in module {frame.f_globals.get('__name__', '?')}, line {trace.tb_lineno}"
        trace = trace.tb_next
    return found


@checks.register("pgflow")
def check_schedules(app_configs: Sequence[Any] | None = None, **kwargs: Any) -> list[checks.CheckMessage]:
    from pgflow_django.flows.registry import get_flows

    specs, failure = _declared()
    if specs is None:
        return [failure] if failure is not None else []
    registered = get_flows()
    return [
        checks.Error(
            f"schedule {spec.name!r} starts flow {spec.flow_slug!r}, which is not registered: no worker "
            "runs it and its ticks fail",
            hint="list the flow in PGFLOW['FLOWS'] or define it in an app's flows.py, or fix the target",
            obj=spec.name,
            id="pgflow.E031",
        )
        for spec in specs
        if spec.task is None and spec.flow_slug not in registered
    ]


@checks.register("pgflow", checks.Tags.database)
def check_stored_schedules(
    app_configs: Sequence[Any] | None = None, databases: Sequence[str] | None = None, **kwargs: Any
) -> list[checks.CheckMessage]:
    """Only with ``manage.py check --database ALIAS``."""
    messages: list[checks.CheckMessage] = []
    for alias in databases or ():
        if connections[alias].vendor == "postgresql":
            messages.extend(_stored(alias))
    return messages


def _stored(alias: str) -> list[checks.CheckMessage]:
    try:
        with connections[alias].cursor() as cursor:
            if not fetch_value(cursor, queries.HAS_SCHEDULES_TABLE):
                return []  # not migrated: pgflow.W001
            rows = fetch_all(cursor, queries.STORED_SCHEDULE_CHECKS)
    except DatabaseError:
        return []  # pgflow.E009 reports a database that cannot be inspected
    specs, _ = _declared()
    declared = {spec.name for spec in specs or ()}
    messages: list[checks.CheckMessage] = []
    active: list[queries.StoredScheduleCheck] = []
    for row in rows:
        name, flow_slug = row.name, row.flow_slug
        parses = True
        try:
            check_cron(row.cron)
            check_timezone(row.timezone)
        except InvalidSchedule as exc:
            parses = False
            if row.timezone in HOST_ZONES:
                fires = "until then it fires on the zone of whichever host plans it"
            else:
                fires = "it fires nothing"
            messages.append(
                checks.Error(
                    f"database {alias!r}: schedule {name!r}: {exc}; {fires}",
                    hint="edit it (pgflow_django.schedules.edit_schedule, or its declaration) or delete it",
                    obj=name,
                    id="pgflow.E032",
                )
            )
        if parses and row.plan_error is not None:
            when = "" if row.plan_failed_at is None else f" at {row.plan_failed_at:%Y-%m-%d %H:%M:%S %Z}"
            messages.append(
                checks.Error(
                    f"database {alias!r}: schedule {name!r} could not be planned{when}: "
                    f"{' '.join(row.plan_error.split())}; it gets no new ticks until it plans again",
                    hint="the host that planned it differs from this one (its zoneinfo or cronsim): fix "
                    "that host, or edit the schedule; the next plan that works clears this",
                    obj=name,
                    id="pgflow.E035",
                )
            )
        if row.origin == "runtime" and name in declared:
            messages.append(
                checks.Error(
                    f"database {alias!r}: schedule {name!r} is declared in code, but a runtime schedule has "
                    "that name; the sync refuses it",
                    hint="rename the declaration (name=...) or delete the runtime schedule",
                    obj=name,
                    id="pgflow.E033",
                )
            )
        if row.active and row.compiled:
            active.append(row)
        if row.active and not row.compiled:
            messages.append(
                checks.Warning(
                    f"database {alias!r}: schedule {name!r} starts flow {flow_slug!r}, which is not compiled "
                    "there; its ticks fail until it is",
                    hint=f"run `manage.py pgflow_compile {flow_slug}` (a worker for it compiles it too), or "
                    "pause the schedule",
                    obj=name,
                    id="pgflow.W030",
                )
            )
    messages.extend(_without_workers(alias, active))
    return messages


def _without_workers(alias: str, rows: list[queries.StoredScheduleCheck]) -> list[checks.CheckMessage]:
    """W031: an active schedule whose (compiled) flow has a step no live worker runs."""
    from pgflow_django.schedules.report import worker_gaps

    try:
        gaps = worker_gaps(
            ((row.name, row.flow_slug, {"task": row.task_path} if row.task_path else None) for row in rows),
            using=alias,
        )
    except DatabaseError:
        return []
    return [
        checks.Warning(
            f"database {alias!r}: schedule {row.name!r}: {gaps[row.name].detail}",
            hint=f"start {' and '.join(gaps[row.name].commands)} and keep it running, or pause the schedule",
            obj=row.name,
            id="pgflow.W031",
        )
        for row in rows
        if row.name in gaps
    ]
