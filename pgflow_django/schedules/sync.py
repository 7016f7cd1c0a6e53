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
from typing import Final

from django.db import connections, transaction

from pgflow_django.db.query import fetch_all, fetch_one, fetch_value
from pgflow_django.schedules import queries
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


def sync_declared_schedules(specs: list[ScheduleSpec] | None = None, *, using: str = "default") -> SyncResult:
    """Sync ``specs`` (default: every declared schedule) as the complete set declared in code."""
    from pgflow_django.flows.compiler import compile_flow

    declared = declared_schedules() if specs is None else specs
    result = SyncResult()
    with transaction.atomic(using=using), connections[using].cursor() as cursor:
        fetch_value(cursor, queries.SYNC_SCHEDULES_LOCK, [SYNC_LOCK_KEY])
        for spec in declared:
            if spec.task is not None and spec.flow is not None:
                compile_flow(spec.flow, using=using)
            current = fetch_one(cursor, queries.LOCK_STORED_TIMING, [spec.name])
            if current is not None and current.origin != "code":
                raise InvalidSchedule(
                    f"schedule {spec.name!r} is declared in code but a runtime schedule has that name; "
                    "rename the declaration (name=...) or delete the runtime schedule"
                )
            row = fetch_one(
                cursor,
                queries.SYNC_DECLARED_SCHEDULE,
                {**spec.parameters(), "replan": _replans(spec, current)},
            )
            if row is None:
                result.unchanged.append(spec.name)
            else:
                (result.created if row.inserted else result.updated).append(spec.name)
        removed = fetch_all(cursor, queries.MARK_REMOVED_FROM_CODE, [[spec.name for spec in declared]])
        result.removed.extend(sorted(row.schedule_name for row in removed))
        plan_schedules(cursor, names=[spec.name for spec in declared])
    return result


def _replans(spec: ScheduleSpec, current: queries.StoredTiming | None) -> bool:
    """Whether the stored ticks are dropped and planned again from now: the ticks moved (cron,
    timezone, jitter), or the schedule comes back after being disabled or removed from code."""
    if current is None:
        return False
    return (
        (current.cron, current.timezone, current.jitter_seconds) != (spec.cron, spec.timezone, spec.jitter)
        or (spec.enabled and not current.enabled)
        or current.paused_reason == "removed_from_code"
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
