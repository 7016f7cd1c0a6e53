"""The scheduler's clock is the database server's, never the host's.

Every worker plans and fires against one shared ledger: on host clocks, a worker 30 s fast fires a
tick 30 s early and counts the ticks in between as missed for everyone, and one hours ahead uses up
a schedule's whole plan at once. So planning, firing, resuming and triggering read
``clock_timestamp()`` (the default of ``pgflow.fire_due_schedules`` too), and a host whose clock
differs from the database's by more than ``SKEW_WARNING`` is told once per process: its schedules
still fire on time, but its other timestamps (logs) are off.
"""

from __future__ import annotations

import logging
import threading
import time
from datetime import UTC, datetime, timedelta
from typing import Any, Final

from pgflow_django.db.query import fetch_value
from pgflow_django.schedules import queries

logger = logging.getLogger("pgflow_django.schedules")

SKEW_WARNING: Final = timedelta(seconds=1)
"""A host clock further than this from the database's (beyond the query's round trip) is logged."""

_lock = threading.Lock()
_warned = False


def database_now(cursor: Any) -> datetime:
    """The database server's current time (``clock_timestamp()``, in UTC) on ``cursor``, Django's or
    psycopg's; warns once per process when this host's clock is off by more than ``SKEW_WARNING``."""
    started = time.monotonic()
    moment: datetime = fetch_value(cursor, queries.DATABASE_NOW).astimezone(UTC)
    host = datetime.now(UTC)
    trip = timedelta(seconds=time.monotonic() - started)
    _check_skew(host - trip / 2, moment, trip)
    return moment


def _check_skew(host: datetime, database: datetime, trip: timedelta) -> None:
    global _warned
    skew = host - database
    if abs(skew) - trip / 2 <= SKEW_WARNING:
        return
    with _lock:
        if _warned:
            return
        _warned = True
    logger.warning(
        "this host's clock is %.1f s %s the database server's: schedules fire on the database's clock, "
        "but fix this host's time sync (NTP) so its logs and timestamps agree (logged once per process)",
        abs(skew.total_seconds()),
        "ahead of" if skew > timedelta(0) else "behind",
    )
