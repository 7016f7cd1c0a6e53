"""One scheduler pass: plan the schedules running low on ticks, then fire the due ones.

The worker runs a pass on its maintenance loop (on its engine connection, so firing costs it no extra
connection) and ``manage.py pgflow_scheduler`` runs passes alone. Each part runs in its own short
transaction; the firing one holds the firing lock, so passes of many processes never wait on each
other: all but one return at once. A schedule that cannot be planned (a stored cron that no longer
parses, a time zone this host does not know) is skipped alone by the planner, which records and logs
why; the others plan and fire in the same pass. A lost connection propagates, for the caller's
reconnect logic; any other failure of a part (a SQL error) is logged and that part rolled back (a
failed planning still lets the ticks planned before fire), so a schedule problem never stops a
worker's claim loop. Both parts read the database's clock,
never this host's (see ``clock``).
"""

from __future__ import annotations

import logging
from datetime import datetime
from typing import Any, Final

import psycopg

from pgflow_django.schedules.firing import MAX_SCHEDULES, FireResult, fire_due
from pgflow_django.schedules.planner import plan_schedules

logger = logging.getLogger("pgflow_django.schedules")

PASS_INTERVAL: Final = 1.0
"""Seconds between a worker's scheduler passes: the finest resolution of a seconds-field cron."""


def run_pass(
    conn: psycopg.Connection[Any], *, now: datetime | None = None, max_schedules: int = MAX_SCHEDULES
) -> FireResult:
    """Plan, then fire, on a psycopg connection outside any transaction, as of ``now`` (default: the
    database's clock, read by each part); returns what fired."""
    try:
        with conn.transaction(), conn.cursor() as cursor:
            plan_schedules(cursor, now=now)
    except (psycopg.OperationalError, psycopg.InterfaceError):
        raise
    except Exception as exc:
        # the ticks planned before are still there: firing them does not wait for the planner
        logger.error("scheduler pass: planning failed: %s: %s", type(exc).__name__, str(exc).strip())
    try:
        with conn.transaction(), conn.cursor() as cursor:
            result = fire_due(cursor, now=now, max_schedules=max_schedules)
    except (psycopg.OperationalError, psycopg.InterfaceError):
        raise
    except Exception as exc:
        logger.error("scheduler pass: firing failed: %s: %s", type(exc).__name__, str(exc).strip())
        return FireResult(locked=False)
    for tick in result.fired:
        logger.info(
            "schedule %s fired tick %s: run %s", tick.schedule_name, tick.tick.isoformat(), tick.run_id
        )
    return result
