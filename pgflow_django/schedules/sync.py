"""Writes the declared schedules to the database: the one path of ``pgflow_compile`` and worker start.

A declared schedule is created, or its stored definition is brought in line with the code. A change
of cron, timezone or jitter, enabling it again or declaring it again after its removal plans its
ticks from now: nothing of the time it was changed, disabled or removed is caught up. A schedule
declared before but missing from the code now is paused with reason ``removed_from_code``: it keeps
its history and fires nothing, until it is declared again or deleted. An operator pause survives a
sync. Concurrent syncs (workers starting
together) queue on an advisory lock, so each sees the previous one's result.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any, Final

from django.db import connections, transaction

from pgflow_django.schedules.cron import InvalidSchedule
from pgflow_django.schedules.declare import declared_schedules
from pgflow_django.schedules.definition import ScheduleSpec
from pgflow_django.schedules.planner import plan_schedules

SYNC_LOCK_KEY: Final = "pgflow:sync_schedules"

logger = logging.getLogger("pgflow_django.schedules")


@dataclass(frozen=True)
class SyncResult:
    created: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    """Declared before, missing from the code now: paused as ``removed_from_code``."""


_CURRENT = """
select origin, cron, timezone, jitter_seconds, enabled, paused_reason
  from pgflow.schedules where schedule_name = %s for update
"""

_UPSERT = """
insert into pgflow.schedules as s (schedule_name, flow_slug, cron, timezone, input, input_callable,
                                   catch_up, max_catch_up, jitter_seconds, enabled, origin)
values (%(name)s, %(flow_slug)s, %(cron)s, %(timezone)s, %(input)s::jsonb, %(input_callable)s,
        %(catch_up)s, %(max_catch_up)s, %(jitter)s, %(enabled)s, 'code')
on conflict (schedule_name) do update
   set flow_slug = excluded.flow_slug, cron = excluded.cron, timezone = excluded.timezone,
       input = excluded.input, input_callable = excluded.input_callable, catch_up = excluded.catch_up,
       max_catch_up = excluded.max_catch_up, jitter_seconds = excluded.jitter_seconds,
       enabled = excluded.enabled, revision = s.revision + 1, updated_at = clock_timestamp(),
       paused_reason = case when s.paused_reason = 'removed_from_code' then null else s.paused_reason end,
       paused_detail = case when s.paused_reason = 'removed_from_code' then null else s.paused_detail end,
       paused_at = case when s.paused_reason = 'removed_from_code' then null else s.paused_at end,
       upcoming = case when %(replan)s then '{}' else s.upcoming end,
       planned_until = case when %(replan)s then clock_timestamp() else s.planned_until end,
       next_fire_at = case when %(replan)s then null else s.next_fire_at end
 where s.origin = 'code'
   and ((s.flow_slug, s.cron, s.timezone, s.input, s.input_callable, s.catch_up, s.max_catch_up,
         s.jitter_seconds, s.enabled)
        is distinct from (excluded.flow_slug, excluded.cron, excluded.timezone, excluded.input,
                          excluded.input_callable, excluded.catch_up, excluded.max_catch_up,
                          excluded.jitter_seconds, excluded.enabled)
        or s.paused_reason = 'removed_from_code')
returning (xmax = 0) as inserted
"""


def sync_declared_schedules(specs: list[ScheduleSpec] | None = None, *, using: str = "default") -> SyncResult:
    """Sync ``specs`` (default: every declared schedule) as the complete set declared in code."""
    from pgflow_django.compiler import compile_flow

    declared = declared_schedules() if specs is None else specs
    result = SyncResult()
    with transaction.atomic(using=using), connections[using].cursor() as cursor:
        cursor.execute("select pg_advisory_xact_lock(hashtextextended(%s, 0))", [SYNC_LOCK_KEY])
        for spec in declared:
            if spec.task is not None and spec.flow is not None:
                compile_flow(spec.flow, using=using)
            cursor.execute(_CURRENT, [spec.name])
            current = cursor.fetchone()
            if current is not None and current[0] != "code":
                raise InvalidSchedule(
                    f"schedule {spec.name!r} is declared in code but a runtime schedule has that name; "
                    "rename the declaration (name=...) or delete the runtime schedule"
                )
            cursor.execute(_UPSERT, {**_params(spec), "replan": _replans(spec, current)})
            row = cursor.fetchone()
            if row is None:
                result.unchanged.append(spec.name)
            else:
                (result.created if row[0] else result.updated).append(spec.name)
        cursor.execute(
            """
            update pgflow.schedules
               set paused_reason = 'removed_from_code', paused_detail = null, paused_at = clock_timestamp(),
                   updated_at = clock_timestamp()
             where origin = 'code' and not (schedule_name = any(%s::text[]))
               and paused_reason is distinct from 'removed_from_code'
            returning schedule_name
            """,
            [[spec.name for spec in declared]],
        )
        result.removed.extend(sorted(row[0] for row in cursor.fetchall()))
        plan_schedules(cursor, names=[spec.name for spec in declared])
    return result


def _params(spec: ScheduleSpec) -> dict[str, Any]:
    return {
        "name": spec.name,
        "flow_slug": spec.flow_slug,
        "cron": spec.cron,
        "timezone": spec.timezone,
        "input": spec.input_json(),
        "input_callable": spec.input_callable,
        "catch_up": spec.catch_up,
        "max_catch_up": spec.max_catch_up,
        "jitter": spec.jitter,
        "enabled": spec.enabled,
    }


def _replans(spec: ScheduleSpec, current: tuple[object, ...] | None) -> bool:
    """Whether the stored ticks are dropped and planned again from now: the ticks moved (cron,
    timezone, jitter), or the schedule comes back after being disabled or removed from code."""
    if current is None:
        return False
    _, cron, timezone, jitter, enabled, paused_reason = current
    return (
        (cron, timezone, jitter) != (spec.cron, spec.timezone, spec.jitter)
        or (spec.enabled and not enabled)
        or paused_reason == "removed_from_code"
    )


def sync_schedules_at_start(using: str = "default") -> SyncResult | None:
    """The worker's start-up sync: a definition problem is logged, not fatal (the flows still run)."""
    from django.core.exceptions import ImproperlyConfigured
    from django.db import DatabaseError

    try:
        result = sync_declared_schedules(using=using)
    except (InvalidSchedule, ImproperlyConfigured, DatabaseError) as exc:
        logger.warning("declared schedules were not synced: %s", exc)
        return None
    finally:
        connections[using].close()
    if result.created or result.updated or result.removed:
        logger.info(
            "schedules synced: %d created, %d updated, %d removed from code (paused)",
            len(result.created),
            len(result.updated),
            len(result.removed),
        )
    return result
