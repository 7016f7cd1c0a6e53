"""The Python side of firing: evaluate callable inputs, then call ``pgflow.fire_due_schedules``.

The SQL function does the firing and its guarantees (each tick once, recorded with its run in one
transaction; a concurrent caller returns at once). Python adds what SQL cannot do: it asks which due
ticks of callable-input schedules fire, calls each callable with its tick (an aware datetime in the
schedule's time zone) and passes the results in, all inside the transaction that holds the firing
lock, so no other caller can fire those ticks meanwhile. A callable that raises holds back its
schedule (recorded in ``last_error``); the other schedules still fire. Ticks fire on the database's
clock (see ``clock``), read once under the lock so the callables and the SQL see the same moment.
"""

from __future__ import annotations

import json
import logging
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Final

from pgflow_django.db.query import fetch_all, fetch_value
from pgflow_django.schedules import queries
from pgflow_django.schedules.callables import resolve_callable
from pgflow_django.schedules.clock import database_now
from pgflow_django.schedules.cron import stored_zone

logger = logging.getLogger("pgflow_django.schedules")

FIRE_LOCK_KEY: Final = "pgflow:fire_due_schedules"
"""The advisory lock ``pgflow.fire_due_schedules`` try-locks (hashtextextended(key, 0))."""
MAX_SCHEDULES: Final = 500
"""Schedules fired per call at most; the next call takes the rest."""
GRACE: Final = timedelta(seconds=60)
"""How late a tick of a ``catch_up="none"`` schedule may fire."""


@dataclass(frozen=True)
class FiredTick:
    schedule_name: str
    tick: datetime
    run_id: uuid.UUID


@dataclass(frozen=True)
class FireResult:
    """What one call did: ``locked`` is False when another caller held the firing lock (nothing done)."""

    locked: bool
    fired: list[FiredTick] = field(default_factory=list)
    held: list[str] = field(default_factory=list)
    """Callable-input schedules held back because their callable raised."""


def fire_due(
    cursor: Any,
    *,
    now: datetime | None = None,
    max_schedules: int = MAX_SCHEDULES,
    grace: timedelta = GRACE,
) -> FireResult:
    """Fire every tick due at ``now`` (default: the database's clock) on ``cursor`` (Django's or
    psycopg's), which must be inside a transaction the caller commits; the firing lock is held until
    then."""
    if not fetch_value(cursor, queries.TRY_FIRE_LOCK, [FIRE_LOCK_KEY]):
        return FireResult(locked=False)
    moment = (now or database_now(cursor)).astimezone(UTC)
    inputs, held = _callable_inputs(cursor, moment, max_schedules, grace)
    rows = fetch_all(cursor, queries.FIRE_DUE_SCHEDULES, [moment, max_schedules, json.dumps(inputs), grace])
    fired = [FiredTick(row.schedule_name, row.tick, _uuid(row.run_id)) for row in rows]
    return FireResult(locked=True, fired=fired, held=held)


def _callable_inputs(
    cursor: Any, moment: datetime, max_schedules: int, grace: timedelta
) -> tuple[list[dict[str, Any]], list[str]]:
    due = fetch_all(cursor, queries.DUE_CALLABLE_TICKS, [moment, max_schedules, moment, grace])
    inputs: list[dict[str, Any]] = []
    failed: dict[str, str] = {}
    for row in due:
        name, path = row.schedule_name, row.input_callable
        if name in failed:
            continue
        try:
            tick = row.tick.astimezone(stored_zone(row.timezone))
            value = evaluate_input(path, json.loads(row.input), tick)
        except Exception as exc:
            failed[name] = f"input callable {path} raised {type(exc).__name__}: {exc}"
            logger.warning("schedule %s held back: %s", name, failed[name])
            continue
        inputs.append({"schedule": name, "tick": row.tick.isoformat(), "input": value})
    if failed:
        fetch_value(cursor, queries.RECORD_SCHEDULE_ERRORS, [json.dumps(failed)])
    return [item for item in inputs if item["schedule"] not in failed], sorted(failed)


def evaluate_input(path: str, template: Any, tick: datetime) -> Any:
    """Call a schedule's input callable for ``tick``; for a task schedule (``template`` is the task's
    call payload) its result becomes the keyword arguments. The result is checked as a run input."""
    from pgflow_django.runs.client import encode_run_input

    value = resolve_callable(path)(tick)
    if isinstance(template, dict) and set(template) == {"task", "args", "kwargs"}:
        if not isinstance(value, dict):
            raise TypeError(
                "a task schedule's input callable must return the keyword arguments, a dict; "
                f"got {type(value).__name__}"
            )
        value = {**template, "kwargs": value}
    return json.loads(encode_run_input("schedule", value, f"the result of {path}"))


def _uuid(value: Any) -> uuid.UUID:
    return value if isinstance(value, uuid.UUID) else uuid.UUID(str(value))
