"""Plans each schedule's coming ticks into ``pgflow.schedules.upcoming``, so firing needs no Python.

A schedule is planned when it holds fewer than ``LOW_WATER`` ticks: ``PLAN_AHEAD`` ticks are computed
after the last one planned. When planning stopped for longer than the plan lasted (nothing ran), the
ticks of that gap are not all replayed: only as many of its latest ticks as the catch-up policy can
fire (``max_catch_up`` for ``all``, one otherwise) are planned, and firing applies the policy to them.
A plan whose ticks are all in the past (every worker was down for longer than it lasted) is planned
again from now however many ticks it holds, and ``pgflow.fire_due_schedules`` fires none of them
until then: else the policy would pick the stale end of the old plan instead of the ticks due now.
Planning runs on the database's clock (see ``clock``). Any process that runs Django can plan:
workers on their scheduler pass, ``pgflow_scheduler``, the sync at ``pgflow_compile`` and worker
start, and every API call that changes a definition.

One schedule that cannot be planned (its stored cron no longer parses, its time zone is one this
host's zoneinfo does not know) is skipped alone: its reason is stored in ``plan_error`` with the
moment (``plan_failed_at``), logged once as a warning, and the other schedules are planned in the
same call. A schedule whose planning failed is tried again ``PLAN_RETRY`` later (at once when named:
a sync or an edit plans it), and comes last among the candidates, so failed schedules never take the
batch of those that plan; the next plan that works clears the error.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, Final

from cronsim import CronSimError

from pgflow_django.db.query import fetch_all
from pgflow_django.schedules import queries
from pgflow_django.schedules.clock import database_now
from pgflow_django.schedules.cron import InvalidSchedule, ticks_after, ticks_before

logger = logging.getLogger("pgflow_django.schedules")

PLAN_AHEAD: Final = 100
"""Ticks planned per schedule at a time."""
LOW_WATER: Final = 50
"""A schedule with fewer planned ticks than this is planned again."""
PLAN_BATCH: Final = 500
"""At most this many schedules planned per call (the next call takes the rest)."""
PLAN_RETRY: Final = timedelta(minutes=1)
"""A schedule whose planning failed is tried again this long after (by a pass; a sync or an edit
that names it tries at once): a stored definition stays broken until someone fixes it, and each try
logs a warning."""


def plan_ticks(
    cron: str,
    timezone: str,
    *,
    catch_up: str,
    max_catch_up: int,
    planned: int,
    after: datetime | None,
    now: datetime,
) -> list[datetime]:
    """The ticks to add to a schedule holding ``planned`` ticks, the last at or before ``after``."""
    wanted = max(PLAN_AHEAD - planned, 0)
    if after is None or after >= now:
        return ticks_after(cron, timezone, after or now, wanted)
    backlog = ticks_before(cron, timezone, now, max_catch_up if catch_up == "all" else 1, after=after)
    return backlog + ticks_after(cron, timezone, now, wanted)


def plan_schedules(
    cursor: Any, *, now: datetime | None = None, names: Sequence[str] | None = None, limit: int = PLAN_BATCH
) -> list[str]:
    """Plan the schedules running low or stale (only ``names`` when given) on ``cursor`` (Django's or
    psycopg's) as of ``now`` (default: the database's clock); returns the names planned. Safe to run
    anywhere at any time: a plan made for a definition edited meanwhile is refused by
    ``pgflow.plan_schedules``, and duplicates are merged away. The names come in name order. A
    schedule that cannot be planned is left out of the result: its reason is stored and logged,
    and the others are planned."""
    moment = (now or database_now(cursor)).astimezone(UTC)
    listed = list(names) if names is not None else None
    candidates = fetch_all(
        cursor,
        queries.SCHEDULES_TO_PLAN,
        {"low_water": LOW_WATER, "names": listed, "limit": limit, "now": moment, "retry": PLAN_RETRY},
    )
    plans: list[dict[str, Any]] = []
    for row in candidates:
        try:
            plan = _plan(row, moment)
        except Exception as exc:
            reason = _reason(row, exc)
            logger.warning(
                "schedule %r cannot be planned: %s; it gets no new ticks until it is fixed (edit it, or "
                "its schedule(...) declaration), the other schedules are planned and fire",
                row.schedule_name,
                _inert(reason),
            )
            plans.append(
                {
                    "schedule": row.schedule_name,
                    "revision": row.revision,
                    "error": reason,
                    "failed_at": moment.isoformat(),
                }
            )
            continue
        if plan is not None:
            plans.append(plan)
    if not plans:
        return []
    return [row.schedule_name for row in fetch_all(cursor, queries.PLAN_SCHEDULES, [json.dumps(plans)])]


def _plan(row: queries.PlanCandidate, moment: datetime) -> dict[str, Any] | None:
    """The plan of one candidate (None when it needs no tick), or the exception that stops it."""
    # a stale plan's ticks are all due: they stay, for firing to apply the policy to them with
    # the ticks due since, and the whole plan ahead is made again
    stale = row.last_planned is not None and row.last_planned <= moment
    planned = 0 if stale else row.planned or 0
    after = max(
        (moment for moment in (row.last_planned, row.planned_until, row.last_tick) if moment is not None),
        default=None,
    )
    ticks = plan_ticks(
        row.cron,
        row.timezone,
        catch_up=row.catch_up,
        max_catch_up=row.max_catch_up,
        planned=planned,
        after=after,
        now=moment,
    )
    future = [tick for tick in ticks if tick > moment]
    # an expression that stops matching (cronsim looks 50 years ahead) is planned to its end once
    exhausted = len(future) < max(PLAN_AHEAD - planned, 0)
    if not ticks and not exhausted:
        return None
    return {
        "schedule": row.schedule_name,
        "revision": row.revision,
        "ticks": [tick.isoformat() for tick in ticks],
        "planned_until": "infinity" if exhausted else ticks[-1].isoformat(),
    }


def _reason(row: queries.PlanCandidate, exc: Exception) -> str:
    """Why a schedule cannot be planned, in words an operator acts on."""
    if isinstance(exc, InvalidSchedule):
        return str(exc)
    if isinstance(exc, CronSimError):
        return f"cron {row.cron!r} is not valid: {exc}"
    return f"planning cron {row.cron!r} in {row.timezone!r} raised {type(exc).__name__}: {exc}"


def _inert(text: str) -> str:
    """``text`` with its control and format characters (ESC, bidi overrides) as visible escapes."""
    return "".join(char if char.isprintable() else repr(char)[1:-1] for char in text)
