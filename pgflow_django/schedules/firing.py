"""The Python side of firing: evaluate callable inputs, then call ``pgflow.fire_due_schedules``.

The SQL function does the firing and its guarantees (each tick once, recorded with its run in one
transaction; a concurrent caller returns at once). Python adds what SQL cannot do: it asks which due
ticks of callable-input schedules fire, calls each callable with its tick (an aware datetime in the
schedule's time zone) and passes the results in, all inside the transaction that holds the firing
lock, so no other caller can fire those ticks meanwhile. A callable that raises holds back its
schedule (recorded in ``last_error``); the other schedules still fire.
"""

from __future__ import annotations

import json
import logging
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Final
from zoneinfo import ZoneInfo

from pgflow_django.schedules.definition import resolve_callable

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
    """Fire every due tick on ``cursor`` (Django's or psycopg's), which must be inside a transaction
    the caller commits; the firing lock is held until then."""
    moment = (now or datetime.now(UTC)).astimezone(UTC)
    cursor.execute("select pg_try_advisory_xact_lock(hashtextextended(%s, 0))", [FIRE_LOCK_KEY])
    row = cursor.fetchone()
    if not (row and row[0]):
        return FireResult(locked=False)
    inputs, held = _callable_inputs(cursor, moment, max_schedules, grace)
    cursor.execute(
        "select schedule_name, tick, run_id from pgflow.fire_due_schedules(%s, %s, %s::jsonb, %s)",
        [moment, max_schedules, json.dumps(inputs), grace],
    )
    fired = [FiredTick(name, tick, _uuid(run_id)) for name, tick, run_id in cursor.fetchall()]
    return FireResult(locked=True, fired=fired, held=held)


def _callable_inputs(
    cursor: Any, moment: datetime, max_schedules: int, grace: timedelta
) -> tuple[list[dict[str, Any]], list[str]]:
    cursor.execute(
        """
        select d.schedule_name, d.tick, d.input_callable, d.timezone, d.input::text
          from pgflow.schedule_due_ticks(pgflow.due_schedule_names(%s, %s, true), %s, %s) as d
         where d.fire and d.input_callable is not null
         order by d.schedule_name, d.tick
        """,
        [moment, max_schedules, moment, grace],
    )
    inputs: list[dict[str, Any]] = []
    failed: dict[str, str] = {}
    for name, tick, path, timezone, template in cursor.fetchall():
        if name in failed:
            continue
        try:
            value = evaluate_input(path, json.loads(template), tick.astimezone(ZoneInfo(timezone)))
        except Exception as exc:
            failed[name] = f"input callable {path} raised {type(exc).__name__}: {exc}"
            logger.warning("schedule %s held back: %s", name, failed[name])
            continue
        inputs.append({"schedule": name, "tick": tick.isoformat(), "input": value})
    if failed:
        cursor.execute(
            """
            update pgflow.schedules as s set last_error = left(f.error, 2000)
              from jsonb_each_text(%s::jsonb) as f(name, error) where s.schedule_name = f.name
            """,
            [json.dumps(failed)],
        )
    return [item for item in inputs if item["schedule"] not in failed], sorted(failed)


def evaluate_input(path: str, template: Any, tick: datetime) -> Any:
    """Call a schedule's input callable for ``tick``; for a task schedule (``template`` is the task's
    call payload) its result becomes the keyword arguments. The result is checked as a run input."""
    from pgflow_django.client import encode_run_input

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
