"""Cron expressions and their ticks in a time zone.

cronsim does the cron arithmetic: it is maintained, has no dependencies, reads 5-field expressions
and 6-field ones with a leading seconds field, iterates both ways, works with zoneinfo, and follows
Debian cron on DST days: a tick that falls in the hour skipped by spring-forward fires at the first
instant after the change (02:30 becomes 03:00), and a tick in the hour repeated by fall-back fires
once, at its first occurrence. Ticks leave this module as UTC datetimes.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Final
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from cronsim import CronSim, CronSimError

HOST_ZONES: Final = frozenset({"localtime", "posixrules"})
"""Zone files that are each host's own setting, not a zone: hosts set differently would plan the
same schedule's ticks at different instants."""


class InvalidSchedule(ValueError):
    """A schedule definition that cannot be stored; the message names the field and the fix."""


def check_cron(expression: str) -> str:
    """``expression`` normalised to single spaces, or InvalidSchedule saying what is wrong."""
    if not isinstance(expression, str) or not expression.strip():
        raise InvalidSchedule(f"cron must be a cron expression such as '*/5 * * * *', got {expression!r}")
    normalised = " ".join(expression.split())
    if len(normalised.split()) not in (5, 6):
        raise InvalidSchedule(
            f"cron {expression!r} has {len(normalised.split())} fields; use 5 (minute hour day month "
            "weekday) or 6 (a leading seconds field)"
        )
    try:
        CronSim(normalised, datetime(2000, 1, 1, tzinfo=UTC))
    except CronSimError as exc:
        raise InvalidSchedule(f"cron {expression!r} is not valid: {exc}") from None
    return normalised


def check_timezone(name: str) -> ZoneInfo:
    """The zoneinfo time zone called ``name`` (an IANA name such as 'Europe/Paris'), for a definition:
    a host's own zone setting (``HOST_ZONES``) is refused."""
    if name in HOST_ZONES:
        raise InvalidSchedule(
            f"timezone {name!r} is each host's own zone setting, so hosts would disagree on the ticks; "
            "give an IANA zone name such as 'Europe/Paris' or 'UTC'"
        )
    return stored_zone(name)


def stored_zone(name: str) -> ZoneInfo:
    """The zone called ``name``. Planning reads stored zones with it, so a schedule stored with a host
    zone before those were refused keeps firing (``manage.py check --database`` reports it)."""
    if not isinstance(name, str) or not name:
        raise InvalidSchedule(f"timezone must be an IANA time zone name such as 'Europe/Paris', got {name!r}")
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise InvalidSchedule(
            f"timezone {name!r} is not a known IANA time zone; use a name such as 'UTC' or 'Europe/Paris'"
        ) from None


def _iterate(expression: str, zone: ZoneInfo, start: datetime, *, reverse: bool) -> Iterator[datetime]:
    local = start.astimezone(zone)
    for tick in CronSim(expression, local, reverse=reverse):
        yield tick.astimezone(UTC)


def ticks_after(expression: str, timezone: str, after: datetime, count: int) -> list[datetime]:
    """The next ``count`` ticks strictly after ``after`` (fewer if the expression stops matching)."""
    found: list[datetime] = []
    for tick in _iterate(expression, stored_zone(timezone), after, reverse=False):
        if len(found) >= count:
            break
        found.append(tick)
    return found


def ticks_before(
    expression: str, timezone: str, before: datetime, count: int, *, after: datetime
) -> list[datetime]:
    """Up to ``count`` latest ticks in the window ``(after, before]``, oldest first."""
    found: list[datetime] = []
    # a tick exactly at `before` counts: cronsim's reverse iteration starts strictly before its start
    for tick in _iterate(
        expression,
        stored_zone(timezone),
        before.replace(microsecond=0) + timedelta(seconds=1),
        reverse=True,
    ):
        if len(found) >= count or tick <= after:
            break
        if tick <= before:
            found.append(tick)
    return sorted(found)
