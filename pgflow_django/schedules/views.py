"""What reading a schedule returns: the rows of ``pgflow.schedules`` and of its tick ledger.

Each class is also the row type of the statements in ``pgflow_django.schedules.queries`` that read them, built
from the named result columns by ``from_columns``, so its fields are listed once.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pgflow_django.schedules.definition import CatchUp


def as_uuid(value: Any) -> uuid.UUID:
    """A run id as a UUID, whether the cursor returned one or its text."""
    return value if isinstance(value, uuid.UUID) else uuid.UUID(str(value))


@dataclass(frozen=True)
class ScheduleView:
    """One row of ``pgflow.schedules``. ``upcoming`` are the planned ticks (before jitter), UTC."""

    name: str
    flow_slug: str
    cron: str
    timezone: str
    input: Any
    input_callable: str | None
    catch_up: CatchUp
    max_catch_up: int
    jitter: int
    enabled: bool
    paused_reason: str | None
    paused_detail: str | None
    paused_at: datetime | None
    origin: str
    revision: int
    upcoming: tuple[datetime, ...]
    next_fire_at: datetime | None
    last_tick: datetime | None
    last_fired_at: datetime | None
    last_run_id: uuid.UUID | None
    missed_ticks: int
    last_error: str | None
    """Why firing last held it back (an input callable raised, its flow is not compiled)."""
    created_at: datetime
    updated_at: datetime
    plan_error: str | None
    """Why it could not be planned (its cron no longer parses, its time zone is unknown to the
    planning host): it gets no new ticks until fixed. None once it plans."""
    plan_failed_at: datetime | None

    @classmethod
    def from_columns(cls, **columns: Any) -> ScheduleView:
        """The view of a row read with ``input`` as JSON text and ``upcoming`` as an array (or null)."""
        run_id = columns["last_run_id"]
        return cls(
            **{
                **columns,
                "input": json.loads(columns["input"]),
                "upcoming": tuple(columns["upcoming"] or ()),
                "last_run_id": None if run_id is None else as_uuid(run_id),
            }
        )

    @property
    def active(self) -> bool:
        """Enabled and not paused: its due ticks fire."""
        return self.enabled and self.paused_reason is None


@dataclass(frozen=True)
class TickView:
    """One fired tick of the ledger: ``kind`` is ``cron`` or ``manual`` (``trigger_now``)."""

    schedule_name: str
    tick: datetime
    run_id: uuid.UUID
    kind: str
    fired_at: datetime

    @classmethod
    def from_columns(cls, **columns: Any) -> TickView:
        return cls(**{**columns, "run_id": as_uuid(columns["run_id"])})
